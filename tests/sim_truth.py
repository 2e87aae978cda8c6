"""Ground truth of the simulated board: what its model says a layer costs.

The model's formulas are checked by hand in test_sim_perf.py; these helpers give, for a
sub-model on a simulated processor at given levels, the time and board power the whole
path (executor pacing, markers, virtual logger, collector, clock fit, attribution)
should reproduce.
"""

from __future__ import annotations

from profiler.boards.model import Board
from profiler.sim import model as sim_model
from profiler.sim import perf
from profiler.sim.executor import Pricer
from profiler.sim.work import model_works
from profiler.slicing.graph import ModelView
from profiler.tflite.model_io import parse_model


def layer_truth(board: Board, letter: str, model_bytes: bytes, freq_khz: int | None,
                host_khz: int | None = None) -> tuple[float, float]:
    """(modelled ms of one call, board W while it runs) of `model_bytes` on `letter` at
    `freq_khz` (None: top level) with its host at `host_khz` (None: the host's top)."""
    proc = board.processor(letter)
    works = model_works(ModelView.of(parse_model(model_bytes, "truth")))
    ns, watts, _ = Pricer(board, proc, works).price((freq_khz, host_khz))
    return ns / 1e6, sim_model.idle_power_w(board) + watts


def ops_truth_ms(board: Board, letter: str, model_bytes: bytes, ops: list[int],
                 freq_khz: int | None, host_khz: int | None = None) -> float:
    """Modelled ms of operators `ops` of `model_bytes` inside one call (no per-call cost):
    what the fused method should recover for a layer made of them."""
    proc = board.processor(letter)
    view = ModelView.of(parse_model(model_bytes, "truth"))
    pricer = Pricer(board, proc, model_works(view, ops))
    ns, _, split = pricer.price((freq_khz, host_khz))
    return ns / 1e6 - call_overhead_ms(board, letter, freq_khz, host_khz)


def call_overhead_ms(board: Board, letter: str, freq_khz: int | None,
                     host_khz: int | None = None) -> float:
    """The fixed part of every call on `letter` (dispatch, synchronisation)."""
    proc = board.processor(letter)
    f_khz, _ = sim_model.operating_point(proc, freq_khz)
    host = board.processors.get(proc.host) if proc.host else None
    fh_khz = sim_model.operating_point(host, host_khz)[0] if host is not None else f_khz
    return float(perf.call_overhead_ms(sim_model.constants(proc).timing, f_khz / 1e6,
                                       fh_khz / 1e6))
