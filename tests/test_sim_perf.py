"""The simulated board's per-layer model (profiler/sim/perf.py) against hand-computed values."""

from __future__ import annotations

import math

import pytest

from profiler.sim import perf
from profiler.sim.work import COMPUTE_KINDS, OpWork

RATES = dict.fromkeys(COMPUTE_KINDS, 4.0) | {"conv3x3s1": 8.0, "fc": 2.0}


def params(**kw: float) -> perf.TimingParams:
    base = dict(call_us=100.0, call_kcycles=200.0, host_call_kcycles=50.0, op_kcycles=10.0,
                host_op_kcycles=5.0, act_gb_s=2.0, weight_gb_s=1.0, stream_gb_s=4.0,
                memory_clock_share=0.0, roofline_p=1.0, half_occupancy_pixels=0.0)
    base.update(kw)
    return perf.TimingParams(**base, macs_per_cycle=dict(RATES))  # type: ignore[arg-type]


def test_one_conv_sums_compute_memory_weights_and_overheads() -> None:
    w = perf.Works.of([OpWork("conv3x3s1", 8_000_000, 2_000_000, 1_000_000, 100)])
    s = perf.call_split(params(), w, 1.0, 2.0, 1.0)
    # compute: 8e6 MACs / (8 MAC/cycle * 1 GHz) = 1e6 ns = 1 ms
    assert float(s.compute_ms) == pytest.approx(1.0)
    # memory: 2e6 B / 2 GB/s = 1 ms; weights: 1e6 B / 1 GB/s = 1 ms
    assert float(s.memory_ms) == pytest.approx(1.0)
    assert float(s.weights_ms) == pytest.approx(1.0)
    # overhead: op 10 kcycles / 1 GHz = 10 us, 5 kcycles / 2 GHz = 2.5 us; call: 100 us
    # + 200 kcycles / 1 GHz = 200 us + 50 kcycles / 2 GHz = 25 us
    assert float(s.overhead_ms) == pytest.approx((10 + 2.5 + 100 + 200 + 25) / 1e3)


def test_roofline_p_takes_the_larger_and_occupancy_slows_small_maps() -> None:
    w = perf.Works.of([OpWork("conv1x1", 4_000_000, 1_000_000, 0, 100)])
    # compute 1 ms, memory 0.5 ms
    p1 = perf.op_split(params(roofline_p=1.0), w, 1.0, 1.0, 1.0)
    assert float(p1.compute_ms[0] + p1.memory_ms[0]) == pytest.approx(1.5)
    p2 = perf.op_split(params(roofline_p=2.0), w, 1.0, 1.0, 1.0)
    both = float(p2.compute_ms[0] + p2.memory_ms[0])
    assert both == pytest.approx(math.hypot(1.0, 0.5))
    assert float(p2.compute_ms[0]) / both == pytest.approx(1.0 / 1.5)  # split by share
    p8 = perf.op_split(params(roofline_p=8.0), w, 1.0, 1.0, 1.0)
    assert float(p8.compute_ms[0] + p8.memory_ms[0]) == pytest.approx((1 + 0.5 ** 8) ** 0.125)
    # 100 pixels with half occupancy at 100: half the rate, twice the compute time
    half = perf.op_split(params(half_occupancy_pixels=100.0), w, 1.0, 1.0, 1.0)
    assert float(half.compute_ms[0]) == pytest.approx(2.0)


def test_clock_scaling_of_compute_and_memory() -> None:
    w = perf.Works.of([OpWork("conv", 4_000_000, 2_000_000, 0, 1)])
    top = perf.op_split(params(memory_clock_share=0.25), w, 2.0, 2.0, 2.0)
    low = perf.op_split(params(memory_clock_share=0.25), w, 0.5, 2.0, 2.0)
    assert float(low.compute_ms[0] / top.compute_ms[0]) == pytest.approx(4.0)
    # memory: (1 - m) + m * f_max / f = 0.75 + 0.25 * 4 = 1.75
    assert float(low.memory_ms[0] / top.memory_ms[0]) == pytest.approx(1.75)


def test_views_cost_only_dispatch_and_fc_streams_its_weights() -> None:
    w = perf.Works.of([OpWork("view", 0, 10_000_000, 0, 1),
                       OpWork("fc", 1_000_000, 4_000, 8_000_000, 1)])
    s = perf.op_split(params(), w, 1.0, 1.0, 1.0)
    assert float(s.compute_ms[0] + s.memory_ms[0]) == 0.0
    # fc: compute 1e6 / 2 = 0.5 ms, weights 8e6 B / 4 GB/s = 2 ms (its memory term; the
    # activation bytes do not count), summed at p = 1
    assert float(s.compute_ms[1] + s.memory_ms[1]) == pytest.approx(2.5)


def test_power_follows_activity_voltage_and_the_host() -> None:
    pp = perf.PowerParams(ceff_nf=2.0, static_mw_per_v2=100.0, activity_memory=0.5,
                          activity_overhead=0.25, activity_weights=0.125, host_ceff_nf=0.5)
    s = perf.TimeSplit(1.0, 2.0, 1.0, 4.0)  # ms
    # activity = (1 + 0.5 * 2 + 0.125 * 4 + 0.25 * 1) / 8 = 0.34375
    assert float(perf.activity(pp, s)) == pytest.approx(0.34375)
    w = perf.dynamic_power_w(pp, s, 1.0, 0.8, 0.9, 1.2)
    # static 0.1 W * 1^2 + 2 nF * 1^2 * 0.8 GHz * 0.34375 + 0.5 nF * 0.81 * 1.2 GHz
    assert float(w) == pytest.approx(0.1 + 2 * 0.8 * 0.34375 + 0.5 * 0.81 * 1.2)


def test_profile_tables_round_trip() -> None:
    p = params(roofline_p=3.0)
    assert perf.TimingParams.from_table(p.to_table()) == p
    with pytest.raises(ValueError, match="lacks"):
        perf.TimingParams.from_table({**p.to_table(), "macs_per_cycle": {"conv": 1.0}})


def test_a_3x3_conv_with_few_input_channels_is_priced_as_gemm_not_winograd() -> None:
    """ACL's rule (perf.TimingParams.winograd_min_in_channels): below the threshold a 3x3
    stride-1 conv runs at the plain conv rate (4 MAC/cycle here), from it at Winograd's (8)."""
    p = params(winograd_min_in_channels=17)
    w = perf.Works.of([OpWork("conv3x3s1", 8_000_000, 0, 0, 100, in_channels=16),
                       OpWork("conv3x3s1", 8_000_000, 0, 0, 100, in_channels=17)])
    s = perf.op_split(p, w, 1.0, 1.0, 1.0)
    assert [float(x) for x in s.compute_ms] == pytest.approx([2.0, 1.0])
    # without the rule (0, the default) both are Winograd
    s0 = perf.op_split(params(), w, 1.0, 1.0, 1.0)
    assert [float(x) for x in s0.compute_ms] == pytest.approx([1.0, 1.0])
    # written as an integer, left out where it is the default; read back the same
    assert p.to_table()["winograd_min_in_channels"] == 17
    assert "winograd_min_in_channels" not in params().to_table()
    assert perf.TimingParams.from_table(p.to_table()) == p
    assert perf.TimingParams.from_table(params().to_table()) == params()


def test_input_channels_per_group_come_from_the_graph() -> None:
    """SqueezeNet 1.0's fire2 expand 3x3 reads the 16-channel squeeze; AlexNet's conv2 has
    2 groups of 48 input channels; other ops carry none."""
    from profiler import zoo
    from profiler.sim.work import model_works
    from profiler.slicing.graph import ModelView
    from profiler.tflite.model_io import parse_model

    def works(name: str) -> list[OpWork]:
        return model_works(ModelView.of(parse_model(zoo.build(name), name)))

    sq = [w for w in works("squeezenet1_0") if w.kind == "conv3x3s1"]
    assert [w.in_channels for w in sq[:2]] == [16, 16]  # fire2, fire3
    assert sorted({w.in_channels for w in sq}) == [16, 32, 48, 64]
    alex = works("alexnet_bvlc")
    convs = [w for w in alex if w.kind.startswith("conv")]
    assert convs[1].in_channels == 48  # conv2: 96 channels in 2 groups, 5x5
    assert all(w.in_channels == 0 for w in alex if not w.kind.startswith("conv"))
