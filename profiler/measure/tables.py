"""From a measured run to tables: DataFrames, tidy CSV + JSON sidecar, rich rendering.

Measuring and rendering are separate: `run_tables(run)` turns a `LayerRun` into a
`RunTables` (DataFrames + metadata + totals); `write_tables` saves it as CSV and a
JSON sidecar (`results_frame`, `layers_sidecar`: the same for another writer, e.g. to
standard output); `read_tables` loads those files back into the same `RunTables`;
`render` draws a rich table from a `RunTables`, fresh or loaded. The CSV is tidy, units in
column names, every row led by the run's identifying columns (`ID_COLUMNS`); power columns
are present only when the run has them, never 0.

The rows and columns, fused runs included: docs/measure.md ("From a measured run to tables").
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table

from profiler.boards.host import format_cpu_list
from profiler.errors import BadInputError
from profiler.measure.method import Method
from profiler.measure.results import LayerRun

if TYPE_CHECKING:
    from collections.abc import Callable

    from profiler.measure.fused import FusedEnergy, FusedResult

SIDE_CAR_FORMAT = "coupprof-layers/2"
# /1 (before issue 26): a fused run's time_ms_mean held the sliced figure, time_ms_fused the
# fused one; `read_tables` maps such files to /2 (`upgrade_v1_columns`, `_totals`).
OLD_SIDE_CAR_FORMAT = "coupprof-layers/1"

# Per-layer columns contributed by a power source, in display order.
POWER_COLUMNS = ("power_w", "energy_mj", "dynamic_energy_mj", "fps_per_w", "samples")
# Per-frame totals contributed by a power source.
POWER_TOTALS = ("power_w", "energy_mj", "dynamic_energy_mj", "fps_per_w", "samples", "lost_frames")

# The run's identity, repeated on every row (from the sidecar's metadata).
ID_COLUMNS = ("board", "simulated", "model", "processor", "freq_level", "freq_khz")

LAYER_COLUMNS = (
    "kind", *ID_COLUMNS, "layer", "op_types", "macs", "param_bytes", "bytes_in", "bytes_out",
    "time_ms_mean", "time_ms_median", "time_ms_p95", "time_ms_std",
    "transfer_ms_mean", "transfer_ms_median", "transfer_ms_p95", "frames",
)
FRAME_COLUMNS = (
    "kind", *ID_COLUMNS, "layer", "frame", "time_ms", "transfer_ms",
    "start_ns", "end_ns", "transfer_start_ns", "transfer_end_ns",
)
# Nullable integers: blank when the run did not set a frequency.
NULLABLE_INT_COLUMNS = ("freq_level", "freq_khz")
INT_COLUMNS = ("layer", "frame", "macs", "param_bytes", "bytes_in", "bytes_out", "frames",
               "samples", "start_ns", "end_ns", "transfer_start_ns", "transfer_end_ns")

UNITS = {
    "time_ms": "ms, sub-model invoke (layer_end - layer_start)",
    "time_ms_mean": "ms per frame, the layer's time: a fused run's layer inside one "
                    "uninterrupted run of the model, T(prefix 0..k) - T(prefix 0..k-1), 20 % "
                    "trimmed mean over interleaved rounds (fixed row: the empty prefix, the "
                    "fixed cost per call); a sliced run's sub-model invoke, mean over frames",
    "time_ms_ci95": "ms, half-width of a fused run's time_ms_mean's 95 % interval",
    "below_resolution": "true when time_ms_mean's 95 % interval holds 0: an upper bound only",
    "group": "a fused run's layers reported as one row (e.g. 'layers 1-4'): the runtime "
             "compiles them into one kernel, or a row's interval lay wholly below zero; "
             "the kind = \"group\" row holds the group's time, the layers' rows add up to it "
             "(docs/fused.md, \"Rows that alternate\")",
    "time_ms_sliced": "ms, a fused run's layer called on its own as a sub-model, with its "
                      "per-call cost (mean, median, p95, std over the sliced frames)",
    "transfer_ms": "ms, hand-over of the layer's inputs into its sub-model",
    "bytes_in": "bytes, sum of the layer's input tensors",
    "bytes_out": "bytes, sum of the layer's output tensors",
    "macs": "multiply-accumulates per frame",
    "param_bytes": "bytes of constant tensors (weights, biases)",
    "start_ns": "ns, host clock (time.perf_counter_ns)",
    "power_w": "W = energy_mj / time_ms_mean",
    "energy_mj": "mJ per frame, of the same method as time_ms_mean",
    "dynamic_energy_mj": "mJ per frame above the idle baseline",
    "fps_per_w": "frames per joule of the layer (1 / energy in J)",
    "latency_ms": "ms per frame: a fused run's one call of the whole model (fixed + layers); "
                  "a sliced run's layers + the hand-overs between them",
    "energy_mj_sliced": "mJ per frame of the layer's sliced windows (fused runs)",
    "fixed_energy_mj": "mJ per call of the fixed row: the empty prefix's energy where prefix "
                       "energies were measured, else the sliced frames' mean power x the "
                       "fixed time (sidecar: fused.fixed_energy)",
    "*_sliced": "totals of a fused run's sliced frames (each layer called on its own)",
    "fps": "frames per second = 1000 / latency_ms_mean",
}


@dataclass
class RunTables:
    """A run as tables: aggregate rows, optional per-frame rows, metadata, per-frame totals."""

    layers: pd.DataFrame
    frames: pd.DataFrame | None
    info: dict[str, Any]
    totals: dict[str, float] = field(default_factory=dict)


def _stats_ms(values_ns: np.ndarray, axis: int = 0) -> dict[str, np.ndarray]:
    ms = values_ns.astype(np.float64) / 1e6
    return {
        "mean": ms.mean(axis=axis),
        "median": np.median(ms, axis=axis),
        "p95": np.percentile(ms, 95, axis=axis),
        # sample std; a single frame has no spread
        "std": ms.std(axis=axis, ddof=1 if ms.shape[axis] > 1 else 0),
    }


def model_name(model_path: str | Path | None) -> str:
    """'/x/mobilenet_v1_0.25_128.tflite' -> 'mobilenet_v1_0.25_128' (the CSV's `model`)."""
    name = Path(str(model_path or "model")).name
    return name[: -len(".tflite")] if name.endswith(".tflite") else name


def id_columns(info: dict[str, Any], rows: int) -> dict[str, Any]:
    """The ID_COLUMNS for `rows` rows of a run with metadata `info` (RunInfo.to_dict())."""
    def nullable(v: int | None) -> pd.arrays.IntegerArray:
        return pd.array([None if v is None else int(v)] * rows, dtype="Int64")

    return {
        "board": [str(info.get("board", ""))] * rows,
        "simulated": [bool(info.get("simulated", False))] * rows,
        "model": [model_name(info.get("model_path"))] * rows,
        "processor": [str(info.get("processor", ""))] * rows,
        "freq_level": nullable(info.get("freq_level")),
        "freq_khz": nullable(info.get("freq_khz")),
    }


def layer_table(run: LayerRun) -> pd.DataFrame:
    """One row per layer with time/transfer aggregates over the recorded frames."""
    t = run.timings
    time = _stats_ms(t.time_ns)
    xfer = _stats_ms(t.transfer_ns)
    df = pd.DataFrame({
        "kind": "layer",
        **id_columns(run.info.to_dict(), len(run.layers)),
        "layer": [li.index for li in run.layers],
        "op_types": ["+".join(li.op_types) for li in run.layers],
        "macs": [li.macs for li in run.layers],
        "param_bytes": [li.param_bytes for li in run.layers],
        "bytes_in": [li.bytes_in for li in run.layers],
        "bytes_out": [li.bytes_out for li in run.layers],
        "time_ms_mean": time["mean"],
        "time_ms_median": time["median"],
        "time_ms_p95": time["p95"],
        "time_ms_std": time["std"],
        "transfer_ms_mean": xfer["mean"],
        "transfer_ms_median": xfer["median"],
        "transfer_ms_p95": xfer["p95"],
        "frames": t.frames,
    })
    extras = [c for c in POWER_COLUMNS if c in run.layer_extras]
    extras += [c for c in run.layer_extras if c not in POWER_COLUMNS]
    for name in extras:
        df[name] = np.asarray(run.layer_extras[name])
    return df


def frame_table(run: LayerRun) -> pd.DataFrame:
    """One row per (layer, frame) with the raw timestamps."""
    t = run.timings
    n_frames, n_layers = t.frames, t.layers
    layer_ids = np.array([li.index for li in run.layers])

    def flat(a: np.ndarray) -> np.ndarray:  # (frames, layers) -> layer-major rows
        return np.ascontiguousarray(a.T).reshape(-1)

    return pd.DataFrame({
        "kind": "frame",
        **id_columns(run.info.to_dict(), n_frames * n_layers),
        "layer": np.repeat(layer_ids, n_frames),
        "frame": np.tile(np.arange(n_frames), n_layers),
        "time_ms": flat(t.time_ns) / 1e6,
        "transfer_ms": flat(t.transfer_ns) / 1e6,
        "start_ns": flat(t.start_ns),
        "end_ns": flat(t.end_ns),
        "transfer_start_ns": flat(t.transfer_start_ns),
        "transfer_end_ns": flat(t.transfer_end_ns),
        # a simulated processor's overrun (its late wake-up): time_ms = end_ns - start_ns - this
        "overrun_ns": flat(t.overrun_ns) if t.overrun_ns is not None
        else np.zeros(n_frames * n_layers, np.int64),
    })


def totals(run: LayerRun) -> dict[str, float]:
    """Per-frame totals: layer times and transfers summed within each frame, then aggregated."""
    t = run.timings
    compute = _stats_ms(t.time_ns.sum(axis=1))
    xfer = _stats_ms(t.transfer_ns.sum(axis=1))
    latency = _stats_ms(t.time_ns.sum(axis=1) + t.transfer_ns.sum(axis=1))
    out = {f"time_ms_{k}": float(v) for k, v in compute.items()}
    out |= {f"transfer_ms_{k}": float(xfer[k]) for k in ("mean", "median", "p95")}
    out |= {f"latency_ms_{k}": float(latency[k]) for k in ("mean", "median", "p95")}
    out["fps"] = 1000.0 / out["latency_ms_mean"] if out["latency_ms_mean"] > 0 else float("inf")
    out["macs"] = float(sum(li.macs for li in run.layers))
    out["layers"] = float(len(run.layers))
    out |= {k: float(v) for k, v in run.total_extras.items()}
    return out


def run_tables(run: LayerRun, raw: bool = True) -> RunTables:
    return RunTables(
        layers=layer_table(run),
        frames=frame_table(run) if raw else None,
        info=run.info.to_dict(),
        totals=totals(run),
    )


#: A layer's statistics over sliced frames: a sliced run's time columns; a fused run keeps
#: them under `sliced_name` (the layer called on its own, with its per-call cost).
SLICED_STATS = ("time_ms_mean", "time_ms_median", "time_ms_p95", "time_ms_std")
#: Per-frame totals of the sliced frames; a fused run keeps them under `sliced_name`.
SLICED_TOTALS = (*SLICED_STATS, "transfer_ms_mean", "transfer_ms_median", "transfer_ms_p95",
                 "latency_ms_mean", "latency_ms_median", "latency_ms_p95", "fps",
                 "power_w", "energy_mj", "dynamic_energy_mj", "fps_per_w",
                 "frame_energy_mj", "frame_fps_per_w")


def sliced_name(name: str) -> str:
    """A sliced figure's name in a fused run: 'time_ms_median' -> 'time_ms_sliced_median',
    'energy_mj' -> 'energy_mj_sliced', 'fps' -> 'fps_sliced'."""
    for stat in ("_mean", "_median", "_p95", "_std"):
        if name.endswith(stat):
            return name[: -len(stat)] + "_sliced" + stat
    return name + "_sliced"


def sliced_stat(df: pd.DataFrame, stat: str = "median") -> pd.Series:
    """Each layer row's sliced time statistic (mean, median, p95 or std: the layer called
    on its own): time_ms_sliced_* where the CSV has them (a fused run, a sweep with fused
    pairs), else time_ms_* (a sliced run)."""
    plain, renamed = f"time_ms_{stat}", sliced_name(f"time_ms_{stat}")
    if renamed in df.columns:
        return df[renamed].fillna(df[plain]) if plain in df.columns else df[renamed]
    return df[plain]


def in_fused_layout(layers: pd.DataFrame) -> pd.DataFrame:
    """A sliced run's layer rows in a fused run's columns, for one CSV that holds both (a
    sweep): time_ms_mean stays, its statistics also go under `sliced_name` (what they
    are), the fused run's interval, flag and group are blank, energy_mj_sliced is energy_mj."""
    df = layers.rename(columns={c: sliced_name(c) for c in SLICED_STATS if c != "time_ms_mean"})
    at = df.columns.get_loc("time_ms_mean") + 1
    df.insert(at, "time_ms_ci95", float("nan"))
    df.insert(at + 1, "below_resolution", pd.array([pd.NA] * len(df), dtype="boolean"))
    df.insert(at + 2, "group", pd.array([pd.NA] * len(df), dtype="string"))
    df.insert(at + 3, sliced_name("time_ms_mean"), df["time_ms_mean"])
    if "energy_mj" in df.columns:
        df["energy_mj_sliced"] = df["energy_mj"]
    return df


def with_fused(tables: RunTables, fused: FusedResult,
               energy: FusedEnergy | None = None) -> RunTables:
    """`tables` of a sliced run turned into a fused run's (see docs/measure.md):
    time_ms_mean becomes the fused figure (time_ms_ci95, below_resolution beside it), the
    sliced statistics and totals move to `sliced_name`. A layer's energy becomes its power
    (from its own windows) times its fused time, or, given the prefix ``energy`` of a
    counter source, the difference of prefix energies; the totals are one call of the
    whole model (`_fused_frame_totals`)."""
    df = tables.layers.rename(columns={c: sliced_name(c) for c in SLICED_STATS})
    n = len(df)
    if len(fused.layers) != n:
        raise ValueError(f"fused result has {len(fused.layers)} layers, the run {n}")
    t_ms = fused.times_ms()
    at = df.columns.get_loc(sliced_name("time_ms_mean")) if sliced_name("time_ms_mean") \
        in df.columns else len(df.columns)
    df.insert(at, "time_ms_mean", t_ms)
    df.insert(at + 1, "time_ms_ci95", [layer.ci95_ms for layer in fused.layers])
    df.insert(at + 2, "below_resolution", [layer.below_resolution for layer in fused.layers])
    labels = [fused.groups[layer.group].label if layer.group is not None else ""
              for layer in fused.layers]
    df.insert(at + 3, "group", pd.array([x or pd.NA for x in labels], dtype="string"))
    if "sim_late_runs" in df.columns:  # a late prefix spoils the differences that use it
        df["sim_late_runs"] = df["sim_late_runs"].fillna(0).astype(int) + fused.layer_late_runs()
    sliced = dict(tables.totals)
    tot = {k: v for k, v in sliced.items() if k not in SLICED_TOTALS}
    tot |= {sliced_name(k): v for k, v in sliced.items() if k in SLICED_TOTALS}
    baseline = float(tot.get("baseline_power_w", tables.info.get("extra", {}).get(
        "baseline_power_w", 0.0)) or 0.0)
    if energy is not None:
        e_mj = np.asarray(energy.layer_energy_mj, dtype=float)
        if "energy_mj" in df.columns:
            df["energy_mj_sliced"] = df["energy_mj"]
        with np.errstate(divide="ignore", invalid="ignore"):
            df["power_w"] = np.where(t_ms > 0, e_mj / t_ms, np.nan)
        df["energy_mj"] = e_mj
        df["dynamic_energy_mj"] = e_mj - baseline * t_ms
        df["fps_per_w"] = [1000.0 / e if e > 0 else float("inf") for e in e_mj]
        tot["fixed_energy_mj"] = energy.fixed_energy_mj
        tot["whole_energy_mj"] = energy.whole_energy_mj
    elif "power_w" in df.columns:
        df["energy_mj_sliced"] = df["energy_mj"]
        power = df["power_w"].to_numpy(dtype=float)
        df["energy_mj"] = power * t_ms
        df["dynamic_energy_mj"] = (power - baseline) * t_ms
        df["fps_per_w"] = [1000.0 / e if e > 0 else float("inf") for e in df["energy_mj"]]
    tot.update({
        "fused_layer_sum_ms": fused.layer_sum_ms,
        "fixed_ms": fused.fixed.time_ms,
        "fixed_ms_ci95": fused.fixed.ci95_ms,
        "whole_ms": fused.whole.time_ms,
        "whole_ms_ci95": fused.whole.ci95_ms,
        "rounds": float(fused.rounds),
    })
    if fused.call_factor is not None:
        tot["call_factor"] = fused.call_factor
    info = dict(tables.info)
    info["method"] = Method.FUSED
    info["fused"] = fused.info()
    if energy is not None:
        info["fused"]["energy"] = energy.info()
    how = _fused_frame_totals(tot, df, baseline)
    if how:
        info["fused"]["fixed_energy"] = how
    return RunTables(layers=df, frames=tables.frames, info=info, totals=_frame_first(tot))


def _fused_frame_totals(tot: dict[str, float], layers: pd.DataFrame, baseline_w: float) -> str:
    """A fused run's per-frame totals in ``tot``: one call of the whole model, the fixed row
    plus the layers (which add up to the whole model with prefixes), so that the CSV's rows,
    the sidecar and every output give one time, energy and FPS/W with W x ms = mJ.
    Returns how the fixed row's energy was had ('' without a power source)."""
    fixed_ms = float(tot["fixed_ms"])
    time_ms = fixed_ms + float(layers["time_ms_mean"].sum())
    tot["time_ms_mean"] = time_ms
    tot["time_ms_ci95"] = float(tot.get("whole_ms_ci95", float("nan")))
    tot["latency_ms_mean"] = time_ms  # one call: no hand-overs between its layers
    tot["fps"] = 1000.0 / time_ms if time_ms > 0 else float("inf")
    if "energy_mj" not in layers.columns:
        return ""
    if "fixed_energy_mj" in tot:
        how = "the empty prefix's energy per call, measured as the layers' are"
    else:
        # Only per-layer power was measured: the sliced frames' mean power prices the fixed
        # time (each sliced call pays it, so their power is mostly the fixed cost's).
        power = float(tot.get(sliced_name("power_w"), float("nan")))
        how = f"the sliced frames' mean power ({power:.3f} W) x the fixed time"
        if not np.isfinite(power):
            t = layers["time_ms_mean"].to_numpy(dtype=float)
            e = layers["energy_mj"].to_numpy(dtype=float)
            ok = np.isfinite(e)
            power = float(e[ok].sum() / t[ok].sum()) if t[ok].sum() > 0 else float("nan")
            how = f"the layers' mean power ({power:.3f} W) x the fixed time"
        tot["fixed_energy_mj"] = power * fixed_ms
    fixed_e = float(tot["fixed_energy_mj"])
    energy_mj = float(np.nansum(layers["energy_mj"].to_numpy(dtype=float))) + fixed_e
    tot["energy_mj"] = energy_mj
    tot["power_w"] = energy_mj / time_ms if time_ms > 0 else float("nan")
    tot["fps_per_w"] = 1000.0 / energy_mj if energy_mj > 0 else float("inf")
    if "dynamic_energy_mj" in layers.columns:
        tot["dynamic_energy_mj"] = float(np.nansum(layers["dynamic_energy_mj"].to_numpy(
            dtype=float))) + fixed_e - baseline_w * fixed_ms
    return how


#: The per-frame totals a sidecar lists first.
FRAME_TOTALS = ("time_ms_mean", "time_ms_ci95", "latency_ms_mean", "fps", "power_w",
                "energy_mj", "dynamic_energy_mj", "fps_per_w")


def _frame_first(tot: dict[str, float]) -> dict[str, float]:
    return {**{k: tot[k] for k in FRAME_TOTALS if k in tot}, **tot}


def fixed_row(tables: RunTables) -> pd.DataFrame | None:
    """The ``kind = "fixed"`` CSV row of a fused run (None for a sliced run): the fixed
    cost per call in time_ms_mean, its energy and power where the run has them."""
    tot = tables.totals
    if "fixed_ms" not in tot:
        return None
    t = float(tot["fixed_ms"])
    row = pd.DataFrame({"kind": ["fixed"], **id_columns(tables.info, 1),
                        "time_ms_mean": [t], "time_ms_ci95": [tot["fixed_ms_ci95"]]})
    if "fixed_energy_mj" in tot:
        e = float(tot["fixed_energy_mj"])
        row["power_w"] = [e / t if t > 0 else float("nan")]
        row["energy_mj"] = [e]
        if "dynamic_energy_mj" in tot:
            row["dynamic_energy_mj"] = [e - float(tot.get("baseline_power_w", 0.0) or 0.0) * t]
    return row


def group_rows(tables: RunTables) -> pd.DataFrame | None:
    """The ``kind = "group"`` CSV rows of a fused run's groups (None: none), from its
    sidecar: layers reported as one row, their time and interval in time_ms_mean and
    time_ms_ci95, their label in ``group`` and why in op_types (docs/fused.md, "Rows that
    alternate"). Not part of the frame: the layers' rows add up to each."""
    groups = tables.info.get("fused", {}).get("groups") or []
    if not groups:
        return None
    n = len(groups)
    out = pd.DataFrame({
        "kind": ["group"] * n, **id_columns(tables.info, n),
        "op_types": [g["describe"] for g in groups],
        "time_ms_mean": [g["time_ms"] for g in groups],
        "time_ms_ci95": [g["ci95_ms"] for g in groups],
        "below_resolution": [g["below_resolution"] for g in groups],
        "group": [g["label"] for g in groups]})
    df = tables.layers
    if "energy_mj" in df.columns and "group" in df.columns:  # energies add up as times do
        for col in ("energy_mj", "dynamic_energy_mj"):
            if col in df.columns:
                out[col] = [float(df.loc[df["group"] == g["label"], col].sum()) for g in groups]
        t = out["time_ms_mean"].to_numpy(dtype=float)
        e = out["energy_mj"].to_numpy(dtype=float)
        out.insert(out.columns.get_loc("energy_mj"), "power_w",
                   np.where(t > 0, e / np.where(t > 0, t, 1.0), np.nan))
    return out


@dataclass(frozen=True)
class FrameFigures:
    """One frame of a run, from its CSV rows alone (`frame_figures`): the figures the
    terminal's footer, the sidecar's totals, the report and `plot layers` all give."""

    time_ms: float
    energy_mj: float | None = None
    fixed_ms: float | None = None  # a fused run's fixed row, within time_ms

    @property
    def fps(self) -> float:
        return 1000.0 / self.time_ms if self.time_ms > 0 else float("inf")

    @property
    def power_w(self) -> float | None:
        return None if self.energy_mj is None or self.time_ms <= 0 \
            else self.energy_mj / self.time_ms  # mJ / ms = W

    @property
    def fps_per_w(self) -> float | None:
        return None if self.energy_mj is None or self.energy_mj <= 0 else 1000.0 / self.energy_mj

    def text(self, sep: str = ", ") -> str:
        """'8.659 ms (115.5 FPS), 34.757 mJ = 4.014 W, 28.77 FPS/W'."""
        out = f"{self.time_ms:.3f} ms ({self.fps:.1f} FPS)"
        if self.energy_mj is not None:
            out += f"{sep}{self.energy_mj:.3f} mJ = {self.power_w:.3f} W, {self.fps_per_w:.2f} FPS/W"
        return out


def frame_figures(rows: pd.DataFrame) -> FrameFigures | None:
    """A frame of one run from its CSV rows: a fused run's layers plus its fixed row (one
    call of the whole model), a sliced run's layers plus their hand-overs. None for a fused
    run's layers without the fixed row (a sweep keeps it in its sidecar)."""
    kind = rows["kind"] if "kind" in rows.columns else pd.Series("layer", index=rows.index)
    layers, fixed = rows[kind == "layer"], rows[kind == "fixed"]
    if layers.empty:
        return None
    fused = "time_ms_ci95" in layers.columns and bool(layers["time_ms_ci95"].notna().any())
    if fused and fixed.empty:
        return None

    def total(df: pd.DataFrame, col: str) -> float:
        return float(np.nansum(df[col].to_numpy(dtype=float))) if col in df.columns else 0.0

    fixed_ms = total(fixed, "time_ms_mean") if fused else None
    time_ms = total(layers, "time_ms_mean") + (fixed_ms if fixed_ms is not None
                                               else total(layers, "transfer_ms_mean"))
    if "energy_mj" not in layers.columns or layers["energy_mj"].isna().all():
        return FrameFigures(time_ms, fixed_ms=fixed_ms)
    return FrameFigures(time_ms, total(layers, "energy_mj") + total(fixed, "energy_mj"),
                        fixed_ms)


def upgrade_v1_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Rows (any kind) of a coupprof-layers/1 or coupprof-sweep/1 CSV in today's columns:
    where the fused method ran, time_ms_fused becomes time_ms_mean and the sliced time_ms_*
    become time_ms_sliced_*; a sweep's sliced pairs keep their time_ms_mean
    (`in_fused_layout`). A CSV without fused rows is unchanged."""
    if "time_ms_fused" not in df.columns:
        return df
    sliced_mean = df["time_ms_mean"] if "time_ms_mean" in df.columns else None
    df = df.rename(columns={c: sliced_name(c) for c in SLICED_STATS}).rename(
        columns={"time_ms_fused": "time_ms_mean", "time_ms_fused_ci95": "time_ms_ci95"})
    if sliced_mean is not None:  # a sweep's sliced pair: no fused figure, its own leads
        df["time_ms_mean"] = df["time_ms_mean"].fillna(sliced_mean)
    lead = [c for c in ("time_ms_mean", "time_ms_ci95", "below_resolution") if c in df.columns]
    rest = [c for c in df.columns if c not in lead]
    at = rest.index(sliced_name("time_ms_mean")) if sliced_name("time_ms_mean") in rest \
        else len(rest)
    return df[rest[:at] + lead + rest[at:]]


def upgrade_v1_totals(totals: dict[str, float], layers: pd.DataFrame,
                      info: dict[str, Any]) -> dict[str, float]:
    """A coupprof-layers/1 fused run's totals (or a sweep/1 fused pair's) in today's keys,
    given its layer rows in today's columns (`upgrade_v1_columns`): /1 kept the fused
    layers' energy, dynamic energy and FPS/W, the rest were the sliced frames'."""
    if "fixed_ms" not in totals or sliced_name("time_ms_mean") in totals:
        return totals
    fused_keys = ("energy_mj", "dynamic_energy_mj", "fps_per_w")
    tot = {k: v for k, v in totals.items() if k not in SLICED_TOTALS or k in fused_keys}
    tot |= {sliced_name(k): v for k, v in totals.items()
            if k in SLICED_TOTALS and k not in fused_keys}
    baseline = float(tot.get("baseline_power_w", (info.get("extra") or {}).get(
        "baseline_power_w", 0.0)) or 0.0)
    how = _fused_frame_totals(tot, layers, baseline)
    if how and isinstance(info.get("fused"), dict):
        info["fused"].setdefault("fixed_energy", how)
    return _frame_first(tot)


# -- files -------------------------------------------------------------------------


def default_json_path(csv_path: str | Path) -> Path:
    return Path(csv_path).with_suffix(".json")


def results_frame(tables: RunTables) -> pd.DataFrame:
    """The tidy CSV's rows: layer rows, the fixed row and group rows of a fused run, then
    frame rows."""
    parts = [tables.layers]
    fixed = fixed_row(tables)
    if fixed is not None:
        parts.append(fixed)
    groups = group_rows(tables)
    if groups is not None:
        parts.append(groups)
    if tables.frames is not None:
        frames = tables.frames.copy()
        for col in ("start_ns", "end_ns", "transfer_start_ns", "transfer_end_ns"):
            frames[col] = frames[col].astype("Int64")  # exact ns, blank on layer rows
        parts.append(frames)
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def layers_sidecar(tables: RunTables, csv_name: str | None) -> dict[str, Any]:
    """The JSON sidecar of the CSV named ``csv_name`` (None: it went to standard output)."""
    return {
        "format": SIDE_CAR_FORMAT,
        "csv": csv_name,
        **tables.info,
        "totals": tables.totals,
        "raw_rows": tables.frames is not None,
        "units": UNITS,
    }


def write_tables(tables: RunTables, csv_path: str | Path,
                 json_path: str | Path | None = None) -> tuple[Path, Path]:
    """Write the tidy CSV (`results_frame`) and its JSON sidecar."""
    csv_p = Path(csv_path)
    json_p = Path(json_path) if json_path is not None else default_json_path(csv_p)
    df = results_frame(tables)
    try:
        csv_p.parent.mkdir(parents=True, exist_ok=True)
        json_p.parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(csv_p, index=False)
        json_p.write_text(json.dumps(layers_sidecar(tables, csv_p.name), indent=2) + "\n")
    except OSError as err:
        raise BadInputError(f"cannot write results to {err.filename or csv_p}: {err.strerror}",
                            "choose a writable path with --csv / --json") from None
    return csv_p, json_p


def read_tables(csv_path: str | Path, json_path: str | Path | None = None) -> RunTables:
    """Load a CSV + sidecar written by `write_tables` (for re-rendering or notebooks); an
    older coupprof-layers/1 pair comes back in today's columns (`upgrade_v1_columns`)."""
    csv_p = Path(csv_path)
    json_p = Path(json_path) if json_path is not None else default_json_path(csv_p)
    for p in (csv_p, json_p):
        if not p.is_file():
            raise BadInputError(f"results file not found: {p}",
                                "pass the CSV written by `coupprof layers` (its .json beside it)")
    try:
        meta = json.loads(json_p.read_text())
        df = pd.read_csv(csv_p, dtype={c: "Int64" for c in INT_COLUMNS + NULLABLE_INT_COLUMNS},
                         keep_default_na=True)
    except (ValueError, OSError) as err:
        raise BadInputError(f"cannot read results {csv_p} / {json_p}: {err}",
                            "re-run `coupprof layers` to write them again") from None
    fmt = meta.get("format")
    if fmt not in (SIDE_CAR_FORMAT, OLD_SIDE_CAR_FORMAT) or "kind" not in df.columns:
        newer = str(fmt or "").startswith("coupprof-layers/")
        raise BadInputError(f"{json_p} is " + (f"of format {fmt}, which this coupprof does "
                                                "not know" if newer else
                                                "not a coupprof layers sidecar"),
                            "upgrade coupprof" if newer else
                            "pass the CSV written by `coupprof layers`")
    tot = meta.pop("totals", {})
    for key in ("format", "csv", "raw_rows", "units"):
        meta.pop(key, None)
    if fmt == OLD_SIDE_CAR_FORMAT:
        df = upgrade_v1_columns(df)
        tot = upgrade_v1_totals(tot, df[df["kind"] == "layer"], meta)

    df = with_id_columns(df, meta)

    def part(kind: str) -> pd.DataFrame:
        sub = df[df["kind"] == kind]
        # Columns of the other row kind are blank here; the ID columns stay even when blank.
        keep = [c for c in sub.columns if c in ID_COLUMNS or sub[c].notna().any()]
        sub = sub[keep].reset_index(drop=True)
        for col in sub.columns:
            if col in INT_COLUMNS and col not in ("start_ns", "end_ns",
                                                  "transfer_start_ns", "transfer_end_ns"):
                sub[col] = sub[col].astype("int64")
        return sub

    frames = part("frame")
    return RunTables(layers=part("layer"), frames=frames if len(frames) else None,
                     info=meta, totals=tot)


def with_id_columns(df: pd.DataFrame, info: dict[str, Any]) -> pd.DataFrame:
    """`df` with ID_COLUMNS right after `kind`, filled from `info` where the CSV lacks them
    (CSVs written before the columns existed), so old and new runs concatenate alike."""
    ids = id_columns(info, len(df))
    out = df.copy()
    for name in ID_COLUMNS:
        if name not in out.columns:
            out[name] = ids[name]
    out["simulated"] = out["simulated"].astype(bool)
    for name in NULLABLE_INT_COLUMNS:
        out[name] = out[name].astype("Int64")
    first = ["kind"] if "kind" in out.columns else []
    order = first + list(ID_COLUMNS) + [c for c in out.columns if c not in first + list(ID_COLUMNS)]
    return out[order]


# -- rendering ---------------------------------------------------------------------


def _count(n: int | None, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{'?' if n is None else n} {noun}s"


def title(info: dict[str, Any]) -> str:
    model = Path(str(info.get("model_path", "model"))).name
    cores = info.get("cores") or []
    board_cores = (info.get("extra") or {}).get("board_cores")
    # simulated: the board's cores, and this machine's that ran the layers in their place
    where = (f"board cores {format_cpu_list(board_cores)}, run on this machine's cores "
             f"{format_cpu_list(cores)}" if board_cores else f"cores {format_cpu_list(cores)}")
    text = (f"{model} on board {info.get('board', '?')}, processor {info.get('processor', '?')}"
            f" ({where}, {_count(info.get('threads'), 'thread')})")
    if info.get("freq_khz"):
        text += f" at level {info.get('freq_level')} = {info['freq_khz'] / 1000:g} MHz"
    if info.get("simulated"):
        text += " [SIMULATED]"
    return text


def _f(v: float | None, digits: int = 3) -> str:
    return "" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{float(v):.{digits}f}"


def _i(v: float | None) -> str:
    return "" if v is None or pd.isna(v) else f"{int(v):,}"


# Short operator names for the table (the CSV keeps LiteRT's names).
OP_SHORT = {
    "CONV_2D": "conv", "DEPTHWISE_CONV_2D": "dwconv", "FULLY_CONNECTED": "fc",
    "AVERAGE_POOL_2D": "avgpool", "MAX_POOL_2D": "maxpool", "CONCATENATION": "concat",
    "RESHAPE": "reshape", "SOFTMAX": "softmax", "ADD": "add", "MUL": "mul", "MEAN": "mean",
    "RELU": "relu", "RELU6": "relu6", "LOCAL_RESPONSE_NORMALIZATION": "lrn", "PAD": "pad",
    "QUANTIZE": "quant", "DEQUANTIZE": "dequant", "TRANSPOSE_CONV": "tconv",
}


def short_ops(op_types: str) -> str:
    """'DEPTHWISE_CONV_2D+CONV_2D' -> 'dwconv+conv'."""
    return "+".join(OP_SHORT.get(op, op.lower()) for op in str(op_types).split("+"))


def _kib(v: float | None) -> str:
    return "" if v is None or pd.isna(v) else f"{int(v) / 1024:,.1f}"


#: The layer tables' columns a narrow terminal may leave out, least wanted first (see
#: `profiler.cli.common.fit`). Never left out: the layer, its time (mean ms, or fused ms
#: and its ±95%), its energy (mJ) and the flags.
LESSER_COLUMNS = ("samples", "KiB in", "KiB out", "dyn mJ", "p95", "MMAC", "median", "FPS/W",
                  "W", "xfer ms", "sliced ms", "operators")


def render(tables: RunTables) -> Table:
    """The layer table: one row per layer and a totals row; power columns only when present.

    Times are per frame in ms; bytes in KiB; the CSV has every column at full precision.
    A terminal too narrow for it leaves out LESSER_COLUMNS first.
    """
    df, tot = tables.layers, tables.totals
    if "time_ms_ci95" in df.columns:
        return render_fused(tables)
    power = [c for c in POWER_COLUMNS if c in df.columns]
    # Light box, one space between columns: the table fits an 80-column terminal.
    table = Table(title=title(tables.info), caption=_caption(tables), box=box.SIMPLE_HEAD,
                  padding=(0, 1), collapse_padding=True, pad_edge=False)
    table.add_column("layer", justify="right")
    table.add_column("operators", overflow="fold", ratio=1, min_width=10)
    for head in ("mean ms", "median", "p95", "xfer ms", "KiB in", "KiB out", "MMAC"):
        table.add_column(head, justify="right", no_wrap=True)
    labels = {"power_w": "W", "energy_mj": "mJ", "dynamic_energy_mj": "dyn mJ",
              "fps_per_w": "FPS/W", "samples": "samples"}
    for c in power:
        table.add_column(labels[c], justify="right", no_wrap=True)
    # Shown only when something happened: an accelerator ran ops on the CPU, or a
    # layer's windows were set aside (lost frames, sample holes, no sample inside).
    fallback = _flags(df, "fallback", lambda v: str(v).lower() in ("yes", "true", "1"))
    lost = _flags(df, "lost_frames", lambda v: not pd.isna(v) and int(v) > 0) or \
        _flags(df, "flagged_windows", lambda v: not pd.isna(v) and int(v) > 0)
    # The simulated board: runs where this machine was slower than the modelled processor.
    slow = _flags(df, "sim_late_runs", lambda v: not pd.isna(v) and int(v) > 0)
    if fallback:
        table.add_column("fallback", no_wrap=True)
    if lost:
        table.add_column("flag", no_wrap=True)
    if slow:
        table.add_column("host slow", no_wrap=True)
    for r in df.itertuples(index=False):
        row = r._asdict()
        cells = [str(row["layer"]), short_ops(row["op_types"]),
                 _f(row["time_ms_mean"]), _f(row["time_ms_median"]), _f(row["time_ms_p95"]),
                 _f(row["transfer_ms_mean"]), _kib(row["bytes_in"]), _kib(row["bytes_out"]),
                 _f(row["macs"] / 1e6, 2)]
        cells += [_i(row[c]) if c == "samples" else _f(row[c]) for c in power]
        if fallback:
            cells.append("CPU" if fallback[int(row["layer"])] else "")
        if lost:
            cells.append(_lost_text(row) if lost[int(row["layer"])] else "")
        if slow:
            cells.append(f"{int(row['sim_late_runs'])} runs" if slow[int(row["layer"])] else "")
        table.add_row(*cells)
    table.add_section()
    cells = ["total", f"{len(df)} layers",
             _f(tot.get("time_ms_mean")), _f(tot.get("time_ms_median")),
             _f(tot.get("time_ms_p95")), _f(tot.get("transfer_ms_mean")), "", "",
             _f(tot.get("macs", 0) / 1e6, 2)]
    cells += [_i(tot.get(c)) if c == "samples" else _f(tot.get(c)) for c in power]
    cells += [f"{sum(fallback.values())} layers"] if fallback else []
    cells += [f"{sum(lost.values())} layers"] if lost else []
    cells += [f"{sum(slow.values())} layers"] if slow else []
    table.add_row(*cells, style="bold")
    return table


def render_fused(tables: RunTables) -> Table:
    """A fused run: each layer's fused time with its 95 % interval (an upper bound where it
    is below resolution), the sliced median beside it, and the fixed per-call row."""
    df, tot = tables.layers, tables.totals
    power = [c for c in POWER_COLUMNS if c in df.columns and c != "samples"]
    table = Table(title=title(tables.info) + " - fused", caption=_fused_caption(tables),
                  box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False)
    table.add_column("layer", justify="right")
    table.add_column("operators", overflow="fold", ratio=1, min_width=10)
    for head in ("fused ms", "±95%", "sliced ms", "xfer ms", "KiB in", "KiB out", "MMAC"):
        table.add_column(head, justify="right", no_wrap=True)
    labels = {"power_w": "W", "energy_mj": "mJ", "dynamic_energy_mj": "dyn mJ",
              "fps_per_w": "FPS/W"}
    for c in power:
        table.add_column(labels[c], justify="right", no_wrap=True)
    table.add_column("flag", no_wrap=True)
    groups = {g["label"]: g for g in tables.info.get("fused", {}).get("groups") or []}
    grouped = group_rows(tables)  # the CSV's group rows, as written
    group_cells = {} if grouped is None else \
        {r["group"]: r for r in grouped.to_dict("records")}
    for r in df.itertuples(index=False):
        row = r._asdict()
        label = row.get("group")
        member = isinstance(label, str) and label in groups
        low = bool(row["below_resolution"]) and not member
        t, h = float(row["time_ms_mean"]), float(row["time_ms_ci95"])
        cells = [str(row["layer"]), short_ops(row["op_types"]),
                 f"<{t + h:.3f}" if low else _f(t), _f(h), _f(row["time_ms_sliced_median"]),
                 _f(row["transfer_ms_mean"]), _kib(row["bytes_in"]), _kib(row["bytes_out"]),
                 _f(row["macs"] / 1e6, 2)]
        cells += ["" if low and c != "power_w" else _f(row[c]) for c in power]
        # a group's layer: its share as the prefixes split it; the group's row is the figure
        cells.append(f"in {label}" if member else "below resolution" if low else "")
        table.add_row(*cells, style="dim" if member else None)
        g = groups.get(label) if member else None
        if g is not None and g["last"] == row["layer"]:
            gl = bool(g["below_resolution"])
            gt, gh = float(g["time_ms"]), float(g["ci95_ms"])
            grow = group_cells.get(g["label"], {})
            table.add_row(g["label"].replace("layers ", ""), g["describe"].split(", ", 1)[1],
                          f"<{gt + gh:.3f}" if gl else _f(gt), _f(gh), "", "", "", "", "",
                          *[_f(grow[c]) if c in grow and not gl else "" for c in power],
                          "below resolution" if gl else "group", style="bold")
    table.add_section()
    fixed = fixed_row(tables)  # the CSV's fixed row, as written
    fixed_cells = fixed.iloc[0].to_dict() if fixed is not None else {}
    table.add_row("fixed", "per call", _f(tot.get("fixed_ms")), _f(tot.get("fixed_ms_ci95")),
                  "", "", "", "", "",
                  *[_f(fixed_cells[c]) if c in fixed_cells else "" for c in power], "")
    # rows below resolution: layers in no group, and groups
    in_group = df["group"].notna() if "group" in df.columns else pd.Series(False, index=df.index)
    lows = int((df["below_resolution"].astype(bool) & ~in_group).sum()) + sum(
        bool(g["below_resolution"]) for g in groups.values())
    # One call of the whole model: the sidecar's totals (W x ms = mJ); sliced: its sums.
    table.add_row("total", f"{len(df)} layers + fixed",
                  _f(tot.get("time_ms_mean")), "",
                  _f(tot.get("time_ms_sliced_median")), _f(tot.get("transfer_ms_sliced_mean")),
                  "", "", _f(tot.get("macs", 0) / 1e6, 2),
                  *[_f(tot.get(c)) for c in power],
                  f"{lows} below resolution" if lows else "", style="bold")
    return table


def _fused_caption(tables: RunTables) -> str:
    tot, fused = tables.totals, tables.info.get("fused", {})
    settings = fused.get("settings", {})
    nan = float("nan")
    # The per-frame figures every output gives (the sidecar's totals, `frame_figures`).
    text = (f"per frame, one call of the whole model: {tot.get('time_ms_mean', nan):.3f} ± "
            f"{tot.get('time_ms_ci95', nan):.3f} ms = {tot.get('fps', nan):.1f} FPS")
    if "energy_mj" in tot:
        text += (f", {tot['energy_mj']:.3f} mJ = {tot.get('power_w', nan):.3f} W, "
                 f"{tot.get('fps_per_w', nan):.2f} FPS/W")
    whole = tot.get("whole_ms", nan)
    if abs(whole - tot.get("time_ms_mean", nan)) >= 0.0005:  # windows: not the same figure
        text += f" (the whole model in the rounds: {whole:.3f} ms)"
    text += _sum_warning(tot)
    text += _chain_warning(fused)
    text += (f"; {int(tot.get('rounds', 0))} interleaved rounds in {fused.get('elapsed_s', 0):.1f} s"
            f" (budget {settings.get('budget_s', '?')} s, "
            f"{'every interval within target' if fused.get('converged') else 'budget or rounds spent'})"
            f"; sliced: {tables.info.get('frames', '?')} frames")
    groups = fused.get("groups") or []
    if groups:
        text += (f"; {len(groups)} group{'s' if len(groups) > 1 else ''} of layers reported as "
                 "one row (docs/fused.md, \"Rows that alternate\")")
    if any(fused.get("end_ms") or []):
        text += "; each prefix's end (its outputs reduced, joined, read back) measured and taken out"
    if fused.get("cache") == "cold":
        choice = fused.get("cache_choice") or {}
        llc, weights = choice.get("llc_bytes"), choice.get("weight_bytes")
        text += "; calls timed cold (the last-level cache"
        text += f", {llc / 2**20:.0f} MiB, emptied before each; the weights: " \
            f"{weights / 2**20:.0f} MiB" if llc and weights else " emptied before each"
        text += f"; {choice['reason']})" if choice.get("reason") else ")"
    alone = fused.get("whole_alone_ms")
    if alone is not None:
        text += f"; the whole model alone after the rounds: {alone:.3f} ms/call"
        mean, factor = fused.get("whole_alone_mean_ms"), fused.get("call_factor")
        if mean is not None and factor is not None:
            text += (f" undisturbed, {mean:.3f} on average (predictions price this "
                     f"processor's calls x{factor:.3f})")
    if "whole_energy_mj" in tot:
        text += ("; energy = differences of prefix energies per call (each prefix's power "
                 "run back to back x its time; the fixed row: the empty prefix's)")
    elif "energy_mj" in tot:
        text += ("; energy = each layer's power x its fused time; the fixed row's: "
                 f"{fused.get('fixed_energy', 'priced from the sliced frames')}")
    return text


#: Rows plus fixed row further than this share from the whole model in the same rounds
#: (and outside three of its intervals) are a table not to price runs from: seen at 0.553
#: on an H200's G, prefixes in blocks run at different clocks (data/validation/h200-run).
SUM_WARN_REL = 0.05


def misses_whole(part: float, whole: float, ci: float) -> bool:
    """Whether rows adding up to ``part`` miss the whole model's ``whole`` (95 %
    half-width ``ci``) by over ``SUM_WARN_REL`` of it and three of its intervals."""
    gap = abs(part - whole)
    return gap > SUM_WARN_REL * whole and gap > 3 * ci


def _sum_warning(tot: dict[str, Any]) -> str:
    """A warning where the rows do not add up to the whole model measured beside them
    (time, and energy where prefix energies were measured); else ''."""
    out = []
    for name, unit, part, whole, ci in (
            ("time", "ms", tot.get("time_ms_mean"), tot.get("whole_ms"),
             tot.get("whole_ms_ci95") or 0.0),
            ("energy", "mJ", tot.get("energy_mj"), tot.get("whole_energy_mj"), 0.0)):
        if part is None or whole is None or not whole > 0 or pd.isna(part):
            continue
        if misses_whole(part, whole, ci):
            out.append(f"the rows' {name} adds up to {part / whole:.3f} of the whole model's "
                       f"{whole:.3f} {unit}")
    if not out:
        return ""
    return ("; WARNING: " + " and ".join(out) + " in the same rounds: do not price runs "
            "from this table (prefixes measured at different speeds, e.g. blocks at "
            "different clocks; measure again, or with --loaded-mb 0)")


#: Blocks of prefixes tied by a scale further from 1 than this factor are said to be.
CHAIN_WARN_FACTOR = 1.25


def _chain_warning(fused: dict[str, Any]) -> str:
    """A note where the prefixes' blocks were tied by scales far from 1 (`chain_blocks`):
    the rows add up, but an early block's rows are only as good as the ties after it; on
    an H200 the ties compounded a 0.3-7 % bias per block (docs/fused.md, "Memory")."""
    scales = (fused.get("block_chain") or {}).get("block_scales") or []
    if not scales or all(1 / CHAIN_WARN_FACTOR <= k <= CHAIN_WARN_FACTOR for k in scales):
        return ""
    return (f"; NOTE: its {len(scales)} blocks of prefixes were tied onto the last one by "
            f"scales of {min(scales):.2f}-{max(scales):.2f}: the rows add up to the whole "
            "model, but how they split among the blocks is only as good as those ties "
            "(--loaded-mb 0 measures every prefix in the same rounds, memory allowing)")


def _flags(df: pd.DataFrame, column: str, test: Callable[[Any], bool]) -> dict[int, bool]:
    """{layer: flagged} when any layer is flagged in `column`, else {} (column not shown)."""
    if column not in df.columns:
        return {}
    flags = {int(layer): bool(test(v)) for layer, v in zip(df["layer"], df[column], strict=True)}
    return flags if any(flags.values()) else {}


def _lost_text(row: dict[str, Any]) -> str:
    parts = []
    if "lost_frames" in row and not pd.isna(row["lost_frames"]) and int(row["lost_frames"]):
        parts.append(f"lost {_count(int(row['lost_frames']), 'frame')}")
    if "flagged_windows" in row and not pd.isna(row["flagged_windows"]) \
            and int(row["flagged_windows"]):
        parts.append(f"{_count(int(row['flagged_windows']), 'window')} set aside")
    return ", ".join(parts) or "flagged"


def _caption(tables: RunTables) -> str:
    tot, info = tables.totals, tables.info
    if "latency_ms_mean" not in tot:
        return ""
    text = (f"latency {tot['latency_ms_mean']:.3f} ms/frame (compute {tot['time_ms_mean']:.3f}"
            f" + transfer {tot['transfer_ms_mean']:.3f}) = {tot['fps']:.1f} FPS; "
            f"{info.get('frames', '?')} frames after {info.get('warmup', '?')} warm-up")
    if "lost_frames" in tot:
        text += f"; logger frames lost: {int(tot['lost_frames'])}"
    return text


def render_text(tables: RunTables, width: int = 160) -> str:
    """The rendered table as plain text (for tests and logs)."""
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, force_terminal=False).print(render(tables))
    return buf.getvalue()
