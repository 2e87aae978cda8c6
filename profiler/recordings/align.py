"""Match the expected windows of a run to the observed marker segments.

There is no host clock, so the match is by order and duration: a banded dynamic programme
finds the cheapest path through (expected window, observed segment), where a spurious
pulse or a missed edge is a fault of known shape. Windows in a fault are set aside and
their frames flagged; every other window keeps the segment it had in a clean recording,
so one fault never shifts later layers.

The costs and passes: docs/recordings.md ("Matching windows to marker segments").
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from profiler.errors import BadInputError
from profiler.recordings.layout import LAYER, RunLayout
from profiler.recordings.traces import Recording

DELTA_MS = 2.0  # about one reading: short windows are not over-penalised
SIGMA = 0.3  # natural spread of a window's duration (ln units)
CAP = 16.0  # one badly matched window costs at most this
FAULT = 30.0  # a spurious pulse or a missed edge: dearer than a few badly matched windows
SKIP = FAULT / 2  # an expected window past the end of the recording, or a segment after the run

OK, SPURIOUS, MISSED, UNCOVERED = "ok", "spurious", "missed", "uncovered"

# (expected consumed, observed consumed, faults)
MOVES = ((1, 1, 0), (1, 3, 1), (1, 5, 2), (3, 1, 1), (5, 1, 2))


@dataclass
class Segments:
    """Runs of constant marker level: reading index range, edge times (mid-way between
    the readings either side of a level change), durations."""

    start: np.ndarray  # first reading
    stop: np.ndarray  # one past the last reading
    t0_ms: np.ndarray
    t1_ms: np.ndarray
    active: np.ndarray
    level: np.ndarray

    @property
    def duration_ms(self) -> np.ndarray:
        return self.t1_ms - self.t0_ms

    def __len__(self) -> int:
        return int(self.start.size)


def segments(rec: Recording) -> Segments:
    """Split at every change of the marker level, from the first idle-level reading on
    (before it the run had not started; ARM-CO-UP's reader starts there too)."""
    idle = np.flatnonzero(~rec.active)
    if idle.size == 0:
        raise BadInputError(f"{rec.path}: the marker never leaves its active level",
                            "check --marker-col and --active-level")
    first = int(idle[0])
    lv = rec.level[first:]
    cut = np.flatnonzero(lv[1:] != lv[:-1]) + 1 + first
    start = np.r_[first, cut]
    stop = np.r_[cut, rec.readings]
    t = rec.t_ms
    edges = (t[cut - 1] + t[cut]) / 2
    t0 = np.r_[t[first], edges]
    t1 = np.r_[edges, t[-1]]
    return Segments(start=start, stop=stop, t0_ms=t0, t1_ms=t1,
                    active=rec.active[start], level=rec.level[start])


@dataclass
class WindowMatch:
    status: str  # OK, SPURIOUS, MISSED or UNCOVERED
    first: int = -1  # first observed segment
    last: int = -1  # last observed segment (inclusive)


@dataclass
class Alignment:
    layout: RunLayout
    segs: Segments
    matches: list[WindowMatch]
    expected_ms: np.ndarray  # the durations the final pass scored against (NaN: unknown)
    cost: float
    faults: int
    console_used: bool
    flagged: list[tuple[int, int]] = field(default_factory=list)  # (setting, frame)
    uncovered_settings: list[int] = field(default_factory=list)
    ignored_tail: int = 0  # observed segments after the last expected window

    def is_ok(self, i: int) -> bool:
        return self.matches[i].status == OK

    def covered_settings(self) -> list[int]:
        return [s for s in range(len(self.layout.settings)) if s not in self.uncovered_settings]


def _cost(d: np.ndarray, e: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        c = ((np.log(d + DELTA_MS) - np.log(e + DELTA_MS)) / SIGMA) ** 2
    return np.where(np.isnan(e), 0.0, np.minimum(c, CAP))


def _anchors(layout: RunLayout, d: np.ndarray, active: np.ndarray) -> list[int]:
    """Per setting, the observed segment that closes it: its last trailing segment, taken
    as the longest segment of that level near where it is expected. Without trailing
    segments there are no anchors inside the recording."""
    if layout.trailing == 0:
        return []
    out = []
    for s in range(len(layout.settings) - 1):
        guess = (s + 1) * layout.per_setting - 1
        lo, hi = max(0, guess - layout.per_frame), min(d.size, guess + layout.per_frame + 1)
        if lo >= hi:
            break
        cand = np.arange(lo, hi)
        cand = cand[active[cand] == bool(layout.trailing % 2 == 0)]
        if cand.size == 0:
            break
        out.append(int(cand[np.argmax(d[cand])]))
    return out


#: What a fault must explain, in summed per-window variance of ln(duration) across a
#: setting's measured frames, before the first pass believes it. On ARM-CO-UP's clean
#: traces leaving out the two best-chosen frames gains at most 1.13; a real shift, more.
CHANGE_PENALTY = 1.0


def _frame_values(logd: np.ndarray, lo: int, hi: int, runs: int, pf: int,
                  off: np.ndarray) -> np.ndarray:
    """(frames, windows per frame) ln durations when frame f's windows are the observed
    segments counted from ``lo`` shifted by ``off[f]`` (NaN: frame left out)."""
    i = np.arange(runs * pf).reshape(runs, pf)
    j = lo + i + np.nan_to_num(off, nan=0).astype(int)[:, None]
    ok = (j >= lo) & (j <= hi) & ~np.isnan(off)[:, None]
    return np.where(ok, logd[np.clip(j, 0, logd.size - 1)], np.nan)


def _spread(vals: np.ndarray) -> float:
    """Summed variance of each window's ln duration across the frames."""
    n = np.sum(~np.isnan(vals), axis=0)
    with warnings.catch_warnings():  # all-NaN windows (frames left out) are expected
        warnings.simplefilter("ignore", RuntimeWarning)
        var = np.nanvar(vals, axis=0)
    return float(np.nansum(np.where(n > 1, var * n, 0.0)))


def _nanmedian0(vals: np.ndarray) -> np.ndarray:
    """``np.nanmedian(vals, axis=0)`` without its masked-array path (thousands of calls on
    small arrays per recording); NaN where a column has no value."""
    srt = np.sort(vals, axis=0)  # NaNs sort last
    n = np.sum(~np.isnan(vals), axis=0)
    cols = np.arange(vals.shape[1])
    mid = 0.5 * (srt[np.maximum((n - 1) // 2, 0), cols] + srt[np.maximum(n // 2, 0), cols])
    return np.where(n > 0, mid, np.nan)


def _profile(vals: np.ndarray) -> np.ndarray:
    """Each window's median ln duration, centred separately over the idle-level (gap) and
    active (layer) windows: gaps keep their length across levels, layers scale together."""
    with warnings.catch_warnings():  # all-NaN windows (frames left out) are expected
        warnings.simplefilter("ignore", RuntimeWarning)
        p = _nanmedian0(vals)
        p[0::2] -= np.nanmean(p[0::2])
        p[1::2] -= np.nanmean(p[1::2])
    return p


def _initial_path(layout: RunLayout, d: np.ndarray, active: np.ndarray) -> list[tuple[int, int, int]]:
    """A first match with no durations known. Settings are delimited by their closing
    segments (the anchors). Within one, the observed segments are counted from its start
    with an offset per frame that changes at most twice (a fault in each changing frame,
    that frame left out), the offsets ending at the count difference. The choice makes
    each window's duration most alike across the setting's measured frames and the
    setting's duration profile most like the fault-free settings' (a shift that is the same
    in every frame of a setting shows only there), each change having to earn
    CHANGE_PENALTY. Two faults that cancel out in the count are found this way too."""
    per, pf, runs = layout.per_setting, layout.per_frame, layout.runs
    logd = np.log(d + DELTA_MS)
    bounds = [-1, *_anchors(layout, d, active)]
    # Warm-up frames are the irregular ones: they follow the path but are not scored.
    scored = np.arange(runs) >= (layout.warmup if runs - layout.warmup > 2 else 0)
    chunks = []
    for s in range(len(bounds)):
        lo = bounds[s] + 1
        hi = bounds[s + 1] if s + 1 < len(bounds) else None  # inclusive
        n_exp = per if s + 1 < len(bounds) else layout.total - s * per
        if hi is None:  # the last setting ends with the recording, unless that was cut
            hi = d.size - 1
            if abs(hi - lo + 1 - n_exp) > 4:
                hi = min(d.size - 1, lo + n_exp - 1)
        chunks.append((s * per, lo, hi, n_exp, (hi - lo + 1) - n_exp))
    clean = [_profile(_frame_values(logd, lo, hi, runs, pf, np.where(scored, 0.0, np.nan)))
             for _, lo, hi, n_exp, delta in chunks if delta == 0 and n_exp == per]
    with warnings.catch_warnings():  # all-NaN windows (frames left out) are expected
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = np.nanmedian(np.array(clean), axis=0) if clean else None

    def score(lo: int, hi: int, off: np.ndarray) -> float:
        vals = _frame_values(logd, lo, hi, runs, pf, np.where(scored, off, np.nan))
        out = _spread(vals)
        if ref is not None:
            out += float(np.nansum((_profile(vals) - ref) ** 2))
        return out

    steps: list[tuple[int, int, int]] = []
    for e0, lo, hi, n_exp, delta in chunks:
        if n_exp < per or abs(delta) > 4:  # cut short, or too broken: count from the start
            steps += [(e0 + i, lo + i, 0) for i in range(min(hi - lo + 1, n_exp))]
            continue
        cands: list[tuple[float, np.ndarray]] = []
        if delta == 0:
            cands.append((0.0, np.zeros(runs)))
        else:
            cands.append((CHANGE_PENALTY, np.zeros(runs)))  # the fault after the last frame
        frames = np.arange(runs)
        for x in range(runs):
            if delta != 0:
                off = np.where(frames < x, 0.0, float(delta))
                off[x] = np.nan
                cands.append((CHANGE_PENALTY, off))
            for x2 in range(x + 1, runs):
                for mid in (-4, -2, 2, 4):
                    if mid == delta or abs(mid - delta) > 4:
                        continue
                    off = np.where(frames < x, 0.0, np.where(frames < x2, float(mid), float(delta)))
                    off[x], off[x2] = np.nan, np.nan
                    cands.append((2 * CHANGE_PENALTY, off))
        best = min(range(len(cands)), key=lambda k: cands[k][0] + score(lo, hi, cands[k][1]))
        off = cands[best][1]
        for i in range(n_exp):
            f = i // pf
            o = float(delta) if f >= runs else off[f]
            if np.isnan(o):
                continue
            j = lo + i + int(o)
            if lo <= j <= hi:
                steps.append((e0 + i, j, 0))
    return steps


def _dp(d: np.ndarray, e: np.ndarray, selfc: list[np.ndarray] | None, band: int,
        progress: Callable[[int, int], None] | None) -> tuple[list[tuple[int, int, int]], float]:
    """Cheapest path; returns its steps (i, j, move index) and its cost."""
    n_e, n_o = e.size, d.size
    width = 2 * band + 1
    cost = np.full((n_e + 1, width), np.inf)
    back = np.full((n_e + 1, width), -1, dtype=np.int8)
    cost[0, band] = 0.0
    cum = np.r_[0.0, np.cumsum(d)]
    ecum = np.r_[0.0, np.cumsum(np.nan_to_num(e))]
    enan = np.r_[0, np.cumsum(np.isnan(e))]
    offs = np.arange(-band, band + 1)
    # Each move's step cost from every (expected window i, offset k), computed at once:
    # the loop below only relaxes (a Python loop over numpy calls on each row took
    # seconds per pass on a recording of 3,000 windows).
    ii = np.arange(n_e)
    jm = ii[:, None] + offs[None, :]
    step_costs: list[np.ndarray] = []
    for di, dj, _ in MOVES:
        jj = jm + dj
        valid = (jm >= 0) & (jj <= n_o) & (ii[:, None] + di <= n_e)
        if selfc is None:
            dur = cum[np.clip(jj, 0, n_o)] - cum[np.clip(jm, 0, n_o)]
            i2 = np.minimum(ii + di, n_e)
            exp = np.where(enan[i2] - enan[ii] > 0, np.nan, ecum[i2] - ecum[ii])
            sc = _cost(dur, np.broadcast_to(exp[:, None], dur.shape))
        else:
            sc = selfc[len(step_costs)][np.clip(jm, 0, max(n_o - 1, 0))]
        step_costs.append(np.where(valid, sc, np.inf))
    # Pulled rather than pushed: row t takes, per cell, the cheapest of the moves that
    # land there (every move advances at least one expected window, so its sources are
    # final). Candidates are ordered as a push over rows then moves would meet them, so
    # ties resolve the same way: the earliest source row, then the lower move.
    order = sorted(range(len(MOVES)), key=lambda m: (-MOVES[m][0], m))
    di_o = np.array([MOVES[m][0] for m in order])
    sh_o = np.array([MOVES[m][1] - MOVES[m][0] for m in order])
    fault_o = np.array([FAULT * MOVES[m][2] for m in order])[:, None]
    kk = np.arange(width)[None, :] - sh_o[:, None]  # source offset index per landing cell
    k_ok = (kk >= 0) & (kk < width)
    kk = np.clip(kk, 0, width - 1)
    # landed[t, n, k']: move order[n]'s step cost from (t - di, k' - shift), inf if none.
    landed = np.full((n_e + 1, len(order), width), np.inf)
    for n, m in enumerate(order):
        di = int(di_o[n])
        if di > n_e:
            continue
        landed[di:, n] = np.where(k_ok[n][None, :], step_costs[m][:n_e + 1 - di][:, kk[n]],
                                  np.inf)
    flat = cost.ravel()
    # Where each candidate's source cell sits in ``flat`` (a source before row 0 has an
    # infinite landed cost, so any cell serves).
    src = np.maximum(np.arange(n_e + 1)[:, None, None] * width
                     + ((-di_o[:, None]) * width + kk)[None], 0)
    moves = np.array(order, dtype=np.int8)
    step = max(1, n_e // 100)
    for t in range(1, n_e + 1):
        if progress is not None and (t - 1) % step == 0:
            progress(t - 1, n_e)
        cand = flat[src[t]] + landed[t] + fault_o
        cost[t] = cand.min(axis=0)
        back[t] = moves[cand.argmin(axis=0)]  # (unreachable cells stay inf; never read)
    if progress is not None:
        progress(n_e, n_e)
    # End: all expected windows matched (extra observed segments ignored) or the
    # recording ran out (each expected window left over costs SKIP).
    best, end = np.inf, (n_e, band)
    for i in range(n_e + 1):
        for k, o in enumerate(offs):
            c = cost[i, k]
            if not np.isfinite(c):
                continue
            j = i + o
            if i < n_e and j != n_o:
                continue
            c = c + SKIP * (n_e - i) + SKIP * (n_o - j)
            if c < best:
                best, end = c, (i, k)
    if not np.isfinite(best):
        raise BadInputError("the marker segments cannot be matched to the expected windows "
                            f"({n_o} segments observed, {n_e} expected)",
                            "check --order, --frames, --warmup, --levels and --trailing")
    steps: list[tuple[int, int, int]] = []
    i, k = end
    while i > 0:
        m = int(back[i, k])
        di, dj, _ = MOVES[m]
        off = int(offs[k])
        pi, pj = i - di, i + off - dj
        steps.append((pi, pj, m))
        i, k = pi, pj - pi + band
    steps.reverse()
    return steps, float(best)


def _matches(steps: list[tuple[int, int, int]], n_e: int) -> list[WindowMatch]:
    out = [WindowMatch(UNCOVERED) for _ in range(n_e)]
    for i, j, m in steps:
        di, dj, _ = MOVES[m]
        if di == 1 and dj == 1:
            out[i] = WindowMatch(OK, j, j)
        elif di == 1:
            out[i] = WindowMatch(SPURIOUS, j, j + dj - 1)
        else:
            for k in range(di):
                out[i + k] = WindowMatch(MISSED, j, j)
    return out


def _medians(layout: RunLayout, d: np.ndarray, matches: list[WindowMatch]) -> np.ndarray:
    """Per window, the median duration of the same window over its setting's frames."""
    by_key: dict[tuple[int, int], list[float]] = {}
    wins = layout.windows()
    for w, mt in zip(wins, matches, strict=True):
        if mt.status == OK:
            by_key.setdefault((w.setting, w.role), []).append(float(d[mt.first]))
    med = {k: float(np.median(v)) for k, v in by_key.items()}
    return np.array([med.get((w.setting, w.role), np.nan) for w in wins])


def align(rec: Recording, layout: RunLayout, console_layer_ms: np.ndarray | None = None,
          progress: Callable[[int, int], None] | None = None,
          window_ms: np.ndarray | None = None) -> Alignment:
    """Match `layout`'s windows to `rec`'s marker segments.

    ``console_layer_ms[s, k]``: layer k's time in setting s from the console log (NaN
    where unknown); it replaces the learnt median for layer windows. ``window_ms[i]``:
    window i's own duration where the host clocked it (a run recorded live; NaN where
    unknown); it replaces both.
    """
    segs = segments(rec)
    d = segs.duration_ms
    n_e = layout.total
    band = max(24, 2 * abs(len(segs) - n_e) + 24)
    wins = layout.windows()

    def half(k: int, _: int) -> Callable[[int, int], None] | None:
        # three passes, one bar
        return None if progress is None else (lambda done, total: progress(k * n_e + done, 3 * n_e))

    console = np.full(n_e, np.nan)
    if console_layer_ms is not None:
        for w in wins:
            if w.kind == LAYER and w.setting < console_layer_ms.shape[0] \
                    and w.layer is not None and w.layer < console_layer_ms.shape[1]:
                console[w.index] = console_layer_ms[w.setting, w.layer]
    if window_ms is not None:
        if window_ms.shape != (n_e,):
            raise BadInputError(f"{window_ms.size} window durations for {n_e} expected windows")
        console = np.where(np.isfinite(window_ms), window_ms, console)
    used_console = bool(np.isfinite(console).any())
    # Pass 1: the console's layer times where given, else each window against itself
    # one frame away; passes 2 and 3: the medians of the previous pass's path.
    if used_console:
        steps, cost = _dp(d, console, None, band, half(0, 1))
    else:
        steps = _initial_path(layout, d, segs.active)
    for k in (1, 2):
        expected = _medians(layout, d, _matches(steps, n_e))
        expected = np.where(np.isfinite(console), console, expected)
        steps, cost = _dp(d, expected, None, band, half(k, 1))
    matches = _matches(steps, n_e)
    faults = sum(MOVES[m][2] for _, _, m in steps)
    flagged = sorted({(w.setting, w.frame) for w, mt in zip(wins, matches, strict=True)
                      if mt.status in (SPURIOUS, MISSED) and w.frame is not None})
    uncovered = sorted({w.setting for w, mt in zip(wins, matches, strict=True)
                        if mt.status == UNCOVERED})
    last = max((mt.last for mt in matches if mt.last >= 0), default=-1)
    return Alignment(layout=layout, segs=segs, matches=matches, expected_ms=expected, cost=cost,
                     faults=faults, console_used=used_console, flagged=flagged,
                     uncovered_settings=uncovered, ignored_tail=len(segs) - 1 - last)
