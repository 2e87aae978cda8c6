"""A layer run recorded live through a reading logger (ARM-CO-UP's INA260 sketch,
`profiler.power.sources.ina260`), attributed per layer.

The host knows how many windows the run made and how long each lasted, so the run's
layout is aligned to the recording (`align`), the logger's millisecond clock is fitted to
the host's over the matched edges, and each layer is integrated over its own window by
both methods (`coupprof_method`, `armcoup_method`). A layer shorter than two reading
intervals gets no power.

The steps: docs/recordings.md ("A layer run recorded live").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from profiler.recordings.align import OK, UNCOVERED, Alignment, WindowMatch, align
from profiler.recordings.attribute import (
    StepIntegral,
    armcoup_method,
    coupprof_method,
)
from profiler.recordings.layout import RunLayout, Setting
from profiler.recordings.traces import Recording

#: An edge this far from the fitted line is a mismatch, not a reading's uncertainty
#: (readings are at most ~3 ms apart, so an edge is known to +-1.5 ms plus millis' 1 ms).
FIT_OUTLIER_MS = 3.0
MIN_FIT_EDGES = 4


@dataclass(frozen=True)
class MillisClock:
    """The logger's clock (ms) on the host's: host_ms - ref = a + b * (logger_ms - x0)."""

    ref_ns: int
    x0_ms: float
    a_ms: float
    b: float  # host ms per logger ms
    edges: int  # edges the fit kept
    dropped: int  # edges dropped as mismatches
    residual_ms: float  # rms distance of the kept edges from the line

    def to_logger_ms(self, host_ns: np.ndarray) -> np.ndarray:
        rel = (np.asarray(host_ns, dtype=np.int64) - self.ref_ns) / 1e6
        return self.x0_ms + (rel - self.a_ms) / self.b

    def to_dict(self) -> dict[str, Any]:
        return {"host_ns_at_logger_0_ms": self.ref_ns + (self.a_ms - self.b * self.x0_ms) * 1e6,
                "host_ms_per_logger_ms": self.b, "edges": self.edges, "dropped": self.dropped,
                "residual_ms": self.residual_ms}


def fit_millis_clock(logger_ms: np.ndarray, host_ns: np.ndarray) -> MillisClock | None:
    x = np.asarray(logger_ms, dtype=np.float64)
    y_ns = np.asarray(host_ns, dtype=np.int64)
    if x.size < MIN_FIT_EDGES:
        return None
    ref = int(y_ns[0])
    y = (y_ns - ref) / 1e6
    x0 = float(x.mean())
    keep = np.ones(x.size, bool)
    for _ in range(3):
        if keep.sum() < MIN_FIT_EDGES:
            return None
        b, a = np.polyfit(x[keep] - x0, y[keep], 1)
        r = y - (a + b * (x - x0))
        new = np.abs(r) <= FIT_OUTLIER_MS
        if (new == keep).all():
            break
        keep = new
    rms = float(np.sqrt(np.mean(r[keep] ** 2)))
    return MillisClock(ref, x0, float(a), float(b), int(keep.sum()), int((~keep).sum()), rms)


@dataclass
class LiveAttribution:
    """Per layer (arrays of the run's layer count; NaN where no window was left)."""

    power_mw: np.ndarray  # coupprof's method
    armcoup_power_mw: np.ndarray  # ARM-CO-UP's method on the same recording
    samples: np.ndarray  # readings inside the windows used
    windows: np.ndarray  # windows used
    set_aside: np.ndarray  # windows in a fault
    window_ms: np.ndarray  # mean window the power was integrated over (logger clock)
    lag_ms: float | None
    lag_readings: float | None
    update_ms: float
    baseline_mw: float | None
    alignment: Alignment
    clock: MillisClock | None
    notes: list[str] = field(default_factory=list)

    def sidecar(self) -> dict[str, Any]:
        al = self.alignment
        return {
            "method": "coupprof: time-weighted, sensor lag compensated, edge spread corrected, "
                      + ("over the host's windows (logger clock fitted to the host's)"
                         if self.clock is not None else "over the pin's segments"),
            "sensor_lag_ms": self.lag_ms, "sensor_lag_readings": self.lag_readings,
            "sensor_update_ms": self.update_ms,
            "alignment": {"windows_expected": al.layout.total, "segments_observed": len(al.segs),
                          "faults": al.faults, "flagged_frames": [f for _, f in al.flagged],
                          "ignored_segments": al.ignored_tail,
                          "uncovered_windows": sum(m.status == UNCOVERED for m in al.matches)},
            "logger_clock": None if self.clock is None else self.clock.to_dict(),
            "armcoup_power_w": [None if not np.isfinite(p) else p / 1000.0
                                for p in self.armcoup_power_mw],
            "notes": self.notes,
        }


def run_layout(frames: int, layers: int, order: str | None = None) -> RunLayout:
    return RunLayout(order or "X" * layers, frames=frames, warmup=0,
                     settings=(Setting(level=1),), trailing=1)


def attribute_live(rec: Recording, marker_ns: np.ndarray, marker_levels: np.ndarray,
                   start_ns: np.ndarray, end_ns: np.ndarray,
                   baseline_ns: tuple[int, int] | None = None,
                   lag_ms: float | None = None,
                   clock: MillisClock | None = None,
                   update_ms: float | None = None) -> LiveAttribution:
    """``marker_ns``/``marker_levels``: the host's marker changes (sorted; 1 at each
    layer's start, 0 at its end); ``start_ns``/``end_ns`` (frames, layers): each layer's
    invoke on the host clock; ``baseline_ns``: the idle window before the run; ``lag_ms``:
    the sensor's lag, instead of estimating it; ``clock``: the logger's clock on the
    host's, instead of fitting it; ``update_ms``: the sensor's update period, likewise."""
    start = np.asarray(start_ns, dtype=np.int64)
    end = np.asarray(end_ns, dtype=np.int64)
    frames, layers = start.shape
    layout = run_layout(frames, layers)
    n = 2 * frames * layers
    marks = np.asarray(marker_ns, dtype=np.int64)
    levels = np.asarray(marker_levels, dtype=np.int64)
    notes: list[str] = []
    expected = np.full(layout.total, np.nan)
    clean_marks = marks.size == n and (levels == np.tile([1, 0], frames * layers)).all()
    if clean_marks:
        expected[1:n] = np.diff(marks) / 1e6
    else:
        notes.append(f"the host made {marks.size} marker changes for {n} expected: windows "
                     "aligned by the recording's durations alone")
    al = align(rec, layout, window_ms=expected)
    wins = al.matches
    segs = al.segs
    # Edges between two matched windows: the pin's change (between two readings) and
    # the host's marker change that made it.
    pairs = [(float(segs.t0_ms[wins[i].first]), int(marks[i - 1])) for i in range(1, n)
             if clean_marks and wins[i].status == OK and wins[i - 1].status == OK
             and wins[i - 1].first == wins[i].first - 1]
    if clock is None and pairs:
        clock = fit_millis_clock(np.array([p[0] for p in pairs]),
                                 np.array([p[1] for p in pairs], dtype=np.int64))
    used = al
    if clock is not None:
        # The host's windows on the logger's clock: gaps and layers alternate, so window i
        # runs from boundary i-1 to boundary i (the first gap and the closing one keep the
        # pin's outer edge).
        bounds = clock.to_logger_ms(np.stack([start, end], axis=2).reshape(-1))
        t0, t1 = segs.t0_ms.copy(), segs.t1_ms.copy()
        for i, mt in enumerate(wins):
            if mt.status != OK:
                continue
            if i >= 1:
                t0[mt.first] = bounds[i - 1]
            if i < n:
                t1[mt.first] = bounds[i]
        # A window the readings stop inside (a logger that fell silent) is not covered.
        last = float(rec.t_ms[-1])
        matches = [WindowMatch(UNCOVERED) if mt.status == OK and i < n and bounds[i] > last
                   else mt for i, mt in enumerate(wins)]
        used = replace(al, matches=matches,
                       segs=replace(segs, t0_ms=t0, t1_ms=np.maximum(t1, t0)))
    else:
        notes.append("too few clean edges to fit the logger's clock: integrated over the "
                     "pin's segments")
    ours = coupprof_method(rec, used, lag_ms=lag_ms, previous_frequency=False,
                           update_ms=update_ms)
    theirs = armcoup_method(rec, al)
    mine = {f.layer: f for f in ours.figures if f.metric == "task"}
    other = {f.layer: f for f in theirs.figures if f.metric == "task"}
    nan = np.full(layers, np.nan)
    power, arm, window = nan.copy(), nan.copy(), nan.copy()
    samples = np.zeros(layers, np.int64)
    count = np.zeros(layers, np.int64)
    aside = np.full(layers, frames, np.int64)
    for k in range(layers):
        if k in mine:
            f = mine[k]
            power[k], window[k] = f.power_mw, f.window_ms_mean
            samples[k], count[k], aside[k] = f.samples, f.windows, f.set_aside
        if k in other:
            arm[k] = other[k].power_mw
    # A window under two reading intervals may hold no reading at all; the segments the
    # pin did show for it are chance, and its power would be a guess.
    resolution_ms = 2 * float(np.mean(np.diff(rec.t_ms))) if rec.readings > 1 else np.inf
    host_ms = (end - start).mean(axis=0) / 1e6
    short = host_ms < resolution_ms
    if short.any():
        power[short] = np.nan
        aside[short] = frames
        notes.append(f"layer(s) {', '.join(str(k) for k in np.flatnonzero(short))} are "
                     f"shorter than the logger resolves ({resolution_ms:.1f} ms, two readings): "
                     "no power")
    baseline = None
    if clock is not None and baseline_ns is not None and ours.lag_ms is not None:
        a0, b = clock.to_logger_ms(np.array(baseline_ns, dtype=np.int64))
        # the readings hold from the first one less the lag; the window may begin a
        # reading before it (the logger prints in bursts: the first reading kept can come
        # after the host began the window), but most of it must be in this recording
        a = max(a0, float(rec.t_ms[0]) - ours.lag_ms)
        if b - a > 0.5 * (b - a0) > 0:
            step = StepIntegral(rec.t_ms, rec.power_mw, ours.lag_ms)
            baseline = float(step.energy(np.array([a]), np.array([b]))[0] / (b - a))
    notes += [x for x in ours.notes if "previous frequency" not in x]
    return LiveAttribution(power_mw=power, armcoup_power_mw=arm, samples=samples, windows=count,
                           set_aside=aside, window_ms=window, lag_ms=ours.lag_ms,
                           lag_readings=ours.lag_readings, update_ms=ours.update_ms or 0.0,
                           baseline_mw=baseline, alignment=used, clock=clock, notes=notes)
