"""The hardware a measurement drives, built from its specs: the power session and its
marker, the governors that set its levels, the host cluster's level and the clock readers.

Commands turn their options into these (`profiler.cli.common.plumbing`); the sweep,
predict's tables and explore's workers build them here too, so every measurement opens
power, checks governors and reads clocks the same way. Measuring with them is
`profiler.measure.layers`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from governors import sysfs_root_from_env, writable_governor
from governors.host import host_domain
from profiler.boards.model import Board, resolve_level
from profiler.errors import BadInputError, BoardError
from profiler.markers import open_marker
from profiler.measure.freq_trace import FreqSampler, open_freq_reader
from profiler.power.session import PowerSession
from profiler.power.sources import NoneSource, SourceHardware, open_power_source

if TYPE_CHECKING:
    from governors import Governor
    from profiler.markers import MarkerSink
    from profiler.power.sources.base import Activity


def open_power(board: Board, spec: str | None = None, marker: str | None = None, *,
               trace_dir: Path | None = None, layer_runs: bool = False,
               rate_hz: int | None = None, baseline_s: float = 0.5, counter_updates: int = 20,
               sysfs_root: Path | None = None,
               ) -> tuple[PowerSession | None, Activity | None]:
    """(PowerSession, what to tell when a processor works: the source's `activity`) for a
    --power ``spec`` and --marker ``marker``, not opened yet; (None, None) for none. ``spec`` defaults to sim on the
    simulated board, else none; a streaming source needs a marker wired to the logger
    (sim's is the virtual logger's own input). ``trace_dir``: where a streaming source
    keeps its capture (None: memory). ``layer_runs``: the caller measures layer runs
    (layers, sweep), the only thing a reading logger (ina260, sim:ina260) can attribute.
    ``sysfs_root`` (default $COUPPROF_SYSFS_ROOT or /sys) moves /sys/class/gpio too."""
    if baseline_s < 0:
        raise BadInputError(f"--baseline-s {baseline_s} is negative", "give seconds >= 0")
    spec = spec or ("sim" if board.simulated else "none")
    extra: dict[str, Any] = {"trace_dir": trace_dir, "rate_hz": rate_hz}
    if spec.split(":")[0].lower() == "sim" and not board.simulated:
        raise BoardError(f"--power sim needs the simulated board, not '{board.name}'",
                         "use --board sim, or a real source such as arduino:PORT")
    source = open_power_source(spec, SourceHardware(board=board, extra=extra))
    if isinstance(source, NoneSource):
        return None, None
    if source.mode == "readings" and not layer_runs:
        raise BadInputError(
            f"--power {spec} records readings milliseconds apart, with no edge timestamps: "
            "it measures layer runs (coupprof layers, sweep) only",
            "use --power sim (or arduino:PORT, this project's logger) for this command")
    marker_spec = marker or ("sim" if source.kind == "sim" else "none")
    marked = source.mode in ("stream", "readings")  # windows found by the marker's edges
    if marked and marker_spec.split(":")[0].lower() == "none":
        raise BadInputError(
            f"--power {spec} attributes energy by marker edges, but no --marker was given",
            f"wire a GPIO line to the logger's {'pin 13' if source.mode == 'readings' else 'D2'}"
            " input and pass --marker gpiod:CHIP:LINE (or sysfs:NUMBER)")
    opened = None
    if marked:
        root = sysfs_root if sysfs_root is not None else sysfs_root_from_env()
        sink = cast("MarkerSink", source) if source.kind == "sim" else None  # its logger's pins
        opened = open_marker(marker_spec, sim_sink=sink, sysfs_root=root / "class" / "gpio")
    return PowerSession(source, opened, baseline_s=baseline_s,
                        counter_updates=counter_updates), source.activity


def governors_for(board: Board, letters: Sequence[str], sysfs_root: Path | None, *,
                  none_fix: str = "drop --freq") -> dict[str, Governor]:
    """DVFS domain letter -> governor, checked writable (`governors.writable_governor`:
    ``none_fix`` says what to do where none can set frequencies), for every processor in
    ``letters`` that has DVFS."""
    govs: dict[str, Governor] = {}
    for letter in letters:
        dom = board.dvfs_domain(letter)
        if dom.has_dvfs and dom.letter not in govs:
            govs[dom.letter] = writable_governor(board, letter, sysfs_root, none_fix=none_fix)
    return govs


def host_level(board: Board, letter: str, spec: str | None) -> tuple[int, int] | None:
    """--host-freq ``spec`` for ``letter``'s host cluster as (level, kHz); None when not
    given. A processor without a separate host level is one BadInputError."""
    if spec is None:
        return None
    host = host_domain(board, letter)
    if host is None:
        raise BadInputError(
            f"--host-freq {spec}: processor {letter} on board '{board.name}' has no host "
            "cluster with levels of its own (only a GPU has; the NPU's level is --freq)",
            "drop --host-freq")
    return resolve_level(host, spec, board.name)


def host_governor(board: Board, letter: str, sysfs_root: Path | None) -> Governor:
    """The writable governor of ``letter``'s host cluster (`host_level` checked it has one)."""
    host = host_domain(board, letter)
    if host is None:
        raise ValueError(f"processor {letter} has no host cluster with levels of its own")
    return writable_governor(board, host.letter, sysfs_root)


def clock_samplers(stack: ExitStack, board: Board, letters: Sequence[str],
                   sysfs_root: Path | None, note: Callable[[str], None],
                   ) -> dict[str, FreqSampler]:
    """letter -> a sampler of its clock (reader opened on ``stack``, not started), for
    each of ``letters`` whose clock can be read (`profiler.measure.freq_trace.freq_reader_for`).
    A reader that cannot open leaves its processor unsampled; ``note`` says why."""
    samplers: dict[str, FreqSampler] = {}
    for letter in dict.fromkeys(letters):
        reader = open_freq_reader(stack, board, board.processor(letter), sysfs_root, note)
        if reader is not None:
            samplers[letter] = FreqSampler(reader)
    return samplers


__all__ = ["clock_samplers", "governors_for", "host_governor", "host_level", "open_power"]
