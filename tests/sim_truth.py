"""Ground truth of the simulated board: what its model says a layer costs.

The model's formulas are checked by hand in test_sim_perf.py; these helpers give, for a
sub-model on a simulated processor at given levels, the time and board power the whole
path (executor pacing, markers, virtual logger, collector, clock fit, attribution)
should reproduce.
"""

from __future__ import annotations

from profiler.boards.model import Board
from profiler.sim import model as sim_model
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
