"""Match the expected windows of a run to the observed marker segments.

There is no host clock, so the match is by order and duration: a banded dynamic programme
finds the cheapest path through (expected window, observed segment), where a spurious
pulse or a missed edge is a fault of known shape. Windows in a fault are set aside and
their frames flagged; every other window keeps the segment it had in a clean recording,
so one fault never shifts later layers.

The recording is aligned a setting at a time (cut at the settings' closes), in a band
of at most BAND_CAP offsets and a block of rows at a time: memory and time follow a
setting's size, not how far a wrong layout or a cut recording is off in its count.

The costs and passes: docs/recordings.md ("Matching windows to marker segments", and
"Memory and time that stay bounded").
"""

from __future__ import annotations

import functools
import warnings
from array import array
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
_STATUS = (UNCOVERED, OK, SPURIOUS, MISSED)

# (expected consumed, observed consumed, faults)
MOVES = ((1, 1, 0), (1, 3, 1), (1, 5, 2), (3, 1, 1), (5, 1, 2))
#: A path: rows of (expected window, first observed segment, move index), as an array (an
#: hour's run has ~10^5 steps).
_NO_STEPS = np.zeros((0, 3), dtype=np.int64)
_MOVE_DI = np.array([di for di, _, _ in MOVES])
_MOVE_DJ = np.array([dj for _, dj, _ in MOVES])

#: The band of offsets (observed minus expected index) the programme considers is
#: 2 |count difference| + 24 wide on each side, at most BAND_CAP: a fault moves the offset
#: by 2, and each setting is aligned on its own, so only the faults inside one setting add
#: up. Beyond the cap a setting is too broken to match anyway (its frames are flagged).
BAND_CAP = 64
#: Rows of the programme whose step costs are held at once (memory: rows x band x 80 bytes).
BLOCK_ROWS = 1024
#: A setting's closing segment (ARM-CO-UP: ~11 s waiting for the next level) is taken as
#: an anchor only when it is this many times longer than every segment a frame around it.
ANCHOR_RATIO = 3.0


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


@dataclass(slots=True)  # one per expected window: ~10^5 for an hour's run
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


@dataclass(frozen=True)
class _Span:
    """Expected windows [e0, e1) and observed segments [o0, o1) aligned on their own."""

    e0: int
    e1: int
    o0: int
    o1: int
    left_over_cost: float  # per expected window left when the observed segments run out


def _spans(layout: RunLayout, segs: Segments) -> list[_Span]:
    """The recording cut at the settings' closing segments: each setting (or run of
    settings whose closes are not found) is aligned on its own, so memory and time grow
    with a setting's size, not with the whole recording's count difference. A close is
    the longest segment of its level within a frame of where it is expected (counted from
    the previous close) and ANCHOR_RATIO times longer than all others there; a recording
    cut short, or a setting too broken to show its close, joins the next span. The last
    span ends with the recording: where that does not end with a close (it was cut short),
    the expected windows left over were never recorded and cost nothing (at SKIP each, a
    fault that swallows five windows would be cheaper than leaving them, and the tail of a
    cut setting came out flagged); elsewhere a left-over window costs SKIP, as a segment
    left over does."""
    per, pf, n_o = layout.per_setting, layout.per_frame, len(segs)
    d = segs.duration_ms
    level = layout.trailing % 2 == 0  # the closing segment's: active after an even count
    ends: list[tuple[int, int]] = []  # (setting, its closing observed segment)
    if layout.trailing and len(layout.settings) > 1:
        prev_s, prev_a = -1, -1
        for s in range(len(layout.settings) - 1):
            guess = prev_a + (s - prev_s) * per
            lo, hi = max(prev_a + 1, guess - pf), min(n_o, guess + pf + 1)
            if lo >= hi:
                break
            cand = np.arange(lo, hi)
            cand = cand[segs.active[cand] == level]
            if cand.size == 0:
                continue
            a = int(cand[np.argmax(d[cand])])
            others = np.delete(d[lo:hi], a - lo)
            if others.size and d[a] < ANCHOR_RATIO * float(others.max()):
                continue
            ends.append((s, a))
            prev_s, prev_a = s, a
    out, e0, o0 = [], 0, 0
    for s, a in ends:
        out.append(_Span(e0, (s + 1) * per, o0, a + 1, SKIP))
        e0, o0 = (s + 1) * per, a + 1
    # The recording was cut short when it does not end with a setting's close.
    last = d[max(o0, n_o - pf - 1):n_o]
    closed = layout.trailing == 0 or n_o == 0 or (
        bool(segs.active[-1]) == level and last.size > 1
        and last[-1] >= ANCHOR_RATIO * float(last[:-1].max()))
    out.append(_Span(e0, layout.total, o0, n_o, 0.0 if layout.trailing and not closed else SKIP))
    return out


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


def _initial_path(layout: RunLayout, d: np.ndarray, active: np.ndarray) -> np.ndarray:
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

    si, sj = array("q"), array("q")  # the path's (window, segment) pairs, all one-to-one
    for e0, lo, hi, n_exp, delta in chunks:
        if n_exp < per or abs(delta) > 4:  # cut short, or too broken: count from the start
            n = min(hi - lo + 1, n_exp)
            si.extend(range(e0, e0 + n))
            sj.extend(range(lo, lo + n))
            continue
        cands: list[tuple[float, np.ndarray]] = []
        if delta == 0:
            cands.append((0.0, np.zeros(runs)))
        else:
            cands.append((CHANGE_PENALTY, np.zeros(runs)))  # the fault after the last frame
        frames = np.arange(runs)
        for x in range(runs if runs <= EXHAUSTIVE_RUNS else 0):
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
        if runs <= EXHAUSTIVE_RUNS:
            best = min(range(len(cands)), key=lambda k: cands[k][0] + score(lo, hi, cands[k][1]))
            off = cands[best][1]
        else:
            off = _one_change(runs, delta, functools.partial(score, lo, hi))
        for i in range(n_exp):
            f = i // pf
            o = float(delta) if f >= runs else off[f]
            if np.isnan(o):
                continue
            j = lo + i + int(o)
            if lo <= j <= hi:
                si.append(e0 + i)
                sj.append(j)
    return np.column_stack([np.frombuffer(si, dtype=np.int64), np.frombuffer(sj, dtype=np.int64),
                            np.zeros(len(si), dtype=np.int64)]) if si else _NO_STEPS


#: Up to this many frames per setting, the first match tries every frame (or two) where
#: the count could change; beyond, it looks for one change, on a grid of about
#: 2 x EXHAUSTIVE_RUNS frames then around the best of them (the passes that follow find
#: the faults exactly): trying every pair is cubic in the frames, and a setting of 80
#: frames took 4 s.
EXHAUSTIVE_RUNS = 32


def _one_change(runs: int, delta: int, score: Callable[[np.ndarray], float]) -> np.ndarray:
    """The frame offsets (0, then ``delta`` from a frame left out) that score best."""
    frames = np.arange(runs)

    def offsets(x: int) -> np.ndarray:
        off = np.where(frames < x, 0.0, float(delta))
        if x < runs:
            off[x] = np.nan
        return off

    if delta == 0:
        return np.zeros(runs)
    # x = runs: the fault after the last frame
    step = -(-runs // (2 * EXHAUSTIVE_RUNS))
    coarse = min([*range(0, runs, step), runs], key=lambda x: score(offsets(x)))
    fine = range(max(0, coarse - step + 1), min(runs, coarse + step - 1) + 1)
    return offsets(min([*fine, coarse], key=lambda x: score(offsets(x))))


def _dp(cum: np.ndarray, ecum: np.ndarray, enan: np.ndarray, span: _Span, band: int,
        progress: Callable[[int], None] | None) -> tuple[np.ndarray, float]:
    """Cheapest path through one span's expected windows and observed segments; returns its
    steps (rows of i, j, move index) in the whole recording's indices, and its cost. ``cum``,
    ``ecum``, ``enan``: the recording's cumulative observed durations, expected durations
    (NaN as 0) and NaN counts, so a step's durations are the same numbers whichever span
    holds it.

    Memory is the back pointers (one byte per cell of the band) and a block of rows: the
    step costs and the cost rows are made BLOCK_ROWS at a time, not for the whole span."""
    n_e, n_o, e0, o0 = span.e1 - span.e0, span.o1 - span.o0, span.e0, span.o0
    width = 2 * band + 1
    offs = np.arange(-band, band + 1)
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
    moves = np.array(order, dtype=np.int8)
    hist = int(di_o.max())  # cost rows a move reaches back
    back = np.full((n_e + 1, width), -1, dtype=np.int8)
    tail = np.full((hist, width), np.inf)  # the cost rows before the block
    tail[-1, band] = 0.0  # row 0
    at_end = np.full(n_e + 1, np.inf)  # cost of (i, n_o): the recording ran out at i
    if 0 <= n_o + band < width:
        at_end[0] = tail[-1, n_o + band]
    last_row = tail[-1].copy()
    # No cell past row n_o + band is reachable (j - i >= -band).
    rows = min(n_e, n_o + band)
    src_rel = (hist - di_o)[:, None] * width + kk  # a landing row's sources in the block buffer
    for r0 in range(1, rows + 1, BLOCK_ROWS):
        r1 = min(rows + 1, r0 + BLOCK_ROWS)
        # Each move's step cost from every (source row i, offset k) the block's rows pull
        # from, computed at once: the loop below only relaxes (a Python loop over numpy
        # calls on each row took seconds per pass on a recording of 3,000 windows).
        s0 = max(0, r0 - hist)
        ii = np.arange(s0, r1)
        jm = ii[:, None] + offs[None, :]
        step_costs: list[np.ndarray] = []
        for di, dj, _ in MOVES:
            jj = jm + dj
            valid = (jm >= 0) & (jj <= n_o) & (ii[:, None] + di <= n_e)
            dur = cum[o0 + np.clip(jj, 0, n_o)] - cum[o0 + np.clip(jm, 0, n_o)]
            i2 = e0 + np.minimum(ii + di, n_e)
            exp = np.where(enan[i2] - enan[e0 + ii] > 0, np.nan, ecum[i2] - ecum[e0 + ii])
            sc = _cost(dur, np.broadcast_to(exp[:, None], dur.shape))
            step_costs.append(np.where(valid, sc, np.inf))
        # landed[q, n, k']: move order[n]'s step cost from (r0 + q - di, k' - shift), inf
        # if none.
        t = np.arange(r0, r1)
        landed = np.full((r1 - r0, len(order), width), np.inf)
        for n, m in enumerate(order):
            src_row = t - int(di_o[n])
            ok = src_row >= 0
            landed[ok, n] = np.where(k_ok[n][None, :], step_costs[m][src_row[ok] - s0][:, kk[n]],
                                     np.inf)
        if progress is not None:
            progress(r0 - 1)
        buf = np.empty((hist + r1 - r0, width))
        buf[:hist] = tail
        flat = buf.ravel()
        for q in range(r1 - r0):
            cand = flat[src_rel + q * width] + landed[q] + fault_o
            buf[hist + q] = cand.min(axis=0)
            back[r0 + q] = moves[cand.argmin(axis=0)]  # (unreachable cells stay inf; never read)
        k_end = n_o - t + band
        inside = (k_end >= 0) & (k_end < width)
        at_end[t[inside]] = buf[hist + np.flatnonzero(inside), k_end[inside]]
        tail = buf[-hist:].copy()
        last_row = buf[-1].copy()
    if rows < n_e:
        last_row = np.full(width, np.inf)
    # End: all expected windows matched (extra observed segments ignored at SKIP each) or
    # the recording ran out (each expected window left over costs span.left_over_cost).
    j_last = n_e + offs
    ends = np.r_[at_end[:n_e] + span.left_over_cost * (n_e - np.arange(n_e)),
                 np.where(j_last <= n_o, last_row + SKIP * (n_o - j_last), np.inf)]
    if not np.isfinite(ends).any():
        raise BadInputError("the marker segments cannot be matched to the expected windows "
                            f"({n_o} segments observed, {n_e} expected)",
                            "check --order, --frames, --warmup, --levels and --trailing")
    pick = int(np.argmin(ends))
    best = float(ends[pick])
    i, k = (pick, n_o - pick + band) if pick < n_e else (n_e, pick - n_e)
    steps = array("q")
    while i > 0:
        m = int(back[i, k])
        di, dj, _ = MOVES[m]
        off = int(offs[k])
        pi, pj = i - di, i + off - dj
        steps.extend((e0 + pi, o0 + pj, m))
        i, k = pi, pj - pi + band
    return np.frombuffer(steps, dtype=np.int64).reshape(-1, 3)[::-1] if steps else _NO_STEPS, best


def _matches(steps: np.ndarray, n_e: int) -> list[WindowMatch]:
    """Each expected window's match on the path (built from arrays: an hour's run has
    ~10^5 windows, and a Python object per step and field would outlive the call as
    fragmented memory)."""
    status = np.zeros(n_e, dtype=np.int8)  # index into _STATUS
    first = np.full(n_e, -1, dtype=np.int64)
    last = np.full(n_e, -1, dtype=np.int64)
    i, j, m = steps[:, 0], steps[:, 1], steps[:, 2]
    di, dj = _MOVE_DI[m], _MOVE_DJ[m]
    one = di == 1
    status[i[one]] = np.where(dj[one] == 1, 1, 2)
    first[i[one]], last[i[one]] = j[one], j[one] + dj[one] - 1
    for k in range(int(_MOVE_DI.max())):
        many = (di > 1) & (di > k)  # a missed edge: every window it merges
        status[i[many] + k], first[i[many] + k], last[i[many] + k] = 3, j[many], j[many]
    out: list[WindowMatch] = []
    for b0 in range(0, n_e, 8192):
        b1 = b0 + 8192
        out += [WindowMatch(_STATUS[st], f, f if la == f else la) for st, f, la in
                zip(status[b0:b1].tolist(), first[b0:b1].tolist(), last[b0:b1].tolist(),
                    strict=True)]
    return out


def _medians(layout: RunLayout, d: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Per window, the median duration of the same window (its role) over its setting's
    frames, from the windows the path matched one to one."""
    per, pf, body = layout.per_setting, layout.per_frame, layout.per_frame * layout.runs
    i = np.arange(layout.total)
    r = i % per
    roles = pf + layout.trailing
    key = (i // per) * roles + np.where(r < body, r % pf, pf + r - body)
    ok = steps[steps[:, 2] == 0]
    k_ok, v = key[ok[:, 0]], d[ok[:, 1]]
    order = np.lexsort((v, k_ok))
    k_ok, v = k_ok[order], v[order]
    keys, start, count = np.unique(k_ok, return_index=True, return_counts=True)
    med = np.full(len(layout.settings) * roles, np.nan)
    # np.median's value: the middle one, or the mean of the middle two
    med[keys] = (v[start + (count - 1) // 2] + v[start + count // 2]) / 2
    return med[key]


def _shifted(progress: Callable[[int, int], None] | None, done: int, total: int
             ) -> Callable[[int], None] | None:
    return None if progress is None else (lambda i: progress(done + i, total))


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
    spans = _spans(layout, segs)
    wins = layout.windows()
    cum = np.r_[0.0, np.cumsum(d)]

    def dp(e: np.ndarray, k: int) -> tuple[np.ndarray, float]:
        """Pass k (of three, one progress bar) over every span."""
        ecum = np.r_[0.0, np.cumsum(np.nan_to_num(e))]
        enan = np.r_[0, np.cumsum(np.isnan(e))]
        steps: list[np.ndarray] = []
        cost = 0.0
        for sp in spans:
            band = min(BAND_CAP, max(24, 2 * abs((sp.o1 - sp.o0) - (sp.e1 - sp.e0)) + 24))
            got, c = _dp(cum, ecum, enan, sp, band, _shifted(progress, k * n_e + sp.e0, 3 * n_e))
            steps.append(got)
            cost += c
        if progress is not None:
            progress((k + 1) * n_e, 3 * n_e)
        return np.concatenate(steps), cost

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
        steps, cost = dp(console, 0)
    else:
        steps = _initial_path(layout, d, segs.active)
    for k in (1, 2):
        expected = _medians(layout, d, steps)
        expected = np.where(np.isfinite(console), console, expected)
        steps, cost = dp(expected, k)
    matches = _matches(steps, n_e)
    faults = int(np.array([f for _, _, f in MOVES])[steps[:, 2]].sum())
    flagged = sorted({(w.setting, w.frame) for w, mt in zip(wins, matches, strict=True)
                      if mt.status in (SPURIOUS, MISSED) and w.frame is not None})
    uncovered = sorted({w.setting for w, mt in zip(wins, matches, strict=True)
                        if mt.status == UNCOVERED})
    last = max((mt.last for mt in matches if mt.last >= 0), default=-1)
    return Alignment(layout=layout, segs=segs, matches=matches, expected_ms=expected, cost=cost,
                     faults=faults, console_used=used_console, flagged=flagged,
                     uncovered_settings=uncovered, ignored_tail=len(segs) - 1 - last)
