"""The board a command or library caller drives, with every role it needs plugged in.

- ``choose``: `choose_board`, the one door to a board for every command, explore's
  measuring (on Dask workers too) and the benchmarks: ``--board``, else the detected
  board, else the simulated one; LiteRT's GPU accelerator as G on ``host``. Importing it
  plugs the simulated board into the role factories (`profiler.sim.platform`).
- ``latency``: the governor and busy loop `coupprof dvfs-latency` measures with (the
  simulated board's on a virtual clock).
- ``access``: the udev rule and group that let a normal user drive a board
  (`coupprof doctor --udev`).

It sits above ``boards``, the roles (``governors``, ``executors``, ``power``) and ``sim``,
and below everything that measures.
"""

from profiler.platform.choose import choose_board

__all__ = ["choose_board"]
