"""Pipeline-mode search: contiguous stages on distinct processors, one level per DVFS
domain, for the throughput / FPS/W Pareto front (ARM-CO-UP Table 4).

- exact: every stage split x processor order x domain levels, evaluated with prefix sums
  and numpy broadcasting over the levels, where the space has at most ``exact_limit``
  points; the front is then the true one.
- NSGA-II (pymoo, optional extra ``explore``) otherwise: a random-key encoding (stage
  order from the argsort of one key per unit, cuts from up to U - 1 keys, a level key
  per domain), so pymoo's default real-valued operators apply; every decoded point is
  costed exactly, so the front holds real candidates.

Costs are `profiler.explore_space.evaluate`'s pipeline ones (tests check they agree).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiler.errors import BadInputError
from profiler.explore_space import Candidate, CostTables, Evaluation, evaluate

PYMOO_FIX = "pip install 'coupprof[explore]'   (or: pip install 'pymoo>=0.6')"


@dataclass
class PipelineResult:
    front: list[Evaluation]  # by throughput, fastest first
    method: str  # "exact enumeration" or "NSGA-II"
    evaluations: int
    space: int  # points in the space
    seconds: float
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if self.method == "exact":
            return (f"exact: all {self.space:,} points enumerated; the front is the true "
                    "Pareto front of the tables")
        return (f"NSGA-II: {self.evaluations:,} evaluations of a {self.space:,}-point space; "
                "a front of real candidates, not proven optimal")


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
        self.P = np.concatenate([zero, np.cumsum(t.time_ms + same, axis=2)], axis=2)
        # energy per layer as the pipeline formula counts it: dynamic + hand-over above idle
        if self.exact_energy:
            assert t.dynamic_energy_mj is not None
            e_lay = t.dynamic_energy_mj + same_e - idle * same
        elif t.energy_mj is not None:
            e_lay = t.energy_mj + same_e
        else:
            e_lay = np.zeros_like(same)
        self.PE = np.concatenate([zero, np.cumsum(e_lay, axis=2)], axis=2)

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
        ms = self.P[u, :, b + 1] - self.P[u, :, a]
        en = self.PE[u, :, b + 1] - self.PE[u, :, a]
        if prev is not None:
            # swap the same-unit hand-over into layer a for the real one
            xm, xe = self.cross(a, prev, u)
            same_e = self.same_e[u, :, a] - (self.idle * self.same[u, :, a]
                                             if self.exact_energy else 0.0)
            ms = ms - self.same[u, :, a] + xm
            en = en - same_e + xe
        return ms, en


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
            bounds = [0, *cuts, n]
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


def decode(t: CostTables, x: np.ndarray) -> Candidate:
    """Random keys -> a valid pipeline candidate (module docstring)."""
    U, n = len(t.units), t.n_layers
    doms = t.domains()
    order = [int(u) for u in np.argsort(x[:U], kind="stable")]
    cut_keys = x[U:U + U - 1]
    cuts = sorted({int(min(k, 1 - 1e-12) * n) for k in cut_keys} - {0})
    seq: list[int] = []
    letters: set[str] = set()
    for u in order:  # distinct processors; a second host of one letter is skipped
        if t.units[u].letter not in letters:
            seq.append(u)
            letters.add(t.units[u].letter)
    cuts = cuts[:len(seq) - 1]
    seq = seq[:len(cuts) + 1]
    dl = _domain_levels(t, tuple(seq))
    dom_level = {}
    for d, levels in dl.items():
        g = x[2 * U - 1 + doms.index(d)]
        dom_level[d] = levels[min(int(g * len(levels)), len(levels) - 1)]
    return _candidate(t, tuple(seq), [0, *cuts, n], dom_level)


def nsga2_front(t: CostTables, pop_size: int = 100, generations: int = 100, seed: int = 0,
                ) -> PipelineResult:
    """The front NSGA-II finds (pymoo), from ``pop_size`` x ``generations`` evaluations."""
    try:
        from pymoo.algorithms.moo.nsga2 import NSGA2
        from pymoo.core.problem import Problem
        from pymoo.optimize import minimize
    except ImportError:
        raise BadInputError("pipeline search over this many points needs pymoo, which is "
                            "not installed", PYMOO_FIX) from None
    if t.energy_mj is None:
        raise BadInputError("the layer tables have no energy_mj, so there is no FPS/W front",
                            "sweep with a power source (--power)")
    t0 = time.perf_counter()
    U = len(t.units)
    n_var = 2 * U - 1 + len(t.domains())
    cache: dict[Candidate, Evaluation] = {}

    def cost(x: np.ndarray) -> tuple[float, float]:
        c = decode(t, x)
        ev = cache.get(c)
        if ev is None:
            ev = cache[c] = evaluate(t, c)
        return -ev.throughput_fps, -(ev.fps_per_w or 0.0)

    class Mapping(Problem):
        def __init__(self) -> None:
            super().__init__(n_var=n_var, n_obj=2, xl=0.0, xu=1.0)

        def _evaluate(self, X: np.ndarray, out: dict[str, Any], *args: Any,
                      **kwargs: Any) -> None:
            out["F"] = np.array([cost(x) for x in X])

    res = minimize(Mapping(), NSGA2(pop_size=pop_size), ("n_gen", generations), seed=seed,
                   verbose=False)
    evs = list(cache.values())
    mask = _front_mask(np.array([e.throughput_fps for e in evs]),
                       np.array([e.fps_per_w or 0.0 for e in evs]))
    front = sorted((e for e, k in zip(evs, mask, strict=True) if k),
                   key=lambda e: -e.throughput_fps)
    n_eval = int(res.algorithm.evaluator.n_eval)
    return PipelineResult(front, "NSGA-II", n_eval, space_size(t), time.perf_counter() - t0,
                          [f"{len(cache):,} distinct candidates costed"])


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


def igd(found: list[Evaluation], true: list[Evaluation]) -> float:
    """Inverted generational distance of `found` to `true` in objective space scaled by
    the true front's ranges (throughput, FPS/W): the mean over true points of the
    distance to the nearest found point."""
    tf = np.array([[e.throughput_fps, e.fps_per_w or 0.0] for e in true])
    ff = np.array([[e.throughput_fps, e.fps_per_w or 0.0] for e in found])
    span = np.where(np.ptp(tf, axis=0) > 0, np.ptp(tf, axis=0), 1.0)
    d = np.linalg.norm((tf[:, None, :] - ff[None, :, :]) / span, axis=2)
    return float(d.min(axis=1).mean())


__all__ = ["PYMOO_FIX", "PipelineResult", "decode", "enumerate_front", "igd", "nsga2_front",
           "pick", "ranked", "search_pipeline", "space_size"]
