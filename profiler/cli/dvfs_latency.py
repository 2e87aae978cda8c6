"""`coupprof dvfs-latency`: DVFS transition delays between levels, as ARM-CO-UP Table 10.

Writes one CSV row per transition and repeat (tidy) plus a JSON sidecar, and prints
Table 10's summary: per direction the shortest and the longest delay with the
levels where they occur. See governors/latency.py for the method.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.progress import Progress
from rich.table import Table

from governors import RestoreGuard
from governors.latency import (
    LatencyPlan,
    LatencyRun,
    measure,
    summary,
)
from profiler.cli import command_help
from profiler.cli.common.options import add_board_args, add_output_options
from profiler.cli.common.output import Output
from profiler.cli.common.plumbing import hold_board_notice, sysfs_root
from profiler.errors import BadInputError
from profiler.platform import choose_board
from profiler.platform.latency import METHODS, latency_probe

if TYPE_CHECKING:
    import pandas as pd

    from profiler.cli.common.options import Subparsers

SIDECAR_FORMAT = "coupprof-dvfs-latency/1"
CSV_COLUMNS = ("board", "processor", "method", "simulated", "from_level", "from_mhz",
               "to_level", "to_mhz", "direction", "repeat", "delay_us", "detected")


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "dvfs-latency",
        help=command_help(__name__),
        description="For every ordered pair of levels, hold the first, write the second and "
        "time how long until a calibrated busy loop on the processor runs at the new speed "
        "(CPU clusters), or until the kernel reports the new frequency (--method readback, "
        "GPUs). On the simulated board the delays are the profile's model, recovered by the "
        "same detection code, and labelled as such. Writes CSV + JSON; restores the governor.",
    )
    p.add_argument("--processor", "-p", required=True, metavar="LETTER",
                   help="L, B, G or N (N measures its host cluster)")
    add_board_args(p)
    p.add_argument("--levels", default=None, metavar="I,J,...",
                   help="levels to use, numbers or min / max (default: all of the "
                   "processor's levels)")
    p.add_argument("--repeats", type=int, default=3, help="repeats per transition (default 3)")
    p.add_argument("--method", choices=METHODS, default="auto",
                   help="auto: busy loop on CPU clusters, read-back on GPUs (default)")
    p.add_argument("--chunk-us", type=float, default=50.0,
                   help="busy-loop chunk length, the resolution of the result (default 50 us)")
    add_output_options(p, csv="./coupprof-out/dvfs-latency-BOARD-P.csv")
    p.set_defaults(func=run)


def parse_levels(text: str | None, n: int, letter: str) -> list[int]:
    if not text:
        return list(range(1, n + 1))
    named = {"min": 1, "max": n}  # as --freq takes them
    try:
        levels = sorted({named.get(t.strip().lower()) or int(t) for t in text.split(",")
                         if t.strip()})
    except ValueError:
        raise BadInputError(f"--levels '{text}' is not a comma-separated list of level numbers",
                            "e.g. --levels 1,4,8") from None
    bad = [k for k in levels if not 1 <= k <= n]
    if bad or len(levels) < 2:
        raise BadInputError(f"--levels '{text}': processor {letter} has levels 1..{n}"
                            " and at least two are needed", f"e.g. --levels 1,{n}")
    return levels


def run(args: argparse.Namespace) -> int:
    out = Output.of(args)
    if args.repeats < 1:
        raise BadInputError(f"--repeats {args.repeats} must be 1 or more")
    if args.chunk_us <= 0:
        raise BadInputError(f"--chunk-us {args.chunk_us} must be positive")
    root = sysfs_root(args)
    board = choose_board(args.board, root, letters=[args.processor],
                        announce=hold_board_notice)
    target = board.dvfs_domain(args.processor)
    if not target.freqs_khz:
        raise BadInputError(f"processor {target.letter} on board '{board.name}' has no DVFS levels",
                            "pick a processor with a frequency table (`coupprof boards show`)")
    levels = parse_levels(args.levels, len(target.freqs_khz), target.letter)
    plan = LatencyPlan(target, levels, args.repeats, args.chunk_us)

    with latency_probe(board, target, root, args.method) as probe, \
            Progress(disable=not out.progress, transient=True) as bar:
        task = bar.add_task(f"{board.name} {target.letter} transitions", total=None)
        with RestoreGuard([probe.governor]):
            result = measure(probe.governor, plan, probe.loop, board.name, board.simulated,
                             progress=lambda d, t: bar.update(task, completed=d, total=t))

    default_csv = Path("coupprof-out") / f"dvfs-latency-{board.name}-{target.letter}.csv"
    out.table(render(result))
    for note in result.notes:
        out.line(f"note: {note}")
    written = out.save(csv_frame(result), sidecar(result, board.description), default_csv)
    out.wrote(written, f"{len(result.transitions)} transitions")
    return 0


def title(run: LatencyRun) -> str:
    what = {"busy-loop": "busy loop on the cluster (write -> speed change)",
            "readback": "kernel read-back (write -> reported frequency; not the hardware)",
            "sim-busy-loop": "SIMULATED board: the profile's modelled delays (ARM-CO-UP Table 10)"
                             " recovered by the busy-loop detection; not a measurement"}
    return f"DVFS transition delay, {run.board} {run.processor}: {what[run.method]}"


def render(run: LatencyRun) -> Table:
    caption = f"median over repeats; {len(run.transitions)} transitions"
    missed = sum(1 for tr in run.transitions for d in tr.delays_us if d is None)
    if missed:
        caption += f"; {missed} measurement(s) saw no change within the timeout"
    t = Table(title=title(run), box=box.SIMPLE_HEAD, caption=caption)
    for col in ("transition", "PE", "min delay us", "levels i -> j", "max delay us",
                "levels i -> j", "n"):
        t.add_column(col, justify="right" if "us" in col or col == "n" else "left")
    for row in summary(run):
        t.add_row(str(row["direction"]), str(row["processor"]), f"{row['min_delay_us']:.0f}",
                  f"{row['min_from']} -> {row['min_to']}", f"{row['max_delay_us']:.0f}",
                  f"{row['max_from']} -> {row['max_to']}", str(row["transitions"]))
    return t


def csv_frame(run: LatencyRun) -> pd.DataFrame:
    """One row per transition and repeat (CSV_COLUMNS)."""
    import pandas as pd

    rows = [[run.board, run.processor, run.method, run.simulated, tr.from_level,
             f"{tr.from_khz / 1000:g}", tr.to_level, f"{tr.to_khz / 1000:g}", tr.direction, i,
             "" if d is None else f"{d:.1f}", d is not None]
            for tr in run.transitions for i, d in enumerate(tr.delays_us, 1)]
    return pd.DataFrame(rows, columns=list(CSV_COLUMNS))


def sidecar(run: LatencyRun, description: str) -> dict[str, Any]:
    """The CSV's JSON sidecar: the board, the method and Table 10's summary."""
    from profiler.measure.results import environment

    return {
        "format": SIDECAR_FORMAT,
        "csv": None,
        "board": run.board,
        "board_description": description,
        "simulated": run.simulated,
        "title": title(run),
        "processor": run.processor,
        "method": run.method,
        "chunk_us": run.chunk_us,
        "summary": summary(run),
        "notes": run.notes,
        "environment": environment(),
    }
