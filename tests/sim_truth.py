"""Ground truth of the simulated board: what its model says a layer costs.

The model's formulas are checked by hand in test_sim_perf.py; these helpers give, for a
sub-model on a simulated processor at given levels, the time and board power the whole
path (executor pacing, markers, virtual logger, collector, clock fit, attribution)
should reproduce.
"""

from __future__ import annotations

import numpy as np

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
                 freq_khz: int | None, host_khz: int | None = None, threads: int = 1) -> float:
    """Modelled ms of operators `ops` of `model_bytes` inside one call of the whole model
    (each operator as the whole model runs it: linked into its producer's kernel where
    the runtime links it; no per-call cost, no read-back or join at the call's end): what
    the fused method should recover for a layer made of them."""
    return float(op_times_ms(board, letter, model_bytes, freq_khz, host_khz, threads)[ops].sum())


def op_times_ms(board: Board, letter: str, model_bytes: bytes, freq_khz: int | None,
                host_khz: int | None = None, threads: int = 1) -> np.ndarray:
    """Per operator, its modelled ms inside one call of the whole model on `letter`,
    without the call's fixed cost and end (`perf.op_split` less its ``end_ms``)."""
    proc = board.processor(letter)
    view = ModelView.of(parse_model(model_bytes, "truth"))
    f_khz, _ = sim_model.operating_point(proc, freq_khz)
    host = board.processors.get(proc.host) if proc.host else None
    fh_khz = sim_model.operating_point(host, host_khz)[0] if host is not None else f_khz
    s = perf.op_split(sim_model.constants(proc).timing, perf.Works.of(model_works(view)),
                      f_khz / 1e6, fh_khz / 1e6, sim_model.max_khz(proc) / 1e6, threads)
    return np.asarray(s.total_ms - s.end_ms, dtype=np.float64)


def call_overhead_ms(board: Board, letter: str, freq_khz: int | None,
                     host_khz: int | None = None) -> float:
    """The fixed part of every call on `letter` (dispatch, synchronisation, and reading
    back one output, which every call does, without its bytes)."""
    proc = board.processor(letter)
    f_khz, _ = sim_model.operating_point(proc, freq_khz)
    host = board.processors.get(proc.host) if proc.host else None
    fh_khz = sim_model.operating_point(host, host_khz)[0] if host is not None else f_khz
    timing = sim_model.constants(proc).timing
    return float(perf.call_overhead_ms(timing, f_khz / 1e6, fh_khz / 1e6)) \
        + timing.readback_us / 1e3
