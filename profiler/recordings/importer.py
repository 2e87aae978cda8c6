"""Import a recording or ARM-CO-UP's tables: the steps `coupprof import` calls, in order.

`import_trace`: read -> layout -> align (console log times where given) -> both methods
-> layer table + comparison table + sidecar. `import_tables`: Layers.csv /
Transfers.csv -> per-graph coupprof tables. Nothing here prints; results are returned.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler.boards.model import Board
from profiler.errors import BadInputError
from profiler.recordings.align import Alignment, align
from profiler.recordings.armcoup_tables import layers_table, read_layers, transfers_table
from profiler.recordings.attribute import (
    ARMCOUP,
    COUPPROF,
    RecordingFigures,
    armcoup_method,
    coupprof_method,
)
from profiler.recordings.console import ConsoleLog, read_console_log
from profiler.recordings.layout import RunLayout, Setting
from profiler.recordings.outliers import WindowOutliers, find_outliers
from profiler.recordings.output import RunIdentity, compare_rows, layer_rows, units
from profiler.recordings.traces import CsvSpec, Recording, read_armcoup_log, read_csv_trace

_ARMCOUP_NAME = re.compile(r"^power_(?P<model>.+)_(?P<order>[LBGN]+)\.csv$")


@dataclass(frozen=True)
class NameGuess:
    model: str
    order: str
    console: Path | None


def guess_from_name(path: Path) -> NameGuess | None:
    """ARM-CO-UP names its files power_<model>_<ORDER>.csv and time_<model>_<ORDER>.txt."""
    m = _ARMCOUP_NAME.match(path.name)
    if not m:
        return None
    console = path.with_name(f"time_{m['model']}_{m['order']}.txt")
    return NameGuess(m["model"], m["order"], console if console.is_file() else None)


def stepped_levels(board: Board | None, order: str) -> list[int] | None:
    """ARM-CO-UP's runs step through every level of the first layer's DVFS domain (for N
    its host cluster), in table order."""
    if board is None or not order or order[0] not in board.processors:
        return None
    proc = board.processors[order[0]]
    if not proc.freqs_khz and proc.host:
        proc = board.processors[proc.host]
    return list(range(1, len(proc.freqs_khz) + 1)) or None


@dataclass
class TraceImport:
    recording: Recording
    layout: RunLayout
    alignment: Alignment
    outliers: WindowOutliers
    ours: RecordingFigures
    theirs: RecordingFigures
    layers: pd.DataFrame  # the chosen method's layer table
    compare: pd.DataFrame
    sidecar: dict[str, Any]
    console: ConsoleLog | None = None
    warnings: list[str] = field(default_factory=list)


def read_trace(path: Path, fmt: str, spec: CsvSpec | None, active_level: int = 0) -> Recording:
    """``active_level``: an ARM-CO-UP log's pin while a layer runs (their board: 0)."""
    if fmt == "armcoup":
        return read_armcoup_log(path, active_level)
    if spec is None:
        raise BadInputError(f"{path} is not an ARM-CO-UP log; name its columns",
                            "pass --time-col, --power-col (or --current-col and a voltage) "
                            "and --marker-col")
    return read_csv_trace(path, spec)


def console_matrix(log: ConsoleLog | None, layout: RunLayout, npu_run: bool = False
                   ) -> np.ndarray | None:
    """(settings, layers) console times: the marker window's (``Layer Number``), or with
    ``npu_run`` ARM-CO-UP's Time column, which for an NPU layer is only its run
    (``AVG_prof_run_time``)."""
    if log is None:
        return None
    m = np.full((len(layout.settings), layout.layers), np.nan)
    for s, st in enumerate(log.settings[: len(layout.settings)]):
        for k, v in enumerate(st.layer_ms[: layout.layers]):
            m[s, k] = v
            if npu_run and k in st.npu_ms:
                m[s, k] = st.npu_ms[k]["npu_prof_run_ms"]
    return m


def import_trace(rec: Recording, layout: RunLayout, ident: RunIdentity, method: str,
                 board: Board | None, console: ConsoleLog | None = None,
                 published: pd.DataFrame | None = None, lag_ms: float | None = None,
                 progress: Callable[[int, int], None] | None = None) -> TraceImport:
    if method not in (ARMCOUP, COUPPROF):
        raise BadInputError(f"unknown method {method!r}", "use --method coupprof or armcoup")
    warnings: list[str] = []
    cm = console_matrix(console, layout)
    if console is not None and len(console.settings) != len(layout.settings):
        warnings.append(f"the console log has {len(console.settings)} settings, the layout "
                        f"{len(layout.settings)}")
    al = align(rec, layout, cm, progress)
    # Windows far over their layer's time: kept by the armcoup method (it reproduces the
    # published figures), trimmed by coupprof's; flagged in either's rows.
    outliers = find_outliers(al, cm)
    theirs = armcoup_method(rec, al, console_matrix(console, layout, npu_run=True))
    ours = coupprof_method(rec, al, cm, lag_ms, trim_ms=outliers.trimmed_ms())
    levels = [s.level for s in layout.settings]
    flagged: dict[int, list[int]] = {}
    for s, f in al.flagged:
        flagged.setdefault(s, []).append(f)
    chosen = ours if method == COUPPROF else theirs
    table = layer_rows(chosen, ident, levels, board, flagged, outliers)
    outlier_note = outliers.note(chosen.method == COUPPROF, levels)
    if outlier_note:
        warnings.append(outlier_note)
    compare = compare_rows(ours, theirs, ident, levels, published)
    if al.uncovered_settings:
        warnings.append(f"the recording does not cover setting(s) "
                        f"{', '.join(str(s) for s in al.uncovered_settings)} whole")
    if al.ignored_tail:
        warnings.append(f"{al.ignored_tail} marker segment(s) after the last expected window "
                        "were ignored")
    sidecar = {
        "source": {"path": str(rec.path), "sha256": rec.sha256, "format": rec.fmt,
                   "readings": rec.readings, "lines": rec.total_lines,
                   "skipped_lines": [[s.line, s.reason] for s in rec.skipped]},
        "console_log": None if console is None else str(console.path),
        "board": ident.board, "simulated": bool(board is not None and board.simulated),
        "model": ident.model, "order": ident.order,
        "method": chosen.method,
        "layout": {"settings": levels, "frames": layout.frames, "warmup": layout.warmup,
                   "layers": layout.layers, "trailing": layout.trailing,
                   "segments_expected": layout.total, "segments_observed": len(al.segs)},
        "alignment": {"faults": al.faults, "flagged_frames": [list(x) for x in al.flagged],
                      "uncovered_settings": al.uncovered_settings,
                      "ignored_segments": al.ignored_tail, "scored_with_console": al.console_used,
                      # measured frames' layer windows (the outliers' reference scale)
                      "window_over_console_median": outliers.console_ratio},
        "outlier_windows": outliers.sidecar(chosen.method == COUPPROF, levels),
        "sensor_lag_ms": ours.lag_ms, "sensor_lag_readings": ours.lag_readings,
        "lag_compensated": method == COUPPROF,
        "previous_frequency_frames": [{"setting": s, "first_layer_ms": d, "setting_median_ms": m}
                                      for s, d, m in ours.previous_frequency],
        "notes": chosen.notes + warnings,
        "units": units(),
    }
    return TraceImport(rec, layout, al, outliers, ours, theirs, table, compare, sidecar, console,
                       warnings)


def make_layout(order: str, frames: int, warmup: int, levels: list[int],
                trailing: int) -> RunLayout:
    return RunLayout(order=order, frames=frames, warmup=warmup,
                     settings=tuple(Setting(level=lv) for lv in levels), trailing=trailing)


def read_published(path: Path | None, board: Board | None = None,
                   duplicates: str = "last") -> pd.DataFrame | None:
    """ARM-CO-UP's Layers.csv for the comparison: levels 0-based numbers (names mapped
    through ``board``), one row per key (`read_layers`)."""
    return None if path is None else read_layers(path, board, duplicates).rows


def load_console(path: Path | None) -> ConsoleLog | None:
    return None if path is None else read_console_log(path)


@dataclass
class TablesImport:
    layers: dict[str, pd.DataFrame]
    transfers: dict[str, pd.DataFrame]
    blank_rows: int = 0
    notes: list[str] = field(default_factory=list)  # e.g. duplicate rows and which were kept


def import_tables(layers_csv: Path | None, transfers_csv: Path | None, board: Board | None,
                  board_name: str, duplicates: str = "last") -> TablesImport:
    layers: dict[str, pd.DataFrame] = {}
    blank, notes = 0, []
    if layers_csv:
        layers, read = layers_table(layers_csv, board, board_name, duplicates)
        blank, notes = read.blank_rows, read.notes
    transfers = transfers_table(transfers_csv) if transfers_csv else {}
    return TablesImport(layers, transfers, blank, notes)
