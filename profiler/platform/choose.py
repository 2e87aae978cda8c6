"""`choose_board`: the one way every command and library caller gets its board.

``--board NAME|PATH`` if given, else the bundled profile this machine's device tree
names, else the simulated board (`profiler.boards.profiles.select_board`). The
generated `host` board knows only CPU clusters; LiteRT's GPU accelerator is added as G
(`profiler.executors.with_accelerators`) when the caller may use it, so
``sweep --board host --processors B,G`` finds G wherever ``layers --board host -p G``
does. Whether a GPU is really there is found out when the first layer compiles.

Importing this module plugs the simulated board's roles into the factories
(`profiler.sim.platform`), so a board chosen here can always be driven, also in a
fresh process such as a Dask worker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import profiler.sim.platform  # noqa: F401 - registers the simulated board's roles
from profiler.boards.host import sysfs_root_from_env
from profiler.boards.model import Board
from profiler.boards.profiles import select_board
from profiler.executors.factory import with_accelerators


def choose_board(board: str | Path | None, sysfs_root: str | Path | None = None, *,
                 letters: Sequence[str] | None = None,
                 announce: Callable[[str], None] | None = None) -> Board:
    """The board ``board`` names (a bundled name, ``host``, or a profile's path), else the
    detected one, else ``sim`` (said through ``announce``).

    sysfs_root: where ``host`` and detection read (default: $COUPPROF_SYSFS_ROOT, else
    /sys). letters: the processors the caller will use; on ``host`` G is added when it is
    None (any processor) or names G.
    """
    root = Path(sysfs_root) if sysfs_root is not None else sysfs_root_from_env()
    chosen = select_board(str(board) if board else None, root, announce=announce)
    if letters is None or any(letter.strip().upper() == "G" for letter in letters):
        chosen = with_accelerators(chosen)
    return chosen
