"""Switch and Pipeline runs of a mapping on real sub-models and threads: every frame is
processed exactly once, in order, with its own correct outputs; queues stay bounded;
switch mode has one frame in flight; per-layer DVFS reaches the (simulated) governor
files; errors in a stage surface instead of hanging; the CLI on the simulated board."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from governors import RestoreGuard, make_governor
from profiler import zoo
from profiler.boards.profiles import load_board
from profiler.errors import BadInputError, HardwareError
from profiler.mapping.pipeline import MappingRunConfig, run_mapping
from profiler.mapping.spec import parse_freq, parse_order
from profiler.measure.results import LAYER_END, LAYER_START, TRANSFER_END, TRANSFER_START
from profiler.runtime import make_interpreter
from profiler.slicing.slicer import slice_model
from tests.three_processors import board3, make

COUPPROF = str(Path(sys.executable).with_name("coupprof"))


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    data = zoo.build("resnet50", size=32, classes=10)
    return data, slice_model(data, "op", cache_dir=tmp_path_factory.mktemp("slices"))


def frame_inputs(sliced):
    def feed(f: int) -> dict[int, np.ndarray]:
        rng = np.random.default_rng(100 + f)
        return {int(t.index): rng.uniform(-1, 1, t.shape).astype(t.dtype)
                for t in sliced.model_inputs}
    return feed


def assert_whole_model_outputs(data: bytes, feed, outputs: dict) -> None:  # type: ignore[no-untyped-def]
    """Every frame's outputs equal the whole model's, run by one interpreter on its input."""
    interp = make_interpreter(data, num_threads=1)
    for f, outs in outputs.items():
        for det in interp.get_input_details():
            interp.set_tensor(det["index"], feed(f)[det["index"]])
        interp.invoke()
        for det in interp.get_output_details():
            np.testing.assert_allclose(outs[det["index"]], interp.get_tensor(det["index"]),
                                       rtol=1e-4, atol=1e-5)


def assert_timestamps_follow_the_data(run) -> None:  # type: ignore[no-untyped-def]
    """Per frame and call: hand-over, then the call; a call starts its hand-over after its
    predecessor ended (same frame); a frame is done after its last call."""
    ts = run.ts_ns
    assert (ts[:, :, TRANSFER_START] <= ts[:, :, TRANSFER_END]).all()
    assert (ts[:, :, TRANSFER_END] <= ts[:, :, LAYER_START]).all()
    assert (ts[:, :, LAYER_START] < ts[:, :, LAYER_END]).all()
    assert (ts[:, 1:, TRANSFER_START] >= ts[:, :-1, LAYER_END]).all()
    assert (run.done_ns >= ts[:, -1, LAYER_END]).all()
    assert (run.stage_busy_ns > 0).all()


def order_cutting_skips(n: int) -> str:
    """Stages of uneven length; with per-op layers the cuts fall inside residual blocks,
    so skip tensors must be forwarded through a stage that does not use them."""
    a, b = n // 5, n // 5 + 3
    return "L" * a + "G" * 3 + "B" * (b - a - 3 + 4) + "G" * 2 + "L" * (n - b - 6)


@pytest.mark.parametrize("mode, method", [("pipeline", "fused"), ("switch", "fused"),
                                          ("pipeline", "sliced"), ("switch", "sliced")])
def test_every_frame_once_in_order_with_its_own_outputs(resnet, mode: str, method: str) -> None:
    data, sliced = resnet
    board = board3()
    n = len(sliced.layers)
    mapping = parse_order(order_cutting_skips(n), n, board)
    feed = frame_inputs(sliced)
    frames, warmup, depth = 7, 2, 1
    run = run_mapping(sliced, board, MappingRunConfig(
        mapping, mode, frames=frames, warmup=warmup, queue_depth=depth, make=make,
        inputs=feed, keep_outputs=True, method=method, model_bytes=data))
    # Fused: one call per stage (a stage's layers cut from the model as one sub-model);
    # sliced: one per layer.
    assert run.method == method
    want_calls = len(mapping.stages) if method == "fused" else n
    assert len(run.calls) == want_calls and run.ts_ns.shape[1] == want_calls
    assert [c.layers for c in run.calls if c.stage == 1] == (
        [mapping.stages[1].layers] if method == "fused"
        else [(p,) for p in mapping.stages[1].layers])
    total = frames + warmup
    # Each stage saw every frame exactly once, in order.
    assert run.seen == [list(range(total))] * len(mapping.stages)
    # Frames in flight are bounded by the queues and stages; switch keeps one.
    stages = len(mapping.stages)
    assert run.max_in_flight <= (stages + 1) * depth + stages
    if mode == "switch":
        assert run.max_in_flight == 1
    # Each frame's outputs are the whole model's outputs on that frame's input.
    assert sorted(run.outputs) == list(range(warmup, total))
    assert_whole_model_outputs(data, feed, run.outputs)
    g_calls = sum(c.processor == "G" for c in run.calls)  # G calls: CompiledModel
    assert run.fallback.count(False) == g_calls


@pytest.mark.parametrize("method", ["fused", "sliced"])
def test_timestamps_follow_the_data(resnet, method: str) -> None:
    data, sliced = resnet
    board = board3()
    n = len(sliced.layers)
    mapping = parse_order(order_cutting_skips(n), n, board)
    for mode in ("switch", "pipeline"):
        run = run_mapping(sliced, board, MappingRunConfig(mapping, mode, frames=5, warmup=1,
                                                          make=make, method=method,
                                                          model_bytes=data))
        ts = run.ts_ns
        assert_timestamps_follow_the_data(run)
        assert run.throughput_fps > 0
        if mode == "switch":  # one frame at a time: frame f+1 starts after frame f is done
            assert (ts[1:, 0, TRANSFER_START] >= run.done_ns[:-1]).all()


def test_per_layer_dvfs_requests_reach_the_governor(resnet) -> None:
    """On the simulated board the governors write a real cpufreq/devfreq tree. Fused, a
    level change inside a stage cuts it into calls, each requesting its level first."""
    data, sliced = resnet
    sim = load_board("sim")
    n = len(sliced.layers)
    k = n // 2
    mapping = parse_order("B" * k + "G" * (n - k), n, sim)
    levels = ["7"] * (k - 1) + ["3"] + ["2"] * (n - k - 2) + ["-", "4"]
    plan = parse_freq(",".join(levels), mapping, sim)
    govs = {d: make_governor(sim, sim.processor(d)) for d in ("B", "G")}
    with RestoreGuard(list(govs.values())):
        run = run_mapping(sliced, sim, MappingRunConfig(mapping, "switch", frames=2, warmup=0,
                                                        freq=plan, governors=govs,
                                                        model_bytes=data))
        # Each domain was last asked for its last layer's level.
        assert govs["B"].read_khz() == sim.processor("B").freqs_khz[3 - 1]
        assert govs["G"].read_khz() == sim.processor("G").freqs_khz[4 - 1]
    # B: 7...7 | 3; G: 2...2 - (the '-' layer stays in the call around it) | 4.
    assert [(c.processor, c.first, c.last) for c in run.calls] == [
        ("B", 0, k - 2), ("B", k - 1, k - 1), ("G", k, n - 2), ("G", n - 1, n - 1)]


def test_a_stage_that_cannot_start_raises_instead_of_hanging(resnet) -> None:
    _, sliced = resnet
    board = board3()
    bad = replace(board, processors={**board.processors,
                                     "L": replace(board.processor("L"), cores=(4095,))})
    n = len(sliced.layers)
    for order in ("B" * (n - 3) + "LLL", "B" * (n - 6) + "LLLBBB"):  # last, and in between
        mapping = parse_order(order, n, bad)
        t0 = time.monotonic()
        with pytest.raises(HardwareError, match="4095"):
            run_mapping(sliced, bad, MappingRunConfig(mapping, "pipeline", frames=3, warmup=0,
                                                      make=make, method="sliced"))
        assert time.monotonic() - t0 < 30  # no stage left waiting for a frame (join timeout)


def test_pipeline_refuses_clashing_levels_on_a_shared_domain(resnet) -> None:
    _, sliced = resnet
    sim = load_board("sim")
    n = len(sliced.layers)
    mapping = parse_order("B" * (n - 2) + "NN", n, sim)
    plan = parse_freq("8/3", mapping, sim)  # N runs at B's level: 8 vs 3 at the same time
    with pytest.raises(BadInputError, match="same time"):
        run_mapping(sliced, sim, MappingRunConfig(mapping, "pipeline", frames=1, freq=plan,
                                                  method="sliced"))


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COUPPROF, "run", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COUPPROF_CACHE": str(cwd / "cache"),
                                            "COLUMNS": "120"})


def test_cli_runs_a_mapping_on_the_simulated_board(tmp_path: Path) -> None:
    r = cli("--board", "sim", "--order", "L3B4G4N4", "--mode", "pipeline", "--freq",
            "L=6,B=8,G=5", "--frames", "6", "--warmup", "1", "--profile-frames", "3",
            "--min-rounds", "5", "--max-rounds", "5",  # the plumbing, not the tables' spread
            "--csv", str(tmp_path / "r.csv"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "r.csv")
    summ = df[df["kind"] == "summary"].set_index("metric")
    assert summ.loc["throughput_fps", "measured"] > 0
    assert summ.loc["throughput_fps", "predicted"] > 0
    assert np.isfinite(summ.loc["throughput_fps", "error_pct"])
    stages = df[df["kind"] == "stage"]
    assert list(stages["processor"]) == ["L", "B", "G", "N"]
    # Fused (the default): one call per stage, each a row.
    calls = df[df["kind"] == "call"]
    assert len(calls) == 4 and (calls["time_ms_mean"] > 0).all()
    assert list(calls["first_layer"]) == [0, 3, 7, 11] and list(calls["last_layer"]) == [2, 6, 10, 14]
    meta = json.loads((tmp_path / "r.json").read_text())
    assert meta["order"] == "LLLBBBBGGGGNNNN" and meta["simulated"] is True
    assert meta["method"] == "fused" and meta["calls"] == [[0, 2], [3, 6], [7, 10], [11, 14]]
    assert "fused: each stage's layers in one call, 4 calls a frame" in " ".join(r.stdout.split())
    assert meta["prediction"]["mode"] == "pipeline"
    assert "predicted" in r.stdout and "simulated" in r.stdout
    # sim is the default power source on the simulated board: energy measured and
    # predicted (with the idle baseline, so not flagged as an upper bound).
    assert summ.loc["energy_mj", "measured"] > 0 and summ.loc["energy_mj", "predicted"] > 0
    assert meta["power_source"] == "sim" and meta["power"]["baseline_power_w"] > 0
    assert "upper bound" not in meta["prediction"]["energy_note"]


def test_cli_order_length_mismatch_states_the_count(tmp_path: Path) -> None:
    r = cli("--board", "sim", "--order", "GGBB", "--mode", "switch", cwd=tmp_path)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()[-1]
    assert "maps 4 layers but the model has 15 layers" in err
    assert "Traceback" not in r.stderr


def test_energy_per_frame_from_a_counter_source_is_power_over_throughput(resnet) -> None:
    """A counter source whose energy is exactly 3 W x elapsed time (1 ms updates): the
    run repeats its measured batch until the window spans 300 updates (longer than 3
    frames take even on a busy host), and energy per frame times frames per second must
    come back to about 3 W."""
    from test_counter_energy import Ramp

    from profiler.clock import perf_clock
    from profiler.power.session import PowerSession

    data, sliced = resnet
    board = board3()
    n = len(sliced.layers)
    mapping = parse_order("B" * (n // 2) + "L" * (n - n // 2), n, board)
    with Ramp("ramp", perf_clock, interval_ns=1_000_000) as src:
        run = run_mapping(sliced, board, MappingRunConfig(
            mapping, "pipeline", frames=3, warmup=1, make=make,
            power=PowerSession(src, counter_updates=300), model_bytes=data))
    assert run.energy_mj is not None and run.energy_mj > 0
    # 3 W over the counter's window, shared by the frames run inside it. The window's
    # ends are read just after a counter update (start) and up to one 1 ms update after
    # the last one (end): within two updates' energy, 6 mJ of the >= 900 mJ window.
    t0, t1 = run.energy_window_ns
    n = run.power_info["energy_frames"]
    assert t1 - t0 >= 300 * 1_000_000
    expect_mj = 3.0 * (t1 - t0) / 1e6 / n
    assert run.energy_mj == pytest.approx(expect_mj, abs=6.0 / n)
    # the batch was repeated to fill the window; before it, the one warm-up frame (0) ran
    # again while the counter's update was awaited, so that the processor was not idle
    seen = run.seen[0]
    again = len(seen) - n - 1
    assert again >= 1 and seen[:1 + again] == [0] * (1 + again), seen[:1 + again + 2]
    assert len(seen[1 + again:]) == n > 4 and 0 not in seen[1 + again:]
    # The run's throughput spans other frames (the first batch only), so the power it
    # implies matches only roughly on a shared host.
    assert 1.5 < run.energy_mj * run.throughput_fps / 1000 < 9.0  # W
