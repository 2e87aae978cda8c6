"""What the commands share once their options are parsed: messages, the board, the
model, the levels, power and the method. No command owns this module; each calls it and
renders. The hardware itself is built and measured in `profiler.measure` (hardware,
layers), which non-command callers use too.

Option groups and argument types live in `profiler.cli.common.options`, progress bars in
`profiler.cli.common.progress`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from profiler.boards.model import Board, ProcessorSpec, resolve_level
from profiler.errors import BadInputError, BoardError
from profiler.measure.method import Method

if TYPE_CHECKING:
    from profiler.cli.common.progress import TaskProgress
    from profiler.measure.fused import FusedSettings
    from profiler.power.session import PowerSession
    from profiler.power.sources.base import Activity
    from profiler.slicing.specs import SlicedModel


class _Notes:
    """--quiet turns the notes off; errors are not notes (`profiler.cli.main` prints them)."""

    on = True


def set_quiet(quiet: bool) -> None:
    """Leave out (or print again) the notes `say` prints: `--quiet`."""
    _Notes.on = not quiet


def say(text: str) -> None:
    """A note for the user on stderr (results go to stdout); none with --quiet."""
    flush_board_notice()  # the held board notice comes first
    if _Notes.on:
        print(f"coupprof: {text}", file=sys.stderr, flush=True)


class _BoardNotice:
    """The "using the simulated board" notice, held back so that an error is never behind
    it: said once, before the command's next note or when it ends well
    (`flush_board_notice`, called by `profiler.cli.main`); dropped if it fails first."""

    held: str | None = None
    said = False


def hold_board_notice(text: str) -> None:
    """Keep the board notice until the command's next note or its end (once a process)."""
    if not _BoardNotice.said:
        _BoardNotice.held = text


def flush_board_notice() -> None:
    """Say the held board notice, if any (once)."""
    text, _BoardNotice.held = _BoardNotice.held, None
    if text is not None and not _BoardNotice.said:
        _BoardNotice.said = True
        say(text)


def sysfs_root(args: argparse.Namespace) -> Path:
    """--sysfs-root, else $COUPPROF_SYSFS_ROOT, else /sys."""
    from governors import sysfs_root_from_env

    return Path(args.sysfs_root) if args.sysfs_root else sysfs_root_from_env()


# ---------------------------------------------------------------------------
# The board


def choose_board(args: argparse.Namespace, letters: Sequence[str] | None = None) -> Board:
    """--board, or the detected board, or `sim` (said on stderr), through
    `profiler.platform.choose_board`: on `host`, LiteRT's GPU accelerator is added as G
    when ``letters`` is None (every processor) or names G."""
    from profiler.platform import choose_board as choose

    return choose(args.board, sysfs_root(args), letters=letters, announce=hold_board_notice)


def board_summary(board: Board) -> str:
    """'B = CPU x2 (cores 0-1), no DVFS levels; L = ...' for error messages."""
    parts = []
    for letter, proc in board.processors.items():
        levels = f"levels {proc.levels_text()}" if proc.has_dvfs else "no DVFS levels"
        parts.append(f"{letter} = {proc.name}, {levels}")
    return "; ".join(parts)


def resolve_freq(board: Board, proc: ProcessorSpec, freq: str | None) -> tuple[int, int] | None:
    """--freq K for ``proc`` as (level, kHz); for N its host cluster's levels, as on
    ARM-CO-UP's board. None when --freq was not given."""
    if freq is None:
        return None
    domain = board.dvfs_domain(proc.letter)
    if not domain.has_dvfs:
        raise BoardError(
            f"--freq {freq}: processor {proc.letter} on board '{board.name}' has no DVFS levels "
            f"(board has: {board_summary(board)})",
            "drop --freq, or pick a processor/board with a frequency table",
        )
    return resolve_level(domain, freq, board.name)  # range errors list the valid levels


def parse_letters(text: str | None, board: Board) -> list[str]:
    """--processors L,B,G: the board's letters in the given order (default: all)."""
    if not text:
        return list(board.processors)
    letters = [t.strip().upper() for t in text.replace(" ", "").split(",") if t.strip()]
    if not letters:
        raise BadInputError(f"--processors {text!r} names no processor",
                            f"e.g. --processors {','.join(board.processors)}")
    for letter in letters:
        board.processor(letter)  # BoardError listing the board's processors
    return list(dict.fromkeys(letters))


# ---------------------------------------------------------------------------
# The model


def load_model(args: argparse.Namespace, bar: TaskProgress | None,
               ) -> tuple[Path, bytes, SlicedModel]:
    """(path, bytes, sliced model) for --model (or the bundled default), --granularity
    and --cuts. Sets ``args.model`` to the path used."""
    from profiler.cli.common.progress import step
    from profiler.slicing.slicer import slice_model
    from profiler.tflite.model_io import read_model_bytes

    if args.model is None:
        from profiler.zoo import default_model_path

        args.model = default_model_path()
    model: Path = args.model
    data = read_model_bytes(model)
    sliced = slice_model(model, args.granularity, args.cuts, progress=step(bar, "slicing"))
    return model, data, sliced


# ---------------------------------------------------------------------------
# Power


def open_power(args: argparse.Namespace, board: Board, trace_dir: Path | None = None,
               layer_runs: bool = False,
               ) -> tuple[PowerSession | None, Activity | None]:
    """(PowerSession or None, the source's `activity` or None) for --power/--marker/--baseline-s,
    --rate and --counter-updates, not opened yet (`profiler.measure.hardware.open_power`:
    ``trace_dir``, ``layer_runs``). --sysfs-root moves /sys/class/gpio too."""
    from profiler.cli.common.interrupt import keep_on_interrupt
    from profiler.measure.hardware import open_power as open_from_specs

    if trace_dir is not None:  # named if Ctrl-C stops the command while it is there
        keep_on_interrupt(trace_dir, "the power trace so far")
    return open_from_specs(
        board, args.power, args.marker, trace_dir=trace_dir, layer_runs=layer_runs,
        rate_hz=getattr(args, "rate", None), baseline_s=args.baseline_s,
        counter_updates=getattr(args, "counter_updates", 20),
        sysfs_root=sysfs_root(argparse.Namespace(sysfs_root=getattr(args, "sysfs_root", None))))


# ---------------------------------------------------------------------------
# The measurement method


def method_for(args: argparse.Namespace, proc: ProcessorSpec) -> Method:
    """--method, else fused for accelerators (G, N) and sliced for CPU clusters."""
    return Method.chosen(args.method, proc.kind)


def fused_settings(args: argparse.Namespace) -> FusedSettings:
    """The fused method's rounds, target and budget from --min-rounds .. --budget-s."""
    from profiler.measure.fused import FusedSettings

    return FusedSettings(target_ms=args.target_ms, target_rel=args.target_rel,
                         budget_s=args.budget_s, min_rounds=args.min_rounds,
                         max_rounds=args.max_rounds, window=args.window, lead=args.lead,
                         cache=args.cache, loaded_mb=args.loaded_mb, hold_ms=args.hold_ms)
