"""The executor for a processor of a board, from its `ProcessorSpec`.

    kind "cpu"                    -> CpuExecutor (interpreter, threads on its cores)
    accelerator = "gpu" / "npu"   -> AcceleratorExecutor (LiteRT CompiledModel)
    delegate = "lib....so"        -> DelegateExecutor (load_delegate)
    simulated board               -> the executor registered as ``sim``
                                     (`register_executor_kind`, by `profiler.sim.platform`):
                                     a CpuExecutor on this machine's cores, paced to the
                                     processor's modelled speed

The `host` board is read from /sys and knows only CPU clusters; `with_accelerators`
adds G (LiteRT's GPU accelerator, driven from B) when this LiteRT ships one, so
`--processors B,G` works on a workstation with a GPU. Whether a GPU is really there
is found out when the first layer is compiled (a clear exit-3 error if not).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Protocol

from profiler.boards.model import Board, ProcessorKind, ProcessorSpec
from profiler.clock import Clock, perf_clock
from profiler.errors import BoardError, RuntimeUnavailableError
from profiler.executors.accelerator import AcceleratorExecutor
from profiler.executors.base import Executor
from profiler.executors.cpu import CpuExecutor
from profiler.executors.delegate import DelegateExecutor
from profiler.runtime import runtime


class ExecutorBuilder(Protocol):
    """Builds the executor of one processor of a board of a registered kind."""

    def __call__(self, board: Board, proc: ProcessorSpec, *, threads: int | None,
                 clock: Clock) -> Executor: ...


_BUILDERS: dict[str, ExecutorBuilder] = {}
#: The registered kind that drives every processor of a simulated board.
SIMULATED = "sim"


def register_executor_kind(kind: str, builder: ExecutorBuilder) -> None:
    """Add (or replace) the executor of a kind of board (``sim``: the simulated board's)."""
    _BUILDERS[kind] = builder


GPU_LIBS = ("libLiteRtWebGpuAccelerator.so", "libLiteRtGpuAccelerator.so",
            "libLiteRtOpenClAccelerator.so")


def litert_gpu_library() -> Path | None:
    """LiteRT's GPU accelerator library in the installed wheel, if any."""
    try:
        import ai_edge_litert
    except ImportError:
        return None
    base = Path(ai_edge_litert.__file__).parent
    for name in GPU_LIBS:
        if (base / name).exists():
            return base / name
    return None


def with_accelerators(board: Board) -> Board:
    """`board` plus a G processor on the `host` board when LiteRT has a GPU accelerator.
    Under tflite-runtime, which has none of LiteRT's accelerators, G is marked unavailable
    instead, so asking for it says why in one line."""
    if board.name != "host" or "G" in board.processors or "B" not in board.processors:
        return board
    lib = litert_gpu_library()
    if lib is None:
        return _without_litert(board)
    big = board.processors["B"]
    gpu = ProcessorSpec(
        letter="G", kind=ProcessorKind.GPU, name=f"GPU via LiteRT ({lib.name}), driven from B",
        cores=big.cores, host="B", accelerator="gpu",
        extra={"notes": "added by coupprof: availability is checked when layers compile"})
    procs = dict(board.processors)
    procs["G"] = gpu
    return replace(board, processors=procs)


def _without_litert(board: Board) -> Board:
    try:
        rt = runtime()
    except RuntimeUnavailableError:
        return board  # no runtime at all: whatever runs first says so
    if rt.name == "ai-edge-litert":
        return board  # a LiteRT build without a GPU accelerator
    why = (f"G on 'host' is LiteRT's GPU accelerator, and the runtime here is {rt.name} "
           f"{rt.version}, which has none of LiteRT's accelerators; install ai-edge-litert "
           "(`pip install ai-edge-litert`) for it")
    return replace(board, unavailable={**board.unavailable, "G": why})


def make_executor(board: Board, letter: str, *, threads: int | None = None,
                  allow_fallback: bool = True, readback: str = "run",
                  accelerator: str | None = None, clock: Clock = perf_clock) -> Executor:
    """The executor of processor `letter` of `board` (not opened yet).

    accelerator: override the profile's accelerator ("cpu" runs LiteRT's CPU
    accelerator through the accelerator code path; used by tests).
    """
    proc = board.processor(letter)
    if board.simulated:
        builder = _BUILDERS.get(SIMULATED)
        if builder is None:
            raise BoardError(f"board '{board.name}' is simulated, but no executor is registered "
                             f"for kind '{SIMULATED}'",
                             "get the board from profiler.platform.choose_board, which plugs in "
                             "the simulated board")
        return builder(board, proc, threads=threads, clock=clock)
    if accelerator is not None or proc.accelerator:
        return AcceleratorExecutor(proc, accelerator=accelerator, threads=threads,
                                   allow_fallback=allow_fallback, readback=readback,
                                   clock=clock)
    if proc.delegate:
        return DelegateExecutor(proc, threads=threads, clock=clock)
    if proc.kind.is_cpu:
        return CpuExecutor(proc, threads=threads, clock=clock)
    raise BoardError(
        f"processor {letter} ({proc.kind}) of board '{board.name}' names neither a LiteRT "
        "accelerator nor a delegate library",
        f"add `accelerator = \"{proc.kind}\"` or `delegate = \"lib...so\"` to its profile entry")
