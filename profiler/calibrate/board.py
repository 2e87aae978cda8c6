"""A simulated board calibrated on measured layers: fit every processor, write the profile.

Measured layers come from ARM-CO-UP's ``Layers.csv`` (`armcoup_measurements`: their
layer numbering mapped onto the zoo graphs they ran, `profiler.zoo.armcoup`) or from a
``coupprof sweep`` of a real board (`sweep_measurements`: the sweep's model sliced as the
sweep sliced it). Either way every row is one layer at one setting, with the operators
that layer holds (`profiler.sim.work`), its clocks and voltages from the board profile.

`calibrate_board` fits `profiler.calibrate.fit` per processor and gives a `Calibration`;
`profile_text` writes it into a board profile (TOML): the base profile's text with its
``[processors.X.sim.timing]`` / ``.power`` tables and ``[board.sim]`` replaced by the
fitted ones, the transition delays and operating points kept, and the provenance (source
file, its sha256, models, rows, command, date) in ``[board.sim.calibration]``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler.boards.model import Board, ProcessorSpec
from profiler.calibrate import fit
from profiler.errors import BadInputError
from profiler.sim import model as sim_model
from profiler.sim.perf import CUT_EFFECTS, PowerParams, TimingParams
from profiler.sim.work import OpWork, model_works


@dataclass
class Calibration:
    fits: dict[str, fit.ProcessorFit]
    idle_power_mw: float
    sensor_lag_ms: float | None
    provenance: dict[str, Any] = field(default_factory=dict)
    idle_fitted: bool = True  # False: no measured power, the idle power is the prior's


def calibrate_board(measurements: Mapping[str, fit.Measurements],
                    progress: Callable[[str], None] | None = None,
                    prior_idle_mw: float = 0.0) -> Calibration:
    """Fit every processor of `measurements`; the board's idle power is the median of
    the processors' fitted idle powers (each fit sees the board idle between layers), or
    `prior_idle_mw` where no layer has a measured power."""
    fits: dict[str, fit.ProcessorFit] = {}
    for letter, m in measurements.items():
        fits[letter] = fit.fit_processor(m)
        if progress is not None:
            progress(letter)
    powered = [f.power for f in fits.values() if f.power is not None]
    idle = float(np.median([p.idle_mw for p in powered])) if powered else prior_idle_mw
    lag = float(np.median([p.lag_ms for p in powered])) if powered else None
    return Calibration(fits, idle, lag, idle_fitted=bool(powered))


# ---- measured layers --------------------------------------------------------------------

def _volts(proc: ProcessorSpec, khz: pd.Series) -> np.ndarray:
    table = dict(zip(proc.freqs_khz, proc.volts_mv, strict=False))
    v = khz.map(lambda k: table.get(int(k)) if pd.notna(k) else None)
    if v.isna().any():
        bad = int(khz[v.isna()].iloc[0]) if khz[v.isna()].notna().any() else None
        raise BadInputError(f"board profile has no voltage for processor {proc.letter} at "
                            f"{'an unknown level' if bad is None else f'{bad / 1000:g} MHz'}",
                            "add volts_mv to the profile (the power model needs V^2 f)")
    return v.to_numpy(np.float64) / 1000


def _nominal(proc: ProcessorSpec) -> tuple[float, float]:
    sim = proc.extra.get("sim", {})
    khz, mv = sim.get("nominal_khz"), sim.get("nominal_mv")
    if khz is None or mv is None:
        raise BadInputError(f"processor {proc.letter} has no DVFS table and no nominal "
                            "operating point (nominal_khz / nominal_mv in its sim table)",
                            "calibrate onto a board profile whose N has one (--base sim)")
    return float(khz), float(mv) / 1000


def measurement_rows(board: Board, letter: str, model: str, t: pd.DataFrame,
                     time_col: str) -> pd.DataFrame:
    """`fit.ROW_COLUMNS` for one model's rows of processor `letter` (coupprof's layer
    schema: freq_khz; host_freq_khz for G; N's freq_khz is its host's)."""
    proc = board.processor(letter)
    host = board.processors.get(proc.host) if proc.host else None
    khz = t["freq_khz"].astype("Float64")
    if proc.has_dvfs:
        f, v = khz.to_numpy(np.float64), _volts(proc, khz)
        if host is not None and "host_freq_khz" in t and t["host_freq_khz"].notna().all():
            hk = t["host_freq_khz"].astype("Float64")
            fh, vh = hk.to_numpy(np.float64), _volts(host, hk)
        else:
            fh, vh = f, np.zeros(len(t))
    else:  # the NPU: its own nominal point, its level is its host's
        nk, nv = _nominal(proc)
        f, v = np.full(len(t), nk), np.full(len(t), nv)
        if host is None:
            raise BadInputError(f"processor {letter} has neither DVFS nor a host cluster")
        fh, vh = khz.to_numpy(np.float64), _volts(host, khz)
    power = t["power_w"] if "power_w" in t else pd.Series(np.nan, index=t.index)
    return pd.DataFrame({
        "model": model, "layer": t["layer"].astype(int).to_numpy(),
        "f_ghz": f / 1e6, "fh_ghz": fh / 1e6, "volts": v, "host_volts": vh,
        "time_ms": t[time_col].astype(float).to_numpy(),
        "power_w": power.astype(float).to_numpy()})


def _priors(proc: ProcessorSpec) -> tuple[TimingParams | None, PowerParams | None]:
    """The processor's model before the fit (its profile's tables): what a parameter the
    measured layers cannot tell apart keeps (`fit.held_at_prior`)."""
    if "sim" not in proc.extra:
        return None, None
    c = sim_model.constants(proc)
    return c.timing, c.power


def _runtime_rules(proc: ProcessorSpec) -> dict[str, float]:
    """The timing parameters the base board's processor fixes for its runtime (kept
    through a calibration; a processor without a sim model keeps the defaults)."""
    if "sim" not in proc.extra:
        return {}
    t = sim_model.constants(proc).timing
    # what a call's end and the runtime's kernels cost by where a call is cut: the
    # runtime's, not a fit (sliced layers each hand out one output, so they cannot tell
    # a read-back from the fixed cost)
    return {"winograd_min_in_channels": t.winograd_min_in_channels,
            **{name: getattr(t, name) for name in CUT_EFFECTS}}


def _collect(board: Board, per_model: Mapping[str, tuple[pd.DataFrame, list[list[OpWork]]]],
             time_col: str) -> dict[str, fit.Measurements]:
    rows: dict[str, list[pd.DataFrame]] = {}
    works: dict[tuple[str, int], list[OpWork]] = {}
    for model, (table, layer_works) in per_model.items():
        for k, w in enumerate(layer_works):
            works[(model, k)] = w
        for letter, t in table.groupby("processor", sort=False):
            t = t[t[time_col].notna() & (t[time_col] > 0)]
            if len(t):
                rows.setdefault(str(letter), []).append(
                    measurement_rows(board, str(letter), model, t, time_col))
    out = {}
    order = {p: i for i, p in enumerate(board.processors)}
    for letter, parts in sorted(rows.items(), key=lambda kv: order.get(kv[0], 99)):
        proc = board.processor(letter)
        top = proc.freqs_khz[-1] if proc.has_dvfs else _nominal(proc)[0]
        host = board.processors.get(proc.host) if proc.host else None
        prior_timing, prior_power = _priors(proc)
        out[letter] = fit.Measurements(
            letter, pd.concat(parts, ignore_index=True), works, top / 1e6,
            proc.host is not None, _runtime_rules(proc), prior_timing, prior_power,
            dvfs=proc.has_dvfs, host_dvfs=host is not None and host.has_dvfs)
    return out


def armcoup_measurements(layers_csv: str | Path, board: Board,
                         graphs: Sequence[str] | None = None, duplicates: str = "last",
                         notes: list[str] | None = None) -> dict[str, fit.Measurements]:
    """ARM-CO-UP's ``Layers.csv`` `task` rows of the graphs coupprof has (all but YOLOv3),
    each layer with the zoo graph's operators of that layer. Levels named in the table
    (max, min) map through ``board``; ``duplicates``: which copy of a row listed more than
    once is kept (`profiler.recordings.armcoup_tables.read_layers`), said in ``notes``."""
    from profiler.recordings.armcoup_tables import layers_table
    from profiler.zoo import armcoup

    tables, read = layers_table(layers_csv, board, board.name, duplicates)
    if notes is not None:
        notes += read.notes
    wanted = list(graphs) if graphs is not None else [g for g in tables if g in armcoup.MODELS]
    per_model = {}
    for g in wanted:
        if g not in tables:
            raise BadInputError(f"{layers_csv} has no rows of graph {g}",
                                f"it has: {', '.join(tables)}")
        spec = armcoup.model_for(g)
        view = armcoup.load(spec, weights=False)
        per_model[g] = (tables[g], [model_works(view, ops)
                                    for ops in armcoup.layer_groups(spec, view)])
    return _collect(board, per_model, "time_ms_mean")


def sweep_measurements(sweep_dir: str | Path, board: Board) -> dict[str, fit.Measurements]:
    """A ``coupprof sweep`` output folder: each layer's sliced median time (a fused pair's
    time_ms_sliced_median) and power, with the operators of that layer as the sweep
    sliced the model."""
    from profiler.measure.tables import sliced_name, sliced_stat
    from profiler.slicing.graph import ModelView
    from profiler.slicing.slicer import slice_model
    from profiler.sweep.schema import read_sweep
    from profiler.tflite.model_io import parse_model, read_model_bytes

    sweep = read_sweep(Path(sweep_dir))
    df, settings = sweep.layers, sweep.meta.get("settings", {})
    path = Path(settings.get("model_path", ""))
    if not path.is_file():
        raise BadInputError(f"the sweep's model {path} is not there any more",
                            "calibrate where the sweep ran, or copy the model back")
    data = read_model_bytes(path)
    sliced = slice_model(data, settings.get("granularity", "layer"),
                         settings.get("slice_cuts"), cache_dir=False)
    view = ModelView.of(parse_model(data, str(path)))
    model = str(df["model"].iloc[0]) if len(df) else path.stem
    layer_works = [model_works(view, sorted(set(layer.op_indices))) for layer in sliced.layers]
    rows = df[df["kind"] == "layer"] if "kind" in df else df
    # the fit is of a layer called on its own: a fused pair keeps that as time_ms_sliced_*
    col = sliced_name("time_ms_median")
    return _collect(board, {model: (rows.assign(**{col: sliced_stat(rows, "median")}),
                                    layer_works)}, col)


# ---- TOML --------------------------------------------------------------------------------

def _num(v: float) -> str:
    if not math.isfinite(v):
        raise ValueError(f"cannot write {v!r} into a profile")
    return repr(float(f"{v:.6g}"))


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        return _num(float(v))
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} into a profile")


def toml_table(header: str, values: Mapping[str, Any]) -> list[str]:
    return [f"[{header}]", *(f"{k} = {_value(v)}" for k, v in values.items()), ""]


def timing_tables(letter: str, p: TimingParams) -> list[str]:
    d = p.to_table()
    rates = d.pop("macs_per_cycle")
    assert isinstance(rates, Mapping)  # to_table's one sub-table
    return [*toml_table(f"processors.{letter}.sim.timing", d),
            *toml_table(f"processors.{letter}.sim.timing.macs_per_cycle", rates)]


def power_table(letter: str, p: PowerParams) -> list[str]:
    return toml_table(f"processors.{letter}.sim.power", {
        "ceff_nf": p.ceff_nf, "static_mw_per_v2": p.static_mw_per_v2,
        "activity_memory": p.activity_memory, "activity_overhead": p.activity_overhead,
        "activity_weights": p.activity_weights,
        "host_ceff_nf": p.host_ceff_nf})


_HEADER = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]\s*(#.*)?$")


def _drop_tables(text: str, drop: Callable[[str], bool]) -> str:
    """`text` without the tables whose header `drop` selects (their keys included)."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            skipping = drop(m.group(1))
        if not skipping:
            out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out) + "\n"


def profile_text(base_text: str, cal: Calibration, *, kept: Mapping[str, Any] | None = None,
                 existing: Mapping[str, Any] | None = None) -> str:
    """The base profile with the calibration in place of its simulated-board model.

    `kept`: per processor, the keys of its old ``[processors.X.sim]`` table to keep
    (transition delays, a nominal operating point); `existing`: the old processors'
    power/timing tables, used for a processor the calibration has no fit for."""
    def drop(header: str) -> bool:
        parts = header.split(".")
        return (parts[:2] == ["board", "sim"]) or (
            len(parts) >= 3 and parts[0] == "processors" and parts[2] == "sim")

    lines = [_drop_tables(base_text, drop).rstrip(), ""]
    board_sim: dict[str, Any] = {"idle_power_mw": cal.idle_power_mw}
    if cal.sensor_lag_ms is not None:
        board_sim["sensor_lag_ms"] = cal.sensor_lag_ms
    board_sim["notes"] = (
        "FITTED by coupprof calibrate (see [board.sim.calibration]): the board's idle power "
        "while a processor waits between layers" if cal.idle_fitted else
        "PRIOR: no measured power to fit; the idle power the base profile had")
    lines += toml_table("board.sim", board_sim)
    if cal.provenance:
        lines += toml_table("board.sim.calibration", cal.provenance)
    letters = list(dict.fromkeys([*(kept or {}), *cal.fits]))
    for letter in letters:
        lines += toml_table(f"processors.{letter}.sim", dict((kept or {}).get(letter, {})))
        f = cal.fits.get(letter)
        old = (existing or {}).get(letter, {})
        if f is not None:
            lines += timing_tables(letter, f.timing)
        elif "timing" in old:
            lines += timing_tables(letter, TimingParams.from_table(old["timing"]))
        if f is not None and f.power is not None:
            lines += power_table(letter, f.power.power)
        elif "power" in old:
            lines += power_table(letter, PowerParams.from_table(old["power"]))
    return "\n".join(lines).rstrip() + "\n"
