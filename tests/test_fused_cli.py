"""`--method fused` through the real CLI (subprocesses) on the simulated board: the
table's fixed row and intervals, the CSV's columns and fixed row, the sidecar, the
saved run re-rendered, and a sweep mixing a sliced CPU and a fused G."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from sim_truth import call_overhead_ms

from profiler.boards.profiles import load_board
from profiler.measure.tables import read_tables, render_text
from profiler.sweep.schema import read_sweep

COUPPROF = str(Path(sys.executable).with_name("coupprof"))
# A few rounds only (5: the 20 % trim drops one at each end): these tests check the
# plumbing; tests/test_fused.py checks the figures.
FAST = ["--min-rounds", "5", "--max-rounds", "5", "--budget-s", "30"]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([COUPPROF, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={"COLUMNS": "160", "PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def g_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fused")
    r = cli("layers", "--board", "sim", "--processor", "G", "--freq", "5", "--frames", "3",
            "--warmup", "1", "--cuts", "6,12,18", *FAST, "--csv", "g.csv", cwd=d)
    assert r.returncode == 0, r.stderr
    (d / "stdout.txt").write_text(r.stdout)
    return d


def test_g_defaults_to_fused_with_fixed_row_and_intervals(g_run: Path) -> None:
    out = (g_run / "stdout.txt").read_text()
    assert "- fused" in out and "±95%" in out and "sliced ms" in out
    fixed = [line for line in out.splitlines() if line.strip().startswith("fixed")]
    assert len(fixed) == 1 and "per call" in fixed[0]
    df = pd.read_csv(g_run / "g.csv")
    layers, fixed_rows = df[df.kind == "layer"], df[df.kind == "fixed"]
    assert len(layers) == 4 and len(fixed_rows) == 1
    # One time per layer: time_ms_mean is the fused figure the table leads with, the
    # sliced statistics are named for what they are.
    assert {"time_ms_mean", "time_ms_ci95", "below_resolution", "time_ms_sliced_mean",
            "time_ms_sliced_median", "time_ms_sliced_p95", "time_ms_sliced_std",
            "energy_mj_sliced"} <= set(df.columns)
    assert not {"time_ms_fused", "time_ms_fused_ci95", "time_ms_median"} & set(df.columns)
    assert (layers.time_ms_ci95 >= 0).all()
    # The sim G pays its modelled fixed cost per call (at G's level 5 and its host's
    # level, both in the rows): the fixed row carries it, plus the host's per-call input
    # and read-back (~0.1 ms); the fused layers do not, the sliced ones each pay it.
    want = call_overhead_ms(load_board("sim"), "G", int(layers.freq_khz.iloc[0]),
                            int(layers.host_freq_khz.iloc[0]))
    assert want > 1.0
    fixed_ms = float(fixed_rows.time_ms_mean.iloc[0])
    assert want - 0.01 < fixed_ms < want + 0.3
    assert (layers.time_ms_sliced_median - layers.time_ms_mean).min() > 0.8 * want
    # Energy: the layer's power times its fused time, the fixed row's too (W x ms = mJ).
    assert layers.energy_mj.to_numpy() == pytest.approx(
        (layers.power_w * layers.time_ms_mean).to_numpy())
    assert float(fixed_rows.energy_mj.iloc[0]) == pytest.approx(
        float(fixed_rows.power_w.iloc[0]) * fixed_ms)
    meta = json.loads((g_run / "g.json").read_text())
    assert meta["method"] == "fused"
    f = meta["fused"]
    assert f["rounds"] == 5 and f["settings"]["budget_s"] == 30
    assert f["fixed_ms"] + f["layer_sum_ms"] == pytest.approx(f["whole_ms"])
    assert meta["units"]["time_ms_ci95"].startswith("ms")
    # The sidecar's frame is the CSV's rows: one call of the whole model.
    tot = meta["totals"]
    assert tot["time_ms_mean"] == pytest.approx(fixed_ms + layers.time_ms_mean.sum())
    assert tot["time_ms_mean"] == pytest.approx(f["whole_ms"])  # prefixes: by construction
    assert tot["latency_ms_mean"] == tot["time_ms_mean"]
    assert tot["fps"] == pytest.approx(1000 / tot["time_ms_mean"])
    assert tot["energy_mj"] == pytest.approx(df.energy_mj.sum())  # layers + fixed row
    assert tot["power_w"] * tot["time_ms_mean"] == pytest.approx(tot["energy_mj"])
    assert tot["fps_per_w"] == pytest.approx(1000 / tot["energy_mj"])
    assert tot["time_ms_sliced_mean"] > 4 * want  # each sliced call pays the fixed cost


def test_saved_fused_run_renders_again(g_run: Path) -> None:
    text = render_text(read_tables(g_run / "g.csv"))
    assert "fixed" in text and "±95%" in text


def test_cpu_defaults_to_sliced_and_method_fused_is_available(tmp_path: Path) -> None:
    r = cli("layers", "--board", "sim", "--processor", "B", "--frames", "2", "--warmup", "0",
            "--power", "none", "--csv", "b.csv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "fused" not in r.stdout
    assert json.loads((tmp_path / "b.json").read_text())["method"] == "sliced"
    r = cli("layers", "--board", "sim", "--processor", "B", "--frames", "2", "--warmup", "0",
            "--power", "none", "--method", "fused", *FAST, "--window", "4", "--csv", "bf.csv",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "bf.json").read_text())
    assert "fixed" in r.stdout and meta["method"] == "fused"
    # windows of 4 over the 15 layers: 4 segments, every layer differenced within one
    assert meta["fused"]["settings"]["window"] == 4
    assert meta["fused"]["settings"]["lead"] == 6
    assert "segments of 4 layers" in meta["fused"]["scheme"]
    # a simulated B's time is modelled: "auto" leaves its caches warm, and says why
    assert meta["fused"]["cache"] == "warm" and meta["fused"]["evict_bytes"] == 0
    assert meta["fused"]["cache_choice"]["reason"] == "simulated processor"
    assert (pd.read_csv(tmp_path / "bf.csv").kind == "layer").sum() == 15
    for bad in (["--window", "-1"], ["--lead", "0"], ["--cache", "cold"]):
        r = cli("layers", "--board", "sim", "--processor", "B", "--method", "fused", *bad,
                cwd=tmp_path)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) <= 2, (bad, r.stderr)
        assert "Traceback" not in r.stderr
    assert "only a CPU cluster's host caches can be emptied" in r.stderr


def test_sweep_mixes_sliced_cpu_and_fused_g(tmp_path: Path) -> None:
    r = cli("sweep", "--board", "sim", "--processors", "B,G", "--freqs", "5", "--frames", "2",
            "--warmup", "0", "--cuts", "6,12,18", *FAST, "--window", "2", "-o", "sw",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "sw" / "sweep.csv")
    b_rows, g_rows = df[df.processor == "B"], df[df.processor == "G"]
    assert b_rows.time_ms_ci95.isna().all() and g_rows.time_ms_ci95.notna().all()
    # a sliced pair's time is its sliced figure, under both names
    assert (b_rows.time_ms_mean == b_rows.time_ms_sliced_mean).all()
    assert (g_rows.time_ms_sliced_mean - g_rows.time_ms_mean).min() > 0.9
    meta = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    g = next(v for k, v in meta["pairs"].items() if k.startswith("G"))
    assert g["fused"]["rounds"] == 5 and g["fused"]["fixed_ms"] > 0.9
    assert g["fused"]["settings"]["window"] == 0  # a GPU keeps whole prefixes (settings_for)
    assert "fused" not in next(v for k, v in meta["pairs"].items() if k.startswith("B"))
    assert "fused" in r.stdout and "sliced" in r.stdout
    # One frame time: the summary table's ms/frame per pair is what read_sweep (and
    # notebook 02) give, a fused pair's one call and a sliced pair's latency.
    frames = read_sweep(tmp_path / "sw").frame_ms().set_index("processor")
    assert frames.loc["G", "frame_ms"] == pytest.approx(g["totals"]["whole_ms"])
    assert frames.loc["G", "frame_ms"] == pytest.approx(
        g["fused"]["fixed_ms"] + g_rows.time_ms_mean.sum())
    b = next(v for k, v in meta["pairs"].items() if k.startswith("B"))
    assert frames.loc["B", "frame_ms"] == pytest.approx(b["totals"]["latency_ms_mean"])
    printed = {cells[0]: cells for cells in map(str.split, r.stdout.splitlines())
               if cells[:1] in (["B"], ["G"]) and {"sliced", "fused"} & set(cells)}
    mhz = {letter: f"{frames.loc[letter, 'freq_khz'] / 1000:g}" for letter in ("B", "G")}
    for letter in ("B", "G"):
        cells = printed[letter]
        assert f"{frames.loc[letter, 'frame_ms']:.3f}" in cells, cells
        # the progress line gives the same figure
        assert f"{letter} level 5 ({mhz[letter]} MHz): 4 layers, " \
               f"{frames.loc[letter, 'frame_ms']:.3f} ms/frame" in \
            " ".join((r.stdout + r.stderr).split())
    assert "a fused pair's one call" in " ".join(r.stdout.split())


def test_predict_from_fused_tables_charges_one_fixed_cost_per_stage(g_run: Path) -> None:
    r = cli("layers", "--board", "sim", "--processor", "B", "--freq", "5", "--frames", "3",
            "--warmup", "1", "--cuts", "6,12,18", "--power", "none", "--csv", "b.csv", cwd=g_run)
    assert r.returncode == 0, r.stderr
    r = cli("predict", "--order", "GGBB", "--mode", "switch", "--layers", "g.csv,b.csv",
            "--json", "pred.json", cwd=g_run)
    assert r.returncode == 0, r.stderr
    assert "fixed ms" in r.stdout
    # B's two layers are one call in `run` but its table is sliced: one line says which
    # command would measure the table that prices that call
    assert "`coupprof layers -p B --method fused`" in " ".join((r.stdout + r.stderr).split())
    pred = json.loads((g_run / "pred.json").read_text())
    g = pd.read_csv(g_run / "g.csv")
    b = pd.read_csv(g_run / "b.csv")
    fixed = float(g[g.kind == "fixed"].time_ms_mean.iloc[0])
    g_layers = g[g.kind == "layer"]
    st_g, st_b = pred["stages"]
    assert st_g["fixed_ms"] == pytest.approx(fixed)
    assert st_g["compute_ms"] == pytest.approx(fixed + g_layers.time_ms_mean.iloc[:2].sum())
    # The B table is sliced: no fixed cost, its layers' own sub-model times.
    assert st_b["fixed_ms"] == 0.0
    assert st_b["compute_ms"] == pytest.approx(b.time_ms_mean.iloc[2:].sum())
    assert pred["latency_ms"] == pytest.approx(st_g["time_ms"] + st_b["time_ms"])
    # Pipeline: the latency waits in the queue before the slowest stage (here G, second);
    # queues of 3, a run of 4 frames from empty.
    r = cli("predict", "--order", "BGGG", "--mode", "pipeline", "--layers", "g.csv,b.csv",
            "--queue-depth", "3", "--frames", "4", "--json", "pipe.json", cwd=g_run)
    assert r.returncode == 0, r.stderr
    pipe = json.loads((g_run / "pipe.json").read_text())
    s_b, s_g = (st["time_ms"] for st in pipe["stages"])
    assert s_g > s_b  # frame k, taken by B at k S_B, is done at S_B + (k + 1) S_G
    want = sum(s_b + (k + 1) * s_g - k * s_b for k in range(4)) / 4
    assert pipe["latency_ms"] == pytest.approx(want)
    assert (pipe["queue_depth"], pipe["latency_frames"]) == (3, 4)
    assert f"{pipe['queue_wait_ms']:.3f} ms of it waiting in queues of 3 frames" in \
        " ".join(r.stdout.split())


def test_predict_prices_a_fused_cpu_tables_calls_at_its_call_factor(tmp_path: Path) -> None:
    """A fused CPU table keeps its call factor (the mean of the whole model's calls alone
    over their undisturbed time); predict prices that processor's fixed row and layers
    at it, and says so when it is above 1."""
    r = cli("layers", "--board", "sim", "--processor", "B", "--freq", "5", "--frames", "3",
            "--warmup", "1", "--cuts", "6,12,18", "--method", "fused", *FAST, "--power", "none",
            "--csv", "b.csv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    side = json.loads((tmp_path / "b.json").read_text())
    kappa = side["totals"]["call_factor"]
    assert kappa >= 1.0 and kappa == side["fused"]["call_factor"]
    alone, mean = side["fused"]["whole_alone_ms"], side["fused"]["whole_alone_mean_ms"]
    assert kappa == pytest.approx(max(1.0, mean / alone))
    r = cli("predict", "--order", "BBBB", "--mode", "switch", "--layers", "b.csv",
            "--json", "pred.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    b = pd.read_csv(tmp_path / "b.csv")
    fixed = float(b[b.kind == "fixed"].time_ms_mean.iloc[0])
    layers = b[b.kind == "layer"].time_ms_mean.sum()
    (st,) = json.loads((tmp_path / "pred.json").read_text())["stages"]
    assert st["fixed_ms"] == pytest.approx(kappa * fixed)
    assert st["compute_ms"] == pytest.approx(kappa * (fixed + layers))
    assert ("its calls priced x" in " ".join(r.stdout.split())) == (kappa >= 1.005)


def test_sweep_measures_a_cpu_in_windows(tmp_path: Path) -> None:
    r = cli("sweep", "--board", "sim", "--processors", "B", "--freqs", "5", "--frames", "2",
            "--warmup", "0", "--method", "fused", *FAST, "--window", "4", "-o", "sw",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    (b,) = meta["pairs"].values()
    assert b["fused"]["settings"]["window"] == 4 and "segments of 4" in b["fused"]["scheme"]
    df = pd.read_csv(tmp_path / "sw" / "sweep.csv")
    assert len(df) == 15 and df.time_ms_ci95.notna().all()


def test_run_raw_writes_each_frames_calls_and_latency_beside_its_prediction(g_run: Path) -> None:
    """`run --raw`: one row per frame and call with the raw timestamps; each frame's
    latency is its first hand-over to its completion, and beside it the frame's predicted
    latency (Pipeline: the queues filling from an empty pipeline), whose mean is the
    run's prediction."""
    from profiler.mapping.queueing import frame_latencies_ms

    if not (g_run / "b.csv").exists():
        r = cli("layers", "--board", "sim", "--processor", "B", "--freq", "5", "--frames", "3",
                "--warmup", "1", "--cuts", "6,12,18", "--power", "none", "--csv", "b.csv",
                cwd=g_run)
        assert r.returncode == 0, r.stderr
    r = cli("run", "--board", "sim", "--cuts", "6,12,18", "--order", "BGGG", "--mode",
            "pipeline", "--freq", "5", "--layers", "g.csv,b.csv", "--frames", "6", "--warmup",
            "1", "--power", "none", "--raw", "--csv", "raw.csv", cwd=g_run)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(g_run / "raw.csv")
    fr = df[df.kind == "frame"]
    assert len(fr) == 6 * 2 and sorted(set(fr.frame)) == list(range(6))  # 2 calls a frame
    first = fr[fr.call == 0].set_index("frame")
    last = fr[fr.call == 1].set_index("frame")
    assert (first.done_ns == last.done_ns).all()
    assert first.latency_ms.to_numpy() == pytest.approx(
        (first.done_ns - first.transfer_start_ns).to_numpy() / 1e6)
    assert (fr.end_ns >= fr.start_ns).all() and (fr.start_ns >= fr.transfer_end_ns).all()
    assert last.time_ms.to_numpy() == pytest.approx((last.end_ns - last.start_ns).to_numpy() / 1e6)
    pred = json.loads((g_run / "raw.json").read_text())["prediction"]
    want = frame_latencies_ms([st["time_ms"] for st in pred["stages"]], 2, 6)
    assert first.predicted_latency_ms.to_numpy() == pytest.approx(want)
    summary = df[df.kind == "summary"].set_index("metric")
    assert summary.loc["latency_ms_mean", "predicted"] == pytest.approx(sum(want) / 6)
    assert summary.loc["latency_ms_mean", "measured"] == pytest.approx(first.latency_ms.mean())
