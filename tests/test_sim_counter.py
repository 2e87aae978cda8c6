"""`--power sim:counter`: the simulated board's energy read as a hardware counter keeps it
(RAPL's energy_uj, NVML's total energy), on a clock the test moves: the true energy since
open, as of the last 1 ms refresh, in whole 15.3 µJ steps."""

from __future__ import annotations

import math

import pytest

from profiler.errors import BadInputError
from profiler.platform import choose_board
from profiler.power.sources import SourceHardware, open_power_source
from profiler.sim.power import SimPowerModel
from profiler.sim.sources import SimCounterSource


class Clock:
    def __init__(self) -> None:
        self.ns = 1_000_000_000

    def __call__(self) -> int:
        return self.ns


def test_the_counter_holds_the_true_energy_of_its_last_refresh_in_whole_steps() -> None:
    board = choose_board("sim")
    clock = Clock()
    model = SimPowerModel(board, clock=clock)
    src = SimCounterSource("sim:counter", model, clock=clock)
    with src:
        assert src.read_energy_mj() == 0.0
        clock.ns += 10_400_000  # 10.4 ms: the counter was last refreshed at 10 ms
        idle_10ms = model.idle_w * 10.0  # W x ms = mJ
        step = SimCounterSource.RESOLUTION_MJ
        assert src.read_energy_mj() == pytest.approx(math.floor(idle_10ms / step) * step)
        model.running("B", 1.5)  # a layer on B draws 1.5 W above idle for 5 ms
        clock.ns += 5_000_000
        model.stopped("B")
        clock.ns += 600_000  # 16.0 ms since open: refreshed just now
        want = model.idle_w * 16.0 + 1.5 * 5.0
        assert model.true_energy_mj(clock.ns - 16_000_000, clock.ns) == pytest.approx(want)
        assert src.read_energy_mj() == pytest.approx(math.floor(want / step) * step)
        assert src.info().mode == "counter" and src.info().hardware_energy_counter
    assert src.activity is model  # what a run tells when each processor works


def test_sim_counter_is_a_spec_and_a_wrong_kind_is_one_line() -> None:
    hw = SourceHardware(board=choose_board("sim"))
    assert isinstance(open_power_source("sim:counter", hw), SimCounterSource)
    with pytest.raises(BadInputError, match="expected sim, sim:ina260 or sim:counter"):
        open_power_source("sim:count", hw)
