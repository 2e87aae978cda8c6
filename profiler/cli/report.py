"""`coupprof report RUN_DIR`: one Markdown (or HTML) summary of a run directory.

Reads what coupprof wrote into RUN_DIR (and its subdirectories): every command's CSV with
its JSON sidecar (layers, run, sweep, transfer-matrix, explore, dvfs-latency, import,
collect), `predict --json` files, the board profiles `calibrate` fitted and the binary
traces runs kept; renders the figures into RUN_DIR/figures/ and writes RUN_DIR/report.md
(or .html). See profiler/report.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from profiler.cli import command_help

if TYPE_CHECKING:
    from profiler.cli.common.options import Subparsers


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help=command_help(__name__),
        description="Find the results coupprof wrote into RUN_DIR (every command's CSV with "
        "its JSON sidecar: layer runs, mapped runs, sweeps, transfer matrices, searches, DVFS "
        "delays, imports, power traces; `predict --json` files; calibrated board profiles), "
        "render their figures into RUN_DIR/figures/ and write one report with the tables and "
        "figures. A CSV with no coupprof sidecar is listed as such.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="directory holding the CSVs")
    p.add_argument("--format", choices=("md", "html"), default="md",
                   help="md (default) or html")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="FILE",
                   help="report file (default: RUN_DIR/report.md or report.html)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from profiler.report import build_report, write_report

    report = build_report(args.run_dir)
    path = write_report(report, args.format, args.output)
    print(f"wrote {path} ({len(report.sources)} result files, {len(report.figures)} figures"
          + (f" in {report.run_dir / 'figures'}" if report.figures else "") + ")")
    return 0
