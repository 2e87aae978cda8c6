"""The transfer matrix on real sub-models and threads: every (boundary, src, dst) row,
positive times, the boundary's real byte count, data actually delivered to the
consumer on another pinned thread, energy from a counter source, and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler import zoo
from profiler.boards.profiles import load_board
from profiler.clock import StepClock
from profiler.executors import ProcessorWorker
from profiler.mapping.transfer import (
    NoActivity,
    _Loaded,
    _Pair,
    _plan,
    measure_transfer_matrix,
    model_inputs,
    read_transfer_csv,
    summary,
    write_transfer_csv,
)
from profiler.power.session import PowerSession
from profiler.power.sources.base import CounterSource, SourceInfo
from profiler.slicing.slicer import slice_model
from tests.three_processors import board3, make

COUPPROF = str(Path(sys.executable).with_name("coupprof"))


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    data = zoo.build("resnet50", size=32, classes=10)
    return slice_model(data, "layer", cache_dir=tmp_path_factory.mktemp("slices"))


def test_every_boundary_and_pair_has_a_positive_time(resnet) -> None:
    board = board3()
    m = measure_transfer_matrix(resnet, board, ["L", "B", "G"], reps=4, warmup=1,
                                boundaries=[0, 3, 7], make=make)
    df = m.table()
    assert len(df) == 3 * 9
    assert set(map(tuple, df[["boundary", "src", "dst"]].to_numpy())) == {
        (b, s, d) for b in (0, 3, 7) for s in "LBG" for d in "LBG"}
    assert (df["time_ms_mean"] > 0).all() and (df["time_ms_p95"] >= df["time_ms_median"]).all()
    assert (df["reps"] == 4).all()
    assert "energy_mj" not in df.columns  # no power source: absent, never 0
    for b in (0, 3, 7):
        # Independent byte count: what later layers read that they do not make.
        later = resnet.layers[b + 1:]
        live = ({int(t.index): t.nbytes for layer in later for t in layer.inputs}.keys()
                - {int(t.index) for layer in later for t in layer.outputs})
        nbytes = sum({int(t.index): t.nbytes for layer in resnet.layers
                      for t in [*layer.inputs, *layer.outputs]}[i] for i in live)
        assert (df[df["boundary"] == b]["bytes"] == nbytes).all()
    s = summary(df)
    assert list(s.index) == ["B", "G", "L"] and not s.isna().any().any()


def test_only_the_requested_triples_are_measured(resnet) -> None:
    m = measure_transfer_matrix(resnet, board3(), ["L", "B"], reps=2, warmup=0,
                                only=[(2, "L", "B"), (5, "B", "B")], make=make)
    assert sorted((s.boundary, s.src, s.dst) for s in m.samples) == [(2, "L", "B"),
                                                                      (5, "B", "B")]


def test_a_cross_processor_hand_over_delivers_the_producers_outputs(resnet) -> None:
    board = board3()
    plan = _plan(resnet)
    inputs = model_inputs(resnet, seed=5)
    b = 4
    with ProcessorWorker(lambda: make(board, "L")) as wl, \
            ProcessorWorker(lambda: make(board, "G")) as wg:
        src = wl.call(lambda ex: _Loaded(ex, resnet, plan, inputs, "m"))
        dst = wg.call(lambda ex: _Loaded(ex, resnet, plan, inputs, "m"))
        # Spoil the consumer's inputs so only a real hand-over can restore them.
        for spec in plan.tensors[b]:
            for pos, slot in plan.consumers[int(spec.index)]:
                if pos > b:
                    zeros = np.zeros(dst.subs[pos].inputs[slot].shape,
                                     dst.subs[pos].inputs[slot].dtype)
                    wg.call(lambda ex, p=pos, s=slot, z=zeros: dst.subs[p].set_input(s, z))
        pair = _Pair(b, "L", "G", wl, src, wg, dst, __import__("time").perf_counter_ns,
                     NoActivity())
        _, t0, t1, _ = pair.cross(None)
        assert t1 > t0
        sent = wl.call(lambda ex: [np.array(src.source(int(t.index))) for t in plan.tensors[b]])
        # G's consumers now compute from L's tensors: re-running them on both gives equal
        # outputs (the CompiledModel buffers cannot be read back directly).
        consumers = sorted({pos for t in plan.tensors[b]
                            for pos, _ in plan.consumers[int(t.index)] if pos == b + 1})
        for pos in consumers:
            got = wg.call(lambda ex, p=pos: (dst.subs[p].run(), np.array(dst.subs[p].output(0)))[1])
            want = wl.call(lambda ex, p=pos: (src.subs[p].run(), np.array(src.subs[p].output(0)))[1])
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert all(np.abs(a).sum() > 0 for a in sent)


class RampSource(CounterSource):
    """A counter source whose energy is P * t on its own clock, in 1 ms counter steps:
    the ground truth of an energy window is P times its length."""

    kind = "ramp"
    update_interval_ns = 1_000_000

    def __init__(self, power_w: float, clock: StepClock) -> None:
        super().__init__("ramp", clock)
        self.power_w = power_w

    def info(self) -> SourceInfo:
        return SourceInfo("ramp", "ramp", "counter", "test", update_interval_ns=1_000_000)

    def _open_device(self) -> None:
        self.t0 = self.clock()

    def _close_device(self) -> None:
        pass

    def read_energy_mj(self) -> float:
        t = (self.clock() - self.t0) // self.update_interval_ns * self.update_interval_ns
        return self.power_w * t / 1e6  # W * ns -> mJ


def test_energy_meter_per_call_is_power_times_call_time() -> None:
    clock = StepClock(0, 1000)
    with RampSource(2.5, clock) as src:
        meter = PowerSession(src, counter_updates=50)
        per_call = meter.per_call(lambda: clock.advance(400_000))  # each call: 0.4 ms
    # 2.5 W for 0.4 ms (+ the clock reads' own microseconds) = 1.0 mJ
    assert per_call == pytest.approx(1.0, rel=0.03)


def test_matrix_has_an_energy_column_with_a_power_source(resnet) -> None:
    from profiler.clock import perf_clock

    class WallRamp(RampSource):
        def __init__(self) -> None:
            CounterSource.__init__(self, "ramp", perf_clock)
            self.power_w = 3.0

    with WallRamp() as src:
        m = measure_transfer_matrix(resnet, board3(), ["L", "B"], reps=2, warmup=0,
                                    boundaries=[1], make=make,
                                    power=PowerSession(src, counter_updates=5))
    df = m.table()
    assert "energy_mj" in df.columns and df["energy_mj"].notna().all()
    # Energy of "run + hand-over" minus "run": about 3 W times the hand-over time.
    assert (df["energy_mj"].abs() < 3.0 * 50).all()  # mJ; far under 3 W for 50 ms


def test_csv_round_trip(resnet, tmp_path: Path) -> None:
    m = measure_transfer_matrix(resnet, board3(), ["B"], reps=2, warmup=0, boundaries=[0, 1],
                                make=make)
    csv_p, json_p = write_transfer_csv(m, tmp_path / "t.csv", info={"board": "test"})
    back = read_transfer_csv(csv_p)
    pd.testing.assert_frame_equal(back[["boundary", "src", "dst", "bytes"]],
                                  m.table()[["boundary", "src", "dst", "bytes"]])
    meta = json.loads(json_p.read_text())
    assert meta["format"] == "coupprof-transfers/1" and meta["board"] == "test"


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COUPPROF, "transfer-matrix", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "COUPPROF_CACHE": str(cwd / "cache")})


def test_cli_on_the_simulated_board(tmp_path: Path) -> None:
    r = run_cli("--board", "sim", "--processors", "L,B,G,N", "--boundaries", "0,6",
                "--frames", "3", "--warmup", "0", "--csv", str(tmp_path / "t.csv"),
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "t.csv")
    assert len(df) == 2 * 16 and (df["time_ms_mean"] > 0).all()
    # The simulated board's virtual logger is the default power source there.
    assert (df["energy_mj"] > 0).all() and "energy per hand-over" in r.stdout
    assert "src \\ dst" in r.stdout and "per boundary" in r.stdout
    assert "simulated" in r.stdout
    meta = json.loads((tmp_path / "t.json").read_text())
    assert meta["simulated"] is True and meta["layers"] > 2
    assert meta["power_source"] == "sim" and meta["baseline_power_w"] > 0


def test_cli_on_host_with_frequencies_held(tmp_path: Path) -> None:
    r = run_cli("--board", "host", "--frames", "2", "--warmup", "0", "--boundaries", "0",
                "--csv", str(tmp_path / "h.csv"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "h.csv")
    assert set(df["src"]) == set(load_board("host").processors)


@pytest.mark.parametrize("args, code, needle", [
    (["--boundaries", "99"], 2, "boundary 99 does not exist"),
    (["--processors", "B,Q"], 2, "has no processor 'Q'"),
    (["--freq", "4,4"], 2, "one level per processor"),
    (["--power", "bogus"], 2, "unknown power source"),
])
def test_cli_bad_input(tmp_path: Path, args: list[str], code: int, needle: str) -> None:
    r = run_cli("--board", "sim", "--frames", "1", *args, cwd=tmp_path)
    assert r.returncode == code, r.stderr
    err = r.stderr.strip().splitlines()
    assert err[-1].startswith("coupprof transfer-matrix: error:") and needle in err[-1]
    assert "Traceback" not in r.stderr


@pytest.mark.skipif(bool(__import__("profiler.executors.accelerator", fromlist=["x"])
                         .vulkan_icds()), reason="this machine has a Vulkan driver")
def test_cli_gpu_on_a_machine_without_one_exits_3(tmp_path: Path) -> None:
    r = run_cli("--board", "host", "--processors", "B,G", "--frames", "1", cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    from profiler.executors.accelerator import vulkan_loader_error, webgpu_only

    if webgpu_only() and vulkan_loader_error() is not None:
        assert "processor G: no Vulkan loader" in last  # the cause first, before LiteRT
    else:
        assert "accelerator for processor G is unavailable" in last
    assert len(r.stderr.strip().splitlines()) == 1  # LiteRT's own log lines kept out


def test_fused_matrix_adds_the_producers_read_back_at_a_cut() -> None:
    """--method fused: per (boundary, src) the extra time of reading the crossing tensors
    back in full rather than reduced, on the accelerator code path (LiteRT's
    CompiledModel on its CPU accelerator here); 0 on a CPU processor, whose outputs stay
    in host memory. The hand-over itself is measured as sliced does."""
    from profiler.measure.fused import FusedSettings

    data = zoo.build("resnet50", size=32, classes=10)
    sliced = slice_model(data, "layer", cache_dir=False)
    m = measure_transfer_matrix(sliced, board3(), ["B", "G"], reps=3, warmup=1,
                                boundaries=[3], make=make, method="fused", model_bytes=data,
                                fused=FusedSettings(min_rounds=4, max_rounds=4,
                                                    warmup_rounds=1))
    df = m.table().set_index(["src", "dst"])
    assert m.info["method"] == "fused"
    assert (df.loc["B", "readout_ms"] == 0).all() and (df.loc["B", "readout_ms_ci95"] == 0).all()
    g = df.loc["G"]
    assert np.isfinite(g["readout_ms"]).all() and (g["readout_ms_ci95"] > 0).all()
    assert g["readout_ms"].nunique() == 1  # one figure per (boundary, src), whatever dst
    assert (df["time_ms_mean"] > 0).all()
    sliced_m = measure_transfer_matrix(sliced, board3(), ["B"], reps=2, warmup=0,
                                       boundaries=[3], make=make)
    assert "readout_ms" not in sliced_m.table().columns
