"""Build the right governor for a processor of a board profile.

The sysfs back ends (cpufreq, devfreq, kgsl, mpgpu) and ``none`` are built in. Other
kinds plug in with `register_governor_kind`: the simulated board registers ``sim``
(`profiler.sim.platform`), so nothing here imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from governors.base import Governor
from governors.cpufreq import CpufreqGovernor
from governors.devfreq import DevfreqGovernor
from governors.none import NoneGovernor
from governors.sysfs_io import SysfsIO, sysfs_root_from_env
from governors.vendor import KgslGovernor, MpgpuGovernor
from profiler.boards.model import Board, ProcessorSpec
from profiler.errors import BoardError, PermissionDeniedError

KINDS: dict[str, type[Governor]] = {
    "cpufreq": CpufreqGovernor,
    "devfreq": DevfreqGovernor,
    "kgsl": KgslGovernor,
    "mpgpu": MpgpuGovernor,
}
GOVERNOR_KINDS = (*KINDS, "sim", "sim-driver", "none")

#: builder(board, processor, sysfs root, tree) -> the governor; ``tree`` is the caller's
#: own simulated kernel tree (`make_governor`'s ``sim_tree``), None for the board's shared one.
GovernorBuilder = Callable[[Board, ProcessorSpec, Path, object | None], Governor]
_BUILDERS: dict[str, GovernorBuilder] = {}


def register_governor_kind(kind: str, builder: GovernorBuilder) -> None:
    """Add (or replace) a governor kind that is not a built-in sysfs back end."""
    if kind in KINDS or kind == "none":
        raise ValueError(f"governor kind {kind!r} is built in")
    _BUILDERS[kind] = builder


def make_governor(board: Board, proc: ProcessorSpec, sysfs_root: Path | None = None, *,
                  kind: str | None = None, sim_tree: object | None = None) -> Governor:
    """A governor for `proc`; `kind="none"` leaves frequencies alone whatever the profile says.
    ``sim_tree``: a simulated kernel tree of the caller's own, for a registered kind that
    has one (the simulated board's ``sim``)."""
    spec = proc.governor
    if kind == "none" or spec is None or spec.kind == "none":
        return NoneGovernor(proc, SysfsIO(Path(".")), "")
    if kind is not None and kind != spec.kind:
        raise BoardError(f"processor {proc.letter} on board '{board.name}' uses governor"
                         f" '{spec.kind}', not '{kind}'", "drop --governor or pass 'none'")
    root = sysfs_root if sysfs_root is not None else sysfs_root_from_env()
    cls = KINDS.get(spec.kind)
    if cls is not None:
        return cls(proc, SysfsIO(root), spec.path)
    builder = _BUILDERS.get(spec.kind)
    if builder is not None:
        return builder(board, proc, root, sim_tree)
    if spec.kind in GOVERNOR_KINDS:  # a kind the profiles know whose back end is not loaded
        raise BoardError(f"governor kind '{spec.kind}' of processor {proc.letter} on board "
                         f"'{board.name}' is not registered",
                         "get the board from profiler.platform.choose_board, which plugs in "
                         "the simulated board")
    raise BoardError(f"unknown governor kind '{spec.kind}' for processor {proc.letter}",
                     f"use one of: {', '.join(GOVERNOR_KINDS)}")


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
    if not gov.settable:
        raise BoardError(f"cannot set frequencies: processor {domain.letter} on board "
                         f"'{board.name}' has governor '{gov.kind}', whose driver picks the "
                         "clock (it is read, never set)", none_fix)
    bad = [c for c in gov.checks() if not c.ok]
    if bad:
        raise PermissionDeniedError(
            f"cannot set frequencies of processor {domain.letter} on board '{board.name}': "
            f"{bad[0].what} is not writable"
            + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""),
            bad[0].fix or "run as root, or grant write access (`coupprof doctor` prints a "
            "udev rule)")
    return gov
