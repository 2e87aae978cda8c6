"""The layout a trace shows, from its marker segments alone: layers per frame, frames per
setting, settings, and the segments that close each setting.

`coupprof import` used to take the layout from flags with ARM-CO-UP's defaults; a trace of
another shape (30 frames and 11 levels on a second board) was then matched window by
window to the wrong layers. The trace itself says most of it:

- **Settings.** Each setting ends with a long wait (ARM-CO-UP: ~11 s at the active level)
  much longer than any segment of a frame: the top of the sorted durations, above the
  widest gap of at least CLOSE_RATIO. Such closes are taken when most settings they cut
  then hold the same count of segments and a whole frame.
- **Layers.** Each frame marks, per layer, a gap (the first one the input) and the layer,
  so the ln durations repeat every 2L segments. The mean squared difference of segment i
  and segment i + p within a setting (`_differences`, by FFT: O(n log n) for any length)
  is near its floor at p = 2L and its multiples, and well above it elsewhere; L is the
  smallest such (where a console log is given, its layer count settles a tie).
- **Frames and trailing.** From the count: ``2 L runs + trailing``, ``1 <= trailing <=
  2L``. A setting off by a few segments (a spurious pulse adds two, a missed edge takes
  two) is outvoted and said; a last setting cut short is said, with its whole frames.

Warm-up frames are marked like measured ones in ARM-CO-UP's traces, so the trace gives
their sum (``runs``) and cannot tell which were warm-up; coupprof's own recordings (one
setting, one closing idle segment) do not mark them at all (``warmup`` 0). Without closes
(one setting, or settings run back to back) several settings read as one of all their
frames, and a trace that stopped early reads as fewer frames.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from profiler.recordings.align import Segments, segments
from profiler.recordings.console import ConsoleLog
from profiler.recordings.layout import RunLayout
from profiler.recordings.traces import Recording

DELTA_MS = 2.0  # about one reading, as the alignment's costs: short segments not over-weighted
#: A close is at least this many times longer than every segment of a frame.
CLOSE_RATIO = 2.0
#: The period is the smallest whose difference is within this share of the way from the
#: floor (the best period's) to the typical difference (the median over all periods) ...
FLOOR_SHARE = 0.25
#: ... or within this factor of the floor (noise alone moves it that much).
FLOOR_MARGIN = 1.5
#: Below this ratio of the typical difference at other lags to the chosen one's, the
#: period is not clear (ARM-CO-UP's MobileNetV1 traces: 12-18; simulated: 20-100).
MIN_CONTRAST = 3.0
#: Periods longer than this many segments (a frame of 2048 layers) are not tried.
MAX_PERIOD = 4096
#: Segments correlated at once (memory: about 100 bytes each).
CHUNK = 1 << 18
#: Longer settings are cut in pieces this long (pairs that straddle a cut are lost).
PIECE = 4 * MAX_PERIOD


@dataclass(frozen=True)
class InferredLayout:
    """What the trace shows; ``layers``/``runs``/``trailing`` None where it cannot tell
    (too few segments, no repeating frame)."""

    segments: int
    layers: int | None  # per frame
    runs: int | None  # frames per setting, warm-up included where it is marked
    settings: int  # settings seen, a cut-short last one included
    trailing: int | None  # segments closing each setting
    closed: bool  # settings end with a long close (their counts are known)
    last_runs: int | None = None  # whole frames of a last setting cut short (None: whole)
    counts: tuple[int, ...] = ()  # segments of each whole setting
    odd_settings: tuple[tuple[int, int], ...] = ()  # (setting, count less the common one)
    contrast: float = 0.0  # how clear the period is (MIN_CONTRAST)
    warmup: int | None = None  # 0: a recording that does not mark warm-up (coupprof's own)
    #: The recording ends inside a setting's close, well short of the other closes: it
    #: was cut there, and settings after it may have been run but not recorded.
    stopped_in_close: bool = False

    @property
    def cut_short(self) -> bool:
        return self.last_runs is not None or self.stopped_in_close

    @property
    def found(self) -> bool:
        return self.layers is not None and self.runs is not None

    @property
    def sure(self) -> bool:
        """The period is clear and most settings hold the same count."""
        if not self.found or self.contrast < MIN_CONTRAST:
            return False
        return 2 * len(self.odd_settings) <= len(self.counts)

    def shape(self) -> str:
        """'8 settings x 13 frames x 14 layers'."""
        s = "1 setting" if self.settings == 1 else f"{self.settings} settings"
        return f"{s} x {self.runs} frames x {self.layers} layer{'s' if self.layers != 1 else ''}"

    def describe(self) -> str:
        """One line: what the trace shows, and what did not fit."""
        if not self.found:
            return (f"the trace's {self.segments} marker segments show no repeating frame: "
                    "its layout is not known")
        out = f"the trace shows {self.shape()}"
        out += " (warm-up not marked)" if self.warmup == 0 else " (warm-up included)"
        t = f"{self.trailing} closing segment{'s' if self.trailing != 1 else ''}"
        out += f", {t} per setting" if self.closed else \
            f", no long close ({t} after the last frame)"
        if self.last_runs is not None:
            out += f"; the last setting is cut short after {self.last_runs} frames"
        if self.stopped_in_close:
            out += "; the recording stops inside the last setting's close (cut short)"
        for s, delta in self.odd_settings:
            k = (abs(delta) + 1) // 2
            why = (f"{k} spurious pulse{'s' if k != 1 else ''}" if delta > 0
                   else f"{k} missed edge{'s' if k != 1 else ''}")
            out += (f"; setting {s + 1} has {abs(delta)} segment{'s' if abs(delta) != 1 else ''}"
                    f" {'more' if delta > 0 else 'fewer'} ({why}?)")
        return out + ("" if self.sure else " (not sure)")

    def misfits(self, layout: RunLayout) -> list[str]:
        """How ``layout``'s counts disagree with the trace's (empty: they agree, or the
        trace cannot tell). Fewer settings in the trace than in the layout, or (without a
        long close) fewer frames, may be a recording that stopped early: not a misfit."""
        if not self.found:
            return []
        out = []
        if self.layers != layout.layers:
            out.append(f"{self.layers} layers per frame, not {layout.layers}")
        if self.closed:
            if self.runs != layout.runs:
                out.append(f"{self.runs} frames per setting, not {layout.runs} "
                           f"({layout.warmup} warm-up + {layout.frames})")
            if self.trailing != layout.trailing:
                out.append(f"{self.trailing} closing segments per setting, not "
                           f"{layout.trailing}")
            if self.settings > len(layout.settings):
                out.append(f"{self.settings} settings, not {len(layout.settings)}")
        else:
            frames = layout.runs * len(layout.settings)  # settings back to back read as one
            if (self.runs or 0) > frames:
                out.append(f"{self.runs} frames, not {frames}")
        return out


def infer_layout(trace: Segments | Recording, console: ConsoleLog | None = None
                 ) -> InferredLayout:
    """The layout `trace`'s marker segments show (module docstring: how). ``console``:
    its layers per setting settle the period between equally good ones."""
    segs = trace if isinstance(trace, Segments) else segments(trace)
    d = np.asarray(segs.duration_ms, dtype=float)
    n = d.size
    x = np.log(np.maximum(d, 0.0) + DELTA_MS)
    if n < 6:
        return InferredLayout(n, None, None, 1, None, False)
    prefer = None
    if console is not None:
        layers = Counter(len(st.layer_ms) for st in console.settings if st.layer_ms)
        prefer = 2 * layers.most_common(1)[0][0] if layers else None
    for k in _close_candidates(x):
        closes = _top(x, k)
        counts = np.diff(np.r_[-1, closes])
        if 2 * max(Counter(counts.tolist()).values()) < counts.size:
            continue  # the closes do not cut settings of one shape
        period, contrast = _period(x, closes, prefer)
        got = None if period is None else _with_closes(n, closes, period)
        if period is None or got is None:
            continue
        whole, n_set, trailing, runs, last = got
        odd = tuple((s, c - n_set) for s, c in enumerate(whole) if c != n_set)
        settings = len(whole) + (last is not None)
        return InferredLayout(n, period // 2, runs, settings, trailing, True, last,
                              tuple(whole), odd, contrast, _warmup(settings, trailing),
                              _stopped_in_close(x, closes, n_set - trailing))
    # One setting and no long close: what follows the last whole frame is its trailing.
    period, contrast = _period(x, np.zeros(0, dtype=np.int64), prefer)
    if period is None:
        return InferredLayout(n, None, None, 1, None, False)
    return InferredLayout(n, period // 2, n // period, 1, n % period, False,
                          contrast=contrast, warmup=_warmup(1, n % period))


def _stopped_in_close(x: np.ndarray, closes: np.ndarray, frames_segments: int) -> bool:
    """A logger that stopped during the wait after a setting (whole settings, then
    nothing): the trace ends with its last setting's frames and a close under half the
    others' median, long enough to be taken for a close or not."""
    rest = x.size - 1 - int(closes[-1])
    if rest:  # the last setting's frames are whole, its close too short to be taken
        return rest >= frames_segments
    if closes.size < 2:
        return False
    return bool(x[closes[-1]] < float(np.median(x[closes[:-1]])) - np.log(2.0))


def _warmup(settings: int, trailing: int) -> int | None:
    """coupprof's own recordings (one setting ending with one idle segment) do not mark
    their warm-up frames; ARM-CO-UP's (each setting closing at the active level) do."""
    return 0 if settings == 1 and trailing == 1 else None


def _top(x: np.ndarray, k: int) -> np.ndarray:
    """The k longest segments after the first (the wait before the run), in order."""
    return np.sort(np.argsort(-x[1:], kind="stable")[:k] + 1)


def _close_candidates(x: np.ndarray) -> list[int]:
    """How many segments (after the first) stand CLOSE_RATIO or more above all the rest,
    for each gap in the sorted ln durations that wide, widest first; a setting has at
    least three segments, so at most a third of them."""
    v = np.sort(x[1:])[::-1]
    k_max = max(1, v.size // 3)
    gaps = v[:k_max] - v[1:k_max + 1]
    ks = np.flatnonzero(gaps >= np.log(CLOSE_RATIO))
    return [int(k) + 1 for k in ks[np.argsort(-gaps[ks], kind="stable")]]


def _with_closes(n: int, closes: np.ndarray, period: int
                 ) -> tuple[list[int], int, int, int, int | None] | None:
    """Settings cut after each close: (counts of the whole ones, the count most share,
    trailing, runs, whole frames of a cut-short last setting or None), or None when that
    count holds no whole frame."""
    counts = np.diff(np.r_[-1, closes]).tolist()
    rest = n - 1 - int(closes[-1])  # segments after the last close
    tally = Counter(counts)
    top = max(tally.values())

    def trail(c: int) -> int:
        return (c - 1) % period + 1

    # A tie (two settings, one with a fault): the count with the fewest trailing segments.
    n_set = min((c for c, k in tally.items() if k == top), key=lambda c: (trail(c), c))
    trailing = trail(n_set)
    runs = (n_set - trailing) // period
    if runs < 1:
        return None
    last: int | None = None
    if rest:
        if rest >= n_set - trailing:  # its frames whole, its close cut (or missing)
            counts.append(rest)
        else:
            last = rest // period
    return counts, n_set, trailing, runs, last


def _period(x: np.ndarray, closes: np.ndarray, prefer: int | None = None
            ) -> tuple[int | None, float]:
    """The frame's length in segments (even: the marker alternates) from the differences
    within each setting, and how clearly: the typical difference at lags that are not its
    multiples over its own (inf where every lag is one). ``prefer``: taken when it is
    among the good ones."""
    diff = _differences(x, closes)
    p = np.arange(diff.size)
    even = (p >= 2) & (p % 2 == 0) & np.isfinite(diff)
    if not even.any():
        return None, 0.0
    vals = diff[even]
    floor, typical = float(vals.min()), float(np.median(vals))
    ok = even & (diff <= max(floor + FLOOR_SHARE * (typical - floor), FLOOR_MARGIN * floor))
    best = int(np.flatnonzero(ok)[0])
    if prefer is not None and prefer < ok.size and ok[prefer]:
        best = prefer
    others = diff[even & (p % best != 0)]
    if others.size == 0:
        return best, float("inf")
    return best, float(np.median(others)) / max(float(diff[best]), 1e-9)


def _differences(x: np.ndarray, closes: np.ndarray) -> np.ndarray:
    """Mean of (x[i + p] - x[i])^2 over pairs of segments of one setting, neither a close
    nor the first, for p = 0 .. half a setting (NaN where fewer than two pairs): three
    correlations by FFT, a row per setting (or piece of a long one), rows in chunks."""
    n = x.size
    ends = np.r_[closes + 1, n] if closes.size else np.r_[n]
    ends = ends[np.r_[True, ends[1:] > ends[:-1]]]  # no empty row after a final close
    starts = np.r_[0, ends[:-1]]
    lengths = ends - starts
    width = min(int(lengths.max()), PIECE)
    if closes.size:  # a setting whose close was missed is cut, not allowed to widen the rows
        width = min(width, 2 * int(np.median(lengths)))
    pieces = -(-lengths // width)
    first = np.repeat(np.cumsum(pieces) - pieces, pieces)
    bounds = np.repeat(starts, pieces) + width * (np.arange(int(pieces.sum())) - first)
    lengths = np.minimum(np.repeat(ends, pieces) - bounds, width)
    p_max = min(MAX_PERIOD, width // 2)
    keep = np.ones(n, dtype=bool)
    keep[0] = False
    keep[closes] = False
    mean = float(x[keep].mean()) if keep.any() else 0.0
    size = 1 << int(np.ceil(np.log2(max(2, 2 * width))))
    squares, cross, pairs = (np.zeros(p_max + 1) for _ in range(3))
    step = max(1, CHUNK // size)
    col = np.arange(width)
    for r0 in range(0, bounds.size, step):
        idx = np.minimum(bounds[r0:r0 + step, None] + col[None, :], n - 1)
        inside = col[None, :] < lengths[r0:r0 + step, None]
        m = (inside & keep[idx]).astype(float)
        xc = m * (x[idx] - mean)

        def corr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            """sum over rows and i of a[i] b[i + p], p = 0..p_max."""
            f = np.conj(np.fft.rfft(a, size, axis=1)) * np.fft.rfft(b, size, axis=1)
            return np.fft.irfft(f.sum(axis=0), size)[: p_max + 1]

        pairs += corr(m, m)
        squares += corr(xc * xc, m) + corr(m, xc * xc)
        cross += corr(xc, xc)
    pairs = np.rint(pairs)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (squares - 2 * cross) / pairs
    return np.where(pairs >= 2, np.maximum(out, 0.0), np.nan)
