"""`--power sim:counter`: the simulated board's energy read as a hardware counter keeps it
(RAPL's energy_uj, NVML's total energy), on a clock the test moves: the true energy since
open, as of the last 1 ms refresh, in whole 15.3 µJ steps."""

from __future__ import annotations

import math

import numpy as np
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


def test_a_calls_power_starts_when_it_began_never_before_a_time_already_read() -> None:
    """A simulated call tells the power model it runs once it has been priced (its
    frequencies read: 80-150 us after it began on the 2-core VM, a fifth of a 0.6 ms
    layer). Its power is dated back to the call's start, as its modelled time is; but a
    reader (the logger, a counter) that was already given the power at some time keeps
    what it got: the change lands just after the latest time read."""
    board = choose_board("sim")
    clock = Clock()
    model = SimPowerModel(board, clock=clock)
    began = clock.ns
    clock.ns += 150_000  # priced
    model.running("B", 2.0, at_ns=began)
    at = model.activity_w_at
    t = np.array([began - 1, began, began + 100_000])
    np.testing.assert_array_equal(at(t), [0.0, 2.0, 2.0])
    clock.ns += 450_000
    model.stopped("B")  # told at once: the processor works until then
    assert model.true_energy_mj(began, clock.ns) == pytest.approx(model.idle_w * 0.6 + 2.0 * 0.6)
    # a logger reads the power up to now; a call that began 100 us ago is told 200 us on
    read_to = clock.ns
    assert at(np.array([read_to]))[0] == 0.0
    clock.ns += 200_000
    model.running("B", 3.0, at_ns=read_to - 100_000)
    np.testing.assert_array_equal(at(np.array([read_to, read_to + 1, clock.ns])), [0.0, 3.0, 3.0])
    # a counter's read is a read too: the energy it got stays the energy of its window
    clock.ns += 300_000
    model.stopped("B")
    counted = model.idle_w * 0.5 + 3.0 * 0.5
    assert model.true_energy_mj(read_to, clock.ns) == pytest.approx(counted, rel=1e-5)
    read_to = clock.ns
    clock.ns += 100_000
    model.running("B", 1.0, at_ns=read_to - 50_000)
    assert model.true_energy_mj(read_to - 500_000, read_to) == pytest.approx(counted, rel=1e-5)
    np.testing.assert_array_equal(at(np.array([read_to, read_to + 1])), [0.0, 1.0])
