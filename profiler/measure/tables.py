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

SIDE_CAR_FORMAT = "coupprof-layers/1"

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
    "transfer_ms": "ms, hand-over of the layer's inputs into its sub-model",
    "bytes_in": "bytes, sum of the layer's input tensors",
    "bytes_out": "bytes, sum of the layer's output tensors",
    "macs": "multiply-accumulates per frame",
    "param_bytes": "bytes of constant tensors (weights, biases)",
    "start_ns": "ns, host clock (time.perf_counter_ns)",
    "power_w": "W, mean over the layer's windows",
    "energy_mj": "mJ per frame",
    "dynamic_energy_mj": "mJ per frame above the idle baseline",
    "fps_per_w": "frames per joule of the layer (1 / energy in J)",
    "latency_ms": "ms per frame, compute + transfer",
    "time_ms_fused": "ms, the layer inside one uninterrupted run of the model: "
                     "T(prefix 0..k) - T(prefix 0..k-1), 20 % trimmed mean over interleaved rounds "
                     "(fixed row: the empty prefix, the fixed cost per call)",
    "time_ms_fused_ci95": "ms, half-width of time_ms_fused's 95 % interval",
    "below_resolution": "true when time_ms_fused's interval reaches 0: an upper bound only",
    "energy_mj_sliced": "mJ per frame of the layer's sliced windows (fused runs: energy_mj is "
                        "power_w x time_ms_fused)",
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


def with_fused(tables: RunTables, fused: FusedResult,
               energy: FusedEnergy | None = None) -> RunTables:
    """`tables` of a sliced run plus the fused figures (see docs/measure.md). A
    layer's energy becomes its power (from its own windows) times its fused time, or,
    given the prefix ``energy`` of a counter source, the difference of prefix energies."""
    df = tables.layers.copy()
    n = len(df)
    if len(fused.layers) != n:
        raise ValueError(f"fused result has {len(fused.layers)} layers, the run {n}")
    t_ms = fused.times_ms()
    df["time_ms_fused"] = t_ms
    df["time_ms_fused_ci95"] = [layer.ci95_ms for layer in fused.layers]
    df["below_resolution"] = [layer.below_resolution for layer in fused.layers]
    if "sim_late_runs" in df.columns:  # a late prefix spoils the differences that use it
        df["sim_late_runs"] = df["sim_late_runs"].fillna(0).astype(int) + fused.layer_late_runs()
    tot = dict(tables.totals)
    baseline = float(tot.get("baseline_power_w", tables.info.get("extra", {}).get(
        "baseline_power_w", 0.0)) or 0.0)
    if energy is not None:
        e_mj = np.asarray(energy.layer_energy_mj, dtype=float)
        if "energy_mj" in df.columns:
            df["energy_mj_sliced"] = df["energy_mj"]
            tot["energy_mj_sliced"] = float(df["energy_mj_sliced"].sum())
        with np.errstate(divide="ignore", invalid="ignore"):
            df["power_w"] = np.where(t_ms > 0, e_mj / t_ms, np.nan)
        df["energy_mj"] = e_mj
        df["dynamic_energy_mj"] = e_mj - baseline * t_ms
        df["fps_per_w"] = [1000.0 / e if e > 0 else float("inf") for e in e_mj]
        tot["energy_mj"] = float(e_mj.sum())
        tot["dynamic_energy_mj"] = float(df["dynamic_energy_mj"].sum())
        tot["fixed_energy_mj"] = energy.fixed_energy_mj
        tot["whole_energy_mj"] = energy.whole_energy_mj
        tot["fps_per_w"] = 1000.0 / energy.whole_energy_mj if energy.whole_energy_mj > 0 \
            else float("inf")
    elif "power_w" in df.columns:
        df["energy_mj_sliced"] = df["energy_mj"]
        power = df["power_w"].to_numpy(dtype=float)
        df["energy_mj"] = power * t_ms
        df["dynamic_energy_mj"] = (power - baseline) * t_ms
        df["fps_per_w"] = [1000.0 / e if e > 0 else float("inf") for e in df["energy_mj"]]
        tot["energy_mj_sliced"] = float(df["energy_mj_sliced"].sum())
        tot["energy_mj"] = float(df["energy_mj"].sum())
        tot["dynamic_energy_mj"] = float(df["dynamic_energy_mj"].sum())
        tot["fps_per_w"] = 1000.0 / tot["energy_mj"] if tot["energy_mj"] > 0 else float("inf")
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
    return RunTables(layers=df, frames=tables.frames, info=info, totals=tot)


def fixed_row(tables: RunTables) -> pd.DataFrame | None:
    """The ``kind = "fixed"`` CSV row of a fused run (None for a sliced run)."""
    tot = tables.totals
    if "fixed_ms" not in tot:
        return None
    row = pd.DataFrame({"kind": ["fixed"], **id_columns(tables.info, 1),
                        "time_ms_fused": [tot["fixed_ms"]],
                        "time_ms_fused_ci95": [tot["fixed_ms_ci95"]]})
    if "fixed_energy_mj" in tot:
        row["energy_mj"] = [tot["fixed_energy_mj"]]
    return row


# -- files -------------------------------------------------------------------------


def default_json_path(csv_path: str | Path) -> Path:
    return Path(csv_path).with_suffix(".json")


def results_frame(tables: RunTables) -> pd.DataFrame:
    """The tidy CSV's rows: layer rows, the fixed row of a fused run, then frame rows."""
    parts = [tables.layers]
    fixed = fixed_row(tables)
    if fixed is not None:
        parts.append(fixed)
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
    """Load a CSV + sidecar written by `write_tables` (for re-rendering or notebooks)."""
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
    if meta.get("format") != SIDE_CAR_FORMAT or "kind" not in df.columns:
        raise BadInputError(f"{json_p} is not a coupprof layers sidecar",
                            "pass the CSV written by `coupprof layers`")
    tot = meta.pop("totals", {})
    for key in ("format", "csv", "raw_rows", "units"):
        meta.pop(key, None)

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
    if "time_ms_fused" in df.columns:
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
    for r in df.itertuples(index=False):
        row = r._asdict()
        low = bool(row["below_resolution"])
        t, h = float(row["time_ms_fused"]), float(row["time_ms_fused_ci95"])
        cells = [str(row["layer"]), short_ops(row["op_types"]),
                 f"<{t + h:.3f}" if low else _f(t), _f(h), _f(row["time_ms_median"]),
                 _f(row["transfer_ms_mean"]), _kib(row["bytes_in"]), _kib(row["bytes_out"]),
                 _f(row["macs"] / 1e6, 2)]
        cells += ["" if low and c != "power_w" else _f(row[c]) for c in power]
        cells.append("below resolution" if low else "")
        table.add_row(*cells)
    table.add_section()
    fixed_e = {"energy_mj": tot.get("fixed_energy_mj")}
    table.add_row("fixed", "per call", _f(tot.get("fixed_ms")), _f(tot.get("fixed_ms_ci95")),
                  "", "", "", "", "",
                  *[_f(fixed_e[c]) if fixed_e.get(c) is not None else "" for c in power], "")
    lows = int(df["below_resolution"].astype(bool).sum())
    table.add_row("total", f"{len(df)} layers + fixed",
                  _f(tot.get("fused_layer_sum_ms", 0.0) + tot.get("fixed_ms", 0.0)), "",
                  _f(tot.get("time_ms_median")), _f(tot.get("transfer_ms_mean")), "", "",
                  _f(tot.get("macs", 0) / 1e6, 2),
                  *[_f(tot.get("whole_energy_mj")) if c == "energy_mj" and "whole_energy_mj"
                    in tot else _f(tot.get(c)) for c in power],
                  f"{lows} below resolution" if lows else "", style="bold")
    return table


def _fused_caption(tables: RunTables) -> str:
    tot, fused = tables.totals, tables.info.get("fused", {})
    settings = fused.get("settings", {})
    whole = tot.get("whole_ms", float("nan"))
    text = (f"whole model, one call: {whole:.3f} ± {tot.get('whole_ms_ci95', float('nan')):.3f} ms"
            f" = {1000.0 / whole if whole > 0 else float('inf'):.1f} FPS; "
            f"{int(tot.get('rounds', 0))} interleaved rounds in {fused.get('elapsed_s', 0):.1f} s"
            f" (budget {settings.get('budget_s', '?')} s, "
            f"{'every interval within target' if fused.get('converged') else 'budget or rounds spent'})"
            f"; sliced: {tables.info.get('frames', '?')} frames")
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
                 "run back to back x its time), fixed row included in the total")
    elif "energy_mj" in tot:
        text += "; energy = each layer's power x its fused time (fixed row: not included)"
    return text


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
