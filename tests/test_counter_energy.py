"""Counter energy per frame (issue 10): a layer's energy is its repeat-window power times
its in-frame time, checked exactly on a synthetic counter.

The counter integrates a power that each layer's call sets (layer k draws P_k while it
runs, and the board keeps drawing P_k until the next call changes it) on a clock that
moves only when a call runs (its repeat time, which differs from its in-frame time, as
on a GPU) or when the clock is read (1 us, after the reading: a counter read and the
clock read after it name the same instant). So a repeat window of layer k is at P_k
throughout, and the truth of layer k's energy per frame is P_k x its in-frame time.
"""

from __future__ import annotations

import numpy as np
import pytest

from profiler.clock import StepClock
from profiler.power.session import PowerSession
from profiler.power.sources.base import CounterSource, SourceInfo
from profiler.results import LayerTimings

POWER_W = [3.0, 5.5, 2.25]
REPEAT_NS = [700_000, 1_900_000, 350_000]  # a call repeated back to back
IN_FRAME_MS = [[0.40, 1.10, 0.20], [0.42, 1.30, 0.22], [0.38, 1.20, 0.21]]  # frames x layers
IDLE_W = 1.5


class SyntheticCounter(CounterSource):
    def __init__(self, clock: StepClock) -> None:
        super().__init__("synthetic", clock)
        self.update_interval_ns = 10_000
        self.steps = clock
        self.power_w = IDLE_W
        self.energy_mj = 0.0
        self._t = clock.now_ns

    def _advance(self) -> None:
        now = self.steps.now_ns
        self.energy_mj += self.power_w * (now - self._t) / 1e6  # W x ns = 1e-6 mJ
        self._t = now

    def read_energy_mj(self) -> float:
        self._advance()
        return self.energy_mj

    def layer(self, k: int):  # noqa: ANN201
        def call() -> None:
            self._advance()
            self.power_w = POWER_W[k]
            self.steps.advance(REPEAT_NS[k])
            self._advance()
        return call

    def info(self) -> SourceInfo:
        return SourceInfo("synthetic", "synthetic", "counter", "none",
                          update_interval_ns=self.update_interval_ns,
                          hardware_energy_counter=True)

    def _open_device(self) -> None:
        pass

    def _close_device(self) -> None:
        pass


def timings() -> LayerTimings:
    ms = np.array(IN_FRAME_MS)
    ts = np.zeros((*ms.shape, 4), dtype=np.int64)
    ts[:, :, 3] = np.round(ms * 1e6).astype(np.int64)
    return LayerTimings(ts)


def test_layer_energy_is_repeat_power_times_in_frame_time() -> None:
    clock = StepClock(0, 1_000)
    src = SyntheticCounter(clock)
    with PowerSession(src, baseline_s=0.0, counter_updates=50, clock=clock) as session:
        session.baseline_w = IDLE_W  # the idle baseline is not what is checked here
        res = session.finish(timings(), [src.layer(k) for k in range(3)])
    assert res.error is None
    t_ms = np.array(IN_FRAME_MS).mean(axis=0)
    cols = res.columns
    assert cols["power_w"] == pytest.approx(POWER_W, rel=1e-9)
    assert cols["energy_mj"] == pytest.approx(np.array(POWER_W) * t_ms, rel=1e-9)
    assert cols["dynamic_energy_mj"] == pytest.approx((np.array(POWER_W) - IDLE_W) * t_ms,
                                                      rel=1e-9)
    assert cols["fps_per_w"] == pytest.approx(1000 / (np.array(POWER_W) * t_ms))
    # The repeat loop's own time per call is kept beside it, and is not what counts.
    assert cols["repeat_time_ms"] == pytest.approx(np.array(REPEAT_NS) / 1e6, rel=0.01)
    # Per frame: the layers' energies add up to the frame's, over the in-frame time.
    assert res.totals["energy_mj"] == pytest.approx(float((np.array(POWER_W) * t_ms).sum()))
    assert res.totals["power_w"] == pytest.approx(res.totals["energy_mj"] / t_ms.sum())
