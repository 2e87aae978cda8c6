"""Power measurement around a layer run: source, marker, idle baseline, attribution.

A run with power goes:

1. open the source (logger handshake) and the marker (lines requested, low);
2. `begin()`: start streaming and hold the marker low for ``baseline_s`` to
   measure the idle baseline;
3. the runner runs its frames with `hooks()`: in measured frames the marker goes
   high right before each layer's invoke and low right after (host times of both
   changes are recorded, bracketed by clock reads);
4. `finish(timings)`: stop the stream, fit the logger clock to the host clock
   over the edges, and attribute energy to each layer's window
   (`profiler.attribution.attribute`).

Counter sources (nvml, rapl, hwmon) cannot resolve a millisecond window, so
`finish` instead repeats each layer back to back until its counter window spans
enough updates (`profiler.attribution.measure_repeated`).

A source that fails mid-run (port gone, logger silent) does not lose the run:
`finish` keeps the timings, attributes whatever part of the trace survived, and
records the error in `PowerResult.error` for the caller to report (exit 4).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiler.attribution import (
    Attribution,
    attribute,
    fps_per_w,
    idle_baseline_w,
    measure_repeated,
)
from profiler.clock import Clock, perf_clock
from profiler.errors import PowerSourceError, ProfilerError
from profiler.markers.base import Marker
from profiler.power.sources.base import CounterSource, PowerSource, StreamSource
from profiler.runner import LayerHooks


class MarkerHooks(LayerHooks):
    """Marker high for each layer's invoke in measured frames; records when it changed.

    ``rise``/``fall`` have shape (frames, layers, 2): clock reads just before and just
    after the marker call, so the change happened inside that bracket.
    """

    def __init__(self, marker: Marker, frames: int, layers: int, *, clock: Clock = perf_clock,
                 on_layer: Callable[[int], None] | None = None) -> None:
        self.marker = marker
        self.clock = clock
        self.on_layer = on_layer
        self.rise = np.zeros((frames, layers, 2), dtype=np.int64)
        self.fall = np.zeros((frames, layers, 2), dtype=np.int64)
        self._frame: int | None = None

    def before_frame(self, frame: int, warmup: bool) -> None:
        self._frame = None if warmup else frame

    def before_layer(self, layer: int) -> None:
        if self.on_layer is not None:
            self.on_layer(layer)
        f = self._frame
        if f is None:
            return
        t0 = self.clock()
        self.marker.set(1)
        self.rise[f, layer] = (t0, self.clock())

    def after_layer(self, layer: int) -> None:
        f = self._frame
        if f is None:
            return
        t0 = self.clock()
        self.marker.set(0)
        self.fall[f, layer] = (t0, self.clock())

    def host_events(self) -> tuple[np.ndarray, np.ndarray]:
        """Marker-change times (middle of each bracket) and the level after each, in order."""
        rise = self.rise.mean(axis=2).astype(np.int64).ravel()
        fall = self.fall.mean(axis=2).astype(np.int64).ravel()
        t = np.column_stack([rise, fall]).ravel()
        lv = np.tile(np.array([1, 0], dtype=np.int64), rise.size)
        order = np.argsort(t, kind="stable")
        return t[order], lv[order]


@dataclass
class PowerResult:
    """What a run's power measurement produced, ready for `LayerRun` extras and the sidecar."""

    columns: dict[str, np.ndarray] = field(default_factory=dict)  # per layer
    totals: dict[str, float] = field(default_factory=dict)  # per frame
    info: dict[str, Any] = field(default_factory=dict)  # for the JSON sidecar
    attribution: Attribution | None = None
    error: ProfilerError | None = None  # a mid-run failure; the rest is what survived


class PowerSession:
    """Use as a context manager around the runner; see the module docstring."""

    def __init__(self, source: PowerSource, marker: Marker | None, *, baseline_s: float = 0.5,
                 counter_updates: int = 20, clock: Clock = perf_clock) -> None:
        self.source = source
        self.counter_updates = counter_updates
        self.marker = marker
        self.baseline_s = baseline_s
        self.clock = clock
        self._hooks: MarkerHooks | None = None
        self._baseline_window: tuple[int, int] | None = None
        self._counter_baseline_w = 0.0
        self._started = False

    @property
    def streaming(self) -> bool:
        return isinstance(self.source, StreamSource)

    def __enter__(self) -> PowerSession:
        self.source.open()
        try:
            if self.marker is not None:
                self.marker.open()
        except BaseException:
            self.source.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.marker is not None:
                self.marker.close()
        finally:
            self.source.close()

    def hooks(self, frames: int, layers: int,
              on_layer: Callable[[int], None] | None = None) -> LayerHooks | None:
        if not self.streaming or self.marker is None:
            return None
        self._hooks = MarkerHooks(self.marker, frames, layers, clock=self.clock, on_layer=on_layer)
        return self._hooks

    def begin(self) -> None:
        """Start the stream and measure the idle baseline (marker low, nothing running).

        Before the run, not after it: a GPU stays clocked up for seconds after work."""
        src = self.source
        if isinstance(src, StreamSource):
            src.start()
            self._started = True
        if isinstance(src, CounterSource):
            # The counter window must span many updates to resolve the idle power.
            t0, e0 = src.wait_for_tick()
            time.sleep(max(self.baseline_s, 20 * src.update_interval_ns / 1e9))
            self._counter_baseline_w = (src.read_energy_mj() - e0) * 1e6 / max(self.clock() - t0, 1)
            self._baseline_window = (t0, self.clock())
            return
        t0 = self.clock()
        time.sleep(self.baseline_s)
        self._baseline_window = (t0, self.clock())

    def finish(self, timings: Any, layer_calls: list[Callable[[], object]] | None = None,
               progress: Callable[[int, int], None] | None = None) -> PowerResult:
        if isinstance(self.source, StreamSource):
            return self._finish_stream(timings)
        if isinstance(self.source, CounterSource):
            return self._finish_counter(layer_calls or [], progress)
        return PowerResult(info={"power_source": self.source.info().to_dict()})

    # -- streaming sources (arduino, sim) ------------------------------------------------
    def _finish_stream(self, timings: Any) -> PowerResult:
        src = self.source
        assert isinstance(src, StreamSource) and self._hooks is not None
        info: dict[str, Any] = {"power_source": src.info().to_dict()}
        error: ProfilerError | None = None
        host_t, host_lv = self._hooks.host_events()
        set_events = getattr(src, "set_host_events", None)
        if set_events is not None:
            set_events(host_t, host_lv)
        try:
            if hasattr(src, "stop_capture"):
                try:
                    capture = src.stop_capture()  # type: ignore[attr-defined]
                except PowerSourceError as err:
                    error, capture = err, getattr(err, "trace", None)
                    if capture is None or capture.samples.size == 0:
                        return PowerResult(info=info, error=err)
                try:
                    trace = src.map_clock(capture)  # type: ignore[attr-defined]
                finally:  # what was captured goes to the sidecar even if it cannot be mapped
                    info.update(_capture_info(capture, src))
            else:
                trace = src.stop()
        except ProfilerError as err:
            # Nothing to attribute (e.g. the edges never reached the logger): keep timings.
            return PowerResult(info=info, error=error or err)
        self._started = False

        ts = np.asarray(timings.ts_ns)  # (frames, layers, 4)
        b0, b1 = self._baseline_window or (0, 0)
        baseline = idle_baseline_w(trace, b0, b1) if b1 > b0 else 0.0
        if error is not None:
            # A partial capture: only the frames whose windows it covers.
            covered = ts[:, -1, 3] <= (trace.t_ns[-1] if trace.t_ns.size else 0)
            ts = ts[covered]
            info["frames_attributed"] = int(covered.sum())
            if not covered.any():
                return PowerResult(info=info, error=error)
        frames = ts.shape[0]
        start, end = ts[:, :, 2], ts[:, :, 3]
        start_lo, end_hi = self._hooks.rise[:frames, :, 0], self._hooks.fall[:frames, :, 1]
        local = local_offset(getattr(src, "fit", None), host_t)
        if local is not None:
            # Look for each boundary's edge where the clock map's neighbours say it is.
            start, end, start_lo, end_hi = (v - local(v) for v in (start, end, start_lo, end_hi))
        att = attribute(start, end, trace, baseline_power_w=baseline, levels=(1, 0),
                        start_lo_ns=start_lo, end_hi_ns=end_hi)
        info.update({
            "baseline_power_w": baseline,
            "baseline_s": self.baseline_s,
            "edges_missed": att.edges_missed,
            "edges_spurious": att.edges_spurious,
            "edge_offset_ns": list(att.edge_offset_ns),
            "lost_frames": trace.total_lost_frames,
            "corrupt_frames": trace.corrupt_frames,
        })
        return PowerResult(columns=att.columns(), totals=att.totals(), info=info,
                           attribution=att, error=error)

    # -- counter sources (nvml, rapl, hwmon) ---------------------------------------------
    def _finish_counter(self, calls: list[Callable[[], object]],
                        progress: Callable[[int, int], None] | None) -> PowerResult:
        src = self.source
        assert isinstance(src, CounterSource)
        info: dict[str, Any] = {"power_source": src.info().to_dict()}
        baseline = self._counter_baseline_w
        try:
            reps = []
            for i, call in enumerate(calls):
                reps.append(measure_repeated(call, src, baseline_power_w=baseline,
                                             min_updates=self.counter_updates))
                if progress:
                    progress(i + 1, len(calls))
        except PowerSourceError as err:
            return PowerResult(info=info, error=err)
        cols = {
            "power_w": np.array([r.power_w for r in reps]),
            "energy_mj": np.array([r.energy_mj for r in reps]),
            "dynamic_energy_mj": np.array([r.dynamic_energy_mj for r in reps]),
            "fps_per_w": np.array([r.fps_per_w for r in reps]),
            "samples": np.array([r.counter_updates for r in reps]),
            "lost_frames": np.zeros(len(reps), dtype=np.int64),
            "repeats": np.array([r.repeats for r in reps]),
        }
        energy = float(cols["energy_mj"].sum())
        time_ms = float(sum(r.time_ns for r in reps) / 1e6)
        totals = {
            "power_w": energy / time_ms if time_ms > 0 else float("nan"),
            "energy_mj": energy,
            "dynamic_energy_mj": float(cols["dynamic_energy_mj"].sum()),
            "fps_per_w": fps_per_w(energy),
            "samples": float(cols["samples"].sum()),
            "lost_frames": 0.0,
        }
        info.update({"baseline_power_w": baseline, "method": "repeat-to-resolve",
                     "counter_update_interval_ns": int(src.update_interval_ns)})
        return PowerResult(columns=cols, totals=totals, info=info)

    def abort(self) -> None:
        """Stop a stream after a failure elsewhere, ignoring its own errors."""
        if self._started and hasattr(self.source, "stop_capture"):
            with contextlib.suppress(ProfilerError):
                self.source.stop_capture()  # type: ignore[attr-defined]
            self._started = False


def local_offset(fit: Any, host_ns: np.ndarray, neighbours: int = 7,
                 ) -> Callable[[np.ndarray], np.ndarray] | None:
    """Where the logger's edges lie around host time t, relative to the fitted line.

    The clock map is one line (offset and drift), which is what integration needs. But
    the logger's clock can wander off a line by more than the edge-matching tolerance
    over a run: a ceramic resonator's rate follows its temperature, and the simavr rig,
    paced to the wall clock, falls behind and catches up with the host's load. Each
    matched edge's residual (host time - mapped edge time) says how far off the line
    it is; a running median over ``neighbours`` matched edges follows the wander
    without following one late marker call. Returns ``t -> residual`` (int64 ns) for
    shifting host boundaries onto the trace's time axis before matching, or None
    without a fit."""
    if fit is None or getattr(fit, "host_index", np.zeros(0)).size < 3:
        return None
    order = np.argsort(fit.host_index, kind="stable")
    at = np.asarray(host_ns, dtype=np.int64)[fit.host_index[order]]
    r = np.asarray(fit.residual_ns, dtype=np.float64)[order]
    k = min(neighbours, r.size) | 1  # odd: a centred window
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(r, k // 2, mode="edge"), k)
    smooth = np.median(windows, axis=1)
    t0 = int(at[0])
    x = (at - t0).astype(np.float64)

    def residual_at(t: np.ndarray) -> np.ndarray:
        tt = (np.asarray(t, dtype=np.int64) - t0).astype(np.float64)
        return np.rint(np.interp(tt, x, smooth)).astype(np.int64)

    return residual_at


def _capture_info(trace: Any, src: Any) -> dict[str, Any]:
    c = trace.counters
    fit = getattr(src, "fit", None)
    out: dict[str, Any] = {
        "sample_rate_hz": round(float(trace.rate_hz), 1),
        "samples": int(trace.samples.size),
        "frames_ok": c.frames_ok,
        "device_samples_dropped": c.device_samples_dropped,
        "trace_dir": str(trace.path) if getattr(trace, "path", None) else None,
    }
    if fit is not None:
        out["clock_map"] = fit.clock.to_dict()
    return out
