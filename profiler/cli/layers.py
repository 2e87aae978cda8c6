"""`coupprof layers`: time every layer of a model on one processor of a board.

Slices the model (default grouping, `--granularity op` or `--cuts`), pins to the
processor's cores, runs warm-up then measured frames layer by layer, prints the
layer table and writes a tidy CSV with a JSON sidecar.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from profiler.boards.host import format_cpu_list
from profiler.boards.model import Board, ProcessorSpec, resolve_level
from profiler.errors import BoardError
from profiler.results import LayerInfo, LayerRun, RunInfo, environment
from profiler.tflite.model_io import read_model_bytes, sha256_bytes

# Boards this command can run on today; profile boards need their executors and governors.
SERVED_BOARDS = ("host",)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be 1 or more")
    return value


def nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be 0 or more")
    return value


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "layers",
        help="time every layer of a model on one processor",
        description="Run a .tflite model layer by layer (one sub-model per layer) on one "
        "processor of a board and report per-layer time, transfer time and bytes. "
        "Writes a tidy CSV and a JSON sidecar.",
    )
    p.add_argument("--model", "-m", type=Path, default=None,
                   help="the .tflite model (default: the bundled MobileNetV1 0.25 128x128)")
    p.add_argument("--board", default="host",
                   help="board to run on (default: host, this machine read from /sys)")
    p.add_argument("--sysfs-root", default=None, metavar="DIR",
                   help="sysfs tree the host board is read from "
                   "(default: $COUPPROF_SYSFS_ROOT or /sys)")
    p.add_argument("--processor", "-p", default="B", metavar="LETTER",
                   help="L little CPU cluster, B big CPU cluster, G GPU, N NPU (default: B)")
    p.add_argument("--freq", default=None, metavar="K",
                   help="DVFS level: 1-based index into the processor's frequency table, "
                   "or min / max (default: leave the frequency alone)")
    p.add_argument("--frames", type=positive_int, default=60,
                   help="measured frames (default: 60)")
    p.add_argument("--warmup", type=nonneg_int, default=5,
                   help="unrecorded warm-up frames first (default: 5)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="interpreter threads per layer (default: the processor's core count)")
    p.add_argument("--granularity", choices=("layer", "op"), default="layer",
                   help="layer: the documented default grouping; op: one layer per operator")
    p.add_argument("--cuts", default=None, metavar="I,J,K",
                   help="explicit cut points: op indices where a new layer starts")
    p.add_argument("--csv", type=Path, default=None,
                   help="CSV to write (default: ./coupprof-out/layers-MODEL-PROCESSOR.csv)")
    p.add_argument("--json", type=Path, default=None,
                   help="JSON sidecar to write (default: the CSV path with .json)")
    p.add_argument("--raw", action="store_true",
                   help="also write one CSV row per layer and frame with raw timestamps")
    p.add_argument("--seed", type=int, default=0, help="seed of the random input (default: 0)")
    p.set_defaults(func=run)


def board_summary(board: Board) -> str:
    """'B = CPU x2 (cores 0-1), no DVFS levels; L = ...' for error messages."""
    parts = []
    for letter, proc in board.processors.items():
        levels = f"levels {proc.levels_text()}" if proc.has_dvfs else "no DVFS levels"
        parts.append(f"{letter} = {proc.name}, {levels}")
    return "; ".join(parts)


def load_board(name: str, sysfs_root: str | None) -> Board:
    """The board by name or profile path; only the boards in SERVED_BOARDS can run here yet."""
    from profiler.boards.profiles import load_board as load_any

    board = load_any(name, sysfs_root)  # unknown names: BoardError listing the known boards
    if board.name not in SERVED_BOARDS:
        raise BoardError(
            f"`coupprof layers` cannot run on board '{board.name}' yet (it serves: "
            f"{', '.join(SERVED_BOARDS)})",
            "use --board host",
        )
    return board


def resolve_freq(board: Board, proc: ProcessorSpec, freq: str | None) -> tuple[int, int] | None:
    if freq is None:
        return None
    if not proc.has_dvfs:
        raise BoardError(
            f"--freq {freq}: processor {proc.letter} on board '{board.name}' has no DVFS levels "
            f"(board has: {board_summary(board)})",
            "drop --freq, or pick a processor/board with a frequency table",
        )
    level = resolve_level(proc, freq, board.name)  # range errors list the valid levels
    mhz = level[1] / 1000 if level else 0
    # Setting the level needs a governor back end, which this command does not drive yet.
    raise BoardError(
        f"--freq {freq} (= {mhz:g} MHz) cannot be applied on board '{board.name}' "
        "yet: no governor is wired to `coupprof layers`",
        "drop --freq to run at the current frequency",
    )


def default_csv_path(model: Path, letter: str) -> Path:
    return Path("coupprof-out") / f"layers-{model.stem}-{letter}.csv"


@contextmanager
def progress_bar(enabled: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    """A rich progress bar on a terminal; nothing in pipes.

    No auto-refresh thread: a Python thread drawing the bar would hold the GIL when
    an invoke returns and delay the layer's end timestamp. The bar is redrawn from
    the measuring thread between frames instead, at most ten times a second.
    """
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    tasks: dict[str, Any] = {}
    last = [0.0]
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  transient=True, auto_refresh=False) as bar:

        def update(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total)
            bar.update(tasks[what], completed=done, total=total)
            now = time.monotonic()
            if now - last[0] >= 0.1 or done == total:
                last[0] = now
                bar.refresh()

        yield update


def run(args: argparse.Namespace) -> int:
    from profiler.processors import make_executor
    from profiler.runner import LayerRunner
    from profiler.slicing.slicer import slice_model
    from profiler.tables import render, run_tables, write_tables

    if args.model is None:
        from profiler.zoo import default_model_path

        args.model = default_model_path()
    model: Path = args.model
    data = read_model_bytes(model)

    board = load_board(args.board, args.sysfs_root)
    proc = board.processor(args.processor)
    level = resolve_freq(board, proc, args.freq)

    with progress_bar(sys.stderr.isatty()) as bar:
        sliced = slice_model(
            model, args.granularity, args.cuts,
            progress=(lambda d, n: bar("slicing", d, n)) if bar else None,
        )
        with make_executor(proc, args.threads) as executor:
            runner = LayerRunner(sliced, executor, seed=args.seed, model_name=model.name)
            timings = runner.run(
                frames=args.frames, warmup=args.warmup,
                progress=(lambda d, n: bar("frames", d, n)) if bar else None,
            )

    info = RunInfo(
        board=board.name,
        simulated=board.simulated,
        model_path=str(model.resolve()),
        model_sha256=sha256_bytes(data),
        processor=proc.letter,
        processor_name=proc.name,
        cores=tuple(executor.cores),
        threads=executor.threads,
        frames=args.frames,
        warmup=args.warmup,
        granularity=sliced.granularity,
        cuts=tuple(sliced.cuts),
        freq_level=level[0] if level else None,
        freq_khz=level[1] if level else None,
        power_source="none",
        extra={"board_description": board.description, "seed": args.seed,
               "cores_text": format_cpu_list(executor.cores)},
        **environment(),
    )
    result = LayerRun(info, [LayerInfo.from_layer(layer) for layer in sliced.layers], timings)
    tables = run_tables(result, raw=args.raw)

    from rich.console import Console

    Console().print(render(tables))
    csv_path = args.csv or default_csv_path(model, proc.letter)
    csv_p, json_p = write_tables(tables, csv_path, args.json)
    print(f"wrote {csv_p} ({len(tables.layers)} layer rows"
          f"{f', {len(tables.frames)} frame rows' if tables.frames is not None else ''})"
          f" and {json_p}")
    return 0
