"""Build the right governor for a processor of a board profile."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from governors.base import Governor
from governors.cpufreq import CpufreqGovernor
from governors.devfreq import DevfreqGovernor
from governors.none import NoneGovernor
from governors.sysfs_io import SysfsIO, sysfs_root_from_env
from governors.vendor import KgslGovernor, MpgpuGovernor
from profiler.boards.model import Board, ProcessorSpec
from profiler.errors import BoardError, PermissionDeniedError

if TYPE_CHECKING:
    from profiler.sim.governor import SimTree

KINDS: dict[str, type[Governor]] = {
    "cpufreq": CpufreqGovernor,
    "devfreq": DevfreqGovernor,
    "kgsl": KgslGovernor,
    "mpgpu": MpgpuGovernor,
}
GOVERNOR_KINDS = (*KINDS, "sim", "none")


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
        # Imported here: the simulated board's governor builds on this package's back
        # ends, so it cannot be imported while `governors` itself is loading.
        from profiler.sim.governor import SimGovernor, SimTree

        return SimGovernor(proc, sim_tree or SimTree.shared(board))
    cls = KINDS.get(spec.kind)
    if cls is None:
        raise BoardError(f"unknown governor kind '{spec.kind}' for processor {proc.letter}",
                         f"use one of: {', '.join(GOVERNOR_KINDS)}")
    root = sysfs_root if sysfs_root is not None else sysfs_root_from_env()
    return cls(proc, SysfsIO(root), spec.path)


def writable_governor(board: Board, letter: str, sysfs_root: Path | None = None, *,
                      none_fix: str = "drop --freq") -> Governor:
    """The governor of ``letter``'s DVFS domain, checked writable before anything runs:
    BoardError when it cannot set frequencies (``none_fix`` says what to do instead),
    PermissionDeniedError naming the first file it may not write."""
    domain = board.dvfs_domain(letter)
    if not domain.has_dvfs:
        raise BoardError(f"cannot set frequencies: processor {domain.letter} on board "
                         f"'{board.name}' has no DVFS levels", none_fix)
    gov = make_governor(board, domain, sysfs_root)
    if gov.kind == "none":
        raise BoardError(f"cannot set frequencies: processor {domain.letter} on board "
                         f"'{board.name}' has governor 'none'", none_fix)
    bad = [c for c in gov.checks() if not c.ok]
    if bad:
        raise PermissionDeniedError(
            f"cannot set frequencies of processor {domain.letter} on board '{board.name}': "
            f"{bad[0].what} is not writable"
            + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""),
            bad[0].fix or "run as root, or grant write access (`coupprof doctor` prints a "
            "udev rule)")
    return gov
