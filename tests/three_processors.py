"""A three-processor board for executor tests: this host's B split into L and B on
different cores, and a 'G' driven through LiteRT's CompiledModel with its CPU accelerator
(the accelerator code path without a GPU)."""

from __future__ import annotations

import os
from dataclasses import replace

from profiler.boards.model import Board, ProcessorSpec
from profiler.boards.profiles import load_board
from profiler.executors.factory import make_executor

CORES = tuple(sorted(os.sched_getaffinity(0)))


def board3() -> Board:
    host = load_board("host")
    b = host.processor("B")
    procs = {"L": replace(b, letter="L", cores=(CORES[0],)),
             "B": replace(b, cores=(CORES[-1],)),
             "G": ProcessorSpec("G", "gpu", "CompiledModel on CPU", (CORES[-1],), host="B",
                                accelerator="gpu")}
    return replace(host, processors=procs)


def make(board, letter):  # type: ignore[no-untyped-def]
    return make_executor(board, letter, threads=1, accelerator="cpu" if letter == "G" else None)
