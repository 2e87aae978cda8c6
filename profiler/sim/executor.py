"""The simulated board's executor: LiteRT on this machine's cores, at the modelled speed.

A simulated processor is a `CpuExecutor` on the host cores standing in for its own
(core c -> c mod n). Each sub-model it loads is priced by the per-layer model
(`profiler.sim.perf`) from what its operators do (`profiler.sim.work`); every run
computes for real in LiteRT (outputs stay real), then lasts the modelled time at the
frequencies in effect when it starts: the processor's own level (its sim governor's
`effective_khz`, which lags a write by the transition delay) and, for G and N, their
host CPU's level, and on the threads the call runs on (a CPU cluster's join). While a run lasts, the processor draws the run's modelled power on the
board's power model (`profiler.sim.power.current`), so the power a logger samples
follows what each layer does.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from profiler.boards.model import Board, ProcessorSpec
from profiler.clock import Clock, perf_clock
from profiler.executors.base import Executor, ModelledCall
from profiler.executors.cpu import CpuExecutor
from profiler.sim import model as sim_model
from profiler.sim import perf
from profiler.sim.governor import Levels, busy_sink, level_reader
from profiler.sim.work import OpWork, model_works


def host_cores() -> tuple[int, ...]:
    return tuple(sorted(os.sched_getaffinity(0)))


def sim_cores(proc: ProcessorSpec, available: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Host cores standing in for a simulated processor's cores (core c -> c mod n)."""
    have = available or host_cores()
    return tuple(sorted({have[c % len(have)] for c in proc.cores})) or have


class Pricer:
    """A sub-model's call on one simulated processor: modelled ns and W at given levels."""

    def __init__(self, board: Board, proc: ProcessorSpec, works: list[OpWork],
                 threads: int = 1) -> None:
        self.board = board
        self.proc = proc
        self.works = perf.Works.of(works)
        self.threads = threads  # a CPU cluster's call ends with a join of its workers
        self.consts = sim_model.constants(proc)
        self.host = board.processors.get(proc.host) if proc.host else None
        self.f_max_ghz = sim_model.max_khz(proc) / 1e6
        self._cache: dict[Levels, tuple[float, float, perf.TimeSplit]] = {}

    def price(self, levels: Levels) -> tuple[float, float, perf.TimeSplit]:
        """(duration ns, dynamic power W, time split) of one call at `levels`."""
        got = self._cache.get(levels)
        if got is None:
            f_khz, volts = sim_model.operating_point(self.proc, levels[0])
            if self.host is not None and self.host.has_dvfs:
                fh_khz, host_volts = sim_model.operating_point(self.host, levels[1])
            else:
                fh_khz, host_volts = f_khz, 0.0
            split = perf.call_split(self.consts.timing, self.works, f_khz / 1e6, fh_khz / 1e6,
                                    self.f_max_ghz, self.threads)
            watts = perf.dynamic_power_w(self.consts.power, split, volts, f_khz / 1e6,
                                         host_volts, fh_khz / 1e6 if self.host else 0.0)
            got = self._cache[levels] = (float(split.total_ms) * 1e6, float(watts), split)
        return got


class SimCall(ModelledCall):
    """`ModelledCall` of a simulated processor: the price at the levels in effect, and
    the run's power on the board's power model while it lasts."""

    def __init__(self, pricer: Pricer, levels: Callable[[], Levels],
                 busy: Callable[[int, int, int], None] | None = None) -> None:
        self.pricer = pricer
        self.levels = levels
        self.letter = pricer.proc.letter
        self.busy = busy  # a self-clocked processor's driver hears what each call does

    def begin(self, t0_ns: int) -> float:
        from profiler.sim.power import current

        ns, watts, split = self.pricer.price(self.levels())
        if self.busy is not None:  # the work: not dispatch, synchronisation or read-back
            work_ms = float(split.compute_ms + split.memory_ms + split.weights_ms)
            self.busy(t0_ns, int(work_ms * 1e6), int(ns))
        model = current(self.pricer.board)
        if model is not None:
            model.running(self.letter, watts, at_ns=t0_ns)
        return ns

    def end(self, t1_ns: int) -> None:
        from profiler.sim.power import current

        model = current(self.pricer.board)
        if model is not None:
            model.stopped(self.letter)


def sim_modelled(board: Board, proc: ProcessorSpec,
                 threads: int = 1) -> Callable[[bytes, str], ModelledCall]:
    """Model bytes -> the `ModelledCall` of that sub-model on simulated processor `proc`
    run on ``threads`` interpreter threads."""
    from profiler.slicing.graph import ModelView
    from profiler.tflite.model_io import parse_model

    sim_model.constants(proc)  # a clear error now if the profile has no model for it
    levels = level_reader(board, proc)
    busy = busy_sink(board, proc)

    def modelled(model_bytes: bytes, name: str) -> ModelledCall:
        works = model_works(ModelView.of(parse_model(model_bytes, name)))
        return SimCall(Pricer(board, proc, works, threads), levels, busy)

    return modelled


def sim_executor(board: Board, proc: ProcessorSpec, *, threads: int | None = None,
                 clock: Clock = perf_clock) -> Executor:
    """The executor of simulated processor `proc` (not opened yet)."""
    # One interpreter thread computes on the driving thread, whose CPU time is then
    # the layer's work whatever else shares the host core.
    n = threads or 1
    return CpuExecutor(proc, cores=sim_cores(proc), threads=n, clock=clock,
                       modelled=sim_modelled(board, proc, n),
                       pacing_basis="cpu" if n == 1 else "wall")
