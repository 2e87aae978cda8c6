"""Per-layer power from an aligned recording, by two methods.

``armcoup`` reproduces ARM-CO-UP's published ``Power`` column (each window's readings
averaged without weights). ``coupprof`` (the default) integrates the readings as a step
function shifted by the sensor's lag, estimated from the data, corrects the smoothing that
still moves energy across each edge, leaves warm-up frames out and weights power by time.
Windows the alignment put in a fault are set aside by both methods.

Both methods step by step: docs/recordings.md ("Per-layer power by two methods").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from profiler.errors import BadInputError
from profiler.recordings.align import OK, Alignment
from profiler.recordings.layout import GAP, LAYER
from profiler.recordings.traces import Recording

ARMCOUP, COUPPROF = "armcoup", "coupprof"
METHODS = (COUPPROF, ARMCOUP)

LAG_GRID_MS = np.round(np.arange(0.0, 10.01, 0.1), 3)
STEP_BLOCK = 1 << 16  # readings of `StepIntegral`'s knots and sums made at once
PREV_FREQ_LN = 0.15  # frame 0's first layer this far (ln) from its setting's median


@dataclass
class LayerFigure:
    """One row: a layer (metric ``task``) or a frame's input gap (``in``) in one setting."""

    setting: int
    metric: str  # "task" or "in"
    layer: int
    power_mw: float
    time_ms_mean: float
    time_ms_median: float
    time_ms_p95: float
    time_ms_std: float
    window_ms_mean: float  # mean marker-window duration in the trace
    windows: int  # windows averaged
    set_aside: int  # windows in a fault (or at the previous frequency with no warm-up)
    samples: int  # readings inside the windows
    console_ms: float | None = None

    @property
    def energy_mj(self) -> float:
        return self.power_mw / 1000.0 * self.time_ms_mean


@dataclass
class RecordingFigures:
    """One method's per-layer figures for an aligned recording (the live power path's
    per-window energies are `profiler.power.attribution.Attribution`)."""

    method: str
    figures: list[LayerFigure]
    lag_ms: float | None = None
    lag_readings: float | None = None
    update_ms: float | None = None  # the sensor's update period used (coupprof's method)
    previous_frequency: list[tuple[int, float, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _stats(values: list[float]) -> tuple[float, float, float, float]:
    a = np.asarray(values, dtype=np.float64)
    return (float(a.mean()), float(np.median(a)), float(np.percentile(a, 95)),
            float(a.std(ddof=1)) if a.size > 1 else 0.0)


def _groups(al: Alignment, include: Callable[[int, int | None], bool]
            ) -> dict[tuple[int, str, int], list[int]]:
    """(setting, metric, layer) -> the OK observed segments of its windows, frame order."""
    out: dict[tuple[int, str, int], list[int]] = {}
    for w, mt in zip(al.layout.windows(), al.matches, strict=True):
        if w.frame is None or w.layer is None or not include(w.setting, w.frame):
            continue
        if w.kind == LAYER:
            key = (w.setting, "task", w.layer)
        elif w.kind == GAP and w.layer == 0:
            key = (w.setting, "in", 0)
        else:
            continue
        out.setdefault(key, [])
        if mt.status == OK:
            out[key].append(mt.first)
    return out


def _all_windows(al: Alignment, key: tuple[int, str, int]) -> int:
    s, metric, layer = key
    return sum(1 for w in al.layout.windows() if w.setting == s and w.layer == layer
               and w.frame is not None and (w.kind == LAYER) == (metric == "task")
               and (metric == "task" or w.kind == GAP))


def armcoup_method(rec: Recording, al: Alignment, console: np.ndarray | None = None
                   ) -> RecordingFigures:
    segs = al.segs
    figures = []
    for (s, metric, layer), idx in sorted(_groups(al, lambda s, f: True).items()):
        if not idx:
            continue
        # Their order of operations, for the last bits: sum()/len per window, then per layer.
        means = [sum(rec.power_mw[segs.start[j]:segs.stop[j]].tolist()) /
                 int(segs.stop[j] - segs.start[j]) for j in idx]
        power = sum(means) / len(means)
        dur = [float(segs.duration_ms[j]) for j in idx]
        cms = _console(console, s, layer) if metric == "task" else None
        stats = _stats(dur)
        if cms is not None:  # their Time column is the console's
            stats = (cms, cms, cms, 0.0)
        figures.append(LayerFigure(
            setting=s, metric=metric, layer=layer, power_mw=power, time_ms_mean=stats[0],
            time_ms_median=stats[1], time_ms_p95=stats[2], time_ms_std=stats[3],
            window_ms_mean=float(np.mean(dur)), windows=len(idx),
            set_aside=_all_windows(al, (s, metric, layer)) - len(idx),
            samples=int(sum(segs.stop[j] - segs.start[j] for j in idx)), console_ms=cms))
    return RecordingFigures(ARMCOUP, figures)


def _console(console: np.ndarray | None, s: int, layer: int) -> float | None:
    if console is None or s >= console.shape[0] or layer >= console.shape[1]:
        return None
    v = float(console[s, layer])
    return v if np.isfinite(v) else None


class StepIntegral:
    """The readings as a step function on the sensor's clock shifted by ``lag_ms``:
    reading i holds from t_i - lag until the next reading.

    Its knots (t - lag) and running sums are made a block of readings at a time, each
    time it is asked, and never held whole: for an hour's trace they would be two 30 MB
    arrays, and the lag search builds 101 of them. Every number is the one whole arrays
    give: a block's sums start from the sum so far (the order of the additions is a
    single cumsum's), and each value is interpolated in the block holding both knots
    around it (np.interp on a slice, over the same numbers)."""

    def __init__(self, t_ms: np.ndarray, power_mw: np.ndarray, lag_ms: float) -> None:
        self.t_ms, self.power_mw, self.lag_ms = t_ms, power_mw, lag_ms
        self.first, self.last = float(power_mw[0]), float(power_mw[-1])
        ends = t_ms[[0, -1]] - lag_ms
        self.knot_first, self.knot_last = float(ends[0]), float(ends[1])
        # the knot each block starts at (block b: readings b*B .. (b+1)*B, both ends in)
        self.starts = t_ms[::STEP_BLOCK] - lag_ms

    def _blocks(self) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """(block number, knots, mW*ms at each knot) of each block in turn."""
        t, p, n = self.t_ms, self.power_mw, self.t_ms.size
        carry = 0.0
        for b, r0 in enumerate(range(0, n, STEP_BLOCK)):
            r1 = min(n, r0 + STEP_BLOCK + 1)
            knots = t[r0:r1] - self.lag_ms
            cum = np.empty_like(knots)
            cum[0] = carry
            seg = cum[1:]
            np.subtract(knots[1:], knots[:-1], out=seg)
            seg *= p[r0:r1 - 1]
            if seg.size:
                seg[0] += carry
                np.cumsum(seg, out=seg)
            carry = float(cum[-1])
            yield b, knots, cum

    def _by_block(self, block: np.ndarray) -> list[np.ndarray]:
        """The indices of ``block``'s entries equal to each block number."""
        order = np.argsort(block, kind="stable")
        bounds = np.searchsorted(block[order], np.arange(self.starts.size + 1))
        return [order[bounds[b]:bounds[b + 1]] for b in range(self.starts.size)]

    def energy(self, a_ms: np.ndarray, b_ms: np.ndarray) -> np.ndarray:
        """mW*ms (= uJ) between a and b; outside the trace the end readings hold."""
        a = np.asarray(a_ms, dtype=np.float64)
        c = self._c(np.concatenate([a, np.asarray(b_ms, dtype=np.float64)]))
        return c[a.size:] - c[:a.size]

    def _c(self, x: np.ndarray) -> np.ndarray:
        # each value in the last block whose first knot is at or below it
        where = self._by_block(np.clip(np.searchsorted(self.starts, x, side="right") - 1, 0, None))
        c = np.empty_like(x)
        cum_last = 0.0
        for b, knots, cum in self._blocks():
            if where[b].size:
                c[where[b]] = np.interp(x[where[b]], knots, cum)
            cum_last = float(cum[-1])
        c = np.where(x < self.knot_first, (x - self.knot_first) * self.first, c)
        return np.where(x > self.knot_last, cum_last + (x - self.knot_last) * self.last, c)

    def before(self, x: np.ndarray) -> np.ndarray:
        """How many knots lie before each of ``x`` (``np.searchsorted(knots, x)``)."""
        x = np.asarray(x, dtype=np.float64)
        # in the last block whose first knot is below it: every knot before that block
        # is below it, none after
        where = self._by_block(np.searchsorted(self.starts, x, side="left") - 1)
        out = np.zeros(x.size, dtype=np.int64)
        for b, idx in enumerate(where):
            if idx.size:
                r0 = b * STEP_BLOCK
                knots = self.t_ms[r0:r0 + STEP_BLOCK + 1] - self.lag_ms
                out[idx] = r0 + np.searchsorted(knots, x[idx])
        return out


def update_period_ms(rec: Recording) -> float:
    """The sensor's update period, from how often consecutive readings repeat a value.

    Readings ``d`` ms apart repeat when they fall in one conversion (chance ``1 - d/u``
    for an update period ``u > d``), or when two conversions happen to read the same, in
    10 mW steps (chance ``q``: ~0.19 for 15 mW of noise). The readings per change times
    the mean interval is ``u / (1 - q)``, an upper bound (3.1 ms for the simulated
    sensor's 2.7 ms, which over-corrected the edge spread: +0.5 % on 12 ms layers). So
    ``q`` is measured on pairs of readings one to two of those bounds apart (and 1 ms,
    for whole millis), surely in
    different conversions, and ``u`` solved from ``P(repeat | d) = q + (1 - q)(1 - d/u)+``.
    """
    if rec.readings < 3:
        return 0.0
    t = np.asarray(rec.t_ms, dtype=np.float64)
    mw = np.asarray(rec.power_mw)
    gaps = np.diff(t)
    same = mw[1:] == mw[:-1]
    changes = int(np.count_nonzero(~same)) + 1
    bound = float(rec.readings / changes * np.mean(gaps))
    # pairs a lag apart whose gap lies in [bound, 2 bound] (different conversions; +1 ms
    # as millis are whole), both in one pin segment and settled after its edge: the same
    # true power, mostly. Adjacent pairs are chosen the same way.
    seg = np.r_[0, np.cumsum(rec.level[1:] != rec.level[:-1])]
    edge_ms = np.r_[t[0], t[1:][rec.level[1:] != rec.level[:-1]]][seg]
    settled = t - edge_ms >= 2 * bound
    eq = n = 0
    lag = 1
    while lag < t.size:
        d = t[lag:] - t[:-lag]
        sel = (d >= bound + 1) & (d <= 2 * bound + 1) & (seg[lag:] == seg[:-lag]) \
            & settled[:-lag]
        eq += int(np.count_nonzero(mw[lag:][sel] == mw[:-lag][sel]))
        n += int(np.count_nonzero(sel))
        if d.min() > 2 * bound + 1 or lag >= 64:
            break
        lag += 1
    calm = (seg[1:] == seg[:-1]) & settled[:-1]
    if n < 100 or np.count_nonzero(calm) < 100:
        return bound
    q = eq / n
    if q >= 0.9:
        return bound
    gaps = gaps[calm]
    repeat = (float(np.mean(same[calm])) - q) / (1.0 - q)  # mean of (1 - d/u)+ over gaps
    if repeat <= 0.0:
        return bound

    def excess(u: float) -> float:
        return float(np.mean(np.clip(1.0 - gaps / u, 0.0, None))) - repeat

    lo, hi = 1e-6, bound  # excess rises with u; the root lies below the bound
    if excess(hi) <= 0.0:
        return bound
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if excess(mid) < 0.0:
            lo = mid
        else:
            hi = mid
    # to 0.01 ms, as printed: a glitch on the pin moves the pairs chosen, and so the
    # estimate by ~1e-4 ms, which must not move every window's figure
    return round(0.5 * (lo + hi), 2)


def edge_spread_ms(update_ms: float, reading_ms: float) -> float:
    """How much of a power step the integrated readings move across a window edge (ms of
    the step): E|X|/2 for X the sum of the sensor's averaging window, its update phase
    (both ``update_ms`` wide) and the hold between readings (``reading_ms``), centred."""
    grid = 0.005
    dens = np.ones(1)
    for width in (update_ms, update_ms, reading_ms):
        n = max(1, int(round(width / grid)))
        dens = np.convolve(dens, np.full(n, 1.0 / n))
    x = (np.arange(dens.size) - (dens.size - 1) / 2) * grid
    return float(np.sum(np.abs(x) * dens) / 2)


def deblur(measured_mw: np.ndarray, duration_ms: np.ndarray, spread_ms: float) -> np.ndarray:
    """The segments' powers before the sensor's smoothing moved ``spread_ms`` of each step
    across every edge. To first order a segment of T ms measures
    ``m = P + c (P_prev + P_next - 2 P)`` with ``c = spread / T``; its neighbours measure
    the same way, so they are off too (ARM-CO-UP's 8 ms gaps gain from both layers
    beside them, and correcting a layer from its neighbours' measured powers leaves a
    quarter of its loss). Each segment is solved with its two neighbours, taking the
    segments two away as equal to it (gap, layer, gap, layer alternate; the error is
    second order in c): a segment's figure depends on its neighbours only, so a fault
    changes no figure beyond the segments next to it. ``c`` is capped at a quarter
    (T >= 4 spread), where the first-order model stops holding."""
    m = np.asarray(measured_mw, dtype=np.float64)
    t = np.asarray(duration_ms, dtype=np.float64)
    if m.size < 2 or spread_ms <= 0:
        return m.copy()
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.where(t > 0, np.minimum(spread_ms / t, 0.25), 0.0)
    # a neighbour that is missing (the ends) is the segment itself: no edge there
    cp = np.r_[0.0, c[:-1]]  # the previous segment's coupling
    cn = np.r_[c[1:], 0.0]
    mp = np.r_[m[:1], m[:-1]]
    mn = np.r_[m[1:], m[-1:]]
    has_p = np.r_[False, np.ones(m.size - 1, bool)]
    has_n = np.r_[np.ones(m.size - 1, bool), False]
    # P_prev = (m_prev - 2 cp P) / (1 - 2 cp), the same for the next one; substituted:
    kp = np.where(has_p, c, 0.0)
    kn = np.where(has_n, c, 0.0)
    den = 1.0 - kp - kn - 2 * kp * cp / (1 - 2 * cp) - 2 * kn * cn / (1 - 2 * cn)
    num = m - kp * mp / (1 - 2 * cp) - kn * mn / (1 - 2 * cn)
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def _pieces(t0_ms: np.ndarray, t1_ms: np.ndarray, trim_ms: dict[int, float]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(segment -> its first piece, piece starts, piece ends): each segment in ``trim_ms``
    split ``trim_ms[j]`` after its start; with none, the pieces are the segments."""
    split = np.zeros(t0_ms.size, dtype=np.int64)
    cut = t1_ms.copy()
    for j, keep in trim_ms.items():
        if 0 < keep < t1_ms[j] - t0_ms[j]:
            split[j], cut[j] = 1, t0_ms[j] + keep
    piece = np.arange(t0_ms.size) + np.cumsum(split) - split
    p0 = np.empty(t0_ms.size + int(split.sum()))
    p1 = np.empty_like(p0)
    p0[piece], p1[piece] = t0_ms, cut
    tail = piece[split == 1] + 1
    p0[tail], p1[tail] = cut[split == 1], t1_ms[split == 1]
    return piece, p0, p1


def estimate_lag_ms(rec: Recording, al: Alignment) -> float:
    """The shift of the readings that best fits constant power inside each window."""
    ok = [mt.first for w, mt in zip(al.layout.windows(), al.matches, strict=True)
          if mt.status == OK and w.frame is not None]
    if len(ok) < 4:
        raise BadInputError(f"{rec.path}: too few matched windows to estimate the sensor's "
                            "lag", "pass --lag-ms")
    a = al.segs.t0_ms[ok]
    b = al.segs.t1_ms[ok]
    d = b - a
    good = d > 0
    a, b, d = a[good], b[good], d[good]
    scores = []
    for lag in LAG_GRID_MS:
        m = StepIntegral(rec.t_ms, rec.power_mw, float(lag)).energy(a, b) / d
        scores.append(float(np.sum(d * m * m)))
    return float(LAG_GRID_MS[int(np.argmax(scores))])


def coupprof_method(rec: Recording, al: Alignment, console: np.ndarray | None = None,
                    lag_ms: float | None = None, edge_correction: bool = True,
                    previous_frequency: bool = True,
                    trim_ms: dict[int, float] | None = None,
                    update_ms: float | None = None) -> RecordingFigures:
    """``previous_frequency``: look for a frame 0 still at the previous setting's
    frequency (a run that set its level before any frame, as coupprof's do, has none).
    ``trim_ms``: observed segment -> the duration to keep of it from its start edge (an
    outlier window, `profiler.recordings.outliers`); the rest becomes a segment of its own.
    ``update_ms``: the sensor's update period, instead of estimating it."""
    segs = al.segs
    lay = al.layout
    lag = estimate_lag_ms(rec, al) if lag_ms is None else float(lag_ms)
    # Every segment's integrated power, then the first-order correction of the power the
    # sensor's smoothing moves across each edge: P = E + spread/T * (2E - E_prev - E_next).
    # (The spread first: its differences of all readings and the step function's arrays
    # are not held at once.)
    dt = float(np.mean(np.diff(rec.t_ms))) if rec.readings > 1 else 0.0
    update_ms = update_period_ms(rec) if update_ms is None else float(update_ms)
    spread = edge_spread_ms(update_ms, dt) if edge_correction else 0.0
    step = StepIntegral(rec.t_ms, rec.power_mw, lag)
    # Pieces: the segments, each trimmed one split where its layer is taken to end (its
    # own figure from the first piece; the rest, idle with the marker still up, is the
    # next piece and the first one's neighbour in the edge correction).
    piece, p0, p1 = _pieces(segs.t0_ms, segs.t1_ms, trim_ms or {})
    seg_e = step.energy(p0, p1)
    seg_t = p1 - p0
    with np.errstate(invalid="ignore", divide="ignore"):
        seg_p = np.where(seg_t > 0, seg_e / seg_t, np.nan)
    corr_p = deblur(seg_p, seg_t, spread)
    wins = lay.windows()
    notes: list[str] = []
    # Frame 0 still at the previous frequency: its first layer's duration.
    first = {w.setting: mt for w, mt in zip(wins, al.matches, strict=True)
             if w.kind == LAYER and w.frame == 0 and w.layer == 0}
    durations: dict[int, list[float]] = {}
    for w, mt in zip(wins, al.matches, strict=True):
        if w.kind == LAYER and w.layer == 0 and w.frame is not None and w.frame >= lay.warmup \
                and mt.status == OK:
            durations.setdefault(w.setting, []).append(float(segs.duration_ms[mt.first]))
    med = {s: float(np.median(v)) for s, v in durations.items()}
    prev: list[tuple[int, float, float]] = []
    for s, mt in sorted(first.items()) if previous_frequency else ():
        if mt.status != OK or s not in med:
            continue
        d0 = float(segs.duration_ms[mt.first])
        off = abs(np.log(d0 / med[s])) if d0 > 0 else np.inf
        closer_prev = s - 1 in med and abs(np.log(d0 / med[s - 1])) < off
        if off > PREV_FREQ_LN and (s == 0 or closer_prev):
            prev.append((s, d0, med[s]))
    aside_prev = {s for s, _, _ in prev} if lay.warmup == 0 else set()

    def include(s: int, f: int | None) -> bool:
        return f is not None and f >= lay.warmup

    figures = []
    for (s, metric, layer), idx in sorted(_groups(al, include).items()):
        if metric == "task" and layer == 0 and s in aside_prev:
            idx = [j for j in idx if j != first[s].first]
        if not idx:
            continue
        pi = piece[idx]
        a = p0[pi]
        b = p1[pi]
        e = corr_p[pi] * seg_t[pi]
        dur = (b - a).tolist()
        power = float(e.sum() / (b - a).sum())
        lo = step.before(a)
        hi = step.before(b)
        total = sum(1 for w in wins if w.setting == s and w.layer == layer and w.frame is not None
                    and w.frame >= lay.warmup and (w.kind == LAYER) == (metric == "task")
                    and (metric == "task" or w.kind == GAP))
        st = _stats(dur)
        figures.append(LayerFigure(
            setting=s, metric=metric, layer=layer, power_mw=power, time_ms_mean=st[0],
            time_ms_median=st[1], time_ms_p95=st[2], time_ms_std=st[3],
            window_ms_mean=float(np.mean(segs.duration_ms[idx])), windows=len(idx),
            set_aside=total - len(idx),
            samples=int(np.sum(hi - lo)),
            console_ms=_console(console, s, layer) if metric == "task" else None))
    if prev:
        notes.append("frame 0 still at the previous frequency in setting(s) "
                     + ", ".join(str(s) for s, _, _ in prev)
                     + ("; those first layers were set aside (no warm-up)" if aside_prev
                        else "; left out with the warm-up frames"))
    mean_dt = dt if rec.readings > 1 else float("nan")
    notes.append(f"sensor update period {update_ms:.2f} ms; "
                 + (f"edge spread {spread:.2f} ms corrected" if edge_correction
                    else "edge spread not corrected"))
    return RecordingFigures(COUPPROF, figures, lag_ms=lag, update_ms=update_ms,
                            lag_readings=lag / mean_dt if mean_dt > 0 else None,
                            previous_frequency=prev, notes=notes)
