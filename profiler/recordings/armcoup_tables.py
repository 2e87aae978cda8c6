"""ARM-CO-UP's derived tables as coupprof tables.

``Layers.csv`` becomes, per graph, rows in coupprof's layer-table schema (the sweep's), one
per (processor, level, host level, layer), levels 1-based; ``Transfers.csv`` becomes
coupprof's transfer table (its repeated rows averaged). Fields their tables lack stay
empty.

Which column becomes which: docs/recordings.md ("ARM-CO-UP's derived tables").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.boards.model import Board
from profiler.errors import BadInputError

LAYERS_COLUMNS = ("Graph", "Component", "Freq", "Freq_Host", "Layer", "Metric", "Time", "Power")
TRANSFERS_COLUMNS = ("Graph", "Layer", "Dest", "Src", "Time")
EXTRA_METRICS = {"in": "input_ms", "out": "output_ms", "NPU_load": "npu_load_ms",
                 "NPU_run_get": "npu_run_get_ms", "NPU_fill_tensor": "npu_fill_tensor_ms"}


@dataclass
class ImportedTables:
    """One graph's tables."""

    model: str
    layers: pd.DataFrame
    transfers: pd.DataFrame | None
    blank_rows: int = 0


def _read(path: Path, columns: tuple[str, ...], what: str) -> pd.DataFrame:
    if not path.is_file():
        raise BadInputError(f"{what} not found: {path}")
    try:
        df = pd.read_csv(path)
    except (ValueError, OSError, pd.errors.ParserError) as err:
        raise BadInputError(f"cannot read {path} as CSV: {err}") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise BadInputError(f"{path} is not ARM-CO-UP's {what} (no column "
                            f"{', '.join(missing)}; it has {', '.join(map(str, df.columns))})")
    return df


def sniff(path: Path) -> str | None:
    """'layers' or 'transfers' when the file's header is ARM-CO-UP's, else None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.readline().strip().split(",")
    except OSError:
        return None
    if tuple(head) == LAYERS_COLUMNS:
        return "layers"
    if tuple(head) == TRANSFERS_COLUMNS:
        return "transfers"
    return None


def _khz(board: Board | None, letter: str, level: int | None) -> int | None:
    """kHz of a 1-based level of `letter` (N: its host's) on `board`, where known."""
    if board is None or level is None or letter not in board.processors:
        return None
    proc = board.processors[letter]
    if not proc.freqs_khz and proc.host and proc.host in board.processors:
        proc = board.processors[proc.host]
    freqs = proc.freqs_khz
    return int(freqs[level - 1]) if 1 <= level <= len(freqs) else None


def layers_table(path: str | Path, board: Board | None, board_name: str) -> tuple[
        dict[str, pd.DataFrame], int]:
    """Per graph, its layer rows; and how many blank lines the file had."""
    p = Path(path)
    df = _read(p, LAYERS_COLUMNS, "Layers.csv")
    blank = int(df[list(LAYERS_COLUMNS)].isna().all(axis=1).sum())
    df = df.dropna(subset=["Graph", "Component", "Freq", "Layer", "Metric"])
    bad = df[~df["Metric"].isin(["task", *EXTRA_METRICS])]
    if len(bad):
        raise BadInputError(f"{p}: unknown Metric {bad['Metric'].iloc[0]!r}",
                            "expected task, in, out, NPU_load, NPU_run_get, NPU_fill_tensor")
    df = df.assign(Freq=df["Freq"].astype(int), Freq_Host=df["Freq_Host"].fillna(-1).astype(int),
                   Layer=df["Layer"].astype(int))
    key = ["Graph", "Component", "Freq", "Freq_Host", "Layer"]
    out: dict[str, pd.DataFrame] = {}
    for graph, g in df.groupby("Graph", sort=False):
        wide = g.pivot_table(index=key, columns="Metric", values=["Time", "Power"],
                             aggfunc="first")
        rows = []
        for (gname, comp, freq, host, layer), r in wide.iterrows():
            letter = str(comp)
            level = int(freq) + 1
            host_level = int(host) + 1 if int(host) >= 0 else None
            time_ms = r.get(("Time", "task"), np.nan)
            power_mw = r.get(("Power", "task"), np.nan)
            energy = power_mw / 1000.0 * time_ms if np.isfinite(power_mw) and \
                np.isfinite(time_ms) else np.nan
            row = {
                "kind": "layer", "board": board_name, "simulated": False, "model": str(gname),
                "processor": letter, "freq_level": level,
                "freq_khz": _khz(board, letter, level),
                "host_level": host_level,
                "host_freq_khz": _khz(board, board.processors[letter].host or "", host_level)
                if board is not None and letter in board.processors else None,
                "layer": int(layer), "time_ms_mean": time_ms, "transfer_ms_mean": np.nan,
                "power_w": power_mw / 1000.0, "energy_mj": energy,
                "fps_per_w": 1000.0 / energy if energy and np.isfinite(energy) else np.nan,
            }
            for metric, col in EXTRA_METRICS.items():
                row[col] = r.get(("Time", metric), np.nan)
            row["input_power_w"] = r.get(("Power", "in"), np.nan) / 1000.0
            rows.append(row)
        t = pd.DataFrame(rows)
        for col in ("freq_level", "freq_khz", "host_level", "host_freq_khz"):
            t[col] = t[col].astype("Int64")
        t = t.sort_values(["processor", "freq_level", "layer", "host_level"],
                          ascending=[True, True, True, False], na_position="last",
                          kind="stable").reset_index(drop=True)
        # Columns that are empty for every row of this graph are left out.
        t = t[[c for c in t.columns if t[c].notna().any() or c in ("transfer_ms_mean",)]]
        out[str(graph)] = t
    return out, blank


def transfers_table(path: str | Path) -> dict[str, pd.DataFrame]:
    """Per graph, coupprof's transfer table."""
    p = Path(path)
    df = _read(p, TRANSFERS_COLUMNS, "Transfers.csv").dropna(how="all")
    df = df.assign(Layer=df["Layer"].astype(int), Src=df["Src"].astype(str).str.upper(),
                   Dest=df["Dest"].astype(str).str.upper())
    out: dict[str, pd.DataFrame] = {}
    for graph, g in df.groupby("Graph", sort=False):
        agg = g.groupby(["Layer", "Src", "Dest"], sort=True)["Time"].agg(["mean", "size"])
        t = pd.DataFrame({
            "boundary": [k[0] for k in agg.index], "src": [k[1] for k in agg.index],
            "dst": [k[2] for k in agg.index], "bytes": pd.array([None] * len(agg), dtype="Int64"),
            "time_ms_mean": agg["mean"].to_numpy(), "rows": agg["size"].to_numpy(),
        })
        out[str(graph)] = t
    return out
