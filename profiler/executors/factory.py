"""The executor for a processor of a board, from its `ProcessorSpec`.

    kind "cpu"                    -> CpuExecutor (interpreter, threads on its cores)
    accelerator = "gpu" / "npu"   -> AcceleratorExecutor (LiteRT CompiledModel)
    delegate = "lib....so"        -> DelegateExecutor (load_delegate)
    simulated board               -> CpuExecutor on this machine's cores, stretched to the
                                     processor's modelled speed at its frequency in effect,
                                     or paced by its work model (the simulated G: a fixed
                                     cost per call plus MACs and bytes at the frequency)

The `host` board is read from /sys and knows only CPU clusters; `with_accelerators`
adds G (LiteRT's GPU accelerator, driven from B) when this LiteRT ships one, so
`--processors B,G` works on a workstation with a GPU. Whether a GPU is really there
is found out when the first layer is compiled (a clear exit-3 error if not).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from profiler.boards.model import Board, ProcessorSpec
from profiler.clock import Clock, perf_clock
from profiler.errors import BoardError
from profiler.executors.accelerator import AcceleratorExecutor
from profiler.executors.base import Executor, Modelled, Stretch
from profiler.executors.cpu import CpuExecutor
from profiler.executors.delegate import DelegateExecutor

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
    """`board` plus a G processor on the `host` board when LiteRT has a GPU accelerator."""
    if board.name != "host" or "G" in board.processors or "B" not in board.processors:
        return board
    lib = litert_gpu_library()
    if lib is None:
        return board
    big = board.processors["B"]
    gpu = ProcessorSpec(
        letter="G", kind="gpu", name=f"GPU via LiteRT ({lib.name}), driven from B",
        cores=big.cores, host="B", accelerator="gpu",
        extra={"notes": "added by coupprof: availability is checked when layers compile"})
    procs = dict(board.processors)
    procs["G"] = gpu
    return replace(board, processors=procs)


def host_cores() -> tuple[int, ...]:
    return tuple(sorted(os.sched_getaffinity(0)))


def sim_cores(proc: ProcessorSpec, available: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Host cores standing in for a simulated processor's cores (core c -> c mod n)."""
    have = available or host_cores()
    return tuple(sorted({have[c % len(have)] for c in proc.cores})) or have


def sim_stretch(board: Board, proc: ProcessorSpec) -> Stretch:
    """t_sim / t_host for `proc` at the frequency its (simulated) governor has in effect."""
    from governors import sim_model
    from governors.factory import make_governor
    from governors.sim import SimGovernor

    domain = board.dvfs_domain(proc.letter)
    gov = make_governor(board, domain) if domain.has_dvfs else None
    if isinstance(gov, SimGovernor) and proc.has_dvfs:
        return lambda: sim_model.stretch_factor(proc, gov.effective_khz())
    factor = sim_model.stretch_factor(proc, None)
    return lambda: factor


def sim_modelled(board: Board, proc: ProcessorSpec) -> Modelled | None:
    """The work model's run time of a sub-model (`governors.sim_model.call_ns`) at the
    frequency in effect at each run; None when `proc` has no work model."""
    from governors import sim_model
    from governors.factory import make_governor
    from governors.sim import SimGovernor
    from profiler.slicing.costs import model_work
    from profiler.slicing.graph import ModelView
    from profiler.tflite.model_io import parse_model

    if not sim_model.constants(proc).models_work:
        return None
    domain = board.dvfs_domain(proc.letter)
    gov = make_governor(board, domain) if domain.has_dvfs else None
    table = set(proc.freqs_khz)

    def freq() -> int | None:  # None (the top level) until the governor reads a level
        if not isinstance(gov, SimGovernor) or not proc.has_dvfs:
            return None
        khz = gov.effective_khz()
        return khz if khz in table else None

    def modelled(model_bytes: bytes) -> Callable[[], float]:
        macs, nbytes = model_work(ModelView.of(parse_model(model_bytes, "sub-model")))
        return lambda: sim_model.call_ns(proc, freq(), macs, nbytes)

    return modelled


def make_executor(board: Board, letter: str, *, threads: int | None = None,
                  allow_fallback: bool = True, readback: str = "run",
                  accelerator: str | None = None, clock: Clock = perf_clock) -> Executor:
    """The executor of processor `letter` of `board` (not opened yet).

    accelerator: override the profile's accelerator ("cpu" runs LiteRT's CPU
    accelerator through the accelerator code path; used by tests).
    """
    proc = board.processor(letter)
    if board.simulated:
        # One interpreter thread computes on the driving thread, whose CPU time is then
        # the layer's work whatever else shares the host core.
        n = threads or 1
        return CpuExecutor(proc, cores=sim_cores(proc), threads=n,
                           stretch=sim_stretch(board, proc), clock=clock,
                           stretch_basis="cpu" if n == 1 else "wall",
                           modelled=sim_modelled(board, proc))
    if accelerator is not None or proc.accelerator:
        return AcceleratorExecutor(proc, accelerator=accelerator, threads=threads,
                                   allow_fallback=allow_fallback, readback=readback,
                                   clock=clock)
    if proc.delegate:
        return DelegateExecutor(proc, threads=threads, clock=clock)
    if proc.kind == "cpu":
        return CpuExecutor(proc, threads=threads, clock=clock)
    raise BoardError(
        f"processor {letter} ({proc.kind}) of board '{board.name}' names neither a LiteRT "
        "accelerator nor a delegate library",
        f"add `accelerator = \"{proc.kind}\"` or `delegate = \"lib...so\"` to its profile entry")
