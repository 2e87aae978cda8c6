"""ARM-CO-UP's derived tables as coupprof tables.

``Layers.csv`` becomes, per graph, rows in coupprof's layer-table schema (the sweep's), one
per (processor, level, host level, layer), levels 1-based; ``Transfers.csv`` becomes
coupprof's transfer table (its repeated rows averaged). Fields their tables lack stay
empty.

Their ``Freq`` / ``Freq_Host`` hold 0-based levels; a table of another board may name them
(``min``, ``max``) or give a frequency with its unit (``1800MHz``), which the board profile
maps to a level (`read_layers`). A table that lists a row more than once (two runs
appended) keeps one copy per key, the last by default, and says how many it dropped.

Which column becomes which: docs/recordings.md ("ARM-CO-UP's derived tables").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.boards.model import Board
from profiler.errors import BadInputError

LAYERS_COLUMNS = ("Graph", "Component", "Freq", "Freq_Host", "Layer", "Metric", "Time", "Power")
TRANSFERS_COLUMNS = ("Graph", "Layer", "Dest", "Src", "Time")
#: What makes two Layers.csv rows the same measurement.
KEY_COLUMNS = ("Graph", "Component", "Freq", "Freq_Host", "Layer", "Metric")
#: Which copy of a key listed more than once is kept (mean: Time and Power averaged).
DUPLICATES = ("first", "last", "mean")
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
        # Blank lines stay rows, so a row's index + 2 is its line in the file.
        df = pd.read_csv(path, skip_blank_lines=False)
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


@dataclass
class LayersFile:
    """Layers.csv's rows (LAYERS_COLUMNS), ``Freq`` / ``Freq_Host`` as 0-based levels
    (-1: none), one row per key (KEY_COLUMNS); and what reading it found."""

    rows: pd.DataFrame
    blank_rows: int = 0
    duplicate_rows: int = 0  # rows beyond the first copy of their key
    duplicate_keys: int = 0  # keys listed more than once
    duplicates: str = "last"
    notes: list[str] = field(default_factory=list)


_FREQ_TEXT = re.compile(r"^(\d+(?:\.\d*)?)\s*(khz|mhz|ghz)$")
_KHZ_PER = {"khz": 1.0, "mhz": 1e3, "ghz": 1e6}


def _cell(v: object) -> str:
    return "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v).strip()


def level_index(cell: str, freqs_khz: Sequence[int] | None) -> int | None:
    """0-based level a Freq / Freq_Host cell names (-1: none, blank or -1), or None when it
    names none of ``freqs_khz``: a level number (ARM-CO-UP's, 0-based), ``min``, ``max``,
    or a frequency with its unit (``1800MHz``). Without levels to check against (no board,
    or a processor with none) numbers pass as they are and names name nothing."""
    text = cell.strip().lower().replace(" ", "")
    if not text:
        return -1
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None:
        if not number.is_integer():
            return None
        idx = int(number)
        return idx if idx == -1 or not freqs_khz or 0 <= idx < len(freqs_khz) else None
    if not freqs_khz:
        return None
    if text in ("min", "max"):
        return 0 if text == "min" else len(freqs_khz) - 1
    m = _FREQ_TEXT.match(text)
    if m:
        khz = float(m[1]) * _KHZ_PER[m[2]]
        # within 0.5 %: a paper's 1417 MHz is the kernel's 1416000 kHz; levels differ more
        near = [i for i, f in enumerate(freqs_khz) if abs(f - khz) <= 0.005 * f]
        return near[0] if len(near) == 1 else None
    return None


def _column_levels(board: Board | None, letter: str, column: str
                   ) -> tuple[Sequence[int] | None, str]:
    """The kHz table a column's levels index for processor ``letter`` (Freq: its DVFS
    domain, its host's for an NPU; Freq_Host: its host's), and whose it is. None: no
    board to check against; (): the processor has no such levels."""
    if board is None:
        return None, letter
    proc = board.processors.get(letter)
    if proc is None:
        return (), letter
    if column == "Freq_Host":
        if not proc.host or proc.host not in board.processors:
            return (), f"{letter}'s host"
        proc = board.processors[proc.host]
    if not proc.freqs_khz and proc.host in board.processors:
        proc = board.processors[proc.host or ""]
    return proc.freqs_khz, proc.letter


def _levels_error(path: Path, board: Board | None, column: str, cell: str, line: int,
                  letter: str) -> BadInputError:
    freqs, whose = _column_levels(board, letter, column)
    where = f"{path.name}: {column} {cell!r} at line {line} (Component {letter})"
    if board is None:
        return BadInputError(f"{where} is not a level number",
                             "pass --board so min, max and frequencies map to its levels")
    if letter not in board.processors:
        return BadInputError(f"{where}: board {board.name!r} has no processor {letter}",
                             "pass --board with the profile of the board that made the table")
    if not freqs:
        return BadInputError(f"{where}: {whose} has no DVFS levels on board {board.name!r}",
                             "leave Freq_Host -1 or blank for it" if column == "Freq_Host"
                             else "give its level as a number")
    mhz = ", ".join(f"{f / 1000:g}MHz" for f in freqs)
    return BadInputError(f"{where} names no level of {whose} on board {board.name!r}",
                         f"accepted: a 0-based level 0-{len(freqs) - 1} (as ARM-CO-UP writes "
                         f"them), min, max, or a frequency with its unit: {mhz}")


def _map_levels(df: pd.DataFrame, board: Board | None, path: Path) -> pd.DataFrame:
    """Freq and Freq_Host as 0-based level numbers; a cell that names no level of the
    board's processor is one BadInputError naming the column, value and line."""
    letters = df["Component"].astype(str).str.strip().to_numpy()
    out = {}
    for column in ("Freq", "Freq_Host"):
        cells = [_cell(v) for v in df[column]]
        known: dict[tuple[str, str], int | None] = {}
        for key in set(zip(letters, cells, strict=True)):
            level = level_index(key[1], _column_levels(board, key[0], column)[0])
            # a row's own level is never "none" (Freq_Host is, for a CPU row)
            known[key] = None if column == "Freq" and level == -1 else level
        levels = [known[k] for k in zip(letters, cells, strict=True)]
        bad = next((i for i, v in enumerate(levels) if v is None), None)
        if bad is not None:
            raise _levels_error(path, board, column, cells[bad], int(df.index[bad]) + 2,
                                str(letters[bad]))
        out[column] = np.asarray(levels, dtype=np.int64)
    return df.assign(Component=letters, **out)


def _drop_duplicates(df: pd.DataFrame, how: str) -> tuple[pd.DataFrame, int, int]:
    """One row per key; the rows dropped and the keys that had copies."""
    if how not in DUPLICATES:
        raise BadInputError(f"--duplicates {how!r} is not one of {', '.join(DUPLICATES)}")
    key = list(KEY_COLUMNS)
    extra = int(df.duplicated(key).sum())
    if not extra:
        return df, 0, 0
    keys = int(df[df.duplicated(key, keep=False)].drop_duplicates(key).shape[0])
    if how == "mean":
        df = df.groupby(key, sort=False, as_index=False)[["Time", "Power"]].mean()
    else:
        df = df.drop_duplicates(key, keep=how)
    return df, extra, keys


def read_layers(path: str | Path, board: Board | None, duplicates: str = "last") -> LayersFile:
    """Layers.csv's measurement rows: levels mapped through ``board`` (None: numbers
    only, unchecked), blank rows dropped, one row per key (``duplicates``: which copy of
    a key listed more than once, or ``mean`` of their Time and Power)."""
    p = Path(path)
    df = _read(p, LAYERS_COLUMNS, "Layers.csv")[list(LAYERS_COLUMNS)]
    blank = int(df.isna().all(axis=1).sum())
    df = df.dropna(subset=["Graph", "Component", "Freq", "Layer", "Metric"])
    bad = df[~df["Metric"].isin(["task", *EXTRA_METRICS])]
    if len(bad):
        raise BadInputError(f"{p}: unknown Metric {bad['Metric'].iloc[0]!r}",
                            "expected task, in, out, NPU_load, NPU_run_get, NPU_fill_tensor")
    df = _map_levels(df, board, p).assign(Layer=df["Layer"].astype(int))
    df, extra, keys = _drop_duplicates(df, duplicates)
    notes = []
    if extra:
        kept = "averaged Time and Power over the copies" if duplicates == "mean" else \
            f"kept the {duplicates} copy of each"
        notes.append(f"{p.name} lists {keys} rows more than once ({extra} extra copies, as "
                     f"from several runs): {kept} (--duplicates first|last|mean)")
    return LayersFile(df.reset_index(drop=True), blank, extra, keys, duplicates, notes)


def layers_table(path: str | Path, board: Board | None, board_name: str,
                 duplicates: str = "last") -> tuple[dict[str, pd.DataFrame], LayersFile]:
    """Per graph, its layer rows; and the file as read (blank rows, duplicates, notes)."""
    read = read_layers(path, board, duplicates)
    df = read.rows
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
    return out, read


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
