"""Energy from a streaming power source in `coupprof run` and `coupprof transfer-matrix`,
on the simulated board: the real virtual logger, collector, clock fit and attribution
measure the modelled board power, and every figure is checked against the power
model's own ground truth (`SimPowerModel.true_energy_mj`, computed from the recorded
power steps, never through the logger) or against the board model's layer power
(tests/sim_truth.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sim_truth import layer_truth

from profiler.boards.profiles import load_board
from profiler.clock import StepClock
from profiler.mapping.pipeline import MappingRunConfig, run_mapping
from profiler.mapping.predict import measure_costs, predict
from profiler.mapping.spec import parse_order
from profiler.mapping.transfer import measure_transfer_matrix
from profiler.markers import open_marker
from profiler.measure.results import TRANSFER_START
from profiler.power.session import PowerSession
from profiler.power.sources import SourceHardware, open_power_source
from profiler.sim.power import SimPowerModel
from profiler.slicing.slicer import slice_model
from profiler.zoo import default_model_path

COUPPROF = str(Path(sys.executable).with_name("coupprof"))
SIM = load_board("sim")


def max_run_w(board=SIM) -> float:  # noqa: ANN001
    """The most any processor draws above idle running a layer of the default model, at
    any of its levels (and its host's top): a bound on the board's dynamic power."""
    layers = slice_model(default_model_path(), cache_dir=False).layers
    out = 0.0
    for p in "LBGN":
        proc = board.processor(p)
        for khz in proc.freqs_khz or (None,):
            for layer in layers:
                out = max(out, layer_truth(board, p, layer.model_bytes, khz)[1] - IDLE_W)
    return out


IDLE_W = SIM.extra["sim"]["idle_power_mw"] / 1000


# --------------------------------------------------------------------------------
# The power model on its own
# --------------------------------------------------------------------------------

def test_runs_and_busy_processors_add_up_and_the_truth_integrates_them() -> None:
    clock = StepClock(0, 1_000_000)  # every read 1 ms later
    model = SimPowerModel(SIM, clock=clock)
    assert model.baseline_w == pytest.approx(IDLE_W)  # every processor idle
    busy = {p: model.busy_w(p) for p in "BG"}  # what each draws between its runs
    run_b, run_g = 1.5, 2.25  # what a running layer draws (the executor says)

    model.busy("B", key=0)  # t = 0 ms
    model.running("G", run_g)  # 1 ms: a G layer starts
    model.busy("B", key=2)  # 2 ms: a second stage on B keeps it busy, not twice
    model.running("B", run_b)  # 3 ms: a B layer: its power replaces B's busy level
    model.stopped("B")  # 4 ms: back to busy
    model.stopped("G")  # 5 ms
    model.idle("B", key=0)  # 6 ms
    model.idle("B", key=2)  # 7 ms
    model.running("N", 0.5)  # 8 ms, still running at the end
    t_us = np.array([500, 1500, 2500, 3500, 4500, 5500, 6500, 7500, 8500])
    expect = [busy["B"], busy["B"] + run_g, busy["B"] + run_g, run_b + run_g,
              busy["B"] + run_g, busy["B"], busy["B"], 0, 0.5]
    markers = np.zeros(t_us.size, dtype=np.int64)
    model.to_host_ns = lambda dev_us: dev_us * 1000  # the logger's clock = the host's
    assert model.power_w(t_us / 1e6, markers) == pytest.approx(IDLE_W + np.array(expect))
    # The logger only asks for later times; the timeline it no longer needs is dropped
    # without changing the answer.
    assert model.activity_w_at(np.array([8_500_000]))[0] == pytest.approx(0.5)

    # Ground truth over [0.5, 6.5] ms (W x ms = mJ): B busy 0..3 and 4..7, running 3..4;
    # G running 1..5.
    truth = model.true_energy_mj(500_000, 6_500_000)
    assert truth == pytest.approx(IDLE_W * 6 + busy["B"] * (2.5 + 2.5) + run_b + run_g * 4)
    ivs = [(iv.letter, iv.start_ns, iv.end_ns) for iv in model.intervals]
    assert ("G", 1_000_000, 5_000_000) in ivs and ("B", 3_000_000, 4_000_000) in ivs


def test_busy_power_follows_the_frequency_in_effect_not_the_one_requested(
        tmp_path: Path) -> None:
    """A processor's power between runs follows the sim governor's effective frequency,
    which lags a write by ARM-CO-UP's transition delay (the simulated executor prices
    its runs the same way). The shipped board's calibration finds no overhead activity
    on B (ARM-CO-UP's data do not bound it, so the fit writes 0), which would draw
    nothing between runs at any frequency; this board gives B some."""
    import time

    from governors import RestoreGuard, make_governor
    from profiler.boards.profiles import bundled_profiles
    from profiler.sim import model as sim_model
    from profiler.sim import perf

    text = bundled_profiles()["sim"].read_text()
    head, tail = text.split("[processors.B.sim.power]", 1)
    tail = re.sub(r"(?m)^activity_overhead = .*$", "activity_overhead = 0.5", tail, count=1)
    (tmp_path / "sim.toml").write_text(head + "[processors.B.sim.power]" + tail)
    board = load_board(tmp_path / "sim.toml")
    model = SimPowerModel(board)
    b = board.processor("B")
    gov = make_governor(board, b)
    lo, hi = b.freqs_khz[0], b.freqs_khz[-1]
    c = sim_model.constants(b)
    assert c.power.activity_overhead == 0.5

    def want(khz: int) -> float:  # the overhead activity's share of C_eff V^2 f
        _, v = sim_model.operating_point(b, khz)
        return float(perf.dynamic_power_w(c.power, perf.TimeSplit(0.0, 0.0, 1.0), v, khz / 1e6))

    with RestoreGuard([gov]):
        gov.set_khz(lo)
        time.sleep(0.01)  # past the modelled transition delay (at most 4.5 ms)
        assert model.busy_w("B") == pytest.approx(want(lo))
        gov.set_khz(hi)
        assert model.busy_w("B") == pytest.approx(want(lo))  # not in effect yet
        time.sleep(0.01)
        assert model.busy_w("B") == pytest.approx(want(hi))
    assert want(hi) > want(lo)


# --------------------------------------------------------------------------------
# Through the virtual logger, collector, clock fit and attribution
# --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rig():
    sliced = slice_model(default_model_path())
    model = SimPowerModel(SIM)
    src = open_power_source("sim", SourceHardware(extra={"sim_power_model": model}))
    marker = open_marker("sim", sim_sink=src)
    with src, marker:
        yield sliced, model, PowerSession(src, marker, baseline_s=0.2)


ORDER = "L3B4G4N4"


def test_switch_energy_per_frame_matches_the_model_and_the_layer_tables(rig) -> None:
    sliced, model, meter = rig
    mapping = parse_order(ORDER, len(sliced.layers), SIM)
    costs, transfers = measure_costs(sliced, SIM, mapping, frames=8, warmup=1, power=meter,
                                     activity=model)
    # Sliced: each layer its own call, so the run's layer times meet the tables' layers.
    run = run_mapping(sliced, SIM, MappingRunConfig(mapping, "switch", frames=20, warmup=2,
                                                    power=meter, activity=model,
                                                    method="sliced"))
    assert meter.baseline_w == pytest.approx(model.baseline_w, rel=0.01)
    assert run.power_error is None and run.energy_window_ns is not None
    d0, d1 = run.energy_window_ns
    period_ns = (d1 - d0) / (run.frames - 1)

    # 1. The model's truth over the same span. Sampling at 20 kS/s a power that steps
    # at every layer boundary gives each step an error under one sample period x the
    # step; over ~40 steps a frame these average out to well under 1 %.
    truth = model.true_energy_mj(d0, d1) / (run.frames - 1)
    assert run.energy_mj == pytest.approx(truth, rel=0.02)
    assert run.frame_energy_mj is not None and run.frame_energy_mj.size == run.frames - 1

    # Per stage (switch mode): each stage's window against the truth over it.
    stage_truth = []
    for st in mapping.stages:  # over the frames inside the energy span: all but the first
        starts = run.ts_ns[1:, st.first, TRANSFER_START]
        ends = starts + run.stage_busy_ns[1:, st.index]
        stage_truth.append(np.mean([model.true_energy_mj(a, b) for a, b in zip(starts, ends, strict=True)]))
    assert run.stage_energy_mj == pytest.approx(np.array(stage_truth), rel=0.03)

    # 2. Against the layer tables measured first (attributed layer energy, hand-over
    # energy), as `coupprof run` predicts. Layer times differ between the profile and
    # the run (the host is shared), but the power each layer runs at does not, so
    # each layer's mean power over its marked window is scaled to the run's time:
    # P_i(table) x t_i(run). (E_i / t_i(table) would not do: the window is a little
    # longer than the invoke, and a preemption inside it inflates E_i alone.) The
    # frame also holds time no table window covers (same-processor hand-overs in the
    # run, read-outs, the admission of the next frame): there the board draws at
    # least the baseline and at most the baseline + the largest dynamic power.
    tab = costs.table.set_index("layer")
    # (the run's times over the frames inside the energy span: all but the first)
    t_run_ms = run.call_time_ns[1:].mean(axis=0) / 1e6
    e_layers = float((tab["power_w"] * t_run_ms).sum())
    tr = transfers.set_index(["boundary", "src", "dst"])
    x_run_ms = run.transfer_ns[1:].mean(axis=0) / 1e6
    changes = [i for i in range(1, len(ORDER)) if mapping.order[i] != mapping.order[i - 1]]
    e_tr = 0.0
    for i in changes:
        row = tr.loc[(i - 1, mapping.order[i - 1], mapping.order[i])]
        e_tr += row["energy_mj"] / row["time_ms_mean"] * x_run_ms[i]
    gap_ms = period_ns / 1e6 - t_run_ms.sum() - sum(x_run_ms[i] for i in changes)
    assert gap_ms > 0
    lo = e_layers + e_tr + model.baseline_w * gap_ms
    hi = e_layers + e_tr + (model.baseline_w + max_run_w()) * gap_ms
    assert lo * 0.97 <= run.energy_mj <= hi * 1.03

    # The prediction `coupprof run` prints is that sum at the table's times (its mean
    # power moves with the mix of layer times, which the shared host shifts by up to
    # ~20 % per layer between the profile and the run: not compared here).
    pred = predict(mapping, "switch", costs, transfers, method="sliced")
    assert pred.energy_mj is not None and pred.energy_note == ""


def test_pipeline_energy_per_frame_counts_every_concurrent_stage(rig) -> None:
    sliced, model, meter = rig
    board = SIM
    mapping = parse_order(ORDER, len(sliced.layers), board)
    # Fused: one call per stage.
    run = run_mapping(sliced, board, MappingRunConfig(mapping, "pipeline", frames=40, warmup=2,
                                                      power=meter, activity=model,
                                                      model_bytes=default_model_path().read_bytes()))
    assert run.power_error is None and run.energy_window_ns is not None
    d0, d1 = run.energy_window_ns
    frames = run.frames - 1
    truth = model.true_energy_mj(d0, d1) / frames
    assert run.energy_mj == pytest.approx(truth, rel=0.02)
    assert run.stage_energy_mj is None  # overlapping stages: no per-stage board energy

    # The stages did overlap: busy time summed over processors exceeds the span, and
    # the dynamic energy measured is the sum over all of them (a model or attribution
    # that counted one processor at a time would fall short by the overlap).
    ivs = [iv for iv in model.intervals if iv.end_ns > d0 and iv.start_ns < d1]
    busy_ns = sum(min(iv.end_ns, d1) - max(iv.start_ns, d0) for iv in ivs)
    assert busy_ns > 1.3 * (d1 - d0)
    dyn_measured = run.energy_mj * frames - model.baseline_w * (d1 - d0) / 1e6
    dyn_truth = sum(iv.energy_mj(d0, d1) for iv in ivs)
    assert dyn_measured == pytest.approx(dyn_truth, rel=0.1)
    assert dyn_truth > 0.3 * max_run_w() * (d1 - d0) / 1e6  # not negligible here


def test_transfer_matrix_energy_per_hand_over(rig) -> None:
    sliced, model, meter = rig
    m = measure_transfer_matrix(sliced, SIM, ["B", "G"], reps=30, warmup=2,
                                boundaries=[0, 6], power=meter, activity=model)
    df = m.table()
    assert len(df) == 2 * 4 and (df["energy_mj"] > 0).all()
    # Board power during a hand-over: the baseline plus at most one copying processor
    # (src copies out, then dst copies in; never both; neither while dst's thread wakes
    # up). A same-processor hand-over is copying nearly all the time. Windows of tens
    # of us hold one or two 50-us samples each, hence the margins.
    dyn = {p: model.busy_w(p) for p in "BG"}
    power_w = df["energy_mj"] / df["time_ms_mean"]
    top = model.baseline_w + np.maximum(df["src"].map(dyn), df["dst"].map(dyn))
    assert (power_w > 0.95 * model.baseline_w).all()
    assert (power_w < 1.05 * top).all()
    same = df["src"] == df["dst"]
    # A same-processor hand-over is copying nearly all the time: above the (measured)
    # baseline by a quarter of the processor's busy draw, where the logger can see it.
    # Its readings move in steps of 0.1 mA at 5 V (the virtual logger's defaults), 0.5 mW;
    # the fitted board's B draws ~1e-7 W while it copies, so its hand-overs can only be
    # held to the baseline less a step (a sample at a window's edge may add a layer's
    # power, as above).
    step_w = 100e-6 * 5.0
    base_w = m.info["baseline_power_w"]
    for p, w in power_w[same].groupby(df["src"][same]):
        if dyn[p] > step_w:
            assert (w > base_w + 0.25 * dyn[p]).all(), (p, w, base_w)
        else:
            assert (w >= base_w - step_w).all(), (p, w, base_w)
    assert dyn["G"] > step_w  # the first branch is exercised
    assert m.info["energy_method"] == "marker window per hand-over"
    assert m.info["baseline_power_w"] == pytest.approx(model.baseline_w, rel=0.01)


# --------------------------------------------------------------------------------
# The CLI: sim is the default power source on the simulated board
# --------------------------------------------------------------------------------

def cli(cmd: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COUPPROF, cmd, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COUPPROF_CACHE": str(cwd / "cache"),
                                            "COLUMNS": "120"})


def test_cli_run_reports_energy_with_the_default_sim_power(tmp_path: Path) -> None:
    r = cli("run", "--board", "sim", "--order", ORDER, "--mode", "switch", "--frames", "8",
            "--warmup", "1", "--profile-frames", "4", "--baseline-s", "0.2",
            "--min-rounds", "5", "--max-rounds", "5",  # the plumbing, not the tables' spread
            "--csv", str(tmp_path / "r.csv"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "r.csv")
    summ = df[df["kind"] == "summary"].set_index("metric")
    assert summ.loc["energy_mj", "measured"] > 0 and summ.loc["energy_mj", "predicted"] > 0
    assert summ.loc["baseline_power_w", "measured"] == pytest.approx(IDLE_W, rel=0.01)
    stages = df[df["kind"] == "stage"]
    assert (stages["energy_mj"] > 0).all()
    # Stage windows lie inside the frames' (they overlap only by a read-out, ~1 % of a
    # frame here): together they cannot exceed a frame's energy by more.
    assert stages["energy_mj"].sum() <= summ.loc["energy_mj", "measured"] * 1.03
    meta = json.loads((tmp_path / "r.json").read_text())
    assert meta["power_source"] == "sim"
    assert len(meta["power"]["frame_energy_mj"]) == 7
    assert meta["power"]["clock_map"]
    assert "energy_mj" in r.stdout
    # The stage threads' own CPU time: more than nothing, less than every core.
    assert 0 < meta["host_cores_used"] <= meta["host_cores"]
    assert "simulated: the stage threads kept" in " ".join(r.stdout.split())


def test_cli_streaming_power_without_a_marker_is_bad_input(tmp_path: Path) -> None:
    r = cli("run", "--board", "sim", "--order", ORDER, "--mode", "switch",
            "--power", "arduino:/dev/null", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "no --marker was given" in last and "Traceback" not in r.stderr
