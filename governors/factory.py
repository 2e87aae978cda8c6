"""Build the right governor for a processor of a board profile."""

from __future__ import annotations

from pathlib import Path

from governors.base import Governor
from governors.cpufreq import CpufreqGovernor
from governors.devfreq import DevfreqGovernor
from governors.none import NoneGovernor
from governors.sim import SimGovernor, SimTree
from governors.sysfs_io import SysfsIO, sysfs_root_from_env
from governors.vendor import KgslGovernor, MpgpuGovernor
from profiler.boards.model import Board, ProcessorSpec
from profiler.errors import BoardError

KINDS: dict[str, type[Governor]] = {
    "cpufreq": CpufreqGovernor,
    "devfreq": DevfreqGovernor,
    "kgsl": KgslGovernor,
    "mpgpu": MpgpuGovernor,
}
GOVERNOR_KINDS = (*KINDS, "sim", "none")


def dvfs_processor(board: Board, letter: str) -> ProcessorSpec:
    """The processor whose frequency `--freq` sets for `letter`.

    A processor without DVFS of its own (the NPU) uses its host CPU cluster's table
    and governor, as ARM-CO-UP does (its Fig. 16d).
    """
    proc = board.processor(letter)
    if not proc.freqs_khz and proc.host:
        return board.processor(proc.host)
    return proc


def make_governor(board: Board, proc: ProcessorSpec, sysfs_root: Path | None = None, *,
                  kind: str | None = None, sim_tree: SimTree | None = None) -> Governor:
    """A governor for `proc`; `kind="none"` leaves frequencies alone whatever the profile says."""
    spec = proc.governor
    if kind == "none" or spec is None or spec.kind == "none":
        return NoneGovernor(proc, SysfsIO(Path(".")), "")
    if kind is not None and kind != spec.kind:
        raise BoardError(f"processor {proc.letter} on board '{board.name}' uses governor"
                         f" '{spec.kind}', not '{kind}'", "drop --governor or pass 'none'")
    if spec.kind == "sim":
        return SimGovernor(proc, sim_tree or SimTree.shared(board))
    cls = KINDS.get(spec.kind)
    if cls is None:
        raise BoardError(f"unknown governor kind '{spec.kind}' for processor {proc.letter}",
                         f"use one of: {', '.join(GOVERNOR_KINDS)}")
    root = sysfs_root if sysfs_root is not None else sysfs_root_from_env()
    return cls(proc, SysfsIO(root), spec.path)
