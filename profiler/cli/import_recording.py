"""`coupprof import`: other tools' recordings and tables as coupprof CSVs.

    coupprof import ../shared/armcoup/power_MobileV1_BBBBBBBBBBBBBB.csv -o imported/
    coupprof import ../shared/armcoup/Layers.csv ../shared/armcoup/Transfers.csv -o rk3399pro/
    coupprof import ppk2.csv --time-col "Timestamp(ms)" --time-unit ms --current-col \\
        "Current(uA)" --current-unit uA --voltage-v 5 --marker-col D0 --order GGGG --levels 1-5
    coupprof import coupprof-out/layers-long-B.trace/readings.csv --active-level 1 \\
        --order BBBBB --frames 10 --warmup 0 --levels 8 --trailing 1 --board sim

The work is in profiler/recordings/ (read, lay out, align, attribute, write).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from profiler.cli import command_help
from profiler.cli.common.options import nonneg_int, positive_int, stdout_console

if TYPE_CHECKING:
    from profiler.boards.model import Board
    from profiler.cli.common.options import Subparsers
    from profiler.recordings.importer import TraceImport
    from profiler.recordings.layout import RunLayout

EXAMPLES = """\
examples (ARM-CO-UP's RK3399Pro recordings, see ../shared/armcoup/README.md):
  # a raw INA260 trace: layout, model and order from the file name; the console log
  # time_MobileV1_<ORDER>.txt beside it scores the alignment; both methods side by side
  coupprof import power_MobileV1_BBBBBBBBBBBBBB.csv -o imported/
  # ARM-CO-UP's own parsing (their Layers.csv Power column), checked against the file
  coupprof import power_MobileV1_BBBBBBBBBBBBBB.csv --method armcoup --published Layers.csv
  # their derived tables, one coupprof layer and transfer table per model
  coupprof import Layers.csv Transfers.csv -o rk3399pro/
  coupprof predict --order BBBBBBBBBBBBBB --mode switch --layers rk3399pro/MobileV1/layers.csv \\
      --freq max --board rk3399pro
a generic CSV (a PPK2 or Joulescope export with a digital marker channel; every
column's unit is given, none is assumed):
  coupprof import export.csv --time-col t --time-unit s --power-col P --power-unit W \\
      --marker-col D0 --active-level 1 --order BBBB --frames 10 --warmup 3 --levels 1-8 \\
      --trailing 0 --board rk3399pro
a recording coupprof made through an INA260 logger (--power ina260:PORT or sim:ina260;
its marker drives pin 1 while a layer runs; one setting, warm-up frames unmarked, one
closing idle segment):
  coupprof import layers-long-B.trace/readings.csv --active-level 1 --order BBBBB \\
      --frames 10 --warmup 0 --levels 8 --trailing 1 --board sim

The layout is read from the trace first (layers per frame from the repeating pattern of
marker durations, settings from the long waits between them, frames and closing segments
from their counts) and printed; a layout flag not given is taken from it, and a layout
given that the trace surely contradicts is refused (exit 1, the flags that fit named).
The expected windows: per setting (one DVFS level each, --levels), WARMUP + FRAMES frames,
each a gap (marker idle) then a layer (marker active) per layer of --order, then
--trailing segments. They are matched to the trace's marker segments by order and
duration; a missed or spurious edge flags its frame and sets its windows aside. A layer
window over 2x the console's time for it (else its other frames' median) is flagged too:
the coupprof method trims it to that time, the armcoup method keeps it.
methods: coupprof (default) integrates the readings over time (partial readings at the
edges weighted), shifts them by the sensor lag it estimates, leaves warm-up frames out;
armcoup averages each window's readings, warm-up included, no lag (ARM-CO-UP's).
exit codes: 0 ok; 1 the layout does not fit the trace (the flags given disagree with the
layout it shows, or more than 2 frames and 5 % of them hold missed or spurious edges):
nothing written, one line naming the layout it shows and the flags for it; 2 bad input
(one line)."""


def _levels(text: str) -> tuple[tuple[str, str], ...]:
    from profiler.errors import BadInputError
    from profiler.recordings.importer import parse_levels

    try:
        return parse_levels(text)
    except BadInputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "import", help=command_help(__name__),
        description="Turn a power trace recorded by another logger (ARM-CO-UP's pin,millis,mW "
        "INA260 log, or any CSV with time, power or current, and marker columns) into "
        "coupprof's per-layer table, attributing each layer without a host clock; or turn "
        "ARM-CO-UP's Layers.csv / Transfers.csv into coupprof's layer and transfer tables "
        "(for predict, plot and the notebooks). Writes CSVs with JSON sidecars under -o.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", type=Path, metavar="FILE",
                   help="one trace, or Layers.csv and/or Transfers.csv")
    p.add_argument("-o", "--output", type=Path, default=Path("imported"), metavar="DIR",
                   help="directory for the CSVs and sidecars (default: ./imported)")
    p.add_argument("--format", choices=("auto", "armcoup", "csv", "tables"), default="auto",
                   help="auto (default): tables by their header, armcoup when most of the "
                   "first 50 lines read like 1,4487,3000.00 (a cut first line is skipped), "
                   "else csv")
    p.add_argument("--board", default=None, metavar="NAME|PATH",
                   help="board profile for kHz of the levels (default: rk3399pro for ARM-CO-UP "
                   "files, else none)")
    lay = p.add_argument_group("layout (the windows the run made; default: what the trace shows, "
                               "else ARM-CO-UP's)")
    lay.add_argument("--model", default=None, help="model name (default: from power_MODEL_ORDER.csv)")
    lay.add_argument("--order", default=None, metavar="LETTERS",
                     help="processor per layer, e.g. BBBBBBBBBBBBBB (default: from the file name)")
    lay.add_argument("--frames", type=positive_int, default=None, metavar="N",
                     help="measured frames per setting (default: the trace's less --warmup; "
                     "10 where it shows none)")
    lay.add_argument("--warmup", type=nonneg_int, default=None, metavar="N",
                     help="warm-up frames before them (default: 3; 0 where the trace shows "
                     "3 frames or fewer, or leaves them unmarked as coupprof's recordings do; "
                     "a trace marks them like measured ones)")
    lay.add_argument("--levels", type=_levels, default=None, metavar="SPEC",
                     help="the settings' 1-based levels in recorded order: 1-8, 1,3,5, min, "
                     "max or 4-max (min/max: the board's table) (default: every level of the "
                     "first layer's processor, or its host's for N; without a board, 1 to "
                     "the settings the trace shows)")
    lay.add_argument("--trailing", type=nonneg_int, default=None, metavar="N",
                     help="segments closing each setting (ARM-CO-UP: a blip and the idle, 2; "
                     "default: the trace's, 2 where it shows none)")
    lay.add_argument("--console", type=Path, default=None, metavar="TXT",
                     help="console log with layer times (default: time_MODEL_ORDER.txt beside "
                     "an ARM-CO-UP trace)")
    lay.add_argument("--no-console", action="store_true", help="align by durations learnt "
                     "from the trace alone")
    att = p.add_argument_group("attribution")
    att.add_argument("--method", choices=("coupprof", "armcoup"), default="coupprof",
                     help="the layer table's method (the comparison table has both)")
    att.add_argument("--lag-ms", type=float, default=None, metavar="MS",
                     help="sensor lag to compensate instead of estimating it (coupprof method)")
    att.add_argument("--published", type=Path, default=None, metavar="LAYERS_CSV",
                     help="ARM-CO-UP's Layers.csv: the comparison gains their published Power")
    att.add_argument("--duplicates", choices=("first", "last", "mean"), default="last",
                     help="a Layers.csv row listed more than once (two runs in one table): "
                     "keep the first or the last copy, or the mean of their Time and Power "
                     "(default: last; how many is said)")
    csvg = p.add_argument_group("generic CSV columns and units")
    csvg.add_argument("--time-col", default=None, metavar="NAME", help="time column")
    csvg.add_argument("--time-unit", default=None, choices=("s", "ms", "us", "ns"),
                      help="unit of the time column (required with --time-col)")
    csvg.add_argument("--power-col", default=None, metavar="NAME",
                      help="power column (or give --current-col and a voltage)")
    csvg.add_argument("--power-unit", default=None, choices=("W", "mW", "uW"),
                      help="unit of the power column (required with --power-col)")
    csvg.add_argument("--current-col", default=None, metavar="NAME", help="current column")
    csvg.add_argument("--current-unit", default=None, choices=("A", "mA", "uA"),
                      help="unit of the current column (required with --current-col)")
    csvg.add_argument("--voltage-col", default=None, metavar="NAME",
                      help="bus voltage column (power = current x voltage)")
    csvg.add_argument("--voltage-unit", default=None, choices=("V", "mV"),
                      help="unit of the voltage column (required with --voltage-col)")
    csvg.add_argument("--voltage-v", type=float, default=None, metavar="VOLTS",
                      help="a fixed supply voltage instead of --voltage-col")
    csvg.add_argument("--marker-col", action="append", default=[], metavar="NAME",
                      help="marker column (repeat for several: a window runs while any is active)")
    csvg.add_argument("--active-level", type=int, choices=(0, 1), default=None,
                      help="marker value while a layer runs (default: 0 for ARM-CO-UP's "
                      "pin,millis,mW logs, whose board drove the pin low; 1 for a CSV, and "
                      "for a recording coupprof's marker made)")
    csvg.add_argument("--delimiter", default=",", help="field separator (default: ,)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from profiler.errors import BadInputError
    from profiler.recordings.armcoup_tables import sniff
    from profiler.recordings.traces import looks_like_armcoup

    for f in args.files:
        if not f.is_file():
            raise BadInputError(f"file not found: {f}" if not f.exists() else f"{f} is not a file",
                                "pass a trace, or Layers.csv / Transfers.csv")
    kinds = [sniff(f) if args.format in ("auto", "tables") else None for f in args.files]
    if any(kinds) or args.format == "tables":
        if not all(kinds):
            bad = next(f for f, k in zip(args.files, kinds, strict=True) if not k)
            raise BadInputError(f"{bad} is not ARM-CO-UP's Layers.csv or Transfers.csv",
                                "import tables and a trace in separate commands")
        return _tables(args, dict(zip(kinds, args.files, strict=True)))
    if len(args.files) != 1:
        raise BadInputError(f"{len(args.files)} traces given", "import one trace at a time")
    path = args.files[0]
    fmt = args.format if args.format != "auto" else \
        ("armcoup" if looks_like_armcoup(path) else "csv")
    return _trace(args, path, fmt)


def _board(name: str | None, default: str | None) -> tuple[Board | None, str]:
    from profiler.platform import choose_board

    name = name or default
    if name is None:
        return None, ""
    board = choose_board(name, letters=())
    return board, board.name


def _tables(args: argparse.Namespace, files: dict[str | None, Path]) -> int:
    from profiler.cli.common.plumbing import say
    from profiler.recordings.importer import import_tables
    from profiler.recordings.output import write_csv_json

    board, board_name = _board(args.board, "rk3399pro")
    res = import_tables(files.get("layers"), files.get("transfers"), board, board_name,
                        args.duplicates)
    for note in res.notes:
        say(note)
    from rich import box
    from rich.table import Table

    t = Table(title="ARM-CO-UP tables imported", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("model", "processors", "layer rows", "transfer rows", "files"):
        t.add_column(col)
    for model in sorted(set(res.layers) | set(res.transfers)):
        written = []
        prov = {"board": board_name, "model": model}
        if model in res.layers:
            src = files["layers"]
            _, j = write_csv_json(res.layers[model], args.output / model / "layers.csv",
                                  {**prov, "source": _prov(src), "kind": "layers",
                                   "notes": res.notes})
            written.append(str(args.output / model / "layers.csv"))
        if model in res.transfers:
            src = files["transfers"]
            write_csv_json(res.transfers[model], args.output / model / "transfers.csv",
                           {**prov, "source": _prov(src), "kind": "transfers"})
            written.append(str(args.output / model / "transfers.csv"))
        lay = res.layers.get(model)
        t.add_row(model, "" if lay is None else "".join(sorted(set(lay["processor"]))),
                  "" if lay is None else str(len(lay)),
                  str(len(res.transfers[model])) if model in res.transfers else "",
                  ", ".join(written))
    stdout_console().print(t)
    if res.blank_rows:
        print(f"{res.blank_rows} blank rows of {files['layers'].name} skipped")
    return 0


def _prov(path: Path) -> dict[str, str]:
    import hashlib

    return {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def _trace(args: argparse.Namespace, path: Path, fmt: str) -> int:
    from profiler.cli.common.plumbing import say
    from profiler.cli.common.progress import step, task_progress
    from profiler.errors import BadInputError
    from profiler.recordings.importer import (
        LayoutFlags,
        choose_layout,
        cross_checks,
        guess_from_name,
        import_trace,
        load_console,
        read_published,
        read_trace,
    )
    from profiler.recordings.infer import infer_layout
    from profiler.recordings.output import RunIdentity, write_csv_json
    from profiler.recordings.traces import CsvSpec

    guess = guess_from_name(path)
    model = args.model or (guess.model if guess else None)
    order = (args.order or (guess.order if guess else "")).upper()
    if not order:
        raise BadInputError(f"cannot tell the layer order of {path.name}",
                            "pass --order (e.g. BBBBBBBBBBBBBB) and --model")
    board, board_name = _board(args.board, "rk3399pro" if fmt == "armcoup" else None)
    spec = None
    if fmt == "csv" and args.time_col:
        for col, unit, flag in ((args.time_col, args.time_unit, "--time-unit"),
                                (args.power_col, args.power_unit, "--power-unit"),
                                (args.current_col, args.current_unit, "--current-unit"),
                                (args.voltage_col, args.voltage_unit, "--voltage-unit")):
            if col and unit is None:
                raise BadInputError(f"no unit given for column {col!r}",
                                    f"pass {flag} (units are never assumed)")
        spec = CsvSpec(time_col=args.time_col, time_unit=args.time_unit,
                       marker_cols=tuple(args.marker_col), power_col=args.power_col,
                       power_unit=args.power_unit or "mW", current_col=args.current_col,
                       current_unit=args.current_unit or "A", voltage_col=args.voltage_col,
                       voltage_unit=args.voltage_unit or "V", voltage_v=args.voltage_v,
                       active_level=1 if args.active_level is None else args.active_level,
                       delimiter=args.delimiter)
    rec = read_trace(path, fmt, spec, 0 if args.active_level is None else args.active_level)
    if rec.skipped:
        say(rec.skipped_summary())
    console_path = None if args.no_console else (args.console or (guess.console if guess else None))
    console = load_console(console_path)
    inferred = infer_layout(rec, console)
    print(inferred.describe())
    # a layout that does not fit ends here (exit 1), before anything is written
    layout, notes = choose_layout(
        inferred, LayoutFlags(args.order, args.frames, args.warmup, args.levels, args.trailing),
        order, board)
    order = layout.order
    if console is not None and args.console is None:
        say(f"scoring the alignment with the console log {console_path}")
    for note in notes + cross_checks(inferred, layout, board, console):
        say(note)
    published = read_published(args.published, board, args.duplicates)
    ident = RunIdentity(board=board_name, model=model or path.stem, order=order)
    with task_progress(sys.stderr.isatty()) as bar:
        res = import_trace(rec, layout, ident, args.method, board, console, published,
                           args.lag_ms, step(bar, "aligning windows to marker segments"),
                           inferred)
    stem = f"{ident.model}_{order}"
    out_csv, out_json = write_csv_json(res.layers, args.output / f"{stem}.csv", res.sidecar)
    cmp_csv, _ = write_csv_json(res.compare, args.output / f"{stem}_compare.csv",
                                {**res.sidecar, "kind": "comparison"})
    _render(res, layout)
    print(f"wrote {out_csv} (+ {out_json.name}) and {cmp_csv}")
    return 0


def _render(res: TraceImport, layout: RunLayout) -> None:
    import numpy as np
    from rich import box
    from rich.table import Table

    al, rec = res.alignment, res.recording
    print(f"{rec.path.name}: {rec.readings} readings, {len(al.segs)} marker segments; "
          f"expected {layout.describe()}")
    faults = f"{al.faults} fault(s), flagged frames (setting, frame): {al.flagged}" \
        if al.faults else "no missed or spurious edges"
    ratio = res.sidecar["alignment"]["window_over_console_median"]
    print(f"alignment: {faults}" + (f" (scored with the console log; marker windows / console "
                                    f"times: median {ratio:.3f})" if ratio else ""))
    if res.ours.lag_ms is not None:
        print(f"sensor lag: {res.ours.lag_ms:.1f} ms (~{res.ours.lag_readings:.1f} readings), "
              + ("compensated" if res.sidecar["lag_compensated"] else "reported, not applied "
                 "(--method armcoup)"))
    cmp = res.compare[res.compare["metric"] == "task"]
    t = Table(title="coupprof vs armcoup method: layer power difference per processor",
              box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("processor", "rows", "median diff %", "largest diff %"):
        t.add_column(col, justify="right")
    if "armcoup_vs_published_rel" in cmp.columns:
        t.add_column("armcoup vs published (max rel)", justify="right")
    for letter, g in cmp.groupby("processor"):
        d = g["diff_pct"].to_numpy(dtype=float)
        d = d[np.isfinite(d)]
        cells = [str(letter), str(len(g)), f"{np.median(d):+.2f}" if d.size else "",
                 f"{d[np.argmax(np.abs(d))]:+.2f}" if d.size else ""]
        if "armcoup_vs_published_rel" in cmp.columns:
            rel = g["armcoup_vs_published_rel"].to_numpy(dtype=float)
            rel = rel[np.isfinite(rel)]
            cells.append(f"{rel.max():.1e} ({rel.size} rows)" if rel.size else "no rows")
        t.add_row(*cells)
    stdout_console().print(t)
    for note in res.sidecar["notes"]:
        print(f"note: {note}")
