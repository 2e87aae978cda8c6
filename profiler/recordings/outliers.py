"""Layer windows that cannot be right: far longer than the layer's own time.

A marker window that stays open after its layer ends takes the idle's energy into the
layer (on a second board the last layer's window ran 7-23x the console's time, and that
layer's energy came out ~13x too high). Each layer window of a measured frame is
compared with a reference: the console log's time for that layer and setting, scaled
by the trace's median window/console ratio (the marker's own overhead, ~1.01 on
ARM-CO-UP's board), or without one the median of the same layer's windows in the
setting's measured frames. A window over ``RATIO`` x its reference and beyond
``K_MAD`` robust deviations is an outlier. The coupprof method trims it to the
reference from its start edge; the armcoup method keeps it (ARM-CO-UP's figures
are reproduced as published). Either way its layer's rows are flagged. Why these
thresholds, and why trim: docs/recordings.md ("Windows that cannot be right").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from profiler.recordings.align import DELTA_MS, OK, Alignment
from profiler.recordings.layout import LAYER

#: How far over its reference a window must run. ARM-CO-UP's clean measured frames reach
#: 1.73x the console time and 1.75x their frames' median (with DELTA_MS on both); the
#: overruns seen were 7-23x.
RATIO = 2.0
#: ...and how many robust standard deviations (1.4826 x MAD of ln duration) beyond, so a
#: layer whose windows spread widely by nature is not cut.
K_MAD = 5.0
MIN_FRAMES = 3  # a median of fewer frames is no reference
CONSOLE, FRAMES = "console", "frames"


@dataclass(frozen=True)
class OutlierWindow:
    setting: int
    frame: int
    layer: int
    segment: int  # the observed segment
    window_ms: float  # the marker window in the trace
    reference_ms: float  # what it should be: the window it is trimmed to
    reference: str  # CONSOLE or FRAMES

    @property
    def ratio(self) -> float:
        return self.window_ms / self.reference_ms if self.reference_ms > 0 else float("inf")


@dataclass
class WindowOutliers:
    """The outlier windows of an aligned recording and how they were judged."""

    windows: list[OutlierWindow] = field(default_factory=list)
    console_ratio: float | None = None  # median window / console time, measured frames
    judged: int = 0  # layer windows that had a reference
    largest_ratio: float | None = None  # of those, the largest (window + DELTA) / (ref + DELTA)

    def trimmed_ms(self) -> dict[int, float]:
        """Observed segment -> the duration the coupprof method keeps of it."""
        return {o.segment: o.reference_ms for o in self.windows}

    def of_layer(self, setting: int, layer: int) -> list[OutlierWindow]:
        return [o for o in self.windows if o.setting == setting and o.layer == layer]

    def note(self, trimmed: bool, levels: list[int]) -> str | None:
        """One line for stdout and the sidecar's notes: which windows and what was done."""
        if not self.windows:
            return None
        what = ("trimmed to it from their start edge (coupprof method)" if trimmed else
                "kept (the armcoup method reproduces ARM-CO-UP's figures as published)")
        listed = ", ".join(f"(level {levels[o.setting]}, frame {o.frame}, layer {o.layer}) "
                           f"{o.window_ms:.1f}/{o.reference_ms:.1f} ms"
                           for o in self.windows[:6])
        more = f" and {len(self.windows) - 6} more" if len(self.windows) > 6 else ""
        return (f"{len(self.windows)} layer window(s) over {RATIO:g}x their reference (the "
                f"console time, else the layer's other frames) were {what}: "
                f"window/reference {listed}{more}")

    def sidecar(self, trimmed: bool, levels: list[int]) -> dict[str, object]:
        return {
            "rule": f"window + {DELTA_MS:g} ms over {RATIO:g}x (reference + {DELTA_MS:g} ms) "
                    f"and beyond {K_MAD:g} x 1.4826 MAD of ln duration",
            "action": "trimmed" if trimmed else "kept",
            "judged_windows": self.judged,
            "largest_ratio": self.largest_ratio,
            "windows": [{"setting": o.setting, "level": levels[o.setting], "frame": o.frame,
                         "layer": o.layer, "window_ms": o.window_ms,
                         "reference_ms": o.reference_ms, "reference": o.reference}
                        for o in self.windows],
        }


def find_outliers(al: Alignment, console: np.ndarray | None = None) -> WindowOutliers:
    """``console[s, k]``: the console log's layer times (NaN where unknown).

    Only measured frames are judged: warm-up frames are irregular by nature (the first
    frame of ARM-CO-UP's runs takes up to 8x the console time), and both methods that
    use them know it."""
    lay, d = al.layout, al.segs.duration_ms
    # (setting, layer) -> [(frame, segment, duration)] of the measured frames' OK windows
    groups: dict[tuple[int, int], list[tuple[int, int, float]]] = {}
    for w, mt in zip(lay.windows(), al.matches, strict=True):
        if w.kind == LAYER and mt.status == OK and w.frame is not None \
                and w.layer is not None and w.frame >= lay.warmup:
            groups.setdefault((w.setting, w.layer), []).append(
                (w.frame, mt.first, float(d[mt.first])))

    def known(s: int, k: int) -> float | None:
        if console is None or s >= console.shape[0] or k >= console.shape[1]:
            return None
        v = float(console[s, k])
        return v if np.isfinite(v) and v > 0 else None

    pairs = [(dur, c) for (s, k), g in groups.items() if (c := known(s, k)) is not None
             for _, _, dur in g]
    ratio = float(np.median([dur / c for dur, c in pairs])) if pairs else None
    # How well windows agree with the console across the recording (ln units).
    spread_console = _mad([np.log((dur + DELTA_MS) / (ratio * c + DELTA_MS))
                           for dur, c in pairs]) if ratio else 0.0

    def reference(s: int, k: int) -> tuple[float, float, str] | None:
        """(reference window ms, robust sd of ln duration, source)."""
        c = known(s, k)
        if c is not None and ratio is not None:
            return ratio * c, spread_console, CONSOLE
        g = groups.get((s, k), [])
        if len(g) < MIN_FRAMES:
            return None
        x = np.log(np.array([dur for _, _, dur in g]) + DELTA_MS)
        centre = float(np.median(x))
        return float(np.exp(centre)) - DELTA_MS, _mad(list(x - centre)), FRAMES

    out = WindowOutliers(console_ratio=ratio)
    for (s, k), g in sorted(groups.items()):
        ref = reference(s, k)
        if ref is None:
            continue
        ref_ms, sd, source = ref
        for f, j, dur in g:
            out.judged += 1
            r = float(np.log((dur + DELTA_MS) / (ref_ms + DELTA_MS)))
            out.largest_ratio = max(out.largest_ratio or 0.0, float(np.exp(r)))
            if r <= np.log(RATIO) or r <= K_MAD * sd:
                continue
            if f == 0 and k == 0 and s > 0 and _previous_frequency(dur, reference(s - 1, 0)):
                continue  # still at the previous level: the coupprof method reports it
            out.windows.append(OutlierWindow(s, f, k, j, dur, ref_ms, source))
    out.windows.sort(key=lambda o: (o.setting, o.frame, o.layer))
    return out


def _mad(resid: list[float]) -> float:
    """1.4826 x the median absolute deviation from the median (a normal spread's sd)."""
    if not resid:
        return 0.0
    a = np.asarray(resid)
    return float(1.4826 * np.median(np.abs(a - np.median(a))))


def _previous_frequency(dur: float, prev: tuple[float, float, str] | None) -> bool:
    return prev is not None and (dur + DELTA_MS) / (prev[0] + DELTA_MS) <= RATIO
