"""Pipeline-mode search: contiguous stages on distinct processors, one level per DVFS
domain, for the throughput / FPS/W Pareto front (ARM-CO-UP Table 4).

- exact: every stage split x processor order x domain levels, evaluated with prefix sums
  and numpy broadcasting over the levels, where the space has at most ``exact_limit``
  points; the front is then the true one.
- NSGA-II (pymoo, optional extra ``explore``) otherwise: integer genes, one per layer
  (its unit) and one per domain (its level), decoded into a valid pipeline (`decode`);
  then a Pareto local search around its front. Every point is costed exactly, so the front holds real candidates.

Costs are `profiler.explore.space.evaluate`'s pipeline ones (tests check they agree).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

import numpy as np

from profiler.errors import BadInputError
from profiler.explore.nsga import PYMOO_FIX, nsga2_minimize
from profiler.explore.space import Candidate, CostTables, Evaluation, evaluate, stages_of


@dataclass
class PipelineResult:
    front: list[Evaluation]  # by throughput, fastest first
    method: str  # "exact enumeration" or "NSGA-II"
    evaluations: int
    space: int  # points in the space
    seconds: float
    notes: list[str] = field(default_factory=list)
    local_evaluations: int = 0

    def describe(self) -> str:
        if self.method == "exact":
            return (f"exact: all {self.space:,} points enumerated; the front is the true "
                    "Pareto front of the tables")
        more = f" + {self.local_evaluations:,} in a local search around its front" \
            if self.local_evaluations else ""
        return (f"NSGA-II: {self.evaluations:,} evaluations{more}, of a {self.space:,}-point "
                "space; a front of real candidates, not proven optimal")


class _Fast:
    """Prefix sums for costing a stage in O(1) per level."""

    def __init__(self, t: CostTables) -> None:
        self.t = t
        n, U = t.n_layers, len(t.units)
        K = t.time_ms.shape[1]
        idle = t.idle_power_w or 0.0
        self.idle = idle
        self.exact_energy = t.dynamic_energy_mj is not None and t.idle_power_w is not None
        same = np.zeros((U, K, n))  # hand-over into layer i from the same unit
        same_e = np.zeros((U, K, n))
        for u in range(U):
            same[u, :, 0] = t.feed_ms[u, :, 0]
            same_e[u, :, 0] = idle * t.feed_ms[u, :, 0]
            for i in range(1, n):
                ms = t.transfer_ms[i - 1, u, u]
                if math.isnan(ms):
                    same[u, :, i] = t.feed_ms[u, :, i]
                    same_e[u, :, i] = idle * t.feed_ms[u, :, i]
                else:
                    e = np.nan if t.transfer_mj is None else t.transfer_mj[i - 1, u, u]
                    same[u, :, i] = ms
                    same_e[u, :, i] = idle * ms if math.isnan(e) else e
        self.same, self.same_e = same, same_e
        zero = np.zeros((U, K, 1))
        # A stage is one call: its layers, and a hand-over into its first layer only.
        # Levels a unit lacks are inf in time_ms; nan in the prefix sums, so a stage's
        # difference of them is nan without a warning (callers take only real levels).
        P = np.concatenate([zero, np.cumsum(t.time_ms, axis=2)], axis=2)
        self.P = np.where(np.isinf(P), np.nan, P)
        # energy per layer as the pipeline formula counts it: dynamic (above idle), or the
        # layer's board energy for the upper bound
        if self.exact_energy:
            assert t.dynamic_energy_mj is not None
            e_lay = t.dynamic_energy_mj
        elif t.energy_mj is not None:
            e_lay = t.energy_mj
        else:
            e_lay = np.zeros_like(same)
        self.PE = np.concatenate([zero, np.cumsum(e_lay, axis=2)], axis=2)
        # [unit, level index]: what a measured fixed-row energy adds to idle-power pricing
        self.fix_x = np.array([[t.fixed_extra_mj(u, lv) for lv in t.levels[u]]
                               + [0.0] * (K - len(t.levels[u])) for u in range(U)])

    def cross(self, a: int, src: int, dst: int) -> tuple[float, float]:
        """Hand-over into layer a (> 0) between different units: (ms, mJ as counted)."""
        t = self.t
        ms = t.transfer_ms[a - 1, src, dst]
        if math.isnan(ms):
            return 0.0, 0.0
        e = np.nan if t.transfer_mj is None else t.transfer_mj[a - 1, src, dst]
        e = self.idle * ms if math.isnan(e) else e
        return float(ms), float(e - self.idle * ms) if self.exact_energy else float(e)

    def stage(self, u: int, a: int, b: int, prev: int | None
              ) -> tuple[np.ndarray, np.ndarray]:
        """(time ms, energy mJ) of layers a..b on u, per level index."""
        assert self.t.fixed_ms is not None
        # one call per stage: its fixed cost, and the read-back of its outputs at a cut
        per_call = self.t.fixed_ms[u] + self.t.readout(b, u)
        ms = self.P[u, :, b + 1] - self.P[u, :, a] + per_call
        en = self.PE[u, :, b + 1] - self.PE[u, :, a] + self.fix_x[u]
        if not self.exact_energy:  # those at idle power (0 above idle)
            en = en + self.idle * per_call
        if prev is not None:  # the hand-over into its first layer
            xm, xe = self.cross(a, prev, u)
            return ms + xm, en + xe
        same_e = self.same_e[u, :, a] - (self.idle * self.same[u, :, a]
                                         if self.exact_energy else 0.0)
        return ms + self.same[u, :, a], en + same_e


def _structures(t: CostTables, max_stages: int) -> list[tuple[int, ...]]:
    """Unit sequences with distinct processor letters, up to max_stages long."""
    out = []
    U = range(len(t.units))
    for k in range(1, max_stages + 1):
        for seq in itertools.permutations(U, k):
            if len({t.units[u].letter for u in seq}) == k:
                out.append(seq)
    return out


def _domain_levels(t: CostTables, seq: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """Levels each domain used by `seq` may take: those every unit on it has."""
    out: dict[str, set[int]] = {}
    for u in seq:
        d = t.units[u].domain
        out[d] = out.get(d, set(t.levels[u])) & set(t.levels[u])
    return {d: tuple(sorted(v)) for d, v in out.items()}


def space_size(t: CostTables) -> int:
    n = t.n_layers
    total = 0
    for seq in _structures(t, min(len(t.units), n)):
        lv = _domain_levels(t, seq)
        total += math.comb(n - 1, len(seq) - 1) * int(np.prod([len(v) for v in lv.values()]))
    return total


def _front_mask(fps: np.ndarray, eff: np.ndarray) -> np.ndarray:
    """Non-dominated points, both objectives maximised (ties: the first kept)."""
    order = np.lexsort((-eff, -fps))
    keep = np.zeros(len(fps), dtype=bool)
    best = -np.inf
    for idx in order:
        if eff[idx] > best:
            keep[idx] = True
            best = eff[idx]
    return keep


def enumerate_front(t: CostTables) -> PipelineResult:
    """The exact throughput / FPS/W front (every point of the space)."""
    t0 = time.perf_counter()
    if t.energy_mj is None:
        raise BadInputError("the layer tables have no energy_mj, so there is no FPS/W front",
                            "sweep with a power source (--power)")
    fast = _Fast(t)
    n = t.n_layers
    pts_fps: list[np.ndarray] = []
    pts_eff: list[np.ndarray] = []
    keys: list[tuple[tuple[int, ...], tuple[int, ...], list[str], tuple[int, ...]]] = []
    count = 0
    for seq in _structures(t, min(len(t.units), n)):
        dl = _domain_levels(t, seq)
        doms = list(dl)
        if any(not v for v in dl.values()):
            continue
        shape = tuple(len(dl[d]) for d in doms)
        for cuts in itertools.combinations(range(1, n), len(seq) - 1):
            bounds = (0, *cuts, n)
            slowest = np.zeros(shape)
            energy = np.zeros(shape)
            serial = np.zeros(shape)
            for j, u in enumerate(seq):
                d = doms.index(t.units[u].domain)
                kidx = [t.levels[u].index(lv) for lv in dl[doms[d]]]
                ms, en = fast.stage(u, bounds[j], bounds[j + 1] - 1, seq[j - 1] if j else None)
                view = [1] * len(doms)
                view[d] = len(kidx)
                ms_v = ms[kidx].reshape(view)
                slowest = np.maximum(slowest, ms_v)
                serial = serial + ms_v
                energy = energy + en[kidx].reshape(view)
            fps = 1000.0 / slowest
            if fast.exact_energy:
                energy = energy + fast.idle * slowest
            pts_fps.append(fps.ravel())
            pts_eff.append((1000.0 / energy).ravel())
            keys.append((seq, tuple(bounds), doms, shape))
            count += fps.size
    fps_all = np.concatenate(pts_fps)
    eff_all = np.concatenate(pts_eff)
    keep = np.flatnonzero(_front_mask(fps_all, eff_all))
    starts = np.cumsum([0, *[len(p) for p in pts_fps]])
    front = []
    for flat in keep:
        s = int(np.searchsorted(starts, flat, side="right") - 1)
        seq, bounds, doms, shape = keys[s]
        lv_idx = np.unravel_index(int(flat - starts[s]), shape)
        dl = _domain_levels(t, seq)
        dom_level = {d: dl[d][int(k)] for d, k in zip(doms, lv_idx, strict=True)}
        front.append(evaluate(t, _candidate(t, seq, bounds, dom_level)))
    front.sort(key=lambda e: -e.throughput_fps)
    return PipelineResult(front, "exact", count, count, time.perf_counter() - t0)


def _candidate(t: CostTables, seq: tuple[int, ...], bounds: tuple[int, ...] | list[int],
               dom_level: dict[str, int]) -> Candidate:
    units: list[int] = []
    levels: list[int] = []
    for j, u in enumerate(seq):
        m = bounds[j + 1] - bounds[j]
        units += [u] * m
        levels += [dom_level[t.units[u].domain]] * m
    return Candidate("pipeline", tuple(units), tuple(levels))


# --------------------------------------------------------------------------------
# NSGA-II
# --------------------------------------------------------------------------------


def genes(t: CostTables) -> np.ndarray:
    """Upper bound of each integer gene: a unit per layer, a level index per domain."""
    U = len(t.units)
    per_dom = [len(set.intersection(*[set(t.levels[u]) for u in range(U)
                                      if t.units[u].domain == d])) for d in t.domains()]
    return np.array([U - 1] * t.n_layers + [max(k - 1, 0) for k in per_dom])


def decode(t: CostTables, x: np.ndarray) -> Candidate:
    """Integer genes -> a valid pipeline: one gene per layer picks its unit, one per
    domain its level (an index into the levels the domain's units share). Runs of one
    unit are stages; a run on a processor that an earlier, non-adjacent stage already
    uses joins the stage before it, so every gene vector is a pipeline and a mutated gene
    at a boundary moves a cut."""
    n = t.n_layers
    doms = t.domains()
    units: list[int] = []
    letters: set[str] = set()
    for g in x[:n]:
        u = int(g)
        if units and u == units[-1]:
            units.append(u)
        elif t.units[u].letter in letters:
            units.append(units[-1])  # processor already has a stage: stay in this one
        else:
            units.append(u)
            letters.add(t.units[u].letter)
    seq = tuple(u for u, _, _ in stages_of(tuple(units)))
    dom_level = {}
    for d, levels in _domain_levels(t, seq).items():
        dom_level[d] = levels[min(int(x[n + doms.index(d)]), len(levels) - 1)]
    return Candidate("pipeline", tuple(units), tuple(dom_level[t.units[u].domain] for u in units))


def nsga2_front(t: CostTables, pop_size: int = 100, generations: int = 100, seed: int = 0,
                polish: bool = True) -> PipelineResult:
    """The front NSGA-II finds (pymoo), from ``pop_size`` x ``generations`` evaluations,
    then (``polish``) a Pareto local search around it."""
    if t.energy_mj is None:
        raise BadInputError("the layer tables have no energy_mj, so there is no FPS/W front",
                            "sweep with a power source (--power)")
    t0 = time.perf_counter()
    upper = genes(t)
    cache: dict[Candidate, Evaluation] = {}

    def cost(x: np.ndarray) -> tuple[float, float]:
        c = decode(t, x)
        ev = cache.get(c)
        if ev is None:
            ev = cache[c] = evaluate(t, c)
        return -ev.throughput_fps, -(ev.fps_per_w or 0.0)

    n_eval = nsga2_minimize(cost, upper, 2, pop_size=pop_size, generations=generations,
                            seed=seed, what="pipeline search over this many points")
    n_nsga = len(cache)
    front = _front(list(cache.values()))
    polish_evals = 0
    if polish:
        front, polish_evals = _polish(t, front, cache)
    notes = [f"{n_nsga:,} distinct candidates costed by NSGA-II"]
    if polish:
        notes.append(f"local search around the front: {polish_evals:,} more candidates costed")
    return PipelineResult(front, "NSGA-II", n_eval, space_size(t), time.perf_counter() - t0,
                          notes, polish_evals)


def _front(evs: list[Evaluation]) -> list[Evaluation]:
    mask = _front_mask(np.array([e.throughput_fps for e in evs]),
                       np.array([e.fps_per_w or 0.0 for e in evs]))
    return sorted((e for e, k in zip(evs, mask, strict=True) if k),
                  key=lambda e: -e.throughput_fps)


def _neighbours(t: CostTables, c: Candidate) -> list[Candidate]:
    """Pipelines one step away: a cut moved by up to 3 layers, a domain one level up or
    down, two stages' processors (or whole stages) swapped, a stage moved to an unused processor, a stage
    split in two (onto an unused processor) or two stages merged."""
    st = stages_of(c.units)
    seq = [u for u, _, _ in st]
    bounds = [a for _, a, _ in st] + [t.n_layers]
    level = {t.units[u].domain: lv for u, lv in zip(c.units, c.levels, strict=True)}
    used = {t.units[u].letter for u in seq}
    free = [u for u in range(len(t.units)) if t.units[u].letter not in used]
    out: list[Candidate] = []

    def add(sq: list[int], bd: list[int], lv: dict[str, int]) -> None:
        allowed = _domain_levels(t, tuple(sq))
        lvl = {}
        for d, options in allowed.items():
            if not options:
                return
            lvl[d] = lv[d] if lv.get(d) in options else options[-1]
        out.append(_candidate(t, tuple(sq), bd, lvl))

    for j in range(1, len(seq)):
        for step in (-3, -2, -1, 1, 2, 3):
            b = bounds[j] + step
            if bounds[j - 1] < b < bounds[j + 1]:
                add(seq, [*bounds[:j], b, *bounds[j + 1:]], level)
        add(seq[:j] + seq[j + 1:], bounds[:j] + bounds[j + 1:], level)  # merge into stage j - 1
    for d, options in _domain_levels(t, tuple(seq)).items():
        k = options.index(level[d])
        for k2 in (k - 1, k + 1):
            if 0 <= k2 < len(options):
                add(seq, bounds, {**level, d: options[k2]})
    sizes = [bounds[j + 1] - bounds[j] for j in range(len(seq))]
    for a, b in itertools.combinations(range(len(seq)), 2):
        sq = list(seq)
        sq[a], sq[b] = sq[b], sq[a]
        add(sq, bounds, level)  # processors swapped, stages stay
        sz = list(sizes)
        sz[a], sz[b] = sz[b], sz[a]
        add(sq, [0, *itertools.accumulate(sz)], level)  # whole stages swapped
    for j in range(len(seq)):
        for u in free:
            for lv in t.levels[u]:
                add([*seq[:j], u, *seq[j + 1:]], bounds, {**level, t.units[u].domain: lv})
                mid = (bounds[j] + bounds[j + 1]) // 2
                if bounds[j] < mid:
                    add([*seq[:j + 1], u, *seq[j + 1:]], [*bounds[:j + 1], mid, *bounds[j + 1:]],
                        {**level, t.units[u].domain: lv})
    return out


def _polish(t: CostTables, front: list[Evaluation], cache: dict[Candidate, Evaluation],
            rounds: int = 30, depth: int = 2) -> tuple[list[Evaluation], int]:
    """Pareto local search: cost every point up to `depth` steps (`_neighbours`) from
    each front point, until the front stops changing (at most `rounds` times). Two
    steps, because some better pipelines are only reached through a worse one (stages
    swapped, then a level or a cut moved)."""
    added = 0
    done: set[Candidate] = set()
    for _ in range(rounds):
        todo = [e.candidate for e in front if e.candidate not in done]
        if not todo:
            break
        for c in todo:
            done.add(c)
            layer = [c]
            for _ in range(depth):
                nxt: list[Candidate] = []
                for x in layer:
                    for nb in _neighbours(t, x):
                        if nb not in cache:
                            cache[nb] = evaluate(t, nb)
                            added += 1
                            nxt.append(nb)
                layer = nxt
        front = _front(list(cache.values()))
    return front, added


def search_pipeline(t: CostTables, exact_limit: int = 2_000_000, pop_size: int = 100,
                    generations: int = 100, seed: int = 0, method: str = "auto"
                    ) -> PipelineResult:
    """Exact enumeration where the space has at most `exact_limit` points, else NSGA-II
    (``method`` "exact" or "nsga2" forces one)."""
    if method not in ("auto", "exact", "nsga2"):
        raise BadInputError(f"--method {method!r} is not auto, exact or nsga2")
    size = space_size(t)
    if method == "exact" or (method == "auto" and size <= exact_limit):
        return enumerate_front(t)
    return nsga2_front(t, pop_size, generations, seed)


def pick(front: list[Evaluation], min_fps: float | None = None,
         objective: str = "fps_per_w") -> Evaluation | None:
    """One point of the front: the best FPS/W (or throughput) with at least `min_fps`."""
    ok = [e for e in front if min_fps is None or e.throughput_fps >= min_fps]
    if not ok:
        return None
    if objective == "fps":
        return max(ok, key=lambda e: e.throughput_fps)
    return max(ok, key=lambda e: e.fps_per_w or 0.0)


def ranked(front: list[Evaluation], best: Evaluation | None, objective: str = "fps_per_w"
           ) -> list[Evaluation]:
    """The pick first, then the rest of the front by the objective."""
    key = (lambda e: -e.throughput_fps) if objective == "fps" else \
        (lambda e: -(e.fps_per_w or 0.0))
    rest = sorted((e for e in front if best is None or e.candidate != best.candidate), key=key)
    return ([best] if best is not None else []) + rest


def epsilon(found: list[Evaluation], true: list[Evaluation]) -> float:
    """Multiplicative epsilon indicator: the least e such that every point of `true` has
    a point of `found` with at least 1 / (1 + e) of its throughput and of its FPS/W
    (0: `found` reaches the whole true front)."""
    worst = 0.0
    for q in true:
        best = min(max(q.throughput_fps / f.throughput_fps, (q.fps_per_w or 0.0)
                       / (f.fps_per_w or 1e-300)) for f in found)
        worst = max(worst, best - 1.0)
    return max(worst, 0.0)


def igd(found: list[Evaluation], true: list[Evaluation]) -> float:
    """Inverted generational distance of `found` to `true`, relative: objectives
    (throughput, FPS/W) divided by the true front's largest value of each, so 0.01 is
    1 % of the best throughput / FPS/W; the mean over true points of the distance to the
    nearest found point."""
    tf = np.array([[e.throughput_fps, e.fps_per_w or 0.0] for e in true])
    ff = np.array([[e.throughput_fps, e.fps_per_w or 0.0] for e in found])
    scale = np.where(tf.max(axis=0) > 0, tf.max(axis=0), 1.0)
    d = np.linalg.norm((tf[:, None, :] - ff[None, :, :]) / scale, axis=2)
    return float(d.min(axis=1).mean())


__all__ = ["PYMOO_FIX", "PipelineResult", "decode", "genes", "enumerate_front", "epsilon", "igd", "nsga2_front",
           "pick", "ranked", "search_pipeline", "space_size"]
