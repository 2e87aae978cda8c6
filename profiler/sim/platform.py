"""The simulated board plugged into the role factories: the one hook nothing else replaces.

`register()` hands each factory the sim's part, so no factory imports this package:

- the profile loader: the check of each processor's ``[processors.X.sim]`` model tables;
- `governors.make_governor`: kind ``sim`` (`SimGovernor` on the board's shared tree, or
  the caller's own) and ``sim-driver`` (`SimDriverGovernor`: a clock its driver picks);
- `profiler.executors.make_executor`: every processor of a simulated board
  (`sim_executor`, paced to the modelled speed);
- `profiler.power.sources`: ``--power sim`` and ``sim:ina260`` (virtual loggers on a pty).

The ``sim`` marker is built in (`profiler.markers`): it drives the simavr rig too.
Importing this module registers; `profiler.platform` imports it, so every board chosen
there can be driven. Registering again changes nothing.
"""

from __future__ import annotations

from pathlib import Path

from governors.base import Governor
from governors.factory import register_governor_kind
from profiler.boards.model import Board, ProcessorSpec
from profiler.boards.profiles import register_sim_table_check
from profiler.executors.factory import SIMULATED, register_executor_kind
from profiler.power.sources import register_source
from profiler.sim.executor import sim_executor
from profiler.sim.governor import DRIVER_KIND, SimDriver, SimDriverGovernor, SimGovernor, SimTree
from profiler.sim.model import check_model_tables
from profiler.sim.sources import build_sim_source


def _governor(board: Board, proc: ProcessorSpec, sysfs_root: Path,
              tree: object | None) -> Governor:
    # The simulated kernel's tree stands in for sysfs: the root is not used.
    if tree is not None and not isinstance(tree, SimTree):
        raise TypeError(f"sim_tree must be a SimTree, not {type(tree).__name__}")
    return SimGovernor(proc, tree or SimTree.shared(board))


def _driver_governor(board: Board, proc: ProcessorSpec, sysfs_root: Path,
                     tree: object | None) -> Governor:
    # no tree: the driver's pick is read, never written
    return SimDriverGovernor(proc, SimDriver.shared(board, proc))


def register() -> None:
    """Plug the simulated board's roles into the factories."""
    register_sim_table_check(check_model_tables)
    register_governor_kind("sim", _governor)
    register_governor_kind(DRIVER_KIND, _driver_governor)
    register_executor_kind(SIMULATED, sim_executor)
    # After the real loggers in `auto` (it detects nothing: it is chosen by name).
    register_source("sim", build_sim_source, order=90)


register()
