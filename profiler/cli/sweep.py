"""`coupprof sweep`: every (processor, DVFS level) pair of a board into one CSV.

    coupprof sweep --processors L,B,G --freqs all -o DIR [--resume]

Slices the model once, builds each processor's interpreters once, and changes
only the frequency between levels (restored afterwards). Each finished pair is
appended to DIR/sweep.csv at once, so an interrupted sweep keeps its rows and
`--resume` measures only the missing pairs. See profiler/sweep/run.py.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

from profiler.cli import command_help
from profiler.cli.common.interrupt import account
from profiler.cli.common.options import (
    add_board_args,
    add_host_freq_option,
    add_method_options,
    add_model_options,
    add_power_options,
    add_quiet_option,
    add_wide_option,
    nonneg_int,
    positive_int,
)
from profiler.cli.common.output import Output
from profiler.cli.common.plumbing import (
    choose_board,
    fused_settings,
    open_power,
    say,
    sysfs_root,
)
from profiler.cli.common.progress import Throttle, new_bar
from profiler.measure.method import Method
from profiler.sweep.plan import Pair
from profiler.sweep.run import PairResult, SweepProgress, SweepResult
from profiler.sweep.schema import FRAME_MS_MEANING, frame_ms

if TYPE_CHECKING:
    from profiler.cli.common.options import Subparsers


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "sweep",
        help=command_help(__name__),
        description="Run the model layer by layer at every (processor, frequency level) pair "
        "and append each pair's layer rows to DIR/sweep.csv as soon as it finishes (JSON "
        "sidecar: DIR/sweep.json). Interpreters are built once per processor; only the "
        "frequency changes between levels, and the governors are restored afterwards. "
        "An interrupted sweep keeps its rows: run it again with --resume.",
    )
    add_board_args(p)
    p.add_argument("--processors", default=None, metavar="L,B,G,N",
                   help="processors to sweep (default: every processor of the board)")
    p.add_argument("--freqs", default="all", metavar="all|max|current|1,3,5",
                   help="levels (1-based, per processor's table; N uses its host cluster's), "
                   "'all', 'max' (each processor's top level), or 'current' to leave the "
                   "frequency alone (default: all)")
    add_model_options(p)
    p.add_argument("--frames", type=positive_int, default=30,
                   help="measured frames per pair (default: 30)")
    p.add_argument("--warmup", type=nonneg_int, default=3,
                   help="unrecorded warm-up frames per pair, after the level is set (default: 3)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="interpreter threads per layer (default: the processor's core count)")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="DIR",
                   help="output directory (default: ./coupprof-out/sweep-MODEL-BOARD)")
    p.add_argument("--resume", action="store_true",
                   help="add only the pairs missing from DIR/sweep.csv")
    p.add_argument("--seed", type=int, default=0, help="seed of the random input (default: 0)")
    add_quiet_option(p)
    add_wide_option(p)
    add_power_options(p, baseline_s=0.25, baseline_what="before each pair")
    add_method_options(p)  # --budget-s applies to each fused pair
    add_host_freq_option(p)
    p.set_defaults(func=run)


def _mhz(khz: int | None) -> str:
    return "" if khz is None else f"{khz / 1000:g}"


def _pair_line(i: int, n: int, r: PairResult) -> str:
    t = r.totals
    ms = frame_ms(t)
    text = (f"[{i}/{n}] {r.pair.label()}: {r.rows} layers, "
            f"{ms:.3f} ms/frame, {1000.0 / ms if ms > 0 else float('inf'):.1f} FPS")
    if "fixed_ms" in t:
        text += (f" (fused: one call = fixed {t['fixed_ms']:.3f} + layers "
                 f"{t['fused_layer_sum_ms']:.3f} ms, {int(t['rounds'])} rounds)")
    if "energy_mj" in t:
        text += f", {t['energy_mj']:.3f} mJ/frame"
    if "fps_per_w" in t:
        text += f", {t['fps_per_w']:.2f} FPS/W"
    if r.pair.level is not None and r.effective_khz is not None:
        text += f" (reads {_mhz(r.effective_khz)} MHz)"
    return text


class PlainProgress(SweepProgress):
    """One line per finished pair on stdout (pipes, logs, CI); none with --quiet."""

    def __init__(self, quiet: bool = False) -> None:
        self.n = 0
        self.finished = 0
        self.skipped = 0  # pairs already in sweep.csv (--resume)
        self.quiet = quiet

    def start(self, todo: Sequence[Pair], skipped: Sequence[Pair], frames_per_pair: int) -> None:
        self.n = len(todo)
        self.skipped = len(skipped)
        if skipped and not self.quiet:
            print(f"resuming: {len(skipped)} pairs already done, {len(todo)} to measure", flush=True)

    def note(self, text: str) -> None:
        say(text)

    def pair_done(self, index: int, result: PairResult) -> None:
        self.finished += 1
        if not self.quiet:
            print(_pair_line(index + 1, self.n, result), flush=True)


class BarProgress(PlainProgress):
    """A rich bar over all frames of the sweep with its ETA; finished pairs print above it.

    No auto-refresh thread (it would hold the GIL when an invoke returns and delay a
    timestamp): the bar is redrawn from the measuring thread at most ten times a second.
    """

    def __init__(self) -> None:
        super().__init__()
        from rich.progress import TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.bar = new_bar(TextColumn("frames"), TimeElapsedColumn(), TextColumn("ETA"),
                           TimeRemainingColumn())
        self.throttle = Throttle()
        self.task: Any = None
        self.per_pair = 0
        self.base = 0

    def start(self, todo: Sequence[Pair], skipped: Sequence[Pair], frames_per_pair: int) -> None:
        super().start(todo, skipped, frames_per_pair)
        self.per_pair = frames_per_pair
        self.bar.start()
        self.task = self.bar.add_task("sweep", total=max(1, len(todo) * frames_per_pair))
        self.bar.refresh()

    def note(self, text: str) -> None:
        self.bar.console.print(f"coupprof: {text}", style="dim", highlight=False)

    def pair_started(self, index: int, pair: Pair) -> None:
        self.base = index * self.per_pair
        self.bar.update(self.task, description=f"{index + 1}/{self.n} {pair.label()}",
                        completed=self.base)
        self.bar.refresh()

    def frame(self, done: int, total: int) -> None:
        self.bar.update(self.task, completed=self.base + done)
        if self.throttle.due():
            self.bar.refresh()

    def pair_done(self, index: int, result: PairResult) -> None:
        self.finished += 1
        self.bar.console.print(_pair_line(index + 1, self.n, result), highlight=False)
        self.bar.refresh()

    def stop(self) -> None:
        self.bar.stop()


def _stopped(progress: PlainProgress, csv_path: Path) -> str:
    """How many pairs a stopped sweep kept, and the command that measures the rest."""
    import shlex

    kept = progress.finished + progress.skipped
    rows = (f"{kept} pair{'s' if kept != 1 else ''} kept in {csv_path}" if kept
            else "no pair had finished, nothing kept")
    argv = sys.argv[1:] + ([] if "--resume" in sys.argv else ["--resume"])
    return (f"{progress.finished} of {progress.n} pairs measured; {rows}; to measure the "
            f"rest: coupprof {shlex.join(argv)}")


def summary_table(result: SweepResult) -> Table:
    power = any("fps_per_w" in r.totals for r in result.done)
    t = Table(title=f"sweep: {len(result.done)} pairs measured"
              + (f", {len(result.skipped)} already done" if result.skipped else ""),
              caption=FRAME_MS_MEANING, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for head in ("proc", "level", "MHz", "reads MHz", "method", "ms/frame", "FPS"):
        t.add_column(head, justify="right")
    if power:
        t.add_column("mJ/frame", justify="right")
        t.add_column("FPS/W", justify="right")
    for r in result.done:
        ms = frame_ms(r.totals)
        cells = [r.pair.processor, "" if r.pair.level is None else str(r.pair.level),
                 _mhz(r.pair.freq_khz), _mhz(r.effective_khz),
                 str(Method.FUSED if "whole_ms" in r.totals else Method.SLICED), f"{ms:.3f}",
                 f"{1000.0 / ms if ms > 0 else float('inf'):.1f}"]
        if power:
            cells += [f"{r.totals.get('energy_mj', float('nan')):.3f}",
                      f"{r.totals.get('fps_per_w', float('nan')):.2f}"]
        t.add_row(*cells)
    return t


def run(args: argparse.Namespace) -> int:
    from profiler.sweep.plan import parse_freqs, parse_processors, plan_pairs
    from profiler.sweep.run import Sweep, SweepSettings

    output = Output.of(args)
    if args.model is None:
        from profiler.zoo import default_model_path

        args.model = default_model_path()
    root = sysfs_root(args)
    # G on `host` only when --processors names it: the default sweeps what is surely there.
    wanted = [t.strip() for t in (args.processors or "").split(",") if t.strip()]
    board = choose_board(args, wanted)
    freqs = parse_freqs(args.freqs)
    pairs = plan_pairs(board, parse_processors(args.processors, board), freqs)
    out = args.output or Path("coupprof-out") / f"sweep-{Path(args.model).stem}-{board.name}"
    settings = SweepSettings(frames=args.frames, warmup=args.warmup, threads=args.threads,
                             granularity=args.granularity, cuts=args.cuts, seed=args.seed,
                             method=Method(args.method) if args.method else None,
                             fused=fused_settings(args),
                             host_freq=args.host_freq)
    power, _ = open_power(args, board, layer_runs=True)
    sweep = Sweep(board, Path(args.model), pairs, out, settings, resume=args.resume,
                  sysfs_root=root, power=power)
    progress = BarProgress() if output.progress else PlainProgress(output.quiet)
    from governors import Terminated

    try:
        result = sweep.run(progress)
    except (KeyboardInterrupt, Terminated) as stop:  # Ctrl-C, SIGTERM, SIGHUP: rows kept
        if isinstance(progress, BarProgress):
            progress.stop()
        text = _stopped(progress, sweep.csv_path)
        if isinstance(stop, KeyboardInterrupt):
            account(text)  # `profiler.cli.main` says it, with the frequencies restored
        else:
            say(f"stopped by a signal: {text}")
        raise
    finally:
        if isinstance(progress, BarProgress):
            progress.stop()
    if not result.done:
        output.line(f"nothing to do: all {len(result.skipped)} pairs are already in "
                    f"{result.csv_path}")
        return 0
    output.table(summary_table(result), drop=("reads MHz", "method", "MHz"))
    output.line(f"wrote {result.csv_path} ({len(pairs)} pairs, "
                f"{sum(r.rows for r in result.done)} rows added) and {result.json_path}")
    return 0
