"""The governor and busy loop that `coupprof dvfs-latency` measures a board's transition
delays with (`governors.latency.measure` does the measuring).

A real board: its governor on sysfs and, for a CPU cluster, a busy loop pinned to one of
its cores (a GPU is timed by its read-back alone). The simulated board: its governor on a
tree of its own whose kernel runs on a virtual clock, and a busy loop whose chunks take
the modelled time at the frequency in effect (`profiler.sim.busy_loop`), so the result
recovers the profile's modelled delays.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from governors import make_governor
from governors.base import Governor
from governors.latency import BusyLoop, pin_to_cores
from profiler.boards.model import Board, ProcessorSpec
from profiler.errors import BadInputError
from profiler.sim.busy_loop import SimBusyLoop, VirtualClock
from profiler.sim.governor import SimGovernor, SimTree

#: --method: auto picks the busy loop on CPU clusters and the read-back elsewhere.
METHODS = ("auto", "busy-loop", "readback")


@dataclass(frozen=True)
class LatencyProbe:
    """What a transition is timed with: the domain's governor, and the busy loop that
    notices the new speed (None: the governor's read-back alone)."""

    governor: Governor
    loop: BusyLoop | None


@contextmanager
def latency_probe(board: Board, target: ProcessorSpec, sysfs_root: Path,
                  method: str = "auto") -> Iterator[LatencyProbe]:
    """The probe for DVFS domain ``target`` of ``board``; on exit this thread's CPU set
    and the simulated board's own tree are put back. ``method``: one of `METHODS`."""
    if board.simulated:
        if method == "readback":
            raise BadInputError("--method readback means nothing on the simulated board",
                                "drop --method (the simulated busy loop is used)")
        clock = VirtualClock()
        tree = SimTree(board, clock_ns=clock)  # its own tree: its kernel runs on the virtual clock
        try:
            gov = make_governor(board, target, sim_tree=tree)
            assert isinstance(gov, SimGovernor)
            yield LatencyProbe(gov, SimBusyLoop(gov, clock))
        finally:
            tree.remove()
        return
    gov = make_governor(board, target, sysfs_root)
    if method == "auto":
        method = "busy-loop" if target.kind.is_cpu else "readback"
    if method == "busy-loop" and not target.kind.is_cpu:
        raise BadInputError(f"a busy loop cannot run on {target.letter} ({target.kind})",
                            "use --method readback for GPUs")
    if method != "busy-loop":
        yield LatencyProbe(gov, None)
        return
    old_affinity = pin_to_cores(target.cores)
    if old_affinity is None:
        raise BadInputError(f"cannot run on processor {target.letter}'s cores "
                            f"{list(target.cores)} (not in this process's CPU set)",
                            "run without taskset/cgroup limits, or use --method readback")
    try:
        yield LatencyProbe(gov, BusyLoop())
    finally:
        os.sched_setaffinity(0, old_affinity)
