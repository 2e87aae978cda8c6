"""Predict a mapping's latency, throughput and energy from layer and transfer tables.

Costs (all per frame, ms unless named otherwise), for layer ``i`` on processor ``P_i``:

    t_i   the layer's time on P_i                 (layer table: time_ms_mean)
    h_i   the hand-over into layer i:
          i = 0:              feeding the model input into it (layer table: transfer_ms_mean)
          P_{i-1} != P_i:     transfer(i - 1, P_{i-1}, P_i)        (transfer table)
          P_{i-1} == P_i:     transfer(i - 1, P_i, P_i) if the transfer table has it,
                              else the layer table's transfer_ms_mean for layer i

With layer tables measured by the fused method (`coupprof layers --method fused`,
columns time_ms_fused), t_i is the layer's fused time (inside one uninterrupted run)
and a stage runs as one call: it pays its processor's fixed per-call cost F_P (the
table's fixed row) once, so stage k's compute is F_{P_k} + sum of its t_i. With sliced
tables F = 0: each t_i already holds its sub-model's own per-call cost.

**Switch mode** (one frame at a time): latency = sum_k F_k + sum_i (t_i + h_i);
throughput = 1000 / latency.

**Pipeline mode** (AutoDiCE's model): stage k's time S_k = sum over its layers of
(t_i + h_i), so the hand-over into a stage is charged to the stage that receives it;
throughput = 1000 / max_k S_k (the slowest stage sets the pace); latency without
queueing = sum_k S_k.

**Energy per frame**: Switch: sum_i e_i + sum_i E(h_i), where e_i is the layer table's
energy_mj (board energy during the layer) and E(h_i) the board energy of the hand-over
into layer i: the transfer table's energy_mj where it has the row (every boundary a
`coupprof transfer-matrix` or `coupprof run` measured, same-processor ones included),
else the idle baseline times h_i when a baseline is known (0 otherwise; at a processor
change this is noted). Pipeline: stages overlap, so summing board energies would count
the idle power once per stage; with dynamic energies and the idle baseline known,
E = sum_i dyn_i + sum_i (E(h_i) - P_idle * h_i) + P_idle * (1000 / throughput);
otherwise the Switch sum is given and flagged as an upper bound.

A missing transfer at a processor change counts as 0 and is listed in ``missing``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler.boards.model import Board
from profiler.errors import BadInputError
from profiler.executors.base import Executor
from profiler.executors.factory import make_executor
from profiler.executors.worker import ProcessorWorker
from profiler.mapping import FreqPlan, Mapping
from profiler.power.session import MarkerHooks, PowerSession, StreamCapture
from profiler.transfer import Activity, NoActivity, measure_transfer_matrix

LAYER_FIX = "pass the CSVs written by `coupprof layers` (one per processor), with their .json"


@dataclass
class LayerCosts:
    """Per (processor, layer): time_ms, transfer_ms and, where measured, energy_mj and
    dynamic_energy_mj; the idle baseline power per processor table where known."""

    table: pd.DataFrame  # columns processor, level, layer, time_ms, transfer_ms[, energy...]
    baseline_power_w: dict[str, float] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    # (processor, level) -> the fixed per-call cost of a fused table (ms); absent: sliced
    fixed_ms: dict[tuple[str, int | None], float] = field(default_factory=dict)

    def fixed_for(self, letter: str, level: int | None) -> float:
        """The fixed per-call cost a stage on `letter` pays once (0 for sliced tables)."""
        if (letter, level) in self.fixed_ms:
            return self.fixed_ms[(letter, level)]
        same = [v for (p, _), v in self.fixed_ms.items() if p == letter]
        return same[0] if same else 0.0

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
        return (exact if not exact.empty else rows).iloc[0]

    def has_energy(self) -> bool:
        return "energy_mj" in self.table.columns and self.table["energy_mj"].notna().any()


@dataclass
class StagePrediction:
    index: int
    processor: str
    layers: tuple[int, ...]
    compute_ms: float  # the fixed per-call cost (fused tables) plus the layers' times
    transfer_ms: float
    fixed_ms: float = 0.0

    @property
    def time_ms(self) -> float:
        return self.compute_ms + self.transfer_ms


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

    @property
    def bottleneck(self) -> StagePrediction:
        return max(self.stages, key=lambda s: s.time_ms)

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "order": self.order, "latency_ms": self.latency_ms,
                "throughput_fps": self.throughput_fps, "energy_mj": self.energy_mj,
                "energy_note": self.energy_note, "missing_transfers": self.missing,
                "stages": [{"stage": s.index, "processor": s.processor,
                            "layers": [s.layers[0], s.layers[-1]], "compute_ms": s.compute_ms,
                            "fixed_ms": s.fixed_ms,
                            "transfer_ms": s.transfer_ms, "time_ms": s.time_ms}
                           for s in self.stages]}


def _transfer(transfers: pd.DataFrame | None, b: int, src: str, dst: str) -> pd.Series | None:
    if transfers is None:
        return None
    rows = transfers[(transfers["boundary"] == b) & (transfers["src"] == src)
                     & (transfers["dst"] == dst)]
    return None if rows.empty else rows.iloc[0]


def predict(mapping: Mapping, mode: str, layers: LayerCosts,
            transfers: pd.DataFrame | None = None, freq: FreqPlan | None = None) -> Prediction:
    """Latency, throughput and energy of `mapping` in `mode` (see the module docstring)."""
    if mode not in ("switch", "pipeline"):
        raise BadInputError(f"--mode {mode!r} is not switch or pipeline")
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
    stages = []
    for st in mapping.stages:
        fixed = layers.fixed_for(st.processor, freq.level[st.layers[0]] if freq else None)
        stages.append(StagePrediction(st.index, st.processor, st.layers,
                                      fixed + sum(t_ms[i] for i in st.layers),
                                      sum(h_ms[i] for i in st.layers), fixed))
    serial_ms = sum(t_ms) + sum(h_ms) + sum(s.fixed_ms for s in stages)
    if mode == "switch":
        latency, fps = serial_ms, 1000.0 / serial_ms if serial_ms > 0 else math.inf
    else:
        slowest = max(s.time_ms for s in stages)
        latency, fps = serial_ms, 1000.0 / slowest if slowest > 0 else math.inf
    energy, note = _energy(mode, order, e_mj, dyn_mj, te_mj, t_ms, h_ms, fps, layers)
    return Prediction(mode, order, latency, fps, stages, t_ms, h_ms, energy, note, missing)


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _energy(mode: str, order: str, e: list[float | None], dyn: list[float | None],
            te: list[float | None], t_ms: list[float], h_ms: list[float], fps: float,
            layers: LayerCosts) -> tuple[float | None, str]:
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
    total = sum(v for v in e if v is not None) + sum(handover_e)
    if mode == "switch":
        return total, note
    if any(v is None for v in dyn) or p_idle is None:
        return total, "upper bound: sum of layer energies (no idle baseline to overlap stages)"
    dyn_transfer = sum(v - p_idle * h for v, h in zip(handover_e, h_ms, strict=True))
    period_ms = 1000.0 / fps
    return sum(v for v in dyn if v is not None) + dyn_transfer + p_idle * period_ms, note


# --------------------------------------------------------------------------------
# Inputs: saved tables, or measuring them
# --------------------------------------------------------------------------------

def read_layer_tables(paths: Sequence[str | Path]) -> LayerCosts:
    """Layer tables written by `coupprof layers` (CSV + JSON sidecar), or CSVs with a
    `processor` column (one row per processor and layer)."""
    from profiler.tables import read_tables

    frames: list[pd.DataFrame] = []
    base: dict[str, float] = {}
    shas: dict[str, str] = {}
    fixed: dict[tuple[str, int | None], float] = {}
    for raw in paths:
        p = Path(raw)
        if not p.is_file():
            raise BadInputError(f"layer table not found: {p}", LAYER_FIX)
        if p.with_suffix(".json").is_file() and not _multi_row_sidecar(p.with_suffix(".json")):
            rt = read_tables(p)
            df = rt.layers
            letter = str(rt.info.get("processor", "")).upper()
            if not letter:
                raise BadInputError(f"{p}: its sidecar names no processor", LAYER_FIX)
            fused = "time_ms_fused" in df.columns and "fixed_ms" in rt.totals
            part = pd.DataFrame({"processor": letter, "level": rt.info.get("freq_level"),
                                 "layer": df["layer"].astype(int),
                                 "time_ms": df["time_ms_fused" if fused else "time_ms_mean"],
                                 "transfer_ms": df.get("transfer_ms_mean", 0.0)})
            if fused:
                level = rt.info.get("freq_level")
                fixed[(letter, None if level is None else int(level))] = float(
                    rt.totals["fixed_ms"])
            for col in ("energy_mj", "dynamic_energy_mj"):
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
            for col in ("energy_mj", "dynamic_energy_mj"):
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
    return LayerCosts(table, base, [str(p) for p in paths], fixed)


def _multi_row_sidecar(json_path: Path) -> bool:
    """A sidecar of a table with a processor column and many levels (`coupprof import`'s),
    read as a plain CSV rather than as one `coupprof layers` run."""
    import json

    try:
        fmt = json.loads(json_path.read_text()).get("format", "")
    except (OSError, ValueError, AttributeError):
        return False
    return str(fmt).startswith("coupprof-import/")


def measure_costs(
    sliced: Any,
    board: Board,
    mapping: Mapping,
    *,
    freq: FreqPlan | None = None,
    governors: dict[str, Any] | None = None,
    frames: int = 20,
    warmup: int = 3,
    make: Callable[[Board, str], Executor] | None = None,
    power: PowerSession | None = None,
    activity: Activity | None = None,
    seed: int = 0,
    model_name: str = "model",
) -> tuple[LayerCosts, pd.DataFrame]:
    """Layer and transfer tables for what `mapping` needs, measured as `coupprof layers`
    and `coupprof transfer-matrix` would: the whole model chained on each processor the
    mapping uses (layer by layer, so caches are as cold as in the real run), with the
    mapping's per-layer levels requested before its layers; then the hand-over at every
    boundary of the mapping.

    Energy: with a streaming source, the marker is high around each layer's invoke and
    each layer's energy is attributed over those windows (as `coupprof layers`), with
    the dynamic energy and the idle baseline, which the Pipeline prediction needs;
    with a counter source, each layer is repeated until the counter resolves it."""
    from profiler.runner import LayerRunner

    build = make or (lambda bd, letter: make_executor(bd, letter))
    govs = governors or {}
    act = activity or NoActivity()
    n = mapping.n_layers

    class Hooks(MarkerHooks):
        """Per-layer DVFS requests, activity, and (streaming) the marker per layer."""

        def __init__(self, letter: str, cap: StreamCapture | None) -> None:
            super().__init__(cap, frames, n)
            self.letter = letter
            self.requests: list[tuple[Any, int] | None] = []
            for pos in range(n):
                khz = freq.khz[pos] if freq is not None and freq.mode == "per-layer" else None
                gov = govs.get(freq.domain[pos]) if khz is not None and freq else None
                mine = mapping.order[pos] == letter
                self.requests.append((gov, khz) if gov is not None and mine else None)

        def before_layer(self, layer: int) -> None:
            req = self.requests[layer]
            if req is not None:
                req[0].request_khz(req[1])
            act.busy(self.letter)
            super().before_layer(layer)

        def after_layer(self, layer: int) -> None:
            super().after_layer(layer)
            act.idle(self.letter)

    streaming = power is not None and power.streaming
    baselines: dict[str, float] = {}

    def profile(ex: Executor, letter: str) -> list[dict[str, Any]]:
        cap = power.capture().start() if power is not None and streaming else None
        hooks = Hooks(letter, cap)
        runner = LayerRunner(sliced, ex, hooks=hooks, seed=seed, model_name=model_name)
        try:
            timings = runner.run(frames=frames, warmup=warmup)
        finally:
            if cap is not None:
                cap.stop()
        att = None
        if cap is not None:
            ts = np.asarray(timings.ts_ns)
            att = cap.windows_on_edges(ts[:, :, 2], ts[:, :, 3], hooks.rise[:, :, 0],
                                       hooks.fall[:, :, 1])
            baselines[letter] = float(att.baseline_power_w)
        rows = []
        for pos in (i for i, p in enumerate(mapping.order) if p == letter):
            interp = runner.interpreters[pos]
            sub = getattr(interp, "sub", None)
            row: dict[str, Any] = {
                "processor": letter, "level": freq.level[pos] if freq is not None else None,
                "layer": pos, "time_ms": float(timings.time_ns[:, pos].mean()) / 1e6,
                "transfer_ms": float(timings.transfer_ns[:, pos].mean()) / 1e6,
                "fallback": sub.fallback if sub is not None else None}
            if att is not None:
                row["energy_mj"] = att.layers[pos].energy_mj
                # mean power over the marked window, which is a little longer than the
                # invoke (time_ms) and, on a busy host, may hold a preemption
                row["power_w"] = att.layers[pos].power_w
                row["dynamic_energy_mj"] = att.layers[pos].dynamic_energy_mj
            elif power is not None:
                def call(interp: Any = interp, letter: str = letter) -> None:
                    act.busy(letter)
                    interp.invoke()
                    act.idle(letter)

                row["energy_mj"] = power.per_call(call)
            rows.append(row)
        return rows

    rows: list[dict[str, Any]] = []
    for letter in mapping.processors:
        with ProcessorWorker(lambda letter=letter: build(board, letter), name=letter) as w:
            rows += w.call(lambda ex, letter=letter: profile(ex, letter))
    table = pd.DataFrame(rows)
    table["level"] = table["level"].astype("Int64")
    needed = [(b, mapping.order[b], mapping.order[b + 1]) for b in range(n - 1)]
    matrix = measure_transfer_matrix(sliced, board, mapping.processors, reps=frames,
                                     warmup=warmup, only=needed, make=build, power=power,
                                     activity=activity, seed=seed, model_name=model_name)
    return LayerCosts(table, baselines, ["measured by coupprof run"]), matrix.table()


# --------------------------------------------------------------------------------
# Measured against predicted
# --------------------------------------------------------------------------------

def compare(pred: Prediction, run: Any) -> pd.DataFrame:
    """Rows of metric, predicted, measured, error_pct (measured vs predicted)."""
    lat = "latency_ms" if pred.mode == "switch" else "latency_ms (predicted without queueing)"
    rows: list[tuple[str, float, float | None]] = [
        (lat, pred.latency_ms, float(run.latency_ns.mean()) / 1e6),
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
    df["error_pct"] = (df["predicted"] - df["measured"]) / df["measured"] * 100.0
    return df
