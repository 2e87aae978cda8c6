"""`coupprof plot KIND CSV... -o PNG`: the papers' figures from coupprof's CSVs.

    coupprof plot efficiency sweep/sweep.csv -o fig16.png
    coupprof plot layers layers-L.csv layers-B.csv layers-G.csv -o fig17.png
    coupprof plot transfers transfers.csv -o fig18.png
    coupprof plot timeline trace.csv layers-raw.csv -o timeline.png
    coupprof plot pareto coupprof-out/explore-MODEL-pipeline.csv -o pareto.png

A CSV without the columns a kind needs is bad input (exit 2) naming the columns
and the command that writes them. An efficiency plot of a processor measured at one
level still writes its figure (each layer a point) and warns on stderr that a curve
needs two or more levels. See profiler/plots/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from profiler.cli import command_help
from profiler.errors import BadInputError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from profiler.cli.common.options import Subparsers

KIND_HELP = {
    "efficiency": "FPS/W per layer vs frequency, one panel per processor (ARM-CO-UP Fig. 16); "
                  "input: a sweep CSV with power columns and two or more levels per processor "
                  "(one level cannot show a curve: its layers are drawn as points, the PNG "
                  "is written, and a warning on stderr says so)",
    "layers": "time, energy and FPS/W per layer per processor (Fig. 17); input: layers CSVs "
              "or a sweep CSV (one level per processor, --level)",
    "transfers": "src->dst hand-over time per layer boundary (Fig. 18); input: the "
                 "transfer-matrix CSV",
    "pareto": "explore's candidates: throughput vs FPS/W (pipeline) or latency vs energy "
              "(switch), the pick marked; input: the CSV of `coupprof explore`",
    "timeline": "one frame's power trace with layer windows shaded; input: a layers CSV "
                "written with --raw by a run with a power source (its trace is found through the "
                "sidecar), or a trace CSV (coupprof collect) or directory plus that layers CSV",
}


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "plot",
        help=command_help(__name__),
        description="Draw one of the papers' figures as a PNG from coupprof's CSVs. Kinds:\n"
        + "\n".join(f"{k}: {v}." for k, v in KIND_HELP.items()),
    )
    p.add_argument("kind", choices=tuple(KIND_HELP), metavar="KIND",
                   help="efficiency | layers | transfers | timeline | pareto")
    p.add_argument("csv", nargs="+", type=Path, metavar="CSV",
                   help="input CSVs (several are concatenated; a sweep's -o DIR stands for DIR/sweep.csv; "
                   "timeline takes a trace and a layer CSV)")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="PNG",
                   help="PNG to write (default: beside the first CSV, named after it and KIND)")
    p.add_argument("--level", default="max", metavar="K|min|max",
                   help="layers: the level of each processor to show from a sweep (default: max)")
    p.add_argument("--frame", type=int, default=None,
                   help="timeline: the frame to show (default: a typical one, of median duration, among those the trace covers)")
    p.add_argument("--cross-only", action="store_true",
                   help="transfers: leave out the same-processor baseline (src = dst)")
    p.set_defaults(func=run)


def _concat(paths: list[Path]) -> pd.DataFrame:
    from profiler.plots.common import read_csv

    frames = [read_csv(p) for p in paths]
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def figure(args: argparse.Namespace) -> tuple[Figure, list[str], list[str]]:
    """The figure, the warnings to print beside it, and what it shows in words (layers:
    each series' frame, as its run's terminal footer gives it)."""
    from profiler import plots

    # A sweep's output directory stands for its sweep.csv.
    paths: list[Path] = [p / "sweep.csv" if p.is_dir() and (p / "sweep.csv").is_file() else p
                         for p in args.csv]
    source = ", ".join(str(p) for p in paths)
    if args.kind == "timeline":
        return timeline(paths, args.frame), [], []
    df = _concat(paths)
    if args.kind == "pareto":
        return plots.pareto_figure(df, paths[0]), [], []
    if args.kind == "efficiency":
        fig = plots.efficiency_figure(df, source)
        note = plots.efficiency.one_level_note(df, source)
        return fig, [note] if note else [], []
    if args.kind == "layers":
        level: str | int = args.level
        if level not in ("min", "max"):
            try:
                level = int(level)
            except ValueError:
                raise BadInputError(f"--level '{args.level}' is not a level number, min or max",
                                    "e.g. --level 4") from None
        frames = plots.layers.series_frames(df, level)
        return (plots.layers_figure(df, source, level=level), [],
                [f"per frame, {label}: {frame.text()}" for label, frame in frames.items()])
    return plots.transfers_figure(df, source, include_same=not args.cross_only), [], []


def timeline(paths: list[Path], frame: int | None) -> Figure:
    """One layer CSV (its run kept a trace), or a trace (CSV or directory) and a layer CSV."""
    from profiler import plots
    from profiler.plots.common import read_csv
    from profiler.plots.timeline import read_trace_dir, run_trace

    usage = ("e.g. `coupprof plot timeline layers.csv` (a run with --raw and a power source) or "
             "`coupprof plot timeline trace.csv layers.csv`")
    if len(paths) == 1:
        found = run_trace(paths[0])
        if found is None:
            raise BadInputError(f"{paths[0]} names no power trace with a clock fit in its sidecar",
                                "pass the trace too: " + usage)
        trace_path, trace = found
        return plots.timeline_figure(trace, read_csv(paths[0]), frame=frame,
                                     trace_src=trace_path, layers_src=paths[0])
    if len(paths) != 2:
        raise BadInputError(f"timeline takes a layer CSV and optionally its trace, got {len(paths)} "
                            "files", usage)
    if paths[0].is_dir() or (not paths[1].is_dir() and plots.timeline.is_trace(read_csv(paths[0]))):
        trace_path, layers_path = paths
    else:
        layers_path, trace_path = paths
    layers = read_csv(layers_path)
    if trace_path.is_dir():
        from profiler.plots.common import sidecar

        clock = (sidecar(layers_path).get("extra", {}) or {}).get("clock_map")
        trace = read_trace_dir(trace_path, clock)
    else:
        trace = read_csv(trace_path)
    return plots.timeline_figure(trace, layers, frame=frame, trace_src=trace_path,
                                 layers_src=layers_path)


def run(args: argparse.Namespace) -> int:
    from profiler.plots import save

    fig, warnings, notes = figure(args)
    for text in warnings:
        print(f"coupprof plot: warning: {text}", file=sys.stderr)
    first: Path = args.csv[0]
    out = args.output or (first / f"{args.kind}.png" if first.is_dir()
                          else first.with_name(f"{first.stem}-{args.kind}.png"))
    save(fig, out)
    print(f"wrote {out}")
    for text in notes:
        print(text)
    return 0
