"""A simulated twin with known tables, and the ARM-CO-UP-style Layers.csv it gives.

The truth is the rpi5 twin (`profiler.calibrate.twin`) with chosen timing and power
tables, written and loaded as any profile is. Its Layers.csv prices every layer of
ARM-CO-UP's five CNNs (the zoo graphs cut at their layers) with the simulated board's own
model, as its executor does (`profiler.sim.executor.Pricer`), never with the fit's
formulas. Used by tests/test_calibrate_twin.py and benchmarks/twin_recovery.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.boards.model import Board
from profiler.calibrate import fit
from profiler.calibrate.board import Calibration, profile_text
from profiler.calibrate.twin import twin_of
from profiler.platform import choose_board
from profiler.sim import model as sim_model
from profiler.sim.executor import Pricer
from profiler.sim.perf import PowerParams, TimingParams
from profiler.sim.work import OpWork, model_works
from profiler.zoo import armcoup

# A Cortex-A76 cluster unlike the RK3399Pro's A72s the priors come from: less than half
# their per-call cost, more MACs per cycle, faster memory, another power.
TRUTH_TIMING = TimingParams(
    call_us=200.0, call_kcycles=300.0, op_kcycles=10.0, act_gb_s=4.0, weight_gb_s=3.0,
    stream_gb_s=8.0, memory_clock_share=0.2, roofline_p=1.0, half_occupancy_pixels=2.0,
    weight_cache_kb=512.0, winograd_min_in_channels=17,  # the prior's runtime rule, kept
    macs_per_cycle={"conv": 8.0, "conv1x1": 12.0, "conv3x3s1": 16.0, "depthwise": 1.5,
                    "fc": 11.0, "pool": 12.0, "lrn": 9.0})
TRUTH_POWER = PowerParams(ceff_nf=1.0, static_mw_per_v2=100.0, activity_memory=0.8,
                          activity_overhead=0.3, activity_weights=0.6)
TRUTH_IDLE_MW = 2500.0


def truth_board(path: Path) -> Board:
    """The rpi5 twin with the chosen tables, written to `path` and loaded from it."""
    twin = twin_of(choose_board("rpi5", letters=()))
    power = fit.PowerFit(TRUTH_POWER, TRUTH_IDLE_MW, 0.0, 0.0)
    cal = Calibration({"B": fit.ProcessorFit("B", TRUTH_TIMING, power, (), 0)},
                      TRUTH_IDLE_MW, None)
    kept = {"B": {k: v for k, v in twin.board.processor("B").extra["sim"].items()
                  if k.startswith("dvfs_delay")}}
    path.write_text(profile_text(twin.text, cal, kept=kept))
    return choose_board(str(path), letters=())


def works_of(graph: str) -> list[list[OpWork]]:
    """The operators of each of ARM-CO-UP's layers of `graph`, on its zoo graph."""
    spec = armcoup.model_for(graph)
    view = armcoup.load(spec, weights=False)
    return [model_works(view, ops) for ops in armcoup.layer_groups(spec, view)]


def write_layers_csv(board: Board, graphs: Sequence[str], levels: Sequence[int],
                     path: Path) -> int:
    """ARM-CO-UP's Layers.csv of `graphs` on B at 1-based `levels` (their Freq is 0-based):
    each layer's Time (ms) and board Power (mW) as the simulated board prices it."""
    b = board.processor("B")
    rows = []
    for graph in graphs:
        for k, works in enumerate(works_of(graph)):
            pricer = Pricer(board, b, works)
            for level in levels:
                ns, watts, _ = pricer.price((b.freqs_khz[level - 1], None))
                rows.append({"Graph": graph, "Component": "B", "Freq": level - 1,
                             "Freq_Host": -1, "Layer": k, "Metric": "task", "Time": ns / 1e6,
                             "Power": (sim_model.idle_power_w(board) + watts) * 1000})
    pd.DataFrame(rows).to_csv(path, index=False)
    return len(rows)


def price_errors(truth: Board, fitted: Board, graphs: Sequence[str] = tuple(armcoup.MODELS)
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Relative errors of `fitted` against `truth` on B, every layer of `graphs` at every
    level: (time, board power while the layer runs)."""
    tb, fb = truth.processor("B"), fitted.processor("B")
    t_err, p_err = [], []
    for graph in graphs:
        for works in works_of(graph):
            want, got = Pricer(truth, tb, works), Pricer(fitted, fb, works)
            for khz in tb.freqs_khz:
                (t0, w0, _), (t1, w1, _) = want.price((khz, None)), got.price((khz, None))
                t_err.append(t1 / t0 - 1)
                p_err.append((sim_model.idle_power_w(fitted) + w1)
                             / (sim_model.idle_power_w(truth) + w0) - 1)
    return np.array(t_err), np.array(p_err)
