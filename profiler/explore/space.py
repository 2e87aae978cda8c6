"""The space `coupprof explore` searches, and the cost of one point in it.

A *unit* runs a layer: a processor letter (L, B, G, N) and, where the tables say which host
CPU drives a G or N, that host (unit ``G@L``); each unit runs at the level of its DVFS
*domain* (``Board.dvfs_domain``). `CostTables` holds the costs as arrays (per unit, level
and layer; per boundary and unit pair; per domain the transition delays), so a search can
evaluate millions of points; `profiler.explore.tables` fills them. Costs follow
`profiler.mapping.predict`, so a pick's prediction is the one `coupprof predict` gives for
the same tables, plus the DVFS transition delays in switch mode.

The cost model, term by term: docs/explore.md ("The model").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiler.errors import BadInputError
from profiler.mapping.queueing import QUEUE_DEPTH, steady_latency_ms

INF = math.inf


@dataclass(frozen=True)
class Unit:
    """What runs a layer: processor letter, its host CPU (G/N, when the tables tell
    hosts apart) and the DVFS domain whose level it runs at."""

    name: str  # "B", "G", or "G@L" when the tables give G's host
    letter: str
    domain: str
    host: str | None = None


@dataclass
class CostTables:
    """Per-layer, per-boundary and per-domain costs as arrays (units, then levels).

    ``levels[u]`` lists unit u's levels (1-based board levels) present in the tables;
    arrays over levels are padded to the longest list with inf (time) / nan."""

    units: list[Unit]
    levels: list[tuple[int, ...]]
    time_ms: np.ndarray  # [unit, level index, layer]
    feed_ms: np.ndarray  # [unit, level index, layer]: layer table transfer_ms_mean
    energy_mj: np.ndarray | None  # [unit, level index, layer], board energy in the layer
    dynamic_energy_mj: np.ndarray | None  # same shape, above the idle baseline
    transfer_ms: np.ndarray  # [boundary, src unit, dst unit]; nan: not measured
    transfer_mj: np.ndarray | None  # same shape; nan: not measured
    delay_ms: dict[str, np.ndarray] = field(default_factory=dict)  # domain -> [from, to] by level
    idle_power_w: float | None = None
    freq_khz: dict[str, dict[int, int]] = field(default_factory=dict)  # domain -> level -> kHz
    model: str = "model"
    board: str = ""
    sources: list[str] = field(default_factory=list)  # the input files, then `notes`
    notes: list[str] = field(default_factory=list)  # what the tables left out or assumed
    # [unit, level index]: the fixed per-call cost a stage pays once (fused tables; 0 sliced)
    fixed_ms: np.ndarray | None = None
    # [boundary, unit]: a fused call's extra read-back of the boundary tensors in full when
    # it ends at a cut (the transfer matrix's readout_ms; predict adds the same; 0 where
    # not measured, or the unit's table is sliced: its layers hold their read-back)
    readout_ms: np.ndarray | None = None
    # [unit, level index]: the fixed row's energy per call where a counter measured it
    # (fused tables with --power nvml|rapl|hwmon); nan where not (priced at idle power)
    fixed_energy_mj: np.ndarray | None = None

    def __post_init__(self) -> None:
        n_u = len(self.units)
        if self.fixed_ms is None:
            self.fixed_ms = np.zeros(self.time_ms.shape[:2])
        if self.readout_ms is None:
            self.readout_ms = np.zeros((max(self.n_layers - 1, 0), n_u))
        if self.time_ms.ndim != 3 or self.time_ms.shape[0] != n_u:
            raise BadInputError("cost tables: time_ms must be [unit, level, layer]")
        if self.transfer_ms.shape != (max(self.n_layers - 1, 0), n_u, n_u):
            raise BadInputError("cost tables: transfer_ms must be [boundary, unit, unit]")

    @property
    def n_layers(self) -> int:
        return int(self.time_ms.shape[2])

    @property
    def has_energy(self) -> bool:
        return self.energy_mj is not None

    def fixed(self, u: int, level: int) -> float:
        """The fixed per-call cost of a stage on unit u at `level` (0 for sliced tables)."""
        assert self.fixed_ms is not None
        return float(self.fixed_ms[u, self.level_index(u, level)])

    def fixed_extra_mj(self, u: int, level: int) -> float:
        """A call's fixed-row energy beyond the idle power over its fixed time: what a
        measured fixed energy adds to the idle-power pricing (0 where none was measured)."""
        if self.fixed_energy_mj is None:
            return 0.0
        e = float(self.fixed_energy_mj[u, self.level_index(u, level)])
        return 0.0 if math.isnan(e) else e - (self.idle_power_w or 0.0) * self.fixed(u, level)

    def readout(self, last: int, u: int) -> float:
        """The read-back a call on unit u ending at layer `last` pays at a cut."""
        assert self.readout_ms is not None
        return float(self.readout_ms[last, u]) if last < self.n_layers - 1 else 0.0

    def unit_index(self, name: str) -> int:
        for i, u in enumerate(self.units):
            if u.name == name:
                return i
        raise BadInputError(f"no unit {name!r} in the tables (have "
                            f"{', '.join(u.name for u in self.units)})")

    def level_index(self, u: int, level: int) -> int:
        try:
            return self.levels[u].index(level)
        except ValueError:
            raise BadInputError(f"the tables have no level {level} for {self.units[u].name} "
                                f"(have {', '.join(map(str, self.levels[u]))})") from None

    def delay(self, domain: str, a: int, b: int) -> float:
        """Transition delay (ms) of `domain` from level a to level b (0 without a table)."""
        if a == b:
            return 0.0
        d = self.delay_ms.get(domain)
        if d is None or a >= d.shape[0] or b >= d.shape[1] or math.isnan(d[a, b]):
            return 0.0
        return float(d[a, b])

    def domains(self) -> list[str]:
        return list(dict.fromkeys(u.domain for u in self.units))

    def domain_levels(self, domain: str) -> tuple[int, ...]:
        """Levels every unit of `domain` has (one level per domain in pipeline mode)."""
        sets = [set(lv) for u, lv in zip(self.units, self.levels, strict=True)
                if u.domain == domain]
        return tuple(sorted(set.intersection(*sets))) if sets else ()


# --------------------------------------------------------------------------------
# A point and its cost
# --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One point: the unit (index) and level of each layer, in a mode."""

    mode: str  # "switch" or "pipeline"
    units: tuple[int, ...]
    levels: tuple[int, ...]  # 1-based board level per layer (the domain's)


@dataclass(frozen=True)
class Evaluation:
    """Predicted figures of a candidate (per frame)."""

    candidate: Candidate
    latency_ms: float
    throughput_fps: float
    energy_mj: float | None
    stage_ms: tuple[float, ...]
    dvfs_delay_ms: float = 0.0
    missing: tuple[str, ...] = ()
    energy_upper_bound: bool = False

    @property
    def fps_per_w(self) -> float | None:
        return None if not self.energy_mj else 1000.0 / self.energy_mj


def stages_of(units: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """(unit, first layer, last layer) of each maximal run."""
    out: list[tuple[int, int, int]] = []
    start = 0
    for i in range(1, len(units) + 1):
        if i == len(units) or units[i] != units[start]:
            out.append((units[start], start, i - 1))
            start = i
    return out


def handover(t: CostTables, i: int, src: int | None, dst: int, k_dst: int
             ) -> tuple[float, float | None, bool]:
    """(time ms, energy mJ or None, missing) of the hand-over into layer i on `dst` at
    level index `k_dst`, from `src` (None for layer 0: the model input's feed)."""
    if src is None:
        return float(t.feed_ms[dst, k_dst, 0]), None, False
    ms = t.transfer_ms[i - 1, src, dst]
    if not math.isnan(ms):
        e = None if t.transfer_mj is None else float(t.transfer_mj[i - 1, src, dst])
        return float(ms), (None if e is None or math.isnan(e) else e), False
    if src == dst:
        return float(t.feed_ms[dst, k_dst, i]), None, False
    return 0.0, None, True


def call_starts(c: Candidate) -> set[int]:
    """Layers that start a call (`profiler.mapping.spec.calls`, fused): the first, each unit
    change and, in switch mode, each level change within a unit."""
    out = {0}
    for i in range(1, len(c.units)):
        if c.units[i] != c.units[i - 1] or (c.mode == "switch" and c.levels[i] != c.levels[i - 1]):
            out.add(i)
    return out


def _layer(t: CostTables, u: int, level: int, i: int) -> tuple[int, float]:
    k = t.level_index(u, level)
    ms = float(t.time_ms[u, k, i])
    if not math.isfinite(ms):
        raise BadInputError(f"the tables have no time for layer {i} on {t.units[u].name} "
                            f"at level {level}")
    return k, ms


def evaluate(t: CostTables, c: Candidate) -> Evaluation:
    """Predicted latency, throughput and energy of `c` (docs/explore.md), written
    plainly, layer by layer: the searches' ground truth."""
    n = t.n_layers
    if len(c.units) != n or len(c.levels) != n:
        raise BadInputError(f"a candidate maps {len(c.units)} layers, the tables have {n}")
    idle = t.idle_power_w or 0.0
    t_ms, h_ms, e_mj, dyn, he = [], [], [], [], []
    d_total = 0.0
    missing: list[str] = []
    # Each domain starts the frame at the level the previous frame left it at.
    last = {t.units[u].domain: lv for u, lv in zip(c.units, c.levels, strict=True)}
    starts = call_starts(c)
    for i in range(n):
        u, lv = c.units[i], c.levels[i]
        k, ms = _layer(t, u, lv, i)
        t_ms.append(ms)
        if t.energy_mj is not None:
            e_mj.append(float(t.energy_mj[u, k, i]))
        if t.dynamic_energy_mj is not None:
            dyn.append(float(t.dynamic_energy_mj[u, k, i]))
        if i not in starts:  # inside a call: no hand-over
            h_ms.append(0.0)
            he.append(0.0)
            if c.mode == "switch":
                last[t.units[u].domain] = lv
            continue
        h, e, miss = handover(t, i, None if i == 0 else c.units[i - 1], u, k)
        if miss:
            missing.append(f"{i - 1}:{t.units[c.units[i - 1]].name}->{t.units[u].name}")
        h_ms.append(h)
        he.append(e if e is not None else idle * h)
        if c.mode == "switch":
            dom = t.units[u].domain
            d_total += t.delay(dom, last[dom], lv)
            last[dom] = lv
    # fused tables: each call pays its fixed per-call cost once, and the read-back of its
    # outputs where it ends at a cut (both at idle power, plus what a measured fixed
    # energy adds to it)
    per_call = {i: t.fixed(c.units[i], c.levels[i]) for i in sorted(starts)}  # by layer
    fixed_x = sum(t.fixed_extra_mj(c.units[i], c.levels[i]) for i in starts)
    for i in sorted(starts - {0}):
        per_call[i - 1] = per_call.get(i - 1, 0.0) + t.readout(i - 1, c.units[i - 1])
    stage_ms = tuple(sum(per_call.get(i, 0.0) for i in range(a, b + 1)) + sum(t_ms[a:b + 1])
                     + sum(h_ms[a:b + 1]) for _, a, b in stages_of(c.units))
    serial = sum(t_ms) + sum(h_ms) + sum(per_call.values())
    energy: float | None = None
    upper = False
    if c.mode == "switch":
        latency = serial + d_total
        fps = 1000.0 / latency if latency > 0 else INF
        if e_mj:
            energy = sum(e_mj) + sum(he) + idle * (d_total + sum(per_call.values())) + fixed_x
    else:
        latency = steady_latency_ms(stage_ms, QUEUE_DEPTH)
        slowest = max(stage_ms)
        fps = 1000.0 / slowest if slowest > 0 else INF
        if e_mj:
            if dyn and t.idle_power_w is not None:
                energy = sum(dyn) + sum(x - idle * h for x, h in zip(he, h_ms, strict=True)) \
                    + idle * (1000.0 / fps) + fixed_x
            else:
                energy = sum(e_mj) + sum(he) + idle * sum(per_call.values()) + fixed_x
                upper = True
    return Evaluation(c, latency, fps, energy, stage_ms, d_total, tuple(missing), upper)


# --------------------------------------------------------------------------------
# Naming a candidate as `coupprof run` takes it
# --------------------------------------------------------------------------------


def order_string(t: CostTables, c: Candidate) -> str:
    """`--order` in compact form, e.g. G2B4N2."""
    return "".join(f"{t.units[u].letter}{b - a + 1}" for u, a, b in stages_of(c.units))


def freq_spec(t: CostTables, c: Candidate) -> str:
    """`--freq`: per stage (4/8/3) in pipeline mode, per layer (4,4,6,...) in switch mode;
    for N its host's level, as `coupprof run` applies it."""
    if c.mode == "pipeline":
        return "/".join(str(c.levels[a]) for _, a, _ in stages_of(c.units))
    return ",".join(str(lv) for lv in c.levels)


def hosts_string(t: CostTables, c: Candidate) -> str:
    """The host of each G/N stage where the tables tell hosts apart ('' otherwise)."""
    parts = [f"{t.units[u].letter}@{t.units[u].host}" for u, _, _ in stages_of(c.units)
             if t.units[u].host]
    return ",".join(parts)


def run_command(t: CostTables, c: Candidate, board: str = "", model: str = "") -> str:
    """The `coupprof run` line that measures `c`."""
    parts = ["coupprof run", f"--order {order_string(t, c)}", f"--mode {c.mode}",
             f"--freq {freq_spec(t, c)}"]
    if board:
        parts.append(f"--board {board}")
    if model:
        parts.append(f"--model {model}")
    return " ".join(parts)


def row(t: CostTables, ev: Evaluation, rank: int, board: str = "", model: str = "",
        kind: str = "front") -> dict[str, object]:
    """One Pareto CSV row: the mapping as `coupprof run` takes it and its prediction;
    kind: pick, front (another point of the trade-off) or single (one processor)."""
    c = ev.candidate
    return {"rank": rank, "kind": kind, "mode": c.mode, "order": order_string(t, c), "freq": freq_spec(t, c),
            "hosts": hosts_string(t, c), "latency_ms": ev.latency_ms,
            "throughput_fps": ev.throughput_fps, "energy_mj": ev.energy_mj,
            "fps_per_w": ev.fps_per_w, "dvfs_delay_ms": ev.dvfs_delay_ms,
            "slowest_stage_ms": max(ev.stage_ms), "stages": len(ev.stage_ms),
            "stage_ms": ";".join(f"{x:.6g}" for x in ev.stage_ms),
            "energy_upper_bound": ev.energy_upper_bound,
            "missing_transfers": ";".join(ev.missing),
            "command": run_command(t, c, board, model)}


def row_latency_ms(r: Mapping[str, Any], frames: int) -> float:
    """A `row`'s predicted latency for a measured run of `frames` (`coupprof run
    --frames`): a pipeline's from its ``stage_ms``, the mean over frames from an empty
    pipeline (the row's own latency is the steady state's); a switch row's as it is."""
    if r["mode"] != "pipeline":
        return float(r["latency_ms"])
    from profiler.mapping.queueing import pipeline_latency_ms

    stage_ms = [float(x) for x in str(r["stage_ms"]).split(";")]
    return pipeline_latency_ms(stage_ms, QUEUE_DEPTH, frames)


def candidate_for(t: CostTables, order: str, freq: str, mode: str) -> Candidate:
    """A mapping given as `coupprof run` takes it (``--order G2B4N2``, ``--freq`` as one
    level, per stage ``4/8/3`` or per layer ``4,4,...``) as a candidate on these tables."""
    import re

    letters: list[str] = []
    for letter, count in re.findall(r"([A-Za-z])(\d*)", re.sub(r"[\s,_\-]+", "", order)):
        letters += [letter.upper()] * (int(count) if count else 1)
    if len(letters) != t.n_layers:
        raise BadInputError(f"order {order!r} maps {len(letters)} layers but the tables have "
                            f"{t.n_layers}", "give one letter per layer, e.g. G2B4N2")
    by_letter: dict[str, int] = {}
    for i, unit in enumerate(t.units):
        by_letter.setdefault(unit.letter, i)  # the first host where the tables have several
    try:
        units = tuple(by_letter[x] for x in letters)
    except KeyError as err:
        raise BadInputError(f"order {order!r} uses {err.args[0]}, which the tables lack") from None
    st = stages_of(units)
    text = freq.strip()
    if "/" in text:
        parts = text.split("/")
        if len(parts) != len(st):
            raise BadInputError(f"freq {freq!r} gives {len(parts)} stage levels for "
                                f"{len(st)} stages")
        levels = [int(parts[k]) for k, (_, a, b) in enumerate(st) for _ in range(a, b + 1)]
    elif "," in text:
        levels = [int(v) for v in text.split(",")]
    else:
        levels = []
        for u in units:
            want = text.lower()
            lv = t.levels[u]
            levels.append(lv[-1] if want == "max" else lv[0] if want == "min" else int(want))
    if len(levels) != t.n_layers:
        raise BadInputError(f"freq {freq!r} gives {len(levels)} levels for {t.n_layers} layers")
    c = Candidate(mode, units, tuple(levels))
    for u, level in zip(c.units, c.levels, strict=True):
        t.level_index(u, level)  # a level the tables lack: one line naming it
    return c


def single_processor(t: CostTables, mode: str) -> list[Evaluation]:
    """Every mapping of the whole model on one unit at one level (the baselines a
    search must beat)."""
    n = t.n_layers
    out = []
    for u, levels in enumerate(t.levels):
        for k, lv in enumerate(levels):
            if np.isfinite(t.time_ms[u, k]).all():
                out.append(evaluate(t, Candidate(mode, (u,) * n, (lv,) * n)))
    return out


def switch_space_size(t: CostTables) -> int:
    """Number of switch-mode points: (sum over units of their levels) ** layers."""
    return sum(len(lv) for lv in t.levels) ** t.n_layers


__all__ = ["Candidate", "CostTables", "candidate_for", "Evaluation", "Unit", "evaluate", "freq_spec", "handover",
           "hosts_string", "order_string", "row", "run_command", "single_processor", "stages_of",
           "switch_space_size"]
