"""The fused method: prefix models, the interval maths, and per-layer truth on the
simulated board (real LiteRT runs, the sim G's per-layer model paces them).

Ground truth on the simulated board is its per-layer model itself (profiler.sim.perf,
through tests/sim_truth.py), computed from each layer's operators, never from a
measurement.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from sim_truth import call_overhead_ms, layer_truth, ops_truth_ms

from governors import RestoreGuard
from governors.factory import make_governor
from profiler import zoo
from profiler.boards.model import ProcessorSpec
from profiler.boards.profiles import load_board
from profiler.executors.cpu import CpuExecutor
from profiler.executors.factory import make_executor
from profiler.measure.fused import FusedProfiler, FusedSettings, layer_estimates, trimmed_estimate
from profiler.measure.runner import LayerRunner
from profiler.runtime import make_interpreter
from profiler.slicing.prefix import prefix_models
from profiler.slicing.slicer import slice_model


@pytest.fixture(scope="module")
def default_model() -> tuple[bytes, object]:
    data = zoo.default_model_path().read_bytes()
    return data, slice_model(data, cache_dir=False)


def _run(model_bytes: bytes, x: np.ndarray) -> list[np.ndarray]:
    it = make_interpreter(model_bytes, num_threads=1)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def test_prefixes_compute_the_model_and_reduce_big_outputs(default_model) -> None:
    data, sliced = default_model
    prefixes = prefix_models(data, sliced)
    assert [p.last for p in prefixes] == list(range(-1, len(sliced.layers)))
    x = np.random.default_rng(1).uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)
    # The last prefix reads the model's own output (4000 bytes: kept as it is).
    whole = _run(data, x)[0]
    np.testing.assert_allclose(_run(prefixes[-1].model_bytes, x)[0], whole, rtol=1e-5, atol=1e-6)
    assert prefixes[-1].reduced == 0 and prefixes[-1].read_bytes == whole.nbytes
    # The empty prefix reads a corner of the input.
    np.testing.assert_array_equal(_run(prefixes[0].model_bytes, x)[0], x[:1, :1, :1, :])
    # Prefix 0..k reads the mean over H, W of the boundary tensor that layer k's sub-model
    # outputs (the sliced chain gives the boundary tensor).
    cur = x
    for k, layer in enumerate(sliced.layers):
        cur = _run(layer.model_bytes, cur)[0]
        got = _run(prefixes[k + 1].model_bytes, x)[0]
        want = cur.mean(axis=(1, 2)) if cur.nbytes > 4096 else cur
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        assert prefixes[k + 1].read_bytes <= 4096
    # Without reduction (CPU) each prefix outputs the boundary tensor itself.
    cpu = prefix_models(data, sliced, reduce_above_bytes=None)
    np.testing.assert_allclose(_run(cpu[3].model_bytes, x)[0],
                               _run(sliced.layers[2].model_bytes,
                                    _run(sliced.layers[1].model_bytes,
                                         _run(sliced.layers[0].model_bytes, x)[0])[0])[0],
                               rtol=1e-4, atol=1e-5)
    assert cpu[3].reduced == 0 and cpu[3].read_bytes == 128 * 1024


def _chain_values(sliced, x: np.ndarray) -> dict[int, np.ndarray]:
    """Every boundary tensor (index in the model's graph) from the sliced chain: the
    truth the windows' inputs and outputs are held to."""
    values = {sliced.layers[0].inputs[0].index: x}
    for layer in sliced.layers:
        it = make_interpreter(layer.model_bytes, num_threads=1)
        it.allocate_tensors()
        for det, spec in zip(it.get_input_details(), layer.inputs, strict=True):
            it.set_tensor(det["index"], values[spec.index])
        it.invoke()
        for det, spec in zip(it.get_output_details(), layer.outputs, strict=True):
            values[spec.index] = it.get_tensor(det["index"])
    return values


@pytest.mark.parametrize("name, window, lead", [("default", 4, 1), ("default", 3, 6),
                                               ("resnet50", 3, 1), ("resnet50", 3, 4)])
def test_windows_compute_the_model_from_real_inputs(default_model, name, window, lead) -> None:
    """Segments of W layers, each from L layers before it (layer 0 at the earliest): the
    roles and layer ranges, the inputs every window of a segment takes (a residual's skip
    tensor too, before the layer that reads it), their values from one run of the model,
    and every window's outputs against the sliced chain."""
    from profiler.slicing.prefix import tensor_values

    if name == "default":
        data, sliced = default_model
    else:
        data = zoo.build("resnet50", size=32, classes=10)
        sliced = slice_model(data, cache_dir=False)
    layers = sliced.layers
    n = len(layers)
    models = prefix_models(data, sliced, reduce_above_bytes=None, window=window, lead=lead)
    want = [(0, -1, "base")] + [(0, k, "layer") for k in range(window)]
    for a in range(window, n, window):
        s = max(0, a - lead)
        want += [(s, a - 1, "base")] + [(s, k, "layer") for k in range(a, min(a + window, n))]
    want.append((0, n - 1, "whole"))
    assert [(m.first, m.last, m.role) for m in models] == want
    x = np.random.default_rng(3).uniform(-1, 1, layers[0].inputs[0].shape).astype(np.float32)
    truth = _chain_values(sliced, x)
    model_out = layers[-1].outputs[-1].index
    unread = 0
    # a segment: the models from its base up to the next base (or the whole model)
    bases = [i for i, m in enumerate(models) if m.role != "layer"]
    segment_of = {i: max(b for b in bases if b <= i) for i in range(len(models))}
    for i, m in enumerate(models):
        seg = [o for j, o in enumerate(models) if segment_of[j] == segment_of[i]] \
            if m.role != "whole" else [m]
        assert all(o.input_tensors == m.input_tensors for o in seg)
        inner = range(m.first, max(o.last for o in seg) + 1) if m.role != "whole" else range(n)
        produced = {t.index for k in inner for t in layers[k].outputs}
        read = [t.index for k in inner for t in layers[k].inputs]
        # a window takes what its segment reads from before it, each tensor once
        assert list(m.input_tensors) == list(dict.fromkeys(t for t in read if t not in produced))
        ins = tensor_values(data, [x], list(m.input_tensors))
        for t, v in zip(m.input_tensors, ins, strict=True):
            np.testing.assert_allclose(v, truth[t], rtol=1e-4, atol=1e-5)
        it = make_interpreter(m.model_bytes, num_threads=1)
        it.allocate_tensors()
        for det, v in zip(it.get_input_details(), ins, strict=True):
            it.set_tensor(det["index"], v)
        it.invoke()
        # its outputs: what its layers hand to later layers, or the model's output
        own = range(m.first, m.last + 1)
        later = {t.index for k in range(m.last + 1, n) for t in layers[k].inputs} | {model_out}
        outs = list(dict.fromkeys(t.index for k in own for t in layers[k].outputs
                                  if t.index in later)) if m.last >= m.first else []
        if outs:
            got = [it.get_tensor(d["index"]) for d in it.get_output_details()]
            assert len(got) == len(outs)
            for g, t in zip(got, outs, strict=True):
                np.testing.assert_allclose(g, truth[t], rtol=1e-3, atol=1e-4)
        unread += len(set(m.input_tensors) - {t.index for k in own for t in layers[k].inputs})
    if name == "resnet50":  # skip tensors handed to windows that do not read them yet
        assert unread > 0
    np.testing.assert_allclose(_run(models[-1].model_bytes, x)[0], _run(data, x)[0],
                               rtol=1e-5, atol=1e-6)


def test_trimmed_interval_has_its_coverage() -> None:
    """95 % intervals of 20-value samples (one wild value in ten samples) cover the true
    mean about 95 % of the time; the count is deterministic (seeded)."""
    rng = np.random.default_rng(7)
    trials, n, mu = 4000, 20, 5.0
    x = rng.normal(mu, 0.3, (n, trials))
    wild = rng.random(trials) < 0.1
    x[0, wild] += 50.0  # a preempted call: trimming must absorb it
    mean, half = trimmed_estimate(x * 1e6)
    covered = np.abs(mean - mu) <= half
    assert 0.93 <= covered.mean() <= 0.975
    # Hand-computed case: 10 values, 2 cut from each end.
    v = np.array([1, 2, 3, 4, 5, 6, 7, 8, 50, 100], dtype=float)
    m, h = trimmed_estimate(v * 1e6)
    assert m == pytest.approx(np.mean(v[2:8]))
    w = np.array([3, 3, 3, 4, 5, 6, 7, 8, 8, 8], dtype=float)
    se = w.std(ddof=1) / (0.6 * np.sqrt(10))
    assert h == pytest.approx(2.5706 * se, rel=2e-3)  # t(0.975, 5) = 2.5706


def test_layer_estimates_telescope_exactly() -> None:
    """Made-up round times: fixed 1 ms, layers 2, 0.5, 3 ms, plus a per-round drift."""
    drift = np.arange(12)[:, None] * 10_000
    truth = np.cumsum([1_000_000, 2_000_000, 500_000, 3_000_000])
    rounds = truth[None, :] + drift
    fixed, layers, whole = layer_estimates(rounds)
    assert [e.time_ms for e in layers] == pytest.approx([2.0, 0.5, 3.0])
    assert all(e.ci95_ms == pytest.approx(0.0, abs=1e-9) for e in layers)  # drift cancels
    assert fixed.time_ms + sum(e.time_ms for e in layers) == pytest.approx(whole.time_ms)


def test_windows_difference_within_their_segment_exactly() -> None:
    """Made-up rounds of 4 layers in windows of 2: the empty prefix (fixed 1 ms), 0..0,
    0..1, then the lead layer 1 alone, 1..2, 1..3, and the whole model. A window's own
    call cost (1.2 ms) differs from the model's, and cancels; a per-round drift cancels in
    the intervals; the whole model is its own column; a late call of the base flags only
    the layer differenced against it; energies difference the same columns."""
    from profiler.measure.fused import FusedLayer, FusedResult, energy_by_prefix

    layer_ms = np.array([2.0, 0.5, 3.0, 1.5])
    cols_ms = np.array([1.0, 3.0, 3.5, 1.2 + 0.5, 1.2 + 3.5, 1.2 + 5.0, 8.0])
    positions = [1, 2, 4, 5]
    drift = np.arange(12)[:, None] * 10_000
    rounds = np.round(cols_ms * 1e6).astype(np.int64)[None, :] + drift
    fixed, layers, whole = layer_estimates(rounds, positions=positions)
    assert [e.time_ms for e in layers] == pytest.approx(layer_ms)
    assert all(e.ci95_ms == pytest.approx(0.0, abs=1e-9) for e in layers)
    assert fixed.time_ms == pytest.approx(1.0 + 0.055) and whole.time_ms == pytest.approx(8.055)
    res = FusedResult([FusedLayer(k, e.time_ms, e.ci95_ms, False, True)
                       for k, e in enumerate(layers)], fixed, whole, rounds=12, elapsed_s=1.0,
                      converged=True, settings=FusedSettings(window=2), round_ns=rounds,
                      prefix_late_runs=[0, 0, 0, 4, 0, 0, 0], layer_positions=positions)
    assert res.layer_late_runs() == [0, 0, 4, 0]
    assert "segments of 2 layers" in res.info()["scheme"]
    power_w = np.array([2.0, 3.0, 3.0, 4.0, 5.0, 5.0, 4.5])
    energy = energy_by_prefix(res, power_w)
    e = power_w * (cols_ms + 0.055)
    assert energy.layer_energy_mj == pytest.approx([e[1] - e[0], e[2] - e[1], e[4] - e[3],
                                                    e[5] - e[4]])
    assert energy.fixed_energy_mj == pytest.approx(e[0])
    assert energy.whole_energy_mj == pytest.approx(e[6])


def test_a_late_prefix_flags_both_layers_whose_difference_uses_it() -> None:
    """Prefix p (0 = empty) enters layers p - 1 and p; with_fused adds those late calls
    to the rows' sim_late_runs, so a spoilt difference never passes for the board's."""
    import pandas as pd

    from profiler.measure.fused import Estimate, FusedLayer, FusedResult
    from profiler.measure.tables import RunTables, with_fused

    layers = [FusedLayer(k, 1.0, 0.1, False, True) for k in range(4)]
    res = FusedResult(layers, Estimate(0.5, 0.01), Estimate(4.5, 0.1), rounds=5, elapsed_s=1.0,
                      converged=True, settings=FusedSettings(), prefix_late_runs=[0, 0, 3, 0, 2])
    assert res.layer_late_runs() == [0, 3, 3, 2]
    assert res.info()["late_prefixes"] == [2, 4]
    rows = pd.DataFrame({"layer": range(4), "time_ms_mean": [1.0] * 4,
                         "sim_late_runs": [1, 0, 0, 0]})
    out = with_fused(RunTables(rows, None, {}, {}), res)
    assert out.layers["sim_late_runs"].tolist() == [1, 3, 3, 2]
    # a real processor's run has no such column, and gets none
    out = with_fused(RunTables(rows.drop(columns="sim_late_runs"), None, {}, {}), res)
    assert "sim_late_runs" not in out.layers.columns


def test_sim_board_fused_recovers_layers_sliced_is_off_by_the_fixed_cost(default_model) -> None:
    """The default model cut into 5 layers (3 of the default grouping each), so a round
    is short and every layer takes several ms: on a busy 2-core host a late wake-up adds
    milliseconds to one call in ten, and 5 % of a layer must stay above what trimming
    leaves of that. (The 15-layer grouping recovers its layers as well on a quiet host;
    its figures are in the issue's closing note, not in a test.)"""
    data, default = default_model
    sliced = slice_model(data, cuts=default.cuts[2::3], cache_dir=False)
    assert len(sliced.layers) == 5
    board = load_board("sim")
    proc = board.processor("G")
    gov = make_governor(board, proc)
    host_gov = make_governor(board, board.processor("B"))
    with RestoreGuard([gov, host_gov]):
        # G's lowest level (the longest layers), its host at the top
        gov.set_khz(proc.freqs_khz[0])
        host_gov.set_khz(board.processor("B").freqs_khz[-1])
        time.sleep(0.02)  # past the modelled transition delays (at most 4.5 ms)
        _fused_and_sliced_against_the_model(data, sliced, board, gov, host_gov)


def _fused_and_sliced_against_the_model(data, sliced, board, gov, host_gov) -> None:
    khz, host_khz = gov.effective_khz(), host_gov.effective_khz()
    truth_ms = np.array([ops_truth_ms(board, "G", data, sorted(set(layer.op_indices)), khz,
                                      host_khz) for layer in sliced.layers])
    fixed_ms = call_overhead_ms(board, "G", khz, host_khz)
    # A fixed cost per call of a ms or more (the H100's was ~0.9 ms; the fitted Mali's is
    # larger), and layers of a ms or more (ARM-CO-UP Table 7: 1-60 ms on the Mali; this
    # is a small model).
    assert fixed_ms >= 1.0 and truth_ms.min() > 1.0
    with make_executor(board, "G") as ex:
        fused = FusedProfiler(prefix_models(data, sliced), ex).measure(
            FusedSettings(min_rounds=10, target_rel=0.01, budget_s=40, warmup_rounds=1,
                          visit_calls=4))
        sliced_t = LayerRunner(sliced, ex).run(frames=15, warmup=1)
    # nothing changed the levels under the test
    assert (gov.effective_khz(), host_gov.effective_khz()) == (khz, host_khz)
    got = fused.times_ms()
    big = truth_ms >= 1.0
    assert big.all()
    err = np.abs(got - truth_ms) / truth_ms
    assert err[big].max() <= 0.05, (got, truth_ms)
    # Every layer carries an interval, and none is below resolution here.
    assert not any(layer.below_resolution for layer in fused.layers)
    # The fixed row: the empty prefix's modelled call (the overhead, reducing the input)
    # plus what the host adds to every call outside the modelled run: uploading the
    # input and reading the output back (measured here: 60-90 us on a quiet core of the
    # 2-core VM, twice that beside two other test suites), and dispatch and waking up
    # (under 0.1 ms).
    empty = prefix_models(data, sliced)[0].model_bytes
    empty_ms = layer_truth(board, "G", empty, khz, host_khz)[0]
    assert empty_ms == pytest.approx(fixed_ms, rel=0.05)
    host_ms = _host_io_ms(board, empty)
    assert empty_ms - 0.01 <= fused.fixed.time_ms <= empty_ms + host_ms + 0.1, host_ms
    # Sliced: every layer is off by the fixed cost (it pays it again), within 10 % of it.
    # Each layer's fastest frame: what disturbs a call (a late wake-up) only adds time.
    sl_ms = sliced_t.time_ns.min(axis=0) / 1e6
    assert np.abs(sl_ms - truth_ms - fixed_ms).max() <= 0.1 * fixed_ms, sl_ms - truth_ms
    # The fused layers and the fixed row add up to the whole model, one call.
    assert fused.fixed.time_ms + fused.layer_sum_ms == pytest.approx(fused.whole.time_ms, rel=0.01)


def test_sim_cpu_windows_recover_layers(default_model) -> None:
    """Windows of 2 on the simulated B (segments 0-1, 2-3 led by layer 1, 4 led by 3),
    the 5-layer cut above, B's lowest level: every layer within 5 % of the modelled
    truth, the fixed row the modelled per-call cost, and the whole model (its own column
    in the rounds) within 2 % of the fixed row plus the layers."""
    data, default = default_model
    sliced = slice_model(data, cuts=default.cuts[2::3], cache_dir=False)
    board = load_board("sim")
    proc = board.processor("B")
    gov = make_governor(board, proc)
    with RestoreGuard([gov]):
        gov.set_khz(proc.freqs_khz[0])
        time.sleep(0.02)  # past the modelled transition delay
        khz = gov.effective_khz()
        truth_ms = np.array([ops_truth_ms(board, "B", data, sorted(set(layer.op_indices)), khz)
                             for layer in sliced.layers])
        fixed_ms = call_overhead_ms(board, "B", khz)
        assert truth_ms.min() > 1.0 and fixed_ms > 0.5
        with make_executor(board, "B") as ex:
            prof = FusedProfiler(prefix_models(data, sliced, reduce_above_bytes=None, window=2),
                                 ex, read_outputs=False, model_data=data)
            fused = prof.measure(FusedSettings(min_rounds=10, target_rel=0.01, budget_s=40,
                                               warmup_rounds=1, visit_calls=4, window=2))
        assert gov.effective_khz() == khz
    assert fused.layer_positions == [1, 2, 4, 5, 7] and fused.round_ns.shape[1] == 9
    err = np.abs(fused.times_ms() - truth_ms) / truth_ms
    assert err.max() <= 0.05, (fused.times_ms(), truth_ms)
    assert not any(layer.below_resolution for layer in fused.layers)
    assert fixed_ms - 0.01 <= fused.fixed.time_ms <= fixed_ms + 0.2
    assert fused.fixed.time_ms + fused.layer_sum_ms == pytest.approx(fused.whole.time_ms,
                                                                     rel=0.02)
    assert "segments of 2 layers" in fused.info()["scheme"]


def _host_io_ms(board, model_bytes: bytes) -> float:
    """Median ms a call of `model_bytes` spends uploading its inputs and reading its
    outputs back on the simulated G (host work outside the modelled run)."""
    with make_executor(board, "G") as ex:
        sub = ex.load(model_bytes, "io")
        x = [np.zeros(t.shape, t.dtype) for t in sub.inputs]
        spent = []
        for _ in range(9):
            t0 = time.perf_counter_ns()
            for i, v in enumerate(x):
                sub.set_input(i, v)
            t1 = time.perf_counter_ns()
            sub.run()
            t2 = time.perf_counter_ns()
            for i in range(len(sub.outputs)):
                np.array(sub.output(i), copy=True)
            spent.append(t1 - t0 + time.perf_counter_ns() - t2)
    return float(np.median(spent)) / 1e6


def test_cpu_prefixes_telescope_to_the_whole_model(default_model) -> None:
    """On a real CPU core: few rounds, so only the adding-up is checked (exact by
    construction of the estimator, up to trimming)."""
    data, sliced = default_model
    with CpuExecutor(ProcessorSpec("B", "cpu", "one core", (0,)), threads=1) as ex:
        prof = FusedProfiler(prefix_models(data, sliced), ex)
        res = prof.measure(FusedSettings(min_rounds=5, max_rounds=5, warmup_rounds=1))
    assert res.rounds == 5 and res.round_ns is not None and res.round_ns.shape == (5, 16)
    assert len(res.layers) == 15
    assert all(np.isfinite([layer.ci95_ms for layer in res.layers]))
    info = res.info()
    assert info["method"] == "fused" and info["rounds"] == 5 and info["settings"]["budget_s"] == 60
    # The calls alone after the rounds: every call kept, groups of the timed calls of a
    # visit; a CPU's call factor is their mean over their groups' fastest (>= 1).
    s = FusedSettings()
    alone = res.alone_ns
    assert alone is not None and alone.shape == (s.alone_calls, s.visit_calls - s.visit_warm)
    fastest = float(trimmed_estimate(alone.min(axis=1))[0])
    assert res.whole_alone.time_ms == pytest.approx(fastest)
    assert res.whole_alone_mean_ms == pytest.approx(alone.mean() / 1e6)
    assert res.call_factor == pytest.approx(max(1.0, alone.mean() / 1e6 / fastest))
    assert info["call_factor"] == res.call_factor


@pytest.mark.parametrize("window", [0, 4])
def test_accelerator_path_reads_back_reduced_outputs(default_model, window) -> None:
    """Through LiteRT's CompiledModel (the GPU's code path, on its CPU accelerator here):
    every prefix reads back at most 4 KB, and the figures add up to the whole call
    exactly. A GPU keeps whole prefixes even when windows are asked for
    (`settings_for`), and the profiler refuses windows that read outputs back."""
    from profiler.executors.accelerator import AcceleratorExecutor
    from profiler.measure.fused import measure_model

    data, sliced = default_model
    proc = ProcessorSpec("G", "gpu", "CPU accelerator, GPU code path", (0,), accelerator="gpu")
    with AcceleratorExecutor(proc, accelerator="cpu", threads=1) as ex:
        res, energy = measure_model(ex, data, sliced,
                                    FusedSettings(min_rounds=4, max_rounds=4, warmup_rounds=1,
                                                  window=window))
    assert energy is None  # no counter source
    assert res.rounds == 4 and max(res.prefix_read_bytes) <= 4096
    assert res.prefix_reduced[0] == 1 and sum(res.prefix_reduced[1:]) >= 10
    assert res.fixed.time_ms + res.layer_sum_ms == pytest.approx(res.whole.time_ms)
    assert res.settings.window == 0 and res.layer_positions == []
    # an accelerator's calls alone move with its clock: no call factor is made of them
    assert res.whole_alone_mean_ms is not None and res.call_factor is None
    if window:
        with AcceleratorExecutor(proc, accelerator="cpu", threads=1) as ex, \
                pytest.raises(ValueError, match="windows"):
            FusedProfiler(prefix_models(data, sliced, window=window), ex, model_data=data)


def test_auto_cache_is_cold_where_the_weights_outgrow_the_last_level_cache(
        default_model, tmp_path) -> None:
    """``cache_state`` on a real core against fake sysfs trees whose last-level cache is
    half and twice the model's weights; asked states win; a simulated processor stays
    warm; cold without a known cache size is bad input. The profiler then empties twice
    the cache before each timed call."""
    from test_cpu_cache import fake_caches

    from profiler.errors import BadInputError
    from profiler.measure.fused import EVICT_FACTOR, cache_state, fused_profiler

    data, sliced = default_model
    weights = sum(layer.param_bytes for layer in sliced.layers)
    assert weights > 100_000  # MobileNetV1 0.25: about 1.9 MB of float weights
    small_kib, big_kib = weights // 2 // 1024, weights * 2 // 1024
    small = fake_caches(tmp_path / "small", 0, [(1, "Data", "32K"), (3, "Unified", f"{small_kib}K")])
    big = fake_caches(tmp_path / "big", 0, [(3, "Unified", f"{big_kib}K")])
    with CpuExecutor(ProcessorSpec("B", "cpu", "one core", (0,)), threads=1) as ex:
        c = cache_state(FusedSettings(), ex, weights, small)
        assert (c.state, c.llc_bytes, c.weight_bytes) == ("cold", small_kib * 1024, weights)
        assert c.reason == "the weights outgrow the last-level cache"
        assert cache_state(FusedSettings(), ex, weights, big).state == "warm"
        assert cache_state(FusedSettings(cache="warm"), ex, weights, small).state == "warm"
        assert cache_state(FusedSettings(cache="cold"), ex, weights, big).state == "cold"
        assert cache_state(FusedSettings(), ex, weights, tmp_path / "none").state == "warm"
        with pytest.raises(BadInputError, match="no last-level cache size"):
            cache_state(FusedSettings(cache="cold"), ex, weights, tmp_path / "none")
        prof = fused_profiler(ex, data, sliced, FusedSettings(), sysfs_root=small)
        assert prof.evict is not None and prof.evict.nbytes == EVICT_FACTOR * small_kib * 1024
        assert fused_profiler(ex, data, sliced, FusedSettings(), sysfs_root=big).evict is None
    with make_executor(load_board("sim"), "B") as ex:
        c = cache_state(FusedSettings(), ex, weights, small)
        assert (c.state, c.reason) == ("warm", "simulated processor")


def test_auto_cache_goes_by_what_the_core_gets_where_sysfs_lists_more(tmp_path) -> None:
    """A virtual machine lists its host's cache (this project's VM: 300 MiB) and its core
    re-reads about 32 MiB faster than memory: ResNet50's 102 MB of weights then find
    every weight cold frame after frame, and the timed calls are made cold too, emptying
    what the core gets (twice the measured size, not the listed one). Where the
    measure finds all that is listed, or cannot probe, the listed size stands."""
    from test_cpu_cache import fake_caches

    from profiler.measure.fused import cache_state

    vm = fake_caches(tmp_path / "vm", 0, [(3, "Unified", "307200K")])
    listed, weights = 300 * 2**20, 102_121_896
    asked: list[tuple[int, int]] = []

    def usable(core: int, listed_bytes: int) -> int | None:
        asked.append((core, listed_bytes))
        return 32 * 2**20

    with CpuExecutor(ProcessorSpec("B", "cpu", "one core", (0,)), threads=1) as ex:
        c = cache_state(FusedSettings(), ex, weights, vm, usable)
        assert (c.state, c.llc_bytes, c.listed_bytes) == ("cold", 32 * 2**20, listed)
        assert c.reason == ("the weights outgrow the last-level cache (32 MiB of the 300 MiB "
                            "sysfs lists, as measured)")
        assert asked == [(0, listed)]
        small = cache_state(FusedSettings(), ex, 20 * 2**20, vm, usable)
        assert (small.state, small.llc_bytes) == ("warm", 32 * 2**20)
        # weights any core keeps, or more than is listed: the listed size, not measured
        tiny = cache_state(FusedSettings(), ex, 4 * 2**20, vm, usable)
        assert (tiny.state, tiny.llc_bytes, len(asked)) == ("warm", listed, 2)
        huge = cache_state(FusedSettings(), ex, 2 * listed, vm, usable)
        assert (huge.state, huge.llc_bytes, len(asked)) == ("cold", listed, 2)
        whole = cache_state(FusedSettings(), ex, weights, vm, lambda core, b: b)
        assert (whole.state, whole.llc_bytes) == ("warm", listed)
        none = cache_state(FusedSettings(), ex, weights, vm, lambda core, b: 0)
        assert (none.state, none.llc_bytes) == ("cold", 2**20)  # under the smallest probe
        # asked states are not measured
        assert cache_state(FusedSettings(cache="warm"), ex, weights, vm, usable).state == "warm"
        assert len(asked) == 2


def test_cold_calls_empty_the_cache_before_every_timed_call_outside_its_window(
        default_model) -> None:
    """Every timed call of a round (warm-up rounds too) follows one eviction, and no
    timed window holds one: the clock jumps by a second at each eviction, so a window
    that held one would read a second. The calls alone (an application's frames) and
    the visits' untimed calls are not evicted."""
    from profiler.measure.cpu_cache import Evictor

    data, sliced = default_model
    ev = Evictor(1 << 16)

    def clock() -> int:
        return time.perf_counter_ns() + ev.calls * 1_000_000_000

    s = FusedSettings(min_rounds=3, max_rounds=3, warmup_rounds=1, visit_calls=3, visit_warm=1,
                      alone_calls=3, alone_warm=1)
    with CpuExecutor(ProcessorSpec("B", "cpu", "one core", (0,)), threads=1) as ex:
        prof = FusedProfiler(prefix_models(data, sliced, reduce_above_bytes=None), ex,
                             read_outputs=False, evict=ev, clock=clock)
        res = prof.measure(s)
    prefixes = len(sliced.layers) + 1
    assert ev.calls == (s.warmup_rounds + 3) * prefixes * (s.visit_calls - s.visit_warm)
    assert res.round_ns.max() < 100_000_000 and res.alone_ns.max() < 100_000_000
    assert res.settings.cache == "cold" and res.evict_bytes == 1 << 16
    info = res.info()
    assert info["cache"] == "cold" and info["evict_bytes"] == 1 << 16
