"""Search split points and processors across devices (AutoDiCE's first, analytic level).

A point is AutoDiCE's split point encoding: one cut per device boundary (the devices in
the devices file's order; two equal cuts leave a device out, so fewer devices are in the
space too) and one processor per part. Its objectives, from the per-device tables and
the links (`profiler.devices.predict`): throughput (up), the most energy per frame on
one device (down), the most memory on one device (down). Each part runs on one processor,
as one fused call, so a part is priced in O(1) from prefix sums (`_Fast`), which agrees
with `predict_devices` (tests check it). The space is enumerated where it is small, else
searched by NSGA-II (pymoo), as `coupprof explore` searches pipelines.

The encoding and the objectives: docs/devices.md ("Explore across devices").
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping as MappingOf
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiler.devices.linkfit import LinkTable, price_handover
from profiler.devices.predict import cut_bytes
from profiler.devices.spec import DeviceMapping, DevicePart, DeviceSet
from profiler.errors import BadInputError
from profiler.explore.nsga import nsga2_minimize
from profiler.mapping.predict import LayerCosts
from profiler.mapping.queueing import QUEUE_DEPTH, pipeline_latency_ms
from profiler.mapping.spec import Mapping


@dataclass(frozen=True)
class Split:
    """Sorted cuts (``len(devices) - 1``, each in 0..n: part k is layers
    cuts[k-1] .. cuts[k] - 1) and a processor letter per device."""

    cuts: tuple[int, ...]
    processors: tuple[str, ...]


@dataclass(frozen=True)
class SplitEvaluation:
    split: Split
    mapping: DeviceMapping
    throughput_fps: float
    latency_ms: float
    max_energy_mj: float | None
    max_memory_bytes: int | None
    part_ms: tuple[float, ...]
    link_ms: tuple[float, ...]
    energy_mj: tuple[float | None, ...]
    memory_bytes: tuple[int | None, ...]

    @property
    def order(self) -> str:
        return self.mapping.text

    def objectives(self) -> tuple[float, float, float]:
        """Minimised: -throughput, max energy, max memory (0 where unknown)."""
        return (-self.throughput_fps, self.max_energy_mj or 0.0,
                float(self.max_memory_bytes or 0))


@dataclass
class DeviceSearch:
    """Per device its tables and processors, the links, the mode."""

    devices: DeviceSet
    names: list[str]  # devices in the search, in rank order
    costs: MappingOf[str, LayerCosts]
    links: LinkTable | None = None
    mode: str = "pipeline"
    processors: dict[str, list[str]] = field(default_factory=dict)
    n_layers: int = 0
    notes: list[str] = field(default_factory=list)
    _fast: _Fast | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in ("switch", "pipeline"):
            raise BadInputError(f"--mode {self.mode!r} is not switch or pipeline")
        if not self.names:
            raise BadInputError("no devices to search", "list devices in the devices file")
        ns = {name: int(self.costs[name].table["layer"].max()) + 1 for name in self.names}
        if len(set(ns.values())) != 1:
            raise BadInputError(f"the devices' tables have different layer counts ({ns})",
                                "measure every device on the same model")
        self.n_layers = next(iter(ns.values()))
        for name in self.names:
            have = sorted(set(self.costs[name].table["processor"]), key="LBGN".find)
            want = self.processors.get(name) or have
            full = [p for p in want if p in have and self._complete(name, p)]
            if not full:
                raise BadInputError(f"device {name}'s tables cover no processor with every "
                                    f"layer (have {', '.join(have) or 'none'})",
                                    "measure a processor's whole model: coupprof layers")
            self.processors[name] = full

    def _complete(self, name: str, letter: str) -> bool:
        t = self.costs[name].table
        return set(t.loc[t["processor"] == letter, "layer"].astype(int)) >= \
            set(range(self.n_layers))

    def fast(self) -> _Fast:
        """The prefix sums every split is priced from (built once)."""
        if self._fast is None:
            self._fast = _Fast(self)
        return self._fast

    def mapping(self, s: Split) -> DeviceMapping:
        bounds = (0, *s.cuts, self.n_layers)
        parts = [DevicePart(name, bounds[k], Mapping(s.processors[k] * (bounds[k + 1] - bounds[k])))
                 for k, name in enumerate(self.names) if bounds[k + 1] > bounds[k]]
        return DeviceMapping(tuple(parts))


class _Fast:
    """Prefix sums per device and processor, for pricing a one-processor part (one
    fused call) as `profiler.mapping.predict.predict` does."""

    def __init__(self, s: DeviceSearch) -> None:
        self.s = s
        n = s.n_layers
        self.t: dict[tuple[str, str], np.ndarray] = {}  # prefix time (layer at its call factor)
        self.e: dict[tuple[str, str], np.ndarray | None] = {}
        self.dyn: dict[tuple[str, str], np.ndarray | None] = {}
        self.feed: dict[tuple[str, str], np.ndarray] = {}
        self.fixed: dict[tuple[str, str], float] = {}
        self.fixed_e: dict[tuple[str, str], float | None] = {}
        self.idle: dict[tuple[str, str], float | None] = {}
        self.coeff: dict[str, np.ndarray | None] = {}
        self.outb: dict[str, np.ndarray | None] = {}
        self.inb: dict[str, np.ndarray | None] = {}
        self._links: dict[tuple[int, str, str], tuple[float, int | None]] = {}
        for name in s.names:
            c = s.costs[name]
            for p in s.processors[name]:
                rows = [c.lookup(p, None, i) for i in range(n)]
                key = (name, p)
                self.t[key] = np.concatenate([[0.0], np.cumsum([float(r["time_ms"])
                                                                 for r in rows])])
                self.feed[key] = np.array([float(r["transfer_ms"]) for r in rows])
                self.e[key] = self._prefix([r.get("energy_mj") for r in rows])
                self.dyn[key] = self._prefix([r.get("dynamic_energy_mj") for r in rows])
                self.fixed[key] = c.fixed_for(p, None)
                self.fixed_e[key] = c.fixed_energy_for(p, None)
                self.idle[key] = c.baseline_power_w.get(p)
            t = c.table.drop_duplicates("layer").set_index("layer").sort_index()
            for col, store in (("param_bytes", self.coeff), ("bytes_out", self.outb),
                               ("bytes_in", self.inb)):
                v = t[col] if col in t.columns else None
                if v is None or v.isna().any() or len(v) < n:
                    store[name] = None
                else:
                    arr = v.to_numpy(dtype=np.float64)[:n]
                    store[name] = arr if col == "bytes_in" else \
                        np.concatenate([[0.0], np.cumsum(arr)])

    @staticmethod
    def _prefix(vals: Sequence[Any]) -> np.ndarray | None:
        out = []
        for v in vals:
            try:
                f = float(v)
            except (TypeError, ValueError):
                return None
            if math.isnan(f):
                return None
            out.append(f)
        return np.concatenate([[0.0], np.cumsum(out)])

    def part(self, name: str, p: str, a: int, b: int
             ) -> tuple[float, float | None, float | None]:
        """(time ms, energy mJ as its own switch-mode call, idle W) of layers a..b-1."""
        key = (name, p)
        h = float(self.feed[key][a])
        x = self.fixed[key]
        ms = x + float(self.t[key][b] - self.t[key][a]) + h
        e = self.e[key]
        idle = self.idle[key]
        if e is None:
            return ms, None, idle
        pi = idle if idle is not None else 0.0
        fe = self.fixed_e[key]
        call_e = fe if fe is not None else pi * x
        total = float(e[b] - e[a]) + pi * h + call_e
        if self.s.mode == "pipeline":
            dyn = self.dyn[key]
            if dyn is not None and idle is not None:
                # predict's pipeline energy of one stage: dynamic + idle over the period
                total = float(dyn[b] - dyn[a]) + (call_e - pi * x) + pi * ms
        return ms, total, idle

    def memory(self, name: str, a: int, b: int, inbuf: int | None) -> int | None:
        co, ob, ib = self.coeff[name], self.outb[name], self.inb[name]
        if co is None or ob is None:
            return None
        if inbuf is None:
            if ib is None:
                return None
            inbuf = int(ib[a])
        return int(co[b] - co[a]) + int(ob[b] - ob[a]) + inbuf

    def link(self, boundary: int, a: str, b: str) -> tuple[float, int | None]:
        key = (boundary, a, b)
        if key not in self._links:
            nbytes = cut_bytes(boundary, self.s.links, self.s.costs[b])
            self._links[key] = (price_handover(boundary, nbytes or 0, a, b, self.s.links,
                                               self.s.devices).time_ms, nbytes)
        return self._links[key]


def evaluate_split(s: DeviceSearch, split: Split) -> SplitEvaluation:
    """The objectives of one split (as `predict_devices` with the fused method)."""
    f = s.fast()
    n = s.n_layers
    bounds = (0, *split.cuts, n)
    parts = [(name, split.processors[k], bounds[k], bounds[k + 1])
             for k, name in enumerate(s.names) if bounds[k + 1] > bounds[k]]
    part_ms, link_ms, energies, idles, mems = [], [], [], [], []
    prev: tuple[str, int] | None = None
    for name, p, a, b in parts:
        ms, e, idle = f.part(name, p, a, b)
        inbuf = None
        if prev is not None:
            lt, inbuf = f.link(a - 1, prev[0], name)
            link_ms.append(lt)
        part_ms.append(ms)
        energies.append(e)
        idles.append(idle)
        mems.append(f.memory(name, a, b, inbuf))
        prev = (name, b)
    latency = sum(part_ms) + sum(link_ms)
    if s.mode == "pipeline":
        slowest = max(part_ms + link_ms)
        part_lat = [pipeline_latency_ms([m], QUEUE_DEPTH) for m in part_ms]
        latency = sum(part_lat) + sum(link_ms)
    else:
        slowest = latency
    fps = 1000.0 / slowest if slowest > 0 else math.inf
    period = 1000.0 / fps if fps > 0 else 0.0
    dev_e: list[float | None] = []
    for e, idle, ms in zip(energies, idles, part_ms, strict=True):
        dev_e.append(None if e is None else e + (idle or 0.0) * max(period - ms, 0.0))
    max_e = None if any(e is None for e in dev_e) else max(e for e in dev_e if e is not None)
    max_m = None if any(m is None for m in mems) else max(m for m in mems if m is not None)
    return SplitEvaluation(split, s.mapping(split), fps, latency, max_e, max_m,
                           tuple(part_ms), tuple(link_ms), tuple(dev_e), tuple(mems))


# --------------------------------------------------------------------------------
# The search
# --------------------------------------------------------------------------------


@dataclass
class DeviceFront:
    front: list[SplitEvaluation]  # fastest first
    method: str  # "exact" or "NSGA-II"
    evaluations: int
    space: int
    seconds: float
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if self.method == "exact":
            return (f"exact: all {self.space:,} splits costed; the front is the true "
                    "Pareto front of the tables")
        return (f"NSGA-II: {self.evaluations:,} splits costed of a {self.space:,}-point "
                "space; a front of real candidates, not proven optimal")


def space_size(s: DeviceSearch) -> int:
    d = len(s.names)
    return math.comb(s.n_layers + d - 1, d - 1) * math.prod(len(s.processors[n])
                                                           for n in s.names)


def _canonical(s: DeviceSearch, cuts: Sequence[int], procs: Sequence[str]) -> Split:
    """Sorted cuts; an empty part's processor set to its device's first, so one mapping
    is one point."""
    cs = tuple(sorted(int(c) for c in cuts))
    bounds = (0, *cs, s.n_layers)
    ps = tuple(p if bounds[k + 1] > bounds[k] else s.processors[name][0]
               for k, (name, p) in enumerate(zip(s.names, procs, strict=True)))
    return Split(cs, ps)


def all_splits(s: DeviceSearch) -> list[Split]:
    d, n = len(s.names), s.n_layers
    out = []
    for cuts in itertools.combinations_with_replacement(range(n + 1), d - 1):
        for procs in itertools.product(*[s.processors[name] for name in s.names]):
            sp = _canonical(s, cuts, procs)
            if sp.processors == tuple(procs):
                out.append(sp)
    return out


def pareto(evs: Sequence[SplitEvaluation]) -> list[SplitEvaluation]:
    """The non-dominated evaluations (all three objectives), fastest first; a mapping
    that one other equals on every objective is kept once. In lexicographic order a
    point's dominators come before it, and a dominated dominator has one on the front,
    so each point is checked against the front only."""
    if not evs:
        return []
    objs = np.array([e.objectives() for e in evs])
    order = np.lexsort(objs.T[::-1])
    front: list[int] = []
    for i in order:
        if front:
            f = objs[front]
            if np.any(np.all(f <= objs[i], axis=1)):  # dominated, or equal to one kept
                continue
        front.append(int(i))
    return sorted((evs[i] for i in front), key=lambda e: -e.throughput_fps)


def search_splits(s: DeviceSearch, method: str = "auto", exact_limit: int = 50_000,
                  pop_size: int = 60, generations: int = 60, seed: int = 0) -> DeviceFront:
    """The throughput / energy / memory front over split points and processors."""
    if method not in ("auto", "exact", "nsga2"):
        raise BadInputError(f"--method {method!r} is not auto, exact or nsga2")
    size = space_size(s)
    t0 = time.perf_counter()
    if method == "exact" or (method == "auto" and size <= exact_limit):
        evs = [evaluate_split(s, sp) for sp in all_splits(s)]
        return DeviceFront(pareto(evs), "exact", len(evs), size, time.perf_counter() - t0)
    return _nsga2(s, size, pop_size, generations, seed, t0)


def _nsga2(s: DeviceSearch, size: int, pop_size: int, generations: int,
           seed: int, t0: float) -> DeviceFront:
    d, n = len(s.names), s.n_layers
    upper = np.array([n] * (d - 1) + [len(s.processors[name]) - 1 for name in s.names])
    cache: dict[Split, SplitEvaluation] = {}

    def cost(x: np.ndarray) -> tuple[float, float, float]:
        procs = [s.processors[name][int(g)] for name, g in zip(s.names, x[d - 1:], strict=True)]
        sp = _canonical(s, [int(c) for c in x[:d - 1]], procs)
        ev = cache.get(sp)
        if ev is None:
            ev = cache[sp] = evaluate_split(s, sp)
        return ev.objectives()

    n_eval = nsga2_minimize(cost, upper, 3, pop_size=pop_size, generations=generations,
                            seed=seed, what="searching this many splits")
    return DeviceFront(pareto(list(cache.values())), "NSGA-II", n_eval, size,
                       time.perf_counter() - t0,
                       [f"{len(cache):,} distinct splits costed by NSGA-II"])


def single_devices(s: DeviceSearch) -> list[SplitEvaluation]:
    """Every device and processor with the whole model: what a split must beat."""
    d, n = len(s.names), s.n_layers
    out = []
    for k, name in enumerate(s.names):
        cuts = [0] * k + [n] * (d - 1 - k)
        for p in s.processors[name]:
            procs = [s.processors[x][0] for x in s.names]
            procs[k] = p
            out.append(evaluate_split(s, _canonical(s, cuts, procs)))
    return out


def split_row(ev: SplitEvaluation, rank: int, kind: str, mode: str, devices_file: str = "",
              model: str = "") -> dict[str, Any]:
    """One CSV row: the split, its order as `coupprof run --devices` takes it, and its
    prediction."""
    cmd = ["coupprof run", f"--devices {devices_file or 'FILE'}", f"--order '{ev.order}'",
           f"--mode {mode}"]
    if model:
        cmd.append(f"--model {model}")
    return {"rank": rank, "kind": kind, "order": ev.order,
            "cuts": ";".join(map(str, ev.split.cuts)),
            "processors": "".join(ev.split.processors),
            "throughput_fps": ev.throughput_fps, "latency_ms": ev.latency_ms,
            "max_energy_mj": ev.max_energy_mj, "max_memory_bytes": ev.max_memory_bytes,
            "part_ms": ";".join(f"{x:.6g}" for x in ev.part_ms),
            "link_ms": ";".join(f"{x:.6g}" for x in ev.link_ms),
            "energy_mj": ";".join("" if e is None else f"{e:.6g}" for e in ev.energy_mj),
            "memory_bytes": ";".join("" if m is None else str(m) for m in ev.memory_bytes),
            "command": " ".join(cmd)}
