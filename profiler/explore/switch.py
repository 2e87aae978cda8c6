"""Exact switch-mode search: a unit and a level per layer, by dynamic programming.

A state of layer i is its unit and the level each DVFS domain was last set to, since the
next transition delay depends on it. Least latency, or least energy with no bound, is a DP
over a scalar cost; least energy under ``latency_ms`` is a DP over (state, latency bin)
with each step's latency rounded down, so its value is a lower bound and a pick that meets
it is optimal (bins doubled up to ``max_bins`` until it does). Frames repeat, so where the
first pick pays a frame-to-frame transition every start vector is tried (``cycle_limit``).

Why each search is exact, or by how much it may miss: docs/explore.md.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from profiler.errors import BadInputError
from profiler.explore.space import Candidate, CostTables, Evaluation, evaluate

INF = math.inf
FRONT_BINS = 400  # bins whose cheapest mapping is costed for the trade-off front


@dataclass
class SwitchResult:
    """The pick, how it was proven, and a latency/energy front from the same DP."""

    best: Evaluation | None  # None: nothing meets the bound
    objective: str  # "latency" or "energy"
    latency_bound_ms: float | None
    optimal: bool
    lower_bound: float  # of the objective (mJ or ms); equals best's when optimal
    bins: int  # latency bins used (0: no discretisation)
    delta_ms: float  # bin width
    states: int
    seconds: float
    front: list[Evaluation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def proof(self) -> str:
        """One sentence saying how optimal the pick is."""
        if self.best is None:
            return (f"no mapping meets latency <= {self.latency_bound_ms:g} ms (the least "
                    f"latency the tables allow is {self.lower_bound:.3f} ms)")
        if self.bins == 0:
            return (f"optimal: exact DP over {self.states} states per layer (unit, and the "
                    "level each DVFS domain was last set to)")
        what = (f"latency discretised into {self.bins} bins of {self.delta_ms:.4g} ms "
                "(rounded down: a relaxation)")
        if self.optimal:
            return f"optimal: {what}; the pick meets the bound and equals the lower bound"
        gap = self.best.energy_mj - self.lower_bound if self.best.energy_mj else math.nan
        return f"NOT proven optimal: {what}; at most {gap:.4g} mJ above the optimum"


@dataclass
class _Space:
    """The DP's state space and step costs.

    A state of layer i is (unit of layer i, the level each DVFS domain was last set to);
    the latter is what the next transition delay depends on. Arrays index levels by
    their position in ``dlev`` of the unit's domain."""

    doms: list[str]
    dlev: list[tuple[int, ...]]  # board levels per domain axis
    udom: list[int]  # unit -> domain axis
    lat0: np.ndarray  # [U, J]: feed + fixed + layer 0
    en0: np.ndarray
    lat: list[np.ndarray]  # layer i >= 1 starting a call: [U_prev, U, J] hand-over + fixed + layer
    en: list[np.ndarray]
    lat_in: list[np.ndarray]  # layer i >= 1 inside a call (same unit, same level): [U, J]
    en_in: list[np.ndarray]
    delay: list[np.ndarray]  # per domain axis: [from, to] ms
    idle_w: float

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.udom), *(len(d) for d in self.dlev))

    @property
    def states(self) -> int:
        return int(np.prod(self.shape))


def _space(t: CostTables) -> _Space:
    doms = t.domains()
    dlev = [tuple(sorted(set().union(*(set(lv) for u, lv in zip(t.units, t.levels, strict=True)
                                       if u.domain == d)))) for d in doms]
    udom = [doms.index(u.domain) for u in t.units]
    U, n = len(t.units), t.n_layers
    J = max(len(d) for d in dlev)
    idle = t.idle_power_w or 0.0
    lay = np.full((U, J, n), INF)
    lay_e = np.zeros((U, J, n))
    feed = np.zeros((U, J, n))
    for u in range(U):
        for j, lv in enumerate(dlev[udom[u]]):
            if lv in t.levels[u]:
                k = t.levels[u].index(lv)
                lay[u, j] = np.where(np.isfinite(t.time_ms[u, k]), t.time_ms[u, k], INF)
                feed[u, j] = t.feed_ms[u, k]
                if t.energy_mj is not None:
                    lay_e[u, j] = t.energy_mj[u, k]
    fix = np.zeros((U, J))  # fixed per-call cost of a stage starting at this (unit, level)
    fix_e = np.zeros((U, J))  # ... its energy: idle power over it, or the measured row's
    for u in range(U):
        for j, lv in enumerate(dlev[udom[u]]):
            if lv in t.levels[u]:
                fix[u, j] = t.fixed(u, lv)
                fix_e[u, j] = idle * fix[u, j] + t.fixed_extra_mj(u, lv)
    lat, en, lat_in, en_in = [], [], [], []
    for i in range(1, n):
        h = np.zeros((U, U, J))
        he = np.zeros((U, U, J))
        for a in range(U):
            for b in range(U):
                ms = t.transfer_ms[i - 1, a, b]
                if not math.isnan(ms):
                    e = np.nan if t.transfer_mj is None else t.transfer_mj[i - 1, a, b]
                    h[a, b] = ms
                    he[a, b] = idle * ms if math.isnan(e) else e
                elif a == b:  # same unit: the layer table's feed (as predict does)
                    h[a, b] = feed[b, :, i]
                    he[a, b] = idle * feed[b, :, i]
        # a new call (another unit, or a level change) pays its fixed per-call cost (its
        # energy: fix_e), and the call it follows the read-back of its outputs (at idle
        # power)
        ro = np.array([t.readout(i - 1, a) for a in range(U)])[:, None, None]
        lat.append(h + ro + lay[None, :, :, i] + fix[None, :, :])
        en.append(he + idle * ro + lay_e[None, :, :, i] + fix_e[None, :, :])
        lat_in.append(lay[:, :, i])
        en_in.append(lay_e[:, :, i])
    delay = [np.array([[t.delay(d, a, b) for b in lv] for a in lv]) for d, lv in
             zip(doms, dlev, strict=True)]
    return _Space(doms, dlev, udom, feed[:, :, 0] + lay[:, :, 0] + fix,
                  lay_e[:, :, 0] + idle * feed[:, :, 0] + fix_e, lat, en, lat_in, en_in,
                  delay, idle)


def _step(sp: _Space, i: int, u1: int, u2: int, a: int, j: int) -> tuple[float, float]:
    """(ms, mJ) from layer i - 1 on u1 (its domain last at level index a) to layer i on u2
    at level index j: inside a call when the unit and level stay, else a new call."""
    if u1 == u2 and a == j:
        return float(sp.lat_in[i - 1][u2, j]), float(sp.en_in[i - 1][u2, j])
    return float(sp.lat[i - 1][u1, u2, j]), float(sp.en[i - 1][u1, u2, j])


def _q(ms: float, delta: float) -> int:
    # floor, with a hair of slack so float noise cannot push an exact fit up a bin
    return int(math.floor(ms / delta + 1e-9))


@dataclass
class _Table:
    """A finished DP: best value per (state, latency bin), and how each was reached."""

    E: np.ndarray  # [U, *levels, nb]
    back: list[np.ndarray]  # per layer i >= 1: code u_prev * n_dom + old level, int8
    w_lat: float
    w_en: float
    delta: float  # bin width (0: scalar DP)


def _dp(sp: _Space, w_lat: float, w_en: float, bound_ms: float | None, bins: int,
        v0: tuple[int, ...] | None) -> _Table:
    """Scalar (bins == 0): minimise w_lat * latency + w_en * energy. Binned: least energy
    per rounded-down latency bin up to `bound_ms`. ``v0``: the levels every domain starts
    at (each must end there too); None leaves them free (first uses cost nothing)."""
    shape = sp.shape
    nb = bins + 1 if bins else 1
    delta = 0.0
    if bins:
        if bound_ms is None:
            raise ValueError("a binned table needs its latency bound")
        delta = bound_ms / bins

    def cost(lat: float, en: float) -> tuple[int, float]:
        if bins:
            return _q(lat, delta), en
        return 0, w_lat * lat + w_en * en

    E = np.full((*shape, nb), INF)
    for u, d in enumerate(sp.udom):
        for j in range(len(sp.dlev[d])):
            lat, en = float(sp.lat0[u, j]), float(sp.en0[u, j])
            if not math.isfinite(lat):
                continue
            idx: list[int | slice] = [u, *([slice(None)] * len(sp.dlev))]
            if v0 is not None:
                dl = float(sp.delay[d][v0[d], j])
                lat, en = lat + dl, en + sp.idle_w * dl
                idx[1:] = list(v0)
            idx[1 + d] = j
            k, c = cost(lat, en)
            if k < nb:
                E[(*idx, k)] = c
    back: list[np.ndarray] = []
    U = shape[0]
    for i_layer, lat_i in enumerate(sp.lat, start=1):
        newE = np.full_like(E, INF)
        bp = np.zeros(E.shape, dtype=np.int8)
        for u2, d in enumerate(sp.udom):
            nd = len(sp.dlev[d])
            for j in range(nd):
                if not np.isfinite(lat_i[:, u2, j]).any():
                    continue
                sl = (u2, *(j if a == d else slice(None) for a in range(len(shape) - 1)))
                best = newE[sl]  # views: the running minimum is written in place
                code = bp[sl]
                for u1 in range(U):
                    if not math.isfinite(lat_i[u1, u2, j]):
                        continue
                    for a in range(nd):
                        dl = float(sp.delay[d][a, j])
                        s_ms, s_mj = _step(sp, i_layer, u1, u2, a, j)
                        k, c = cost(s_ms + dl, s_mj + sp.idle_w * dl)
                        if k >= nb:
                            continue
                        src = E[(u1, *(a if x == d else slice(None)
                                       for x in range(len(shape) - 1)), slice(0, nb - k))]
                        cand = src + c
                        tgt = best[..., k:]
                        better = cand < tgt
                        np.copyto(tgt, cand, where=better)
                        np.copyto(code[..., k:], u1 * nd + a, where=better)
        back.append(bp)
        E = newE
    if v0 is not None:  # frames repeat: each domain must end where it started
        keep = np.full(E.shape, INF)
        start: tuple[slice | int, ...] = (slice(None), *v0)
        keep[start] = 0.0
        E = E + keep
    return _Table(E, back, w_lat, w_en, delta)


def _path(sp: _Space, tab: _Table, flat: int) -> Candidate:
    """The candidate ending in flat index `flat` of tab.E."""
    idx = list(np.unravel_index(flat, tab.E.shape))
    u, v, b = int(idx[0]), [int(x) for x in idx[1:-1]], int(idx[-1])
    units, levels = [], []
    for i in range(len(tab.back), 0, -1):
        d = sp.udom[u]
        nd = len(sp.dlev[d])
        j = v[d]
        units.append(u)
        levels.append(sp.dlev[d][j])
        code = int(tab.back[i - 1][(u, *v, b)])
        u_prev, a = divmod(code, nd)
        if tab.delta:
            b -= _q(_step(sp, i, u_prev, u, a, j)[0] + float(sp.delay[d][a, j]), tab.delta)
        v[d] = a
        u = u_prev
    units.append(u)
    levels.append(sp.dlev[sp.udom[u]][v[sp.udom[u]]])
    return Candidate("switch", tuple(reversed(units)), tuple(reversed(levels)))


def _starts(sp: _Space) -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in v) for v in np.ndindex(*sp.shape[1:])]


def search_switch(t: CostTables, latency_ms: float | None = None, objective: str = "energy",
                  bins: int = 1000, max_bins: int = 8000, cycle_limit: int = 64,
                  front: bool = False) -> SwitchResult:
    """The optimal switch-mode mapping (docs/explore.md): least latency
    (``objective="latency"``), or least energy, under ``latency_ms`` when given.
    ``cycle_limit``: at most this many start vectors are tried where the relaxed pick's
    own frame-to-frame transition keeps it from being proven. ``front``: with no bound,
    also find the latency / energy trade-off (a bounded search is given it anyway)."""
    t0 = time.perf_counter()
    if objective not in ("energy", "latency"):
        raise BadInputError(f"objective {objective!r} is not energy or latency")
    if objective == "energy" and t.energy_mj is None:
        raise BadInputError("the layer tables have no energy_mj, so energy cannot be minimised",
                            "sweep with a power source (--power), or use --objective latency")
    if latency_ms is not None and not (latency_ms > 0 and math.isfinite(latency_ms)):
        raise BadInputError(f"--latency-ms {latency_ms} must be a positive number")
    if bins < 1:
        raise BadInputError(f"--bins {bins} must be 1 or more")
    sp = _space(t)
    notes: list[str] = []
    if not t.delay_ms:
        notes.append("no DVFS delay table: level changes cost nothing")
    all_starts = _starts(sp)
    # Start vectors matter only through transition delays; too many: no proof by them.
    starts = all_starts if t.delay_ms and len(all_starts) <= cycle_limit else None
    fastest, fast_lb = _scalar(t, sp, 1.0, 0.0, starts)
    if objective == "latency" or latency_ms is None:
        if objective == "latency":
            best, lb = fastest, fast_lb
            val = best.latency_ms
        else:
            best, lb = _scalar(t, sp, 0.0, 1.0, starts)
            val = float(best.energy_mj or 0.0)
        res = SwitchResult(best, objective, latency_ms, val <= lb + _tol(lb), lb, 0, 0.0,
                           sp.states, 0.0, notes=notes)
        if front and t.energy_mj is not None:
            # the trade-off between the fastest and the cheapest mapping, for the table
            cheapest = best if objective == "energy" else _scalar(t, sp, 0.0, 1.0, starts)[0]
            span = max(cheapest.latency_ms, best.latency_ms) * (1 + 1e-9)
            seen: set[Candidate] = set()
            evs: list[Evaluation] = [best, cheapest]
            _bins_pass(t, sp, span, bins, None, seen, evs, None)
            res.front = pareto_switch(evs)
        if latency_ms is not None and best.latency_ms > latency_ms:
            res.best, res.optimal = None, False
        res.seconds = time.perf_counter() - t0
        return res
    if fast_lb > latency_ms:
        return SwitchResult(None, objective, latency_ms, False, fast_lb, 0, 0.0, sp.states,
                            time.perf_counter() - t0, notes=notes)
    b = bins
    while True:
        res = _constrained(t, sp, latency_ms, b, starts, notes)
        if res.optimal or b >= max_bins:
            break
        b = min(b * 2, max_bins)
    res.seconds = time.perf_counter() - t0
    return res


def _tol(x: float) -> float:
    return 1e-9 * max(1.0, abs(x))


def _scalar(t: CostTables, sp: _Space, w_lat: float, w_en: float,
            starts: list[tuple[int, ...]] | None) -> tuple[Evaluation, float]:
    """(best evaluation, lower bound of w_lat * latency + w_en * energy). The relaxed DP
    (domains start the frame wherever suits) first; where its pick pays a transition
    from the previous frame, each start vector in ``starts`` (all of them, or None where
    too many: the bound stays the relaxed one)."""
    def value(ev: Evaluation) -> float:
        return w_lat * ev.latency_ms + w_en * float(ev.energy_mj or 0.0)

    tab = _dp(sp, w_lat, w_en, None, 0, None)
    flat = int(np.argmin(tab.E))
    lb = float(tab.E.flat[flat])
    best = evaluate(t, _path(sp, tab, flat))
    if value(best) <= lb + _tol(lb) or not starts:
        return best, lb
    for v0 in starts:  # exact: every steady state starts from one of these
        tab = _dp(sp, w_lat, w_en, None, 0, v0)
        flat = int(np.argmin(tab.E))
        if math.isfinite(float(tab.E.flat[flat])):
            ev = evaluate(t, _path(sp, tab, flat))
            if value(ev) < value(best):
                best = ev
    return best, value(best)


def _bins_pass(t: CostTables, sp: _Space, bound: float, bins: int, v0: tuple[int, ...] | None,
               seen: set[Candidate], front: list[Evaluation], incumbent: Evaluation | None
               ) -> tuple[Evaluation | None, float]:
    """One binned DP: (best feasible evaluation so far, the pass's lower bound)."""
    tab = _dp(sp, 0.0, 1.0, bound, bins, v0)
    per_bin = tab.E.reshape(-1, tab.E.shape[-1])
    arg = np.argmin(per_bin, axis=0)
    best_e = per_bin[arg, np.arange(per_bin.shape[1])]
    lb = float(np.min(best_e))
    # Cheapest bins first; the first whose pick meets the bound at the lower bound is
    # optimal, else keep the best that meets it.
    for tries, b in enumerate(np.argsort(best_e, kind="stable")):
        if not np.isfinite(best_e[b]) or tries >= 64 or (
                incumbent is not None and float(best_e[b]) >= float(incumbent.energy_mj or 0)):
            break
        where = (*map(int, np.unravel_index(int(arg[b]), tab.E.shape[:-1])), int(b))
        cand = _path(sp, tab, int(np.ravel_multi_index(where, tab.E.shape)))
        if cand in seen:
            continue
        seen.add(cand)
        ev = evaluate(t, cand)
        front.append(ev)
        if ev.latency_ms <= bound * (1 + 1e-12) and ev.energy_mj is not None and (
                incumbent is None or ev.energy_mj < (incumbent.energy_mj or INF)):
            incumbent = ev
    if v0 is None:  # the latency / energy trade-off: each bin's cheapest mapping
        finite = np.flatnonzero(np.isfinite(best_e))
        for b in finite[np.linspace(0, len(finite) - 1, min(len(finite), FRONT_BINS)).astype(int)]:
            where = (*map(int, np.unravel_index(int(arg[b]), tab.E.shape[:-1])), int(b))
            cand = _path(sp, tab, int(np.ravel_multi_index(where, tab.E.shape)))
            if cand not in seen:
                seen.add(cand)
                front.append(evaluate(t, cand))
    return incumbent, lb


def _constrained(t: CostTables, sp: _Space, bound: float, bins: int,
                 starts: list[tuple[int, ...]] | None, notes: list[str]) -> SwitchResult:
    seen: set[Candidate] = set()
    front: list[Evaluation] = []
    inc, lower = _bins_pass(t, sp, bound, bins, None, seen, front, None)
    if (inc is None or float(inc.energy_mj or 0) > lower + _tol(lower)) and starts:
        lbs = []
        for v0 in starts:
            inc, lb = _bins_pass(t, sp, bound, bins, v0, seen, front, inc)
            lbs.append(lb)
        lower = max(lower, min(lbs))
    assert inc is not None, "the fastest mapping meets the bound, so some bin does"
    optimal = float(inc.energy_mj or 0) <= lower + _tol(lower)
    return SwitchResult(inc, "energy", bound, optimal, lower, bins, bound / bins, sp.states,
                        0.0, front=pareto_switch(front), notes=notes)


def pareto_switch(evs: list[Evaluation]) -> list[Evaluation]:
    """The points of `evs` no other beats on both latency and energy, by latency."""
    out: list[Evaluation] = []
    best_e = INF
    for ev in sorted(evs, key=lambda e: (e.latency_ms, e.energy_mj or 0.0)):
        e = ev.energy_mj if ev.energy_mj is not None else INF
        if e < best_e:
            out.append(ev)
            best_e = e
    return out


__all__ = ["SwitchResult", "pareto_switch", "ranked", "search_switch"]


def ranked(res: SwitchResult) -> list[Evaluation]:
    """The pick first, then the other front points: those within the bound by energy,
    then the rest by latency."""
    if res.best is None:
        return []
    bound = res.latency_bound_ms if res.latency_bound_ms is not None else INF
    rest = [e for e in res.front if e.candidate != res.best.candidate]
    ok = sorted((e for e in rest if e.latency_ms <= bound), key=lambda e: e.energy_mj or INF)
    late = sorted((e for e in rest if e.latency_ms > bound), key=lambda e: e.latency_ms)
    return [res.best, *ok, *late]
