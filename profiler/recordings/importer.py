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
from profiler.errors import BadInputError, LayoutMismatchError
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
from profiler.recordings.infer import InferredLayout
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


_LEVEL = re.compile(r"^(\d+|min|max)(?:-(\d+|min|max))?$")


def parse_levels(text: str) -> tuple[tuple[str, str], ...]:
    """``--levels``: comma-separated N, N-M, ``min`` or ``max`` (a range's ends too:
    ``4-max``), as (first, last) pairs; `resolve_levels` maps them through a board."""
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        m = _LEVEL.match(part)
        if part and not m:
            raise BadInputError(f"--levels {text!r}: {part!r} is not a level",
                                "give levels like 1-8, 1,3,5, min or max")
        if m:
            out.append((m[1], m[2] or m[1]))
    if not out or any(t == "0" for pair in out for t in pair):
        raise BadInputError(f"--levels {text!r}: levels are 1-based (1-8, 1,3,5, min or max)")
    return tuple(out)


def resolve_levels(spec: tuple[tuple[str, str], ...], board: Board | None,
                   order: str) -> list[int]:
    """The 1-based levels ``spec`` names; ``min``/``max`` (and any number's range) from the
    board profile's levels of the processor the run stepped (`stepped_levels`)."""
    table = stepped_levels(board, order)
    whose = _stepped_name(board, order)

    def level(token: str) -> int:
        if token.isdigit():
            if table and int(token) > len(table):
                raise BadInputError(f"--levels: {whose} has levels 1-{len(table)}, not "
                                    f"{token}", "pass levels of its table, or --board")
            return int(token)
        if not table:
            raise BadInputError(f"--levels {token} needs a board profile's levels",
                                "pass --board NAME, or level numbers")
        return 1 if token == "min" else len(table)

    out: list[int] = []
    for a, b in spec:
        lo, hi = level(a), level(b)
        if lo > hi:
            raise BadInputError(f"--levels {a}-{b} runs backwards", "e.g. --levels 1-8")
        out += range(lo, hi + 1)
    return out


@dataclass(frozen=True)
class LayoutFlags:
    """The layout flags of `coupprof import` as given (None: not given)."""

    order: str | None = None
    frames: int | None = None
    warmup: int | None = None
    levels: tuple[tuple[str, str], ...] | None = None
    trailing: int | None = None

    def any(self) -> bool:
        return any(v is not None for v in (self.frames, self.warmup, self.levels, self.trailing))


#: ARM-CO-UP's frames per setting, warm-up frames and closing segments, where the trace
#: shows no repeating frame.
ARMCOUP_FRAMES, ARMCOUP_WARMUP, ARMCOUP_TRAILING = 10, 3, 2


def choose_layout(inferred: InferredLayout, given: LayoutFlags, name_order: str,
                  board: Board | None) -> tuple[RunLayout, list[str]]:
    """The layout to align: each flag given, else what the trace shows (frames: its runs
    less ``--warmup``, default 3 where it shows more than 3; levels: the board's stepped
    levels, else 1..settings; order: the file name's when its length is the trace's layers),
    else ARM-CO-UP's. Raises `LayoutMismatchError` where the trace surely shows another
    layout (`InferredLayout.misfits`), naming it and the flags for it; returns notes on what
    was assumed."""
    notes: list[str] = []
    found = inferred.found
    order = (given.order or name_order).upper()
    if given.order is None and found and order and len(order) != inferred.layers:
        raise LayoutMismatchError(
            f"the trace shows {inferred.shape()}, but the order {order} from the file name has "
            f"{len(order)} layers", f"pass --order with {inferred.layers} processor letters")
    if not order:
        raise BadInputError("cannot tell the layer order" + (
            f" (the trace shows {inferred.layers} layers per frame)" if found else ""),
            "pass --order (e.g. BBBBBBBBBBBBBB) and --model")
    board_levels = stepped_levels(board, order)
    if given.levels is not None:
        levels = resolve_levels(given.levels, board, order)
    elif board_levels:
        levels = board_levels
        if inferred.sure and inferred.settings < len(levels) and not inferred.cut_short:
            # not a run cut short: which of the levels it stepped, the trace cannot say
            raise LayoutMismatchError(
                f"the trace shows {inferred.shape()}, {_stepped_name(board, order)} has "
                f"{len(levels)} levels", "pass " + suggest_flags(
                    inferred, given, make_layout(order, 1, 0, levels, 0), board))
    elif found and inferred.settings:
        levels = list(range(1, inferred.settings + 1))
        notes.append(f"levels 1-{inferred.settings} assumed (no --levels, no board profile)")
    else:
        raise BadInputError("which levels did the run step through?",
                            "pass --levels (e.g. 1-8), or --board to take them from its table")
    runs = None
    if found and inferred.runs:
        runs = inferred.runs
        if not inferred.closed and len(levels) > 1:  # back to back: one long setting
            runs = runs // len(levels) if runs % len(levels) == 0 else None
    if runs is None and (given.frames is None or given.trailing is None):
        notes.append("the trace shows no frames to take: ARM-CO-UP's layout assumed where "
                     "no flag is given")
    warmup = given.warmup
    if warmup is None:
        warmup = inferred.warmup if inferred.warmup is not None else \
            ARMCOUP_WARMUP if runs is None or runs > ARMCOUP_WARMUP else 0
    frames = given.frames if given.frames is not None else \
        (ARMCOUP_FRAMES if runs is None else max(1, runs - warmup))
    trailing = given.trailing
    if trailing is None:
        trailing = ARMCOUP_TRAILING if runs is None or inferred.trailing is None else \
            inferred.trailing if inferred.closed or len(levels) == 1 else 0
    layout = make_layout(order, frames, warmup, levels, trailing)
    wrong = inferred.misfits(layout)
    if wrong and _holds_every_segment(inferred, given, layout):
        # A host that stalled inside a setting leaves a wait as long as a setting's
        # close; a layout given in full that accounts for every segment is the run's.
        notes.append(f"the trace reads as {inferred.shape()}, but the layout given holds "
                     f"its {inferred.segments} segments: a pause inside a setting (a host "
                     "that stalled), taken for a close; the layout given is kept")
        return layout, notes
    if wrong and inferred.sure:
        raise LayoutMismatchError(f"the trace shows {inferred.shape()}, not {_shape(layout)} "
                                  f"({'; '.join(wrong)})",
                                  f"pass {suggest_flags(inferred, given, layout, board)}")
    notes += [f"the layout may not fit the trace: it seems to show {w}" for w in wrong]
    return layout, notes


#: Segments a layout given in full may differ from the trace by and still hold it (two
#: faults: a spurious pulse or a missed edge each add or take two).
SEGMENT_SLACK = 4


def _holds_every_segment(inferred: InferredLayout, given: LayoutFlags,
                         layout: RunLayout) -> bool:
    """Every layout flag given, the trace's frames of that many layers, and its segments
    (the wait before the run aside) as many as the layout's windows, give or take
    `SEGMENT_SLACK`."""
    full = None not in (given.frames, given.warmup, given.levels, given.trailing)
    return full and inferred.layers == layout.layers and \
        abs(inferred.segments - 1 - layout.total) <= SEGMENT_SLACK


def _stepped_name(board: Board | None, order: str) -> str:
    """"rk3399pro's B": the processor whose levels a run steps (`stepped_levels`)."""
    if board is None or not order or order[0] not in board.processors:
        return "the board"
    proc = board.processors[order[0]]
    letter = proc.host if not proc.freqs_khz and proc.host else order[0]
    return f"{board.name}'s {letter}"


def _shape(layout: RunLayout) -> str:
    return f"{len(layout.settings)} x {layout.runs} x {layout.layers}"


def suggest_flags(inferred: InferredLayout, given: LayoutFlags, layout: RunLayout,
                  board: Board | None) -> str:
    """The flags that would use the layout the trace shows (``--warmup`` as given, else 3
    where there are more runs; the levels given where there are enough of them)."""
    runs, settings = inferred.runs or 0, inferred.settings
    warmup = given.warmup if given.warmup is not None and given.warmup < runs else \
        inferred.warmup if inferred.warmup is not None else \
        (ARMCOUP_WARMUP if runs > ARMCOUP_WARMUP else 0)
    levels = [s.level for s in layout.settings]
    levels = levels[:settings] if len(levels) >= settings else list(range(1, settings + 1))
    contiguous = levels == list(range(levels[0], levels[0] + len(levels)))
    spec = f"{levels[0]}-{levels[-1]}" if contiguous and len(levels) > 1 else \
        ",".join(map(str, levels))
    if len(levels) == 1 and given.levels is None:
        spec = "<the level it ran at, e.g. max>"
    out = [f"--frames {runs - warmup}", f"--warmup {warmup}", f"--levels {spec}"]
    if inferred.trailing != ARMCOUP_TRAILING or given.trailing is not None:
        out.append(f"--trailing {inferred.trailing}")
    if inferred.layers != layout.layers:
        out.append(f"--order <{inferred.layers} letters>")
    table = stepped_levels(board, layout.order)
    if board is not None and table and max(levels) > len(table):
        out.append(f"--board <one whose {layout.order[0]} has {max(levels)} levels: "
                   f"{_stepped_name(board, layout.order)} has {len(table)}>")
    return " ".join(out)


def cross_checks(inferred: InferredLayout, layout: RunLayout, board: Board | None,
                 console: ConsoleLog | None) -> list[str]:
    """Where the trace's layout and the board profile's levels or the console log's
    layers disagree (said, not fatal: the layout decides)."""
    if not inferred.found:
        return []
    out = []
    table = stepped_levels(board, layout.order)
    if board is not None and table and inferred.closed and inferred.settings > len(table):
        out.append(f"the trace shows {inferred.settings} settings, "
                   f"{_stepped_name(board, layout.order)} has {len(table)} levels: is it the "
                   "recording's board?")
    if console is not None:  # (its settings against the layout's: `import_trace`)
        layers = {len(st.layer_ms) for st in console.settings if st.layer_ms}
        if layers and layers != {inferred.layers}:
            out.append(f"the console log has {'/'.join(map(str, sorted(layers)))} layers per "
                       f"setting, the trace {inferred.layers} per frame")
    return out


#: A layout is taken to fit only when at most this many frames, or this share of the
#: frames the recording covers if more, hold missed or spurious edges.
MAX_FLAGGED_FRAMES, MAX_FLAGGED_SHARE = 2, 0.05


def _too_broken(al: Alignment, inferred: InferredLayout | None) -> LayoutMismatchError | None:
    """The error when more than a few frames did not fit (a layout the counts could not
    tell from the trace's, or a trace too broken to attribute)."""
    layout = al.layout
    covered = len(al.covered_settings()) * layout.runs
    if len(al.flagged) <= max(MAX_FLAGGED_FRAMES, MAX_FLAGGED_SHARE * covered):
        return None
    what = (f"{len(al.flagged)} of {covered} frames hold missed or spurious edges against "
            f"the layout {_shape(layout)} (settings x frames x layers)")
    if inferred is not None and inferred.misfits(layout):
        return LayoutMismatchError(f"{what}; {inferred.describe()}",
                                   f"pass {suggest_flags(inferred, LayoutFlags(), layout, None)}")
    return LayoutMismatchError(f"{what}: too many to attribute",
                               "check --order, --frames, --warmup, --levels, --trailing, the "
                               "marker column and --active-level")


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
                 progress: Callable[[int, int], None] | None = None,
                 inferred: InferredLayout | None = None) -> TraceImport:
    """Raises `LayoutMismatchError` when more than a few frames do not fit ``layout``
    (MAX_FLAGGED_FRAMES, MAX_FLAGGED_SHARE): a table from it could hold rows of another
    layer. ``inferred``: what the trace shows, for that message and the sidecar."""
    if method not in (ARMCOUP, COUPPROF):
        raise BadInputError(f"unknown method {method!r}", "use --method coupprof or armcoup")
    warnings: list[str] = []
    cm = console_matrix(console, layout)
    if console is not None and len(console.settings) != len(layout.settings):
        warnings.append(f"the console log has {len(console.settings)} settings, the layout "
                        f"{len(layout.settings)}")
    al = align(rec, layout, cm, progress)
    broken = _too_broken(al, inferred)
    if broken is not None:
        raise broken
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
        "inferred": None if inferred is None else {
            "settings": inferred.settings, "frames": inferred.runs, "layers": inferred.layers,
            "trailing": inferred.trailing, "closed": inferred.closed,
            "last_setting_frames": inferred.last_runs, "warmup": inferred.warmup,
            "stopped_in_close": inferred.stopped_in_close,
            "odd_settings": [list(x) for x in inferred.odd_settings],
            "sure": inferred.sure, "line": inferred.describe()},
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
