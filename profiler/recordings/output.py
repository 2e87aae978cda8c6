"""What `coupprof import` writes: coupprof layer tables, the methods side by side, sidecars.

A trace's layer table has the sweep's layer-row schema (``kind``, ID columns, one row
per processor, level and layer) so ``coupprof plot efficiency`` and the notebooks read
it, plus: ``host_level`` / ``host_freq_khz``, ``window_ms_mean`` (the marker window in
the trace), ``console_ms`` (the console log's time), ``windows`` and ``flagged_windows``
(set aside by a fault), ``outlier_windows`` (far over the layer's time: trimmed by the
coupprof method, kept by armcoup's), ``samples``, ``method``, ``flags``. The comparison
table has one row per setting and layer (and the ``in`` window) with both methods'
power, the difference in percent and, when ARM-CO-UP's Layers.csv is given, its
published value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler.boards.model import Board
from profiler.errors import BadInputError
from profiler.jsonfile import json_default
from profiler.recordings.attribute import COUPPROF, LayerFigure, RecordingFigures
from profiler.recordings.outliers import RATIO, WindowOutliers

IMPORT_FORMAT = "coupprof-import/1"

UNITS = {
    "time_ms": "ms per frame; coupprof: marker window in the trace (an outlier window "
               "trimmed to its reference); armcoup: console log",
    "window_ms_mean": "ms, marker window in the trace (edge to edge)",
    "console_ms": "ms, the console log's layer time",
    "power_w": "W, whole board, mean over the layer's windows",
    "energy_mj": "mJ per frame = power_w x time_ms_mean",
    "fps_per_w": "frames per joule of the layer (1 / energy in J)",
    "samples": "readings inside the windows",
    "input_ms": "ms, the frame's first marker gap (input), mean window",
    "input_power_w": "W over that gap",
}


@dataclass(frozen=True)
class RunIdentity:
    board: str
    model: str
    order: str


def _level_khz(board: Board | None, letter: str, level: int) -> tuple[int | None, int | None]:
    """(kHz of the level, host letter's kHz) for `letter` at a setting's 1-based level."""
    if board is None or letter not in board.processors:
        return None, None
    proc = board.processors[letter]
    table = proc if proc.freqs_khz else board.processors.get(proc.host or "", proc)
    khz = int(table.freqs_khz[level - 1]) if 1 <= level <= len(table.freqs_khz) else None
    return khz, khz if proc.host else None


def layer_rows(att: RecordingFigures, ident: RunIdentity, levels: list[int],
               board: Board | None, flagged: dict[int, list[int]],
               outliers: WindowOutliers | None = None) -> pd.DataFrame:
    """The layer table (``task`` figures only)."""
    rows: list[dict[str, Any]] = []
    inputs = {f.setting: f for f in att.figures if f.metric == "in"}
    for f in att.figures:
        if f.metric != "task":
            continue
        letter = ident.order[f.layer]
        level = levels[f.setting]
        khz, host_khz = _level_khz(board, letter, level)
        host = board.processors[letter].host if board is not None and \
            letter in board.processors else None
        flags = []
        if f.set_aside:
            flags.append(f"{f.set_aside} window(s) set aside (frames "
                         f"{','.join(map(str, flagged.get(f.setting, [])))})")
        if any(s == f.setting for s, _, _ in att.previous_frequency) and f.layer == 0:
            flags.append("frame 0 at the previous frequency")
        over = outliers.of_layer(f.setting, f.layer) if outliers is not None else []
        if over:
            flags.append(f"{len(over)} window(s) over {RATIO:g}x the layer's time "
                         + ("trimmed" if att.method == COUPPROF else "kept")
                         + f" (frames {','.join(str(o.frame) for o in over)})")
        energy = f.energy_mj
        rows.append({
            "kind": "layer", "board": ident.board, "simulated": False, "model": ident.model,
            "processor": letter, "freq_level": level, "freq_khz": khz,
            "host_level": level if host else None, "host_freq_khz": host_khz,
            "layer": f.layer, "time_ms_mean": f.time_ms_mean, "time_ms_median": f.time_ms_median,
            "time_ms_p95": f.time_ms_p95, "time_ms_std": f.time_ms_std,
            "transfer_ms_mean": np.nan, "frames": f.windows,
            "power_w": f.power_mw / 1000.0, "energy_mj": energy,
            "fps_per_w": 1000.0 / energy if energy > 0 else np.nan, "samples": f.samples,
            "window_ms_mean": f.window_ms_mean, "console_ms": f.console_ms,
            "windows": f.windows, "flagged_windows": f.set_aside,
            "outlier_windows": len(over), "method": att.method,
            "flags": "; ".join(flags),
            # the frame's first gap (input), on layer 0's row as in the Layers.csv import
            "input_ms": inputs[f.setting].window_ms_mean
            if f.layer == 0 and f.setting in inputs else np.nan,
            "input_power_w": inputs[f.setting].power_mw / 1000.0
            if f.layer == 0 and f.setting in inputs else np.nan,
        })
    df = pd.DataFrame(rows)
    for col in ("freq_level", "freq_khz", "host_level", "host_freq_khz"):
        df[col] = df[col].astype("Int64")
    return df


def compare_rows(ours: RecordingFigures, theirs: RecordingFigures, ident: RunIdentity,
                 levels: list[int], published: pd.DataFrame | None) -> pd.DataFrame:
    """Both methods per setting and layer; ``published_mw`` from Layers.csv where given."""
    mine = {(f.setting, f.metric, f.layer): f for f in ours.figures}
    rows = []
    for f in theirs.figures:
        o: LayerFigure | None = mine.get((f.setting, f.metric, f.layer))
        letter = ident.order[f.layer]
        row = {"model": ident.model, "processor": letter, "freq_level": levels[f.setting],
               "metric": f.metric, "layer": f.layer,
               "armcoup_power_mw": f.power_mw,
               "coupprof_power_mw": o.power_mw if o else np.nan,
               "diff_pct": (o.power_mw / f.power_mw - 1) * 100 if o else np.nan,
               "armcoup_time_ms": f.time_ms_mean,
               "coupprof_time_ms": o.time_ms_mean if o else np.nan,
               "armcoup_windows": f.windows, "coupprof_windows": o.windows if o else 0}
        # ARM-CO-UP profiled each processor with a uniform order, except the NPU, which
        # alternates with its host (NBNB..., BNBN...): of those runs only N rows are theirs.
        theirs_here = len(set(ident.order)) == 1 or letter == "N"
        if published is not None:
            pub = _published(published, ident.model, letter, levels[f.setting] - 1, f.layer,
                             f.metric) if theirs_here else None
            row["published_mw"] = pub
            row["armcoup_vs_published_rel"] = abs(f.power_mw - pub) / abs(pub) \
                if pub is not None and pub else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def _published(df: pd.DataFrame, model: str, letter: str, freq0: int, layer: int,
               metric: str) -> float | None:
    r = df[(df["Graph"] == model) & (df["Component"] == letter) & (df["Freq"] == freq0)
           & (df["Layer"] == layer) & (df["Metric"] == metric)]
    if letter in ("N",):
        r = r[r["Freq_Host"] == freq0]
    elif letter != "G":
        r = r[r["Freq_Host"] == -1]
    if len(r) != 1 or pd.isna(r["Power"].iloc[0]):
        return None
    return float(r["Power"].iloc[0])


def write_csv_json(df: pd.DataFrame, csv_path: Path, sidecar: dict[str, Any]) -> tuple[Path, Path]:
    json_path = csv_path.with_suffix(".json")
    try:
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(csv_path, index=False)
        json_path.write_text(json.dumps({"format": IMPORT_FORMAT, "csv": csv_path.name,
                                         **sidecar}, indent=2, default=json_default) + "\n")
    except OSError as err:
        raise BadInputError(f"cannot write {err.filename or csv_path}: {err.strerror}",
                            "choose a writable directory with -o") from None
    return csv_path, json_path


def units() -> dict[str, str]:
    return dict(UNITS)
