"""What the commands share once their options are parsed: messages, the board, the
model, governors and power. No command owns this module; each calls it and renders.

Option groups and argument types live in `profiler.cli.common.options`, progress bars in
`profiler.cli.common.progress`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profiler.boards.model import Board, ProcessorSpec, resolve_level
from profiler.errors import BadInputError, BoardError

if TYPE_CHECKING:
    from governors import Governor
    from profiler.cli.common.progress import TaskProgress
    from profiler.mapping.spec import FreqPlan
    from profiler.markers.base import Marker
    from profiler.measure.freq_trace import FreqSampler
    from profiler.measure.fused import FusedSettings
    from profiler.power.session import PowerSession
    from profiler.power.sources.base import PowerSource
    from profiler.sim.power import SimPowerModel
    from profiler.slicing.specs import SlicedModel


def say(text: str) -> None:
    """A note for the user on stderr (results go to stdout)."""
    print(f"coupprof: {text}", file=sys.stderr, flush=True)


def sysfs_root(args: argparse.Namespace) -> Path:
    """--sysfs-root, else $COUPPROF_SYSFS_ROOT, else /sys."""
    from governors import sysfs_root_from_env

    return Path(args.sysfs_root) if args.sysfs_root else sysfs_root_from_env()


# ---------------------------------------------------------------------------
# The board


def choose_board(args: argparse.Namespace, letters: Sequence[str] | None = None) -> Board:
    """--board, or the detected board, or `sim` (said on stderr). On `host`, LiteRT's GPU
    accelerator is added as G (checked when the layers compile) when ``letters`` is None
    (every processor) or names G."""
    from profiler.boards.profiles import select_board
    from profiler.executors.factory import with_accelerators

    board = select_board(args.board, sysfs_root(args), announce=say)
    if letters is None or "G" in letters:
        board = with_accelerators(board)
    return board


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
# Governors


def governors_for(board: Board, letters: Sequence[str], root: Path) -> dict[str, Governor]:
    """DVFS domain letter -> governor, checked writable, for every processor in
    ``letters`` that has DVFS."""
    from governors import writable_governor

    govs: dict[str, Governor] = {}
    for letter in letters:
        dom = board.dvfs_domain(letter)
        if dom.has_dvfs and dom.letter not in govs:
            govs[dom.letter] = writable_governor(board, letter, root)
    return govs


def apply_setup_levels(plan: FreqPlan, govs: dict[str, Governor]) -> list[str]:
    """Per-processor levels: set each domain once and read it back; returns warnings."""
    warnings = []
    for dom, (level, _khz) in plan.setup.items():
        result = govs[dom].set_level(level)
        if result.warning:
            warnings.append(result.warning)
    return warnings


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


def open_source(args: argparse.Namespace, board: Board, trace_dir: Path | None = None,
                layer_runs: bool = False,
                ) -> tuple[PowerSource | None, Marker | None, SimPowerModel | None]:
    """(source, marker, the sim board's power model) for --power/--marker, not opened
    yet; all None for --power none. ``trace_dir``: where a streaming source keeps its
    capture (None: memory). ``layer_runs``: the command measures layer runs (layers,
    sweep), the only thing a reading logger (ina260, sim:ina260) can attribute.

    --power defaults to sim on the simulated board, else none; a streaming source needs a
    marker wired to the logger (sim's is the virtual logger's own input)."""
    from profiler.markers import open_marker
    from profiler.power.sources import NoneSource, SourceHardware, open_power_source

    if args.baseline_s < 0:
        raise BadInputError(f"--baseline-s {args.baseline_s} is negative", "give seconds >= 0")
    spec = args.power or ("sim" if board.simulated else "none")
    model = None
    extra: dict[str, Any] = {"trace_dir": trace_dir, "rate_hz": getattr(args, "rate", None)}
    if spec.split(":")[0].lower() == "sim":
        if not board.simulated:
            raise BoardError(f"--power sim needs the simulated board, not '{board.name}'",
                             "use --board sim, or a real source such as arduino:PORT")
        from profiler.sim.power import SimPowerModel

        model = SimPowerModel(board)
        extra["sim_power_model"] = model
    source = open_power_source(spec, SourceHardware(extra=extra))
    if isinstance(source, NoneSource):
        return None, None, None
    if source.mode == "readings" and not layer_runs:
        raise BadInputError(
            f"--power {spec} records readings milliseconds apart, with no edge timestamps: "
            "it measures layer runs (coupprof layers, sweep) only",
            "use --power sim (or arduino:PORT, this project's logger) for this command")
    marker_spec = args.marker or ("sim" if source.kind == "sim" else "none")
    marked = source.mode in ("stream", "readings")  # windows found by the marker's edges
    if marked and marker_spec.split(":")[0].lower() == "none":
        raise BadInputError(
            f"--power {spec} attributes energy by marker edges, but no --marker was given",
            f"wire a GPIO line to the logger's {'pin 13' if source.mode == 'readings' else 'D2'}"
            " input and pass --marker gpiod:CHIP:LINE (or sysfs:NUMBER)")
    marker = None
    if marked:
        # --sysfs-root / COUPPROF_SYSFS_ROOT move /sys/class/gpio too (containers, tests).
        root = sysfs_root(argparse.Namespace(sysfs_root=getattr(args, "sysfs_root", None)))
        marker = open_marker(marker_spec, sim_sink=source if source.kind == "sim" else None,
                             sysfs_root=root / "class" / "gpio")
    return source, marker, model


def open_power(args: argparse.Namespace, board: Board, trace_dir: Path | None = None,
               layer_runs: bool = False,
               ) -> tuple[PowerSession | None, SimPowerModel | None]:
    """(PowerSession or None, SimPowerModel or None) for --power/--marker (see open_source)."""
    from profiler.power.session import PowerSession

    source, marker, model = open_source(args, board, trace_dir, layer_runs)
    if source is None:
        return None, None
    return PowerSession(source, marker, baseline_s=args.baseline_s,
                        counter_updates=getattr(args, "counter_updates", 20)), model


def clock_samplers(stack: ExitStack, board: Board, letters: Sequence[str],
                   root: Path | None) -> dict[str, FreqSampler]:
    """letter -> a sampler of its clock (reader opened on ``stack``, not started), for
    each of ``letters`` whose clock can be read (`profiler.measure.freq_trace.freq_reader_for`).
    A reader that cannot open leaves its processor unsampled, with a note."""
    from profiler.measure.freq_trace import FreqSampler, open_freq_reader

    samplers: dict[str, FreqSampler] = {}
    for letter in dict.fromkeys(letters):
        reader = open_freq_reader(stack, board, board.processor(letter), root, say)
        if reader is not None:
            samplers[letter] = FreqSampler(reader)
    return samplers


# ---------------------------------------------------------------------------
# The measurement method


def method_for(args: argparse.Namespace, proc: ProcessorSpec) -> str:
    """--method, else fused for accelerators (G, N) and sliced for CPU clusters."""
    from profiler.measure.fused import default_method

    return args.method or default_method(proc.kind)


def fused_settings(args: argparse.Namespace) -> FusedSettings:
    """The fused method's rounds, target and budget from --min-rounds .. --budget-s."""
    from profiler.measure.fused import FusedSettings

    return FusedSettings(target_ms=args.target_ms, target_rel=args.target_rel,
                         budget_s=args.budget_s, min_rounds=args.min_rounds,
                         max_rounds=args.max_rounds, window=args.window, lead=args.lead,
                         cache=args.cache)


def set_host_freq(board: Board, proc: ProcessorSpec, spec: str | None,
                  root: Path | None) -> tuple[Any, tuple[int, int] | None]:
    """--host-freq for ``proc``: (the host's writable governor or None, (level, kHz) or
    None). Bad input (a processor without a separate host level) is one BadInputError."""
    from governors import writable_governor
    from governors.host import host_domain

    if spec is None:
        return None, None
    host = host_domain(board, proc.letter)
    if host is None:
        raise BadInputError(
            f"--host-freq {spec}: processor {proc.letter} on board '{board.name}' has no host "
            "cluster with levels of its own (only a GPU has; the NPU's level is --freq)",
            "drop --host-freq")
    return writable_governor(board, host.letter, root), resolve_level(host, spec, board.name)
