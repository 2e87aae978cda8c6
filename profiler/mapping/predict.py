"""Predict a mapping's latency, throughput and energy from layer and transfer tables.

A mapping is priced as the calls `coupprof run` executes (`profiler.mapping.spec.calls`):
each call pays its processor's fixed per-call cost, its layers' times, the read-back at a
cut and the hand-over into it. Switch mode sums the calls; Pipeline mode takes the slowest
stage for throughput (AutoDiCE's model) and the wait in the full queues for latency
(`profiler.mapping.queueing`). Energy per frame follows the same calls, with the idle
baseline where a table lacks a figure. A missing transfer at a processor change counts as
0 and is listed in ``missing``.

The formulas: docs/mapping.md ("Predictions").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pandas as pd

from profiler.boards.model import Board
from profiler.errors import BadInputError, ProfilerError
from profiler.executors.base import Executor, SubModel
from profiler.executors.factory import make_executor
from profiler.executors.worker import ProcessorWorker
from profiler.mapping.accuracy import error_pct
from profiler.mapping.queueing import QUEUE_DEPTH, pipeline_latency_ms
from profiler.mapping.spec import Call, FreqPlan, Mapping, calls
from profiler.mapping.transfer import Activity, NoActivity, measure_transfer_matrix
from profiler.markers.hooks import LayerHooks
from profiler.measure.clock_fit import ClockFit
from profiler.measure.freq_trace import FreqSampler, FreqTrace, clock_mismatch
from profiler.measure.fused import FusedSettings
from profiler.measure.layers import (
    LayerMeasurement,
    LayerSettings,
    ModelUnderTest,
    ProcessorLayers,
)
from profiler.measure.method import Method
from profiler.measure.tables import misses_whole
from profiler.power.session import PowerSession

if TYPE_CHECKING:
    from governors import Governor
    from profiler.mapping.pipeline import MappedRun
    from profiler.slicing.specs import SlicedModel

T = TypeVar("T")
#: A fused table whose whole model's 95 % interval is wider than this share of it is
#: noted: half the 10 % a prediction is meant to hold to.
RESOLUTION_REL = 0.05

#: A layer table's sizes, kept where it has them (`profiler.devices.predict`'s memory)
SIZE_COLUMNS = ("param_bytes", "bytes_in", "bytes_out")

LAYER_FIX = ("pass the CSVs written by `coupprof layers` (one per processor), with their "
             ".json, the folder they are in (coupprof-out), or a `coupprof sweep` directory")


@dataclass
class LayerCosts:
    """Per (processor, layer): time_ms, transfer_ms and, where measured, energy_mj and
    dynamic_energy_mj; the idle baseline power per processor table where known."""

    # columns processor, level, layer, time_ms, transfer_ms[, energy...]; time_ms as the
    # table measured it (`lookup` prices it at the table's call factor)
    table: pd.DataFrame
    baseline_power_w: dict[str, float] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    # (processor, level) -> the fixed per-call cost of a fused table (ms, as measured);
    # absent: sliced
    fixed_ms: dict[tuple[str, int | None], float] = field(default_factory=dict)
    # (processor, level) -> the fixed row's energy per call (mJ), where measured
    fixed_energy_mj: dict[tuple[str, int | None], float] = field(default_factory=dict)
    # (processor, level) -> the clock while the table was measured, where it was read
    freq_traces: dict[tuple[str, int | None], FreqTrace] = field(default_factory=dict)
    # (processor, level) -> a fused table's whole model in its rounds: (ms, 95 % half-width)
    whole_ms: dict[tuple[str, int | None], tuple[float, float]] = field(default_factory=dict)
    # (processor, level) -> the factor a fused table's times and fixed row are priced at
    # (`profiler.measure.fused`, "Disturbed calls": mean over undisturbed calls; CPU tables)
    call_factor: dict[tuple[str, int | None], float] = field(default_factory=dict)
    # (processor, level) -> its fused rows fitted against the clock its rounds read
    # (`profiler.measure.clock_fit`), where that clock moved: `priced_at_clocks` uses it
    clock_fits: dict[tuple[str, int | None], ClockFit] = field(default_factory=dict)

    def fixed_for(self, letter: str, level: int | None) -> float:
        """The fixed per-call cost a call on `letter` pays once, at its table's call
        factor (0 for sliced tables)."""
        key = _level_key(self.fixed_ms, letter, level)
        return 0.0 if key is None else self.fixed_ms[key] * self.call_factor.get(key, 1.0)

    def fixed_energy_for(self, letter: str, level: int | None) -> float | None:
        return _by_level(self.fixed_energy_mj, letter, level)

    def resolution_note(self, letter: str, level: int | None) -> str | None:
        """A note when `letter`'s fused table knew its whole model no better than
        ``RESOLUTION_REL`` (its rounds' 95 % interval): no prediction from it is closer."""
        got = _by_level(self.whole_ms, letter, level)
        if got is None or got[0] <= 0 or got[1] <= RESOLUTION_REL * got[0]:
            return None
        ms, ci = got
        return (f"{letter}'s table knows its whole model only to +-{100 * ci / ms:.1f} % "
                f"({ms:.3f} +- {ci:.3f} ms in its rounds), so predictions from it are no "
                "closer than that (measure it longer: coupprof layers --budget-s)")

    def sum_note(self, letter: str, level: int | None) -> str | None:
        """A note where `letter`'s fused rows and fixed row miss its whole model in the
        same rounds (`misses_whole`; its table's caption warned too): a mapping priced
        from those rows is off by as much."""
        got = _by_level(self.whole_ms, letter, level)
        key = _level_key(self.fixed_ms, letter, level)
        if got is None or key is None or got[0] <= 0:
            return None
        t = self.table
        levels = t["level"].astype("Int64")
        mine = levels.isna() if key[1] is None else levels.eq(key[1]).fillna(False)
        rows = t[(t["processor"] == letter) & mine.astype(bool)]
        total = float(rows["time_ms"].sum()) + self.fixed_ms[key]
        ms, ci = got
        if not misses_whole(total, ms, ci):
            return None
        return (f"{letter}'s table's rows and fixed row add up to {total / ms:.3f} of its "
                f"whole model in the same rounds ({total:.3f} against {ms:.3f} ms): a "
                "mapping priced from its rows is off by as much (measure it again, or "
                "with --loaded-mb 0)")

    def freq_trace_for(self, letter: str, level: int | None) -> FreqTrace | None:
        """The clock `letter`'s table for ``level`` was measured at: that level's, else
        the one of the table `lookup` falls back to, as the prediction does."""
        return _by_level(self.freq_traces, letter, level)

    def fused(self, letter: str) -> bool:
        """Whether `letter`'s table is fused (has a fixed row)."""
        return any(p == letter for p, _ in self.fixed_ms)

    def lookup(self, letter: str, level: int | None, layer: int) -> pd.Series:
        t = self.table
        rows = t[(t["processor"] == letter) & (t["layer"] == layer)]
        if rows.empty:
            have = sorted(set(t["processor"]))
            raise BadInputError(
                f"no layer table has layer {layer} on processor {letter} (tables cover: "
                f"{', '.join(have) or 'nothing'})",
                f"measure it: coupprof layers --processor {letter} --csv ...; " + LAYER_FIX)
        levels = rows["level"].astype("Int64")
        exact = rows[levels.eq(level).fillna(False).astype(bool)] if level is not None \
            else rows[levels.isna()]
        row = (exact if not exact.empty else rows).iloc[0]
        # a fused table's layer is priced at its call factor, as its fixed row
        found = None if pd.isna(row["level"]) else int(row["level"])
        kappa = self.call_factor.get((letter, found), 1.0) \
            if (letter, found) in self.fixed_ms else 1.0
        if kappa != 1.0:
            row = row.copy()
            row["time_ms"] = float(row["time_ms"]) * kappa
        return row

    def has_energy(self) -> bool:
        return "energy_mj" in self.table.columns and self.table["energy_mj"].notna().any()


def _level_key(table: dict[tuple[str, int | None], T], letter: str,
               level: int | None) -> tuple[str, int | None] | None:
    """The key `letter` at `level` reads in `table`: that level's, else the first of
    `letter`'s; None when `table` has nothing for it."""
    if (letter, level) in table:
        return (letter, level)
    return next((k for k in table if k[0] == letter), None)


def _by_level(table: dict[tuple[str, int | None], T], letter: str,
              level: int | None) -> T | None:
    key = _level_key(table, letter, level)
    return None if key is None else table[key]


def priced_at_clocks(costs: LayerCosts, run: dict[str, FreqTrace | None],
                     level_of: Callable[[str], int | None],
                     said: str = "the clock this run measured",
                     ) -> tuple[LayerCosts, list[str]]:
    """``costs`` with each processor's rows priced at the clock its run measured (the
    harmonic mean of ``run[letter]``'s samples, at which the part that scales with 1 / f
    takes its mean time; else their median), where its table's rows were fitted against
    the clock (`LayerCosts.clock_fits`): a + b * f_ref / f per row and for the fixed
    row. The notes say at what clock each processor was priced and when that clock lies
    outside the range its table saw; a processor without a fit keeps its figures, with
    a note where it ran at another clock than its table (`clock_mismatch`).
    ``level_of``: the level a processor's table is looked up at; ``said``: what the
    notes call the clock."""
    table = costs.table.copy()
    fixed, whole = dict(costs.fixed_ms), dict(costs.whole_ms)
    notes: list[str] = []
    for letter, trace in run.items():
        level = level_of(letter)
        key = _level_key(costs.clock_fits, letter, level)
        fit = None if key is None else costs.clock_fits[key]
        if fit is None or not fit.identified or trace is None or trace.median_khz <= 0:
            note = clock_mismatch(letter, costs.freq_trace_for(letter, level), trace)
            if note:
                notes.append(note)
            continue
        assert key is not None
        f = trace.hmean_khz or trace.median_khz
        levels = table["level"].astype("Int64")
        mine = (table["processor"] == letter) & (levels.isna() if key[1] is None
                                                 else levels.eq(key[1]).fillna(False))
        per_layer = fit.layer_ms(f)
        layers = table.loc[mine, "layer"].astype(int).to_numpy()
        if layers.size and layers.max() >= per_layer.size:
            raise ValueError(f"{letter}'s clock fit has {per_layer.size} rows, its table more")
        table.loc[mine, "time_ms"] = per_layer[layers]
        fixed[key] = fit.fixed_ms(f)
        whole[key] = (fit.whole_ms(f), fit.whole_ci95_ms(f))
        how = " (harmonic mean of its samples)" if trace.hmean_khz else ""
        text = (f"{letter}: priced at {f / 1000:.0f} MHz, {said}{how}, from its table's rows "
                f"fitted against the clock (t = a + b * f_ref / f; {fit.range_text()} in its "
                "rounds)")
        out = fit.outside(f)
        if out > 0:
            text += (f"; that clock lies {100 * out:.0f} % outside the range, so the "
                     "prediction extrapolates")
        if costs.has_energy():
            text += "; energy as its table measured it, at its rounds' clocks"
        notes.append(text)
    return replace(costs, table=table, fixed_ms=fixed, whole_ms=whole), notes


@dataclass
class StagePrediction:
    index: int
    processor: str
    layers: tuple[int, ...]
    compute_ms: float  # its calls' fixed costs and read-backs plus the layers' times
    transfer_ms: float
    fixed_ms: float = 0.0  # sum over its calls
    calls: int = 1
    readout_ms: float = 0.0  # sum over its calls (included in compute_ms)
    process_ms: float = 0.0  # a stage in its own process: the hand-over to it and back

    @property
    def time_ms(self) -> float:
        return self.compute_ms + self.transfer_ms + self.process_ms


@dataclass
class Prediction:
    mode: str
    order: str
    latency_ms: float
    throughput_fps: float
    stages: list[StagePrediction]
    layer_ms: list[float]
    handover_ms: list[float]
    energy_mj: float | None = None
    energy_note: str = ""
    missing: list[str] = field(default_factory=list)
    method: Method = Method.FUSED
    calls: list[Call] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    call_ms: list[float] = field(default_factory=list)  # per call: fixed + layers + read-back
    # Pipeline mode: the queues the latency waits in, and the run it is the mean over
    queue_depth: int | None = None
    frames: int | None = None  # None: the steady state
    queue_wait_ms: float = 0.0  # of latency_ms, waiting in queues (latency - serial sum)

    @property
    def bottleneck(self) -> StagePrediction:
        return max(self.stages, key=lambda s: s.time_ms)

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "order": self.order, "method": self.method,
                "latency_ms": self.latency_ms, "queue_wait_ms": self.queue_wait_ms,
                "queue_depth": self.queue_depth, "latency_frames": self.frames,
                "throughput_fps": self.throughput_fps, "energy_mj": self.energy_mj,
                "energy_note": self.energy_note, "missing_transfers": self.missing,
                "notes": self.notes,
                "calls": [[c.first, c.last] for c in self.calls],
                "stages": [{"stage": s.index, "processor": s.processor,
                            "layers": [s.layers[0], s.layers[-1]], "compute_ms": s.compute_ms,
                            "fixed_ms": s.fixed_ms, "readout_ms": s.readout_ms,
                            "process_ms": s.process_ms,
                            "calls": s.calls,
                            "transfer_ms": s.transfer_ms, "time_ms": s.time_ms}
                           for s in self.stages]}


def _transfer(transfers: pd.DataFrame | None, b: int, src: str, dst: str) -> pd.Series | None:
    if transfers is None:
        return None
    rows = transfers[(transfers["boundary"] == b) & (transfers["src"] == src)
                     & (transfers["dst"] == dst)]
    return None if rows.empty else rows.iloc[0]


def predict(mapping: Mapping, mode: str, layers: LayerCosts,
            transfers: pd.DataFrame | None = None, freq: FreqPlan | None = None,
            method: Method = Method.FUSED, queue_depth: int = QUEUE_DEPTH,
            frames: int | None = None, process_ms: dict[int, float] | None = None
            ) -> Prediction:
    """Latency, throughput and energy of `mapping` in `mode`, executed by `method`'s
    calls (see docs/mapping.md). Pipeline latency waits in queues of `queue_depth`
    frames: the mean over a run of `frames` that starts empty (None: the steady state).
    `process_ms`: per stage that runs in a process of its own, the hand-over of a frame
    to that process and back, added to the stage's time (`coupprof run` measures it over
    its warm-up frames)."""
    if mode not in ("switch", "pipeline"):
        raise BadInputError(f"--mode {mode!r} is not switch or pipeline")
    run_calls = calls(mapping, freq, method)
    starts = {c.first for c in run_calls}
    order = mapping.order
    t_ms: list[float] = []
    h_ms: list[float] = []
    e_mj: list[float | None] = []
    dyn_mj: list[float | None] = []
    te_mj: list[float | None] = []  # energy of the hand-over into layer i, when known
    missing: list[str] = []
    for i, p in enumerate(order):
        level = freq.level[i] if freq is not None else None
        row = layers.lookup(p, level, i)
        t_ms.append(float(row["time_ms"]))
        e_mj.append(_num(row.get("energy_mj")))
        dyn_mj.append(_num(row.get("dynamic_energy_mj")))
        if i == 0:
            h_ms.append(float(row["transfer_ms"]))
            te_mj.append(None)
            continue
        if i not in starts:  # inside a fused call: no hand-over
            h_ms.append(0.0)
            te_mj.append(None)
            continue
        tr = _transfer(transfers, i - 1, order[i - 1], p)
        if tr is not None:
            h_ms.append(float(tr["time_ms_mean"]))
            te_mj.append(_num(tr.get("energy_mj")))
        elif order[i - 1] == p:
            h_ms.append(float(row["transfer_ms"]))
            te_mj.append(None)
        else:
            missing.append(f"{i - 1}:{order[i - 1]}->{p}")
            h_ms.append(0.0)
            te_mj.append(None)
    fixed_c, readout_c, fixed_e = [], [], []
    for c in run_calls:
        level = freq.level[c.first] if freq is not None else None
        fixed_c.append(layers.fixed_for(c.processor, level))
        fixed_e.append(layers.fixed_energy_for(c.processor, level))
        nxt = order[c.last + 1] if c.last + 1 < len(order) else None
        tr = _transfer(transfers, c.last, c.processor, nxt) if nxt is not None else None
        # Sliced layer times already hold their sub-model's full read-back.
        fused_table = layers.fused(c.processor)
        # a read-back costs at least nothing (a negative figure is noise below resolution)
        readout_c.append(max(_num(tr.get("readout_ms")) or 0.0, 0.0)
                         if tr is not None and fused_table else 0.0)
    stages = []
    for st in mapping.stages:
        mine = [c.index for c in run_calls if c.stage == st.index]
        fixed = sum(fixed_c[k] for k in mine)
        readout = sum(readout_c[k] for k in mine)
        stages.append(StagePrediction(st.index, st.processor, st.layers,
                                      fixed + readout + sum(t_ms[i] for i in st.layers),
                                      sum(h_ms[i] for i in st.layers), fixed, len(mine),
                                      readout, (process_ms or {}).get(st.index, 0.0)))
    serial_ms = sum(t_ms) + sum(h_ms) + sum(fixed_c) + sum(readout_c) \
        + sum(s.process_ms for s in stages)
    if mode == "switch":
        latency, fps = serial_ms, 1000.0 / serial_ms if serial_ms > 0 else math.inf
    else:
        slowest = max(s.time_ms for s in stages)
        latency = pipeline_latency_ms([s.time_ms for s in stages], queue_depth, frames)
        fps = 1000.0 / slowest if slowest > 0 else math.inf
    extra_ms = [f + r for f, r in zip(fixed_c, readout_c, strict=True)]
    extra_mj = [None if e is None else e + 0.0 for e in fixed_e]
    energy, note = _energy(mode, order, e_mj, dyn_mj, te_mj, t_ms, h_ms, fps, layers,
                           extra_ms, extra_mj, readout_c)
    def level_of(letter: str) -> int | None:
        return freq.level[order.index(letter)] if freq is not None else None

    notes = [n for p in mapping.processors
             for n in (layers.sum_note(p, level_of(p)), layers.resolution_note(p, level_of(p)))
             if n]
    for p in mapping.processors:
        kappa = _by_level(layers.call_factor, p, level_of(p))
        if kappa is not None and kappa >= 1.005:
            notes.append(f"{p}: its calls priced x{kappa:.3f}, the mean of its whole model's "
                         "calls back to back over their undisturbed time (its table's; "
                         "the layers' figures are undisturbed)")
    if method == Method.FUSED:
        sliced_only = [p for p in mapping.processors if not layers.fused(p)]
        if sliced_only and len(mapping.order) > len(run_calls):
            notes.append(f"{', '.join(sliced_only)}: sliced tables, so each fused call is "
                         "priced at a per-call cost per layer; to price it as `run` calls "
                         "it, measure again with " + "; ".join(
                             f"`coupprof layers -p {p} --method fused`" for p in sliced_only))
    call_ms = [x + sum(t_ms[i] for i in c.layers)
               for c, x in zip(run_calls, extra_ms, strict=True)]
    pipeline = mode == "pipeline"
    return Prediction(mode, order, latency, fps, stages, t_ms, h_ms, energy, note, missing,
                      method, run_calls, notes, call_ms,
                      queue_depth=queue_depth if pipeline else None,
                      frames=frames if pipeline else None,
                      queue_wait_ms=max(latency - serial_ms, 0.0) if pipeline else 0.0)


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _energy(mode: str, order: str, e: list[float | None], dyn: list[float | None],
            te: list[float | None], t_ms: list[float], h_ms: list[float], fps: float,
            layers: LayerCosts, extra_ms: list[float], extra_mj: list[float | None],
            readout_ms: list[float]) -> tuple[float | None, str]:
    if any(v is None for v in e):
        return None, "no energy in the layer tables"
    changes = [i for i in range(1, len(order)) if order[i] != order[i - 1]]
    no_te = [i for i in changes if te[i] is None]
    note = "" if not no_te else f"transfer energy unknown at {len(no_te)} processor change(s)"
    base = [layers.baseline_power_w.get(p) for p in dict.fromkeys(order)]
    p_idle = None if any(b is None for b in base) else \
        float(np.mean([b for b in base if b is not None]))
    # Board energy of each hand-over: measured, else the idle baseline over its time.
    handover_e = [v if v is not None else (p_idle * h if p_idle is not None else 0.0)
                  for v, h in zip(te, h_ms, strict=True)]
    # Each call's fixed cost (its measured energy, else the baseline over its time) and
    # read-back at a cut (the baseline over its time).
    call_e = [(fe if fe is not None else (p_idle * (x - r) if p_idle is not None else 0.0))
              + (p_idle * r if p_idle is not None else 0.0)
              for fe, x, r in zip(extra_mj, extra_ms, readout_ms, strict=True)]
    total = sum(v for v in e if v is not None) + sum(handover_e) + sum(call_e)
    if mode == "switch":
        return total, note
    if any(v is None for v in dyn) or p_idle is None:
        return total, "upper bound: sum of layer energies (no idle baseline to overlap stages)"
    dyn_transfer = sum(v - p_idle * h for v, h in zip(handover_e, h_ms, strict=True))
    dyn_calls = sum(v - p_idle * x for v, x in zip(call_e, extra_ms, strict=True))
    period_ms = 1000.0 / fps
    return (sum(v for v in dyn if v is not None) + dyn_transfer + dyn_calls
            + p_idle * period_ms), note


# --------------------------------------------------------------------------------
# Inputs: saved tables, or measuring them
# --------------------------------------------------------------------------------

def read_layer_tables(paths: Sequence[str | Path], *, processors: Sequence[str] | None = None,
                      model: str | None = None,
                      note: Callable[[str], None] | None = None) -> LayerCosts:
    """Layer tables written by `coupprof layers` (CSV + JSON sidecar), `coupprof sweep`
    directories (every processor and level they hold), or CSVs with a `processor` column
    (one row per processor and layer).

    A folder that is not a sweep's (`coupprof layers`' coupprof-out/) gives its tables
    of ``processors`` (None: all) for ``model`` (`profiler.mapping.table_folder`), and
    ``note`` is told in one line which files were taken."""
    from profiler.mapping.table_folder import choose_tables
    from profiler.measure.tables import read_tables

    frames: list[pd.DataFrame] = []
    base: dict[str, float] = {}
    shas: dict[str, str] = {}
    fixed: dict[tuple[str, int | None], float] = {}
    fixed_e: dict[tuple[str, int | None], float] = {}
    traces: dict[tuple[str, int | None], FreqTrace] = {}
    whole: dict[tuple[str, int | None], tuple[float, float]] = {}
    factors: dict[tuple[str, int | None], float] = {}
    clock_fits: dict[tuple[str, int | None], ClockFit] = {}
    used: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir() and not _is_sweep(p):
            choice = choose_tables(p, processors, model)
            if note is not None:
                note(choice.describe())
            used += choice.paths
        else:
            used.append(p)
    for p in used:
        if _is_sweep(p):
            sw = _sweep_part(p)
            fixed.update(sw.fixed_ms)
            fixed_e.update(sw.fixed_energy_mj)
            traces.update(sw.freq_traces)
            whole.update(sw.whole_ms)
            factors.update(sw.call_factor)
            base.update(sw.baseline_power_w)
            frames.append(sw.rows)
            continue
        if not p.is_file():
            raise BadInputError(f"layer table not found: {p}", LAYER_FIX)
        if p.with_suffix(".json").is_file() and not _multi_row_sidecar(p.with_suffix(".json")):
            rt = read_tables(p)
            df = rt.layers
            letter = str(rt.info.get("processor", "")).upper()
            if not letter:
                raise BadInputError(f"{p}: its sidecar names no processor", LAYER_FIX)
            fused = "fixed_ms" in rt.totals  # time_ms_mean: the layer inside one call
            level = rt.info.get("freq_level")
            key = (letter, None if level is None else int(level))
            trace = (rt.info.get("extra") or {}).get("freq_trace")
            if trace:
                traces[key] = FreqTrace.from_dict(trace)
            if isinstance(rt.info.get("clock_fit"), dict):
                clock_fits[key] = ClockFit.from_info(rt.info["clock_fit"])
            part = pd.DataFrame({"processor": letter, "level": rt.info.get("freq_level"),
                                 "layer": df["layer"].astype(int),
                                 "time_ms": df["time_ms_mean"],
                                 "transfer_ms": df.get("transfer_ms_mean", 0.0)})
            if fused:
                fixed[key] = float(rt.totals["fixed_ms"])
                if "call_factor" in rt.totals:
                    factors[key] = float(rt.totals["call_factor"])
                if "fixed_energy_mj" in rt.totals:
                    fixed_e[key] = float(rt.totals["fixed_energy_mj"])
                if "whole_ms_ci95" in rt.totals:
                    whole[key] = (float(rt.totals["whole_ms"]), float(rt.totals["whole_ms_ci95"]))
            for col in ("energy_mj", "dynamic_energy_mj", *SIZE_COLUMNS):
                if col in df.columns:
                    part[col] = df[col].to_numpy()
            if "baseline_power_w" in rt.totals:
                base[letter] = float(rt.totals["baseline_power_w"])
            sha = str(rt.info.get("model_sha256", ""))
            if sha:
                shas[str(p)] = sha
        else:
            try:
                df = pd.read_csv(p)
            except (ValueError, OSError) as err:
                raise BadInputError(f"cannot read layer table {p}: {err}", LAYER_FIX) from None
            from profiler.measure.tables import upgrade_v1_columns

            df = upgrade_v1_columns(df)  # a coupprof-layers/1 fused table without its sidecar
            if "kind" in df.columns:  # a layers CSV's fixed and frame rows aside
                df = df[df["kind"] == "layer"]
            need = {"processor", "layer", "time_ms_mean"}
            if not need <= set(df.columns):
                raise BadInputError(f"{p} has no sidecar and lacks columns "
                                    f"{', '.join(sorted(need - set(df.columns)))}", LAYER_FIX)
            level_col = next((c for c in ("level", "freq_level") if c in df.columns), None)
            part = pd.DataFrame({"processor": df["processor"].astype(str).str.upper(),
                                 "level": df[level_col] if level_col else None,
                                 "layer": df["layer"].astype(int), "time_ms": df["time_ms_mean"],
                                 # blank: the table has no hand-over time (imported ones)
                                 "transfer_ms": df["transfer_ms_mean"].fillna(0.0)
                                 if "transfer_ms_mean" in df.columns else 0.0})
            for col in ("energy_mj", "dynamic_energy_mj", *SIZE_COLUMNS):
                if col in df.columns:
                    part[col] = df[col]
        frames.append(part)
    if not frames:
        raise BadInputError("no layer tables given", LAYER_FIX)
    if len(set(shas.values())) > 1:
        listing = ", ".join(f"{k} ({v[:12]})" for k, v in shas.items())
        raise BadInputError(f"the layer tables come from different models: {listing}",
                            "measure every processor on the same model")
    table = pd.concat(frames, ignore_index=True)
    table["level"] = table["level"].astype("Int64")
    return LayerCosts(table, base, [str(p) for p in used], fixed, fixed_e, traces, whole,
                      factors, clock_fits)


def _is_sweep(p: Path) -> bool:
    """A `coupprof sweep` directory, or its sweep.csv (told by its sidecar's format)."""
    from profiler.sweep.schema import CSV_NAME, OLD_SWEEP_FORMAT, SWEEP_FORMAT

    sidecar = (p / CSV_NAME if p.is_dir() else p).with_suffix(".json")
    if not sidecar.is_file():
        return p.is_dir() and (p / CSV_NAME).is_file()
    return _sidecar_format(sidecar) in (SWEEP_FORMAT, OLD_SWEEP_FORMAT)


@dataclass
class _SweepPart:
    """What predict takes from a sweep directory."""

    rows: pd.DataFrame
    fixed_ms: dict[tuple[str, int | None], float]
    fixed_energy_mj: dict[tuple[str, int | None], float]
    baseline_power_w: dict[str, float]
    freq_traces: dict[tuple[str, int | None], FreqTrace]
    whole_ms: dict[tuple[str, int | None], tuple[float, float]]
    call_factor: dict[tuple[str, int | None], float]


def _sweep_part(p: Path) -> _SweepPart:
    """A sweep's layer rows at every (processor, level) it measured, as predict's table
    rows: fused times (and each fused pair's fixed row) where the pair is fused."""
    from profiler.sweep.schema import read_sweep

    data = read_sweep(p)
    df = data.layer_rows(str(p), LAYER_FIX)
    if "host_level" in df.columns:
        hosts = df.groupby(["processor", "freq_level"])["host_level"].nunique()
        if (hosts > 1).any():
            letter, level = hosts[hosts > 1].index[0]
            raise BadInputError(f"{p}: processor {letter} at level {level} was measured at "
                                "several host levels, and predict takes one",
                                "sweep it at one --host-freq, or use coupprof explore")
    fixed = data.fixed_ms()
    level = df["freq_level"].astype("Int64")
    # time_ms_mean: a fused pair's layer inside one call, a sliced pair's own
    part = pd.DataFrame({"processor": df["processor"].astype(str).str.upper(), "level": level,
                         "layer": df["layer"].astype(int),
                         "time_ms": df["time_ms_mean"],
                         "transfer_ms": df["transfer_ms_mean"].fillna(0.0)
                         if "transfer_ms_mean" in df.columns else 0.0})
    for col in ("energy_mj", "dynamic_energy_mj"):
        if col in df.columns:
            part[col] = df[col].to_numpy()
    base: dict[str, list[float]] = {}
    for (letter, _), w in data.baseline_power_w().items():
        base.setdefault(letter, []).append(w)
    ci = data.whole_ms_ci95()
    return _SweepPart(part.reset_index(drop=True), fixed, data.fixed_energy_mj(),
                      {k: float(np.mean(v)) for k, v in base.items()}, data.freq_traces(),
                      {k: (ms, ci[k]) for k, ms in data.whole_ms().items() if k in ci},
                      data.call_factor())


def _multi_row_sidecar(json_path: Path) -> bool:
    """A sidecar of a table with a processor column and many levels (`coupprof import`'s),
    read as a plain CSV rather than as one `coupprof layers` run."""
    return _sidecar_format(json_path).startswith("coupprof-import/")


def _sidecar_format(json_path: Path) -> str:
    """A JSON sidecar's ``format`` ("" when it cannot be read or names none)."""
    import json

    try:
        return str(json.loads(json_path.read_text()).get("format", ""))
    except (OSError, ValueError, AttributeError):
        return ""


class LevelRequests(LayerHooks):
    """Around each of ``letter``'s layers when a mapping's tables are measured: the
    mapping's per-layer DVFS requests and the simulated board's activity (the power
    marker's hooks run inside these, nearest the invoke)."""

    def __init__(self, letter: str, mapping: Mapping, freq: FreqPlan | None,
                 govs: dict[str, Governor], act: Activity) -> None:
        self.letter = letter
        self.act = act
        self.requests: list[tuple[Governor, int] | None] = []
        for pos in range(mapping.n_layers):
            khz = freq.khz[pos] if freq is not None and freq.mode == "per-layer" else None
            gov = govs.get(freq.domain[pos]) if khz is not None and freq else None
            mine = mapping.order[pos] == letter
            self.requests.append((gov, khz) if gov is not None and khz is not None
                                 and mine else None)

    def before_layer(self, layer: int) -> None:
        req = self.requests[layer]
        if req is not None:
            req[0].request_khz(req[1])
        self.act.busy(self.letter)

    def after_layer(self, layer: int) -> None:
        self.act.idle(self.letter)


def measure_costs(
    sliced: SlicedModel,
    board: Board,
    mapping: Mapping,
    *,
    freq: FreqPlan | None = None,
    governors: dict[str, Governor] | None = None,
    frames: int = 20,
    warmup: int = 3,
    make: Callable[[Board, str], Executor] | None = None,
    power: PowerSession | None = None,
    activity: Activity | None = None,
    seed: int = 0,
    model_name: str = "model",
    method: Method = Method.SLICED,
    model_bytes: bytes | None = None,
    fused: FusedSettings | None = None,
    clock: dict[str, FreqSampler] | None = None,
) -> tuple[LayerCosts, pd.DataFrame]:
    """Layer and transfer tables for what `mapping` needs, measured as `coupprof layers`
    and `coupprof transfer-matrix` would: the whole model chained on each processor the
    mapping uses (layer by layer, so caches are as cold as in the real run), with the
    mapping's per-layer levels requested before its layers; then the hand-over at every
    boundary where the mapping's calls meet (`profiler.mapping.spec.calls`).

    With ``method="fused"`` (``model_bytes`` given; ``fused``: `FusedSettings`) each
    processor's layers are then measured by the fused method as well (`coupprof layers
    --method fused`), the table holds their fused times and each processor's fixed
    per-call cost, and the hand-overs are measured as `coupprof transfer-matrix --method
    fused` does (with the producer's extra read-back at a cut). Fused rounds run at the
    levels set before (per-processor SPECs); per-layer levels apply to the sliced frames.

    ``clock``: letter -> a sampler of its clock (`profiler.measure.freq_trace`), run while the
    figures its table keeps are measured (the fused rounds, or the sliced frames); the
    tables' ``freq_traces`` hold what each read.

    Energy: with a streaming source, the marker is high around each layer's invoke and
    each layer's energy is attributed over those windows (as `coupprof layers`), with
    the dynamic energy and the idle baseline, which the Pipeline prediction needs;
    with a counter source, each layer's power is that of its repeat window and its energy
    that power times its time in the frames (as `coupprof layers`). The layers of each
    processor are measured by `profiler.measure.layers.ProcessorLayers`."""
    build = make or (lambda bd, letter: make_executor(bd, letter))
    govs = governors or {}
    act = activity or NoActivity()
    if method == Method.FUSED and model_bytes is None:
        raise ValueError("the fused method needs the model's bytes")
    model = ModelUnderTest(sliced, model_bytes, model_name, model_name)
    settings = LayerSettings(frames=frames, warmup=warmup, seed=seed,
                             fused=(fused or FusedSettings()) if method == Method.FUSED else None)

    def power_failed(err: ProfilerError) -> None:
        raise err

    baselines: dict[str, float] = {}
    fixed: dict[tuple[str, int | None], float] = {}
    fixed_e: dict[tuple[str, int | None], float] = {}
    samplers = clock or {}
    whole: dict[tuple[str, int | None], tuple[float, float]] = {}
    factors: dict[tuple[str, int | None], float] = {}
    traces: dict[tuple[str, int | None], FreqTrace] = {}
    clock_fits: dict[tuple[str, int | None], ClockFit] = {}

    def profile(ex: Executor, letter: str) -> list[dict[str, Any]]:
        sampler = samplers.get(letter)
        with ProcessorLayers(board, letter, model, settings, executor=ex, hooks=LevelRequests(letter, mapping, freq, govs, act),
                             freq_reader=sampler.reader if sampler is not None else None,
                             env={}) as layers:
            m = layers.measure(power=power, on_power_error=power_failed)
            subs = [getattr(interp, "sub", None) for interp in layers.runner.interpreters]
        return table_rows(m, letter, subs)

    def table_rows(m: LayerMeasurement, letter: str, subs: list[SubModel | None]
                   ) -> list[dict[str, Any]]:
        first = mapping.order.index(letter)
        key = (letter, freq.level[first] if freq is not None else None)
        if m.freq_trace is not None:
            traces[key] = m.freq_trace
        if m.clock_fit is not None:
            clock_fits[key] = m.clock_fit
        att = m.power.attribution if m.power is not None else None
        if att is not None:
            baselines[letter] = float(att.baseline_power_w)
        fz = None
        if m.fused is not None:
            fixed[key] = m.fused.fixed.time_ms
            whole[key] = (m.fused.whole.time_ms, m.fused.whole.ci95_ms)
            if m.fused.call_factor is not None:
                factors[key] = m.fused.call_factor
            if m.fused_energy is not None:
                fixed_e[key] = m.fused_energy.fixed_energy_mj
            fz = m.fused.times_ms()
        timings = m.run.timings
        # the layers' power and dynamic energy are taken over the time predict prices
        # them at (`LayerCosts.lookup`: at the call factor)
        kappa = factors.get(key, 1.0)
        rows = []
        for pos in (i for i, p in enumerate(mapping.order) if p == letter):
            sub = subs[pos]
            sliced_ms = float(timings.time_ns[:, pos].mean()) / 1e6
            t_ms = sliced_ms if fz is None else float(fz[pos])
            row: dict[str, Any] = {
                "processor": letter, "level": freq.level[pos] if freq is not None else None,
                "layer": pos, "time_ms": t_ms, "time_ms_sliced": sliced_ms,
                "transfer_ms": float(timings.transfer_ns[:, pos].mean()) / 1e6,
                "fallback": sub.fallback if sub is not None else None}
            if m.fused_energy is not None:  # fused: the prefix energies' difference
                e = float(m.fused_energy.layer_energy_mj[pos])
                t_priced = t_ms * kappa
                row["energy_mj"] = e
                row["power_w"] = e / t_priced if t_priced > 0 else float("nan")
                if att is not None:
                    row["dynamic_energy_mj"] = e - float(att.baseline_power_w) * t_priced
            elif att is not None:
                # mean power over the marked window, which is a little longer than the
                # invoke (time_ms) and, on a busy host, may hold a preemption
                lw = att.layers[pos]
                row["power_w"] = lw.power_w
                row["energy_mj"] = lw.energy_mj
                row["dynamic_energy_mj"] = lw.dynamic_energy_mj
            elif m.power is not None and "energy_mj" in m.power.columns:
                row["energy_mj"] = float(m.power.columns["energy_mj"][pos])
            rows.append(row)
        return rows

    rows: list[dict[str, Any]] = []
    for letter in mapping.processors:
        def opened(letter: str = letter) -> Executor:
            return build(board, letter)

        def measured(ex: Executor, letter: str = letter) -> list[dict[str, Any]]:
            return profile(ex, letter)

        with ProcessorWorker(opened, name=letter) as w:
            rows += w.call(measured)
    table = pd.DataFrame(rows)
    table["level"] = table["level"].astype("Int64")
    transfers = mapping_transfers(sliced, board, mapping, freq=freq, frames=frames,
                                  warmup=warmup, make=make, power=power, activity=activity,
                                  seed=seed, model_name=model_name, method=method,
                                  model_bytes=model_bytes, fused=fused)
    return (LayerCosts(table, baselines, [f"measured by coupprof run ({method})"], fixed,
                       fixed_e, traces, whole, factors, clock_fits), transfers)


def handover_points(mapping: Mapping, freq: FreqPlan | None = None,
                    method: Method = Method.FUSED) -> list[tuple[int, str, str]]:
    """(boundary, src, dst) where `method`'s calls of `mapping` meet: where a run hands over."""
    return [(c.last, c.processor, mapping.order[c.last + 1])
            for c in calls(mapping, freq, method) if c.last + 1 < mapping.n_layers]


def mapping_transfers(sliced: SlicedModel, board: Board, mapping: Mapping, *,
                      freq: FreqPlan | None = None, frames: int = 20, warmup: int = 3,
                      make: Callable[[Board, str], Executor] | None = None,
                      power: PowerSession | None = None, activity: Activity | None = None,
                      seed: int = 0, model_name: str = "model", method: Method = Method.SLICED,
                      model_bytes: bytes | None = None, fused: FusedSettings | None = None
                      ) -> pd.DataFrame:
    """The transfer table at the mapping's hand-over points (`handover_points`), measured as
    `coupprof transfer-matrix --method METHOD` does; empty when the run hands nothing over."""
    needed = handover_points(mapping, freq, method)
    if not needed:
        return pd.DataFrame(columns=["boundary", "src", "dst", "time_ms_mean"])
    build = make or (lambda bd, letter: make_executor(bd, letter))
    matrix = measure_transfer_matrix(sliced, board, mapping.processors, reps=frames,
                                     warmup=warmup, only=needed, make=build, power=power,
                                     activity=activity, seed=seed, model_name=model_name,
                                     method=method, model_bytes=model_bytes, fused=fused)
    return matrix.table()


# --------------------------------------------------------------------------------
# Measured against predicted
# --------------------------------------------------------------------------------

def compare(pred: Prediction, run: MappedRun) -> pd.DataFrame:
    """Rows of metric, predicted, measured, error_pct (`profiler.mapping.accuracy`:
    (predicted - measured) / measured, positive when the prediction is too high)."""
    rows: list[tuple[str, float, float | None]] = [
        ("latency_ms", pred.latency_ms, float(run.latency_ns.mean()) / 1e6),
        ("throughput_fps", pred.throughput_fps, float(run.throughput_fps)),
    ]
    busy = run.stage_busy_ns.mean(axis=0) / 1e6
    for st in pred.stages:
        rows.append((f"stage {st.index} ({st.processor}) ms", st.time_ms, float(busy[st.index])))
    if pred.energy_mj is not None or run.energy_mj is not None:
        rows.append(("energy_mj", pred.energy_mj if pred.energy_mj is not None else math.nan,
                     run.energy_mj))
    df = pd.DataFrame(rows, columns=["metric", "predicted", "measured"])
    df["measured"] = df["measured"].astype(float)
    df["error_pct"] = [error_pct(p, m) for p, m in zip(df["predicted"], df["measured"],
                                                       strict=True)]
    return df
