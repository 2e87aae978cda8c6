"""The simulated board's executor: LiteRT on this machine's cores, at the modelled speed.

A simulated processor is a `CpuExecutor` on the host cores standing in for its own
(core c -> c mod n). Each sub-model run is stretched, inside its timed window, to what
the modelled processor would take at the frequency its sim governor has in effect at
that run: either the host's time times a stretch factor, or (a processor with a work
model) the modelled duration of that sub-model (`profiler.sim.model.call_ns`).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from profiler.boards.model import Board, ProcessorSpec
from profiler.clock import Clock, perf_clock
from profiler.executors.base import Executor, Modelled, Stretch
from profiler.executors.cpu import CpuExecutor


def host_cores() -> tuple[int, ...]:
    return tuple(sorted(os.sched_getaffinity(0)))


def sim_cores(proc: ProcessorSpec, available: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Host cores standing in for a simulated processor's cores (core c -> c mod n)."""
    have = available or host_cores()
    return tuple(sorted({have[c % len(have)] for c in proc.cores})) or have


def sim_stretch(board: Board, proc: ProcessorSpec) -> Stretch:
    """t_sim / t_host for `proc` at the frequency its (simulated) governor has in effect."""
    from governors.factory import make_governor
    from profiler.sim import model as sim_model
    from profiler.sim.governor import SimGovernor

    domain = board.dvfs_domain(proc.letter)
    gov = make_governor(board, domain) if domain.has_dvfs else None
    if isinstance(gov, SimGovernor) and proc.has_dvfs:
        return lambda: sim_model.stretch_factor(proc, gov.effective_khz())
    factor = sim_model.stretch_factor(proc, None)
    return lambda: factor


def sim_modelled(board: Board, proc: ProcessorSpec) -> Modelled | None:
    """The work model's run time of a sub-model (`profiler.sim.model.call_ns`) at the
    frequency in effect at each run; None when `proc` has no work model."""
    from governors.factory import make_governor
    from profiler.sim import model as sim_model
    from profiler.sim.governor import SimGovernor
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


def sim_executor(board: Board, proc: ProcessorSpec, *, threads: int | None = None,
                 clock: Clock = perf_clock) -> Executor:
    """The executor of simulated processor `proc` (not opened yet)."""
    # One interpreter thread computes on the driving thread, whose CPU time is then
    # the layer's work whatever else shares the host core.
    n = threads or 1
    return CpuExecutor(proc, cores=sim_cores(proc), threads=n,
                       stretch=sim_stretch(board, proc), clock=clock,
                       stretch_basis="cpu" if n == 1 else "wall",
                       modelled=sim_modelled(board, proc))
