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

import time

import numpy as np
import pytest

from profiler.clock import Clock, StepClock
from profiler.measure.results import LayerTimings
from profiler.power.session import PowerSession
from profiler.power.sources.base import CounterSource, SourceInfo

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


# -- the fused method: prefix energies (profiler.measure.fused.energy_by_prefix) ---------------

# Four prefixes (the empty one first): their times in the rounds, their board power, and
# their time per call when repeated back to back (another pace, as on a GPU). Prefix 2 is
# faster than prefix 1, as neighbouring GPU prefixes below resolution can be: its layer's
# time is negative, and only differences of energies, not powers x times, still add up.
PREFIX_MS = [1.0, 1.5, 1.2, 2.3]
PREFIX_W = [70.0, 75.0, 90.0, 80.0]
PREFIX_REPEAT_NS = [2_000_000, 2_600_000, 2_100_000, 4_000_000]


def fused_result():  # noqa: ANN201
    from profiler.measure.fused import FusedLayer, FusedResult, FusedSettings, layer_estimates

    rng = np.random.default_rng(3)
    jitter = rng.integers(-20_000, 20_000, size=(12, 4))
    round_ns = np.round(np.array(PREFIX_MS) * 1e6).astype(np.int64) + jitter
    fixed, layers, whole = layer_estimates(round_ns)
    return FusedResult([FusedLayer(k, e.time_ms, e.ci95_ms, e.below_resolution, True)
                        for k, e in enumerate(layers)], fixed, whole, 12, 1.0, True,
                       FusedSettings(), round_ns=round_ns)


def test_fused_layer_energies_are_prefix_energy_differences_and_add_up_exactly() -> None:
    from profiler.measure.fused import energy_by_prefix, trimmed_estimate

    clock = StepClock(0, 1_000)
    src = SyntheticCounter(clock)

    def prefix_call(p: int):  # noqa: ANN202
        def call() -> None:
            src._advance()
            src.power_w = PREFIX_W[p]
            src.steps.advance(PREFIX_REPEAT_NS[p])
            src._advance()
        return call

    res = fused_result()
    with PowerSession(src, baseline_s=0.0, counter_updates=50, clock=clock) as session:
        powers = session.call_powers([prefix_call(p) for p in range(4)])
    assert powers == pytest.approx(PREFIX_W, rel=1e-9)  # each repeat window at its power
    energy = energy_by_prefix(res, powers)
    t_ms = trimmed_estimate(res.round_ns)[0]
    e_mj = np.array(PREFIX_W) * t_ms  # per call: power x the prefix's time in the rounds
    assert energy.prefix_energy_mj == pytest.approx(e_mj, rel=1e-12)
    assert energy.fixed_energy_mj == pytest.approx(e_mj[0], rel=1e-12)
    assert energy.layer_energy_mj == pytest.approx(np.diff(e_mj), rel=1e-12)
    # Fixed row + layers = the whole call's energy (the last prefix's), exactly.
    total = energy.fixed_energy_mj + sum(energy.layer_energy_mj)
    assert total == pytest.approx(energy.whole_energy_mj, rel=1e-12)
    assert energy.whole_energy_mj == pytest.approx(PREFIX_W[-1] * res.whole.time_ms, rel=1e-12)
    # What "a layer's power x its fused time" would give here instead: off, because layer
    # 1's time is negative and the powers differ (the ResNet50 G figure of 0.55).
    naive = PREFIX_W[0] * res.fixed.time_ms + sum(
        w * layer.time_ms for w, layer in zip(PREFIX_W[1:], res.layers, strict=True))
    assert abs(naive / total - 1) > 0.05
    # Repeated back to back, the whole call takes another time per call, so its energy per
    # call there is not its energy in the rounds (the comparison must use its power).
    repeated = PREFIX_W[-1] * PREFIX_REPEAT_NS[-1] / 1e6
    assert abs(repeated / energy.whole_energy_mj - 1) > 0.5


def test_with_fused_puts_prefix_energies_on_layers_and_the_fixed_row() -> None:
    from profiler.measure.fused import energy_by_prefix
    from profiler.measure.results import LayerInfo, LayerRun, RunInfo
    from profiler.measure.tables import fixed_row, run_tables, with_fused

    res = fused_result()
    energy = energy_by_prefix(res, PREFIX_W)
    ts = np.zeros((2, 3, 4), dtype=np.int64)
    ts[:, :, 3] = 1_000_000
    info = RunInfo(board="b", simulated=False, model_path="m.tflite", model_sha256="ab" * 32,
                   processor="G", processor_name="G", cores=(0,), threads=1, frames=2, warmup=0)
    run = LayerRun(info, [LayerInfo(i, ("CONV_2D",), 1, 1, 1, 1) for i in range(3)],
                   LayerTimings(ts), total_extras={"baseline_power_w": IDLE_W})
    tables = with_fused(run_tables(run, raw=False), res, energy)
    df = tables.layers
    assert list(df["energy_mj"]) == pytest.approx(energy.layer_energy_mj)
    t = res.times_ms()
    # A layer's power is its energy over its time; none where its time is not positive.
    assert (t <= 0).sum() == 1
    assert np.isnan(df["power_w"][t <= 0]).all()
    assert list(df["power_w"][t > 0]) == pytest.approx(list(np.array(energy.layer_energy_mj)[t > 0]
                                                            / t[t > 0]))
    assert list(df["dynamic_energy_mj"]) == pytest.approx(
        np.array(energy.layer_energy_mj) - IDLE_W * t)
    tot = tables.totals
    assert tot["fixed_energy_mj"] == pytest.approx(energy.fixed_energy_mj)
    # The frame: the layers and the fixed row, the whole call's energy (W x ms = mJ).
    assert tot["energy_mj"] == pytest.approx(tot["whole_energy_mj"])
    assert tot["energy_mj"] == pytest.approx(sum(energy.layer_energy_mj) + energy.fixed_energy_mj)
    assert tot["power_w"] * tot["time_ms_mean"] == pytest.approx(tot["energy_mj"])
    assert tot["time_ms_mean"] == pytest.approx(res.fixed.time_ms + t.sum())
    fixed = fixed_row(tables)
    assert float(fixed["energy_mj"].iloc[0]) == pytest.approx(energy.fixed_energy_mj)
    assert float(fixed["power_w"].iloc[0]) * res.fixed.time_ms == pytest.approx(
        energy.fixed_energy_mj)


class Ramp(CounterSource):
    """3 W, the counter updated every ``interval_ns`` (default 5 ms) of the real clock since
    it was opened: the update times are known exactly (t0 + k intervals), and the energy
    at each (3 W x k intervals)."""

    kind = "ramp"
    POWER_W = 3.0

    def __init__(self, spec: str, clock: Clock, interval_ns: int = 5_000_000) -> None:
        super().__init__(spec, clock)
        self.update_interval_ns = interval_ns

    def info(self) -> SourceInfo:
        return SourceInfo("ramp", "ramp", "counter", "test")

    def _open_device(self) -> None:
        self.t0 = self.clock()

    def _close_device(self) -> None:
        pass

    def read_energy_mj(self) -> float:
        updates = (self.clock() - self.t0) // self.update_interval_ns
        return self.POWER_W * updates * self.update_interval_ns / 1e6


def test_a_counter_awaited_while_busy_keeps_the_processor_busy_and_times_the_update() -> None:
    """`wait_for_tick(busy=...)` runs the busy call until the counter has changed (the
    processor is never left idle), and still gives the update's time to within a read,
    not within a call: the calls here take 20 ms (work elsewhere, as a GPU's), the
    counter updates every 5 ms. The bound (2 ms) is a tenth of a call, and 40 times the
    poll interval: what a descheduled poller thread on a loaded 2-core VM can add."""
    from profiler.clock import perf_clock

    with Ramp("ramp", perf_clock) as src:
        calls: list[tuple[int, int]] = []

        def busy() -> None:
            a = perf_clock()
            time.sleep(0.02)
            calls.append((a, perf_clock()))

        # just after an update: the next is 5 ms away, after the first call starts (unless
        # a loaded host takes longer to start the poller and the call: then the next one)
        since = src.wait_for_tick()[1]
        t, e = src.wait_for_tick(since_mj=since, busy=busy)
        tick = src.t0 + round(e / 15.0) * src.update_interval_ns
        assert e > since
        assert 0 <= t - tick < 2_000_000, (t - tick) / 1e6
        assert len(calls) >= 1 and calls[-1][1] >= t  # it returned after the call ended
        # the processor was busy when the update was seen, and it is the first one after
        # the first call began (3 W x 5 ms a step) when that call began before it; one that
        # came before the calls began is passed over
        assert any(a <= t <= b for a, b in calls), [(a - t, b - t) for a, b in calls]
        if calls[0][0] - src.t0 < round(since / 15.0 + 1) * src.update_interval_ns:
            assert e == pytest.approx(since + 15.0)
