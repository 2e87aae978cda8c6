"""`coupprof plot` and profiler.plots on CSVs from real short runs: the figures' data
(panels, lines, bars, shaded windows) are checked against the CSVs, the PNGs are
real images, and a CSV without the needed columns is a one-line exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
from cli_runs import layers_while_collecting, run_coupprof
from matplotlib.container import BarContainer
from shared_runs import SharedRuns, copy_run, copy_sweep
from sim_truth import layer_truth
from test_sweep_fakehost import B_FREQS_KHZ, L_FREQS_KHZ, build_fake_host

from profiler.boards.profiles import load_board
from profiler.errors import BadInputError
from profiler.plots import (
    efficiency_figure,
    layers_figure,
    read_csv,
    timeline_figure,
    transfers_figure,
)
from profiler.power.clockmap import ClockMap
from profiler.power.trace import DeviceTrace
from profiler.slicing.slicer import slice_model
from profiler.zoo import default_model_path


def cli(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_coupprof(args, cwd, cwd / "cache", check)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, sim_runs: SharedRuns) -> dict[str, Path]:
    """Real short runs on a fake two-cluster host: a sweep, a transfer matrix, and a
    power trace recorded (virtual logger) while `coupprof layers --raw` ran; and on the
    simulated board (the session's runs, tests/shared_runs.py), a sweep of L, B and G
    and a raw G layer run with its trace."""
    d = tmp_path_factory.mktemp("plots")
    fake = build_fake_host(d / "fake")
    board = ["--board", "host", "--sysfs-root", str(fake.sys)]
    cli("sweep", *board, "--processors", "L,B", "--frames", "3", "--warmup", "1", "-o", "sweep",
        cwd=d)
    cli("transfer-matrix", *board, "--processors", "L,B", "--frames", "5", "--warmup", "1",
        "--csv", "tm.csv", cwd=d)
    layers_while_collecting(cli, d, d / "cache", board, "B", frames=1500, seconds=2.5,
                            pause_s=0.5, csv="raw.csv")
    # The simulated board: energy from its virtual logger (the default power source there).
    copy_sweep(sim_runs.sweep_lbg, d / "simsweep")
    sim_g = copy_run(sim_runs.layers_g, d / "simG")
    return {"dir": d, "sweep": d / "sweep" / "sweep.csv", "tm": d / "tm.csv",
            "trace": d / "trace.csv", "raw": d / "raw.csv",
            "simsweep": d / "simsweep" / "sweep.csv", "simG": sim_g}


def visible_axes(fig) -> list:
    return [a for a in fig.axes if a.get_visible() and a.get_label() != "<colorbar>"]


def bars(ax) -> list[BarContainer]:
    return [c for c in ax.containers if isinstance(c, BarContainer)]


def assert_png(path: Path, min_w: int = 600) -> None:
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[1] >= min_w and img.shape[0] >= 300
    assert float(img[..., :3].std()) > 0.05  # not a blank canvas


# -- efficiency ---------------------------------------------------------------------


def test_efficiency_one_panel_per_processor_lines_per_layer(runs: dict[str, Path]) -> None:
    csv = runs["simsweep"]
    df = read_csv(csv)
    fig = efficiency_figure(df, csv)
    axes = visible_axes(fig)
    assert [a.get_title() for a in axes] == ["L (little CPU)", "B (big CPU)", "G (GPU)"]
    sim = load_board("sim")
    n_layers = df["layer"].nunique()
    for ax, letter in zip(axes, "LBG", strict=True):
        freqs = sim.processor(letter).freqs_khz
        lines = ax.get_lines()
        assert len(lines) == n_layers
        for line in lines:
            layer = int(line.get_label().split()[-1])
            want = df[(df.processor == letter) & (df.layer == layer)].sort_values("freq_khz")
            np.testing.assert_allclose(line.get_xdata(), [freqs[0] / 1000, freqs[2] / 1000])
            np.testing.assert_allclose(line.get_ydata(), want["fps_per_w"])
        assert "MHz" in ax.get_xlabel() and "FPS/W" in ax.get_ylabel()
    assert "[SIMULATED]" in fig.get_suptitle()
    r = cli("plot", "efficiency", str(csv.parent), cwd=runs["dir"])  # the sweep's directory
    assert f"wrote {csv.parent / 'efficiency.png'}" in r.stdout
    assert_png(csv.parent / "efficiency.png")


def test_efficiency_without_power_columns_is_bad_input(runs: dict[str, Path]) -> None:
    with pytest.raises(BadInputError, match="has no fps_per_w column.*coupprof sweep"):
        efficiency_figure(read_csv(runs["sweep"]), runs["sweep"])
    r = cli("plot", "efficiency", str(runs["sweep"]), "-o", "x.png", cwd=runs["dir"], check=False)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "fps_per_w" in r.stderr and "coupprof sweep" in r.stderr
    assert not (runs["dir"] / "x.png").exists()


# -- layers -------------------------------------------------------------------------


def test_layers_bars_match_the_csv_at_the_chosen_level(runs: dict[str, Path]) -> None:
    df = read_csv(runs["sweep"])
    fig = layers_figure(df, runs["sweep"], level="max")
    (ax,) = visible_axes(fig)  # no power columns: the time panel only, and the title says why
    assert "no energy_mj" in fig.get_suptitle()
    containers = bars(ax)
    labels = [c.get_label().splitlines() for c in containers]
    assert [lines[0] for lines in labels] == ["L (little CPU) @ 1200 MHz", "B (big CPU) @ 1800 MHz"]
    pairs = json.loads(runs["sweep"].with_suffix(".json").read_text())["pairs"]
    for c, letter, top in zip(containers, "LB", (len(L_FREQS_KHZ), len(B_FREQS_KHZ)), strict=True):
        want = df[(df.processor == letter) & (df.freq_level == top)].sort_values("layer")
        np.testing.assert_allclose([p.get_height() for p in c.patches], want["time_ms_mean"])
        # the legend's frame is the pair's, as the sweep printed it (sliced: + hand-overs)
        ms = pairs[f"{letter}@{top}"]["totals"]["latency_ms_mean"]
        assert f"per frame: {ms:.3f} ms ({1000 / ms:.1f} FPS)" in c.get_label()
    low = layers_figure(df, runs["sweep"], level=1)
    heights = [p.get_height() for p in bars(visible_axes(low)[0])[1].patches]
    want = df[(df.processor == "B") & (df.freq_level == 1)].sort_values("layer")["time_ms_mean"]
    np.testing.assert_allclose(heights, want)
    with pytest.raises(BadInputError, match="level 9: processor L was measured at levels 1, 2, 3"):
        layers_figure(df, runs["sweep"], level=9)


def test_layers_with_power_has_three_panels(runs: dict[str, Path]) -> None:
    csv = runs["simsweep"]
    df = read_csv(csv)
    fig = layers_figure(df, csv)  # each processor at its highest measured level (3)
    axes = visible_axes(fig)
    assert [a.get_ylabel().split("\n")[0] for a in axes] == [
        "time per frame (ms)", "energy per frame (mJ)", "FPS/W (J⁻¹)"]
    for j, letter in enumerate("LBG"):
        want = df[(df.processor == letter) & (df.freq_level == 3)].sort_values("layer")
        np.testing.assert_allclose([p.get_height() for p in bars(axes[1])[j].patches],
                                   want["energy_mj"])
        np.testing.assert_allclose([p.get_height() for p in bars(axes[2])[j].patches],
                                   want["fps_per_w"])
    r = cli("plot", "layers", str(csv), "-o", "layers.png", cwd=runs["dir"])
    assert "wrote layers.png" in r.stdout
    assert_png(runs["dir"] / "layers.png")


# -- transfers ----------------------------------------------------------------------


def test_transfers_one_line_per_ordered_pair(runs: dict[str, Path]) -> None:
    df = read_csv(runs["tm"])
    fig = transfers_figure(df, runs["tm"])
    top, bottom = visible_axes(fig)
    lines = {ln.get_label(): ln for ln in top.get_lines()}
    assert set(lines) == {"L → L (same processor)", "L → B", "B → L", "B → B (same processor)"}
    for label, line in lines.items():
        src, dst = label.split(" ")[0], label.split(" ")[2]
        want = df[(df.src == src) & (df.dst == dst)].sort_values("boundary")
        np.testing.assert_array_equal(line.get_xdata(), want["boundary"])
        np.testing.assert_allclose(line.get_ydata(), want["time_ms_mean"])
    kib = df.groupby("boundary")["bytes"].max() / 1024
    np.testing.assert_allclose([p.get_height() for p in bottom.patches], kib)
    assert "board host" in fig.get_suptitle()  # from the sidecar: the CSV has no board column
    cross = transfers_figure(df, runs["tm"], include_same=False)
    assert {ln.get_label() for ln in visible_axes(cross)[0].get_lines()} == {"L → B", "B → L"}
    cli("plot", "transfers", str(runs["tm"]), "-o", "tm.png", cwd=runs["dir"])
    assert_png(runs["dir"] / "tm.png")


def test_transfers_of_a_layer_csv_names_the_command(runs: dict[str, Path]) -> None:
    r = cli("plot", "transfers", str(runs["sweep"]), cwd=runs["dir"], check=False)
    assert r.returncode == 2
    assert "boundary, src, dst" in r.stderr and "coupprof transfer-matrix" in r.stderr


# -- timeline -----------------------------------------------------------------------


def test_timeline_shades_each_layer_of_the_frame_over_the_trace(runs: dict[str, Path]) -> None:
    trace, raw = read_csv(runs["trace"]), read_csv(runs["raw"])
    fig = timeline_figure(trace, raw, trace_src=runs["trace"], layers_src=runs["raw"])
    ax = visible_axes(fig)[0]
    frames = raw[raw["kind"] == "frame"]
    k = int(fig.axes[-1].get_xlabel().split("frame ")[1].split(",")[0])
    fr = frames[frames.frame == k].sort_values("start_ns")
    t0 = int(fr["transfer_start_ns"].min())
    # Two spans per layer (hand-over, invoke), at the CSV's timestamps relative to t0.
    spans = [p for p in ax.patches]
    assert len(spans) == 2 * len(fr)
    invokes = sorted((p.get_x(), p.get_x() + p.get_width()) for p in spans[0::2])
    want = sorted(zip((fr.start_ns - t0) / 1e6, (fr.end_ns - t0) / 1e6, strict=True))
    np.testing.assert_allclose(invokes, want, atol=1e-9)
    # The power line is the trace's samples around the frame, unchanged.
    line = ax.get_lines()[0]
    x_ns = np.asarray(line.get_xdata()) * 1e6 + t0
    host = trace["host_ns"].to_numpy(dtype=np.int64)
    idx = np.searchsorted(host, np.round(x_ns).astype(np.int64))
    np.testing.assert_allclose(trace["power_w"].to_numpy()[idx], line.get_ydata())
    assert x_ns.min() < t0 and x_ns.max() > fr["end_ns"].max()  # padding on both sides
    # Frame chosen among those the trace covers; an explicit one is honoured.
    fig2 = timeline_figure(trace, raw, frame=k + 1)
    assert f"frame {k + 1}," in fig2.axes[-1].get_xlabel()
    r = cli("plot", "timeline", str(runs["raw"]), str(runs["trace"]), "-o", "tl.png",
            cwd=runs["dir"])
    assert "wrote tl.png" in r.stdout
    assert_png(runs["dir"] / "tl.png")


def test_timeline_of_a_simulated_run_uses_its_own_trace_and_clock_fit(runs: dict[str, Path]) -> None:
    csv = runs["simG"]
    meta = json.loads(csv.with_suffix(".json").read_text())
    # Ground truth, read independently: the run's trace directory on the logger's clock
    # and the clock fit its sidecar recorded.
    trace = DeviceTrace.load(csv.parent / Path(meta["extra"]["trace_dir"]).name)
    cmap = ClockMap.from_dict(meta["extra"]["clock_map"])
    host = cmap.to_host_ns(trace.t_us)
    r = cli("plot", "timeline", str(csv), "-o", "simG.png", cwd=runs["dir"])
    assert "wrote simG.png" in r.stdout
    assert_png(runs["dir"] / "simG.png")
    from profiler.plots.timeline import run_trace

    found = run_trace(csv)
    assert found is not None
    fig = timeline_figure(found[1], read_csv(csv))
    line = visible_axes(fig)[0].get_lines()[0]
    raw = read_csv(csv)
    k = int(fig.axes[-1].get_xlabel().split("frame ")[1].split(",")[0])
    t0 = int(raw[(raw.kind == "frame") & (raw.frame == k)]["transfer_start_ns"].min())
    x_ns = np.round(np.asarray(line.get_xdata()) * 1e6 + t0).astype(np.int64)
    idx = np.searchsorted(host, x_ns)
    np.testing.assert_array_equal(host[idx], x_ns)
    np.testing.assert_allclose(line.get_ydata(), trace.power_w[idx])
    # While a layer runs the simulated board draws idle + that layer's modelled power on
    # G at 600 MHz (its host at the level the run recorded); the frame shown holds every
    # layer, so its samples reach the most demanding layer's power exactly.
    sim = load_board("sim")
    rows = raw[raw.kind == "layer"]
    host_khz = int(rows["host_freq_khz"].iloc[0])
    layers = slice_model(default_model_path(), cache_dir=False).layers
    busy = max(layer_truth(sim, "G", layer.model_bytes, 600_000, host_khz)[1] for layer in layers)
    assert float(np.max(line.get_ydata())) == pytest.approx(busy, rel=1e-3)


def test_timeline_bad_inputs(runs: dict[str, Path]) -> None:
    d = runs["dir"]
    trace, raw = read_csv(runs["trace"]), read_csv(runs["raw"])
    with pytest.raises(BadInputError, match="has no host_ns column.*coupprof collect"):
        timeline_figure(trace.assign(host_ns=pd.NA), raw)
    late = trace.assign(host_ns=trace["host_ns"] + 10**12)  # 1000 s later: covers no frame
    with pytest.raises(BadInputError, match="covers no frame"):
        timeline_figure(late, raw)
    with pytest.raises(BadInputError, match="frame 3 of .* lies outside the trace"):
        timeline_figure(late, raw, frame=3)
    with pytest.raises(BadInputError, match="has frames 0..1499"):
        timeline_figure(trace, raw, frame=1500)
    # A sweep CSV has no frame rows (no --raw).
    with pytest.raises(BadInputError, match="coupprof layers --raw"):
        timeline_figure(trace, read_csv(runs["sweep"]))
    r = cli("plot", "timeline", str(runs["raw"]), cwd=d, check=False)  # no trace in its sidecar
    assert r.returncode == 2 and "names no power trace" in r.stderr
    r = cli("plot", "layers", "missing.csv", cwd=d, check=False)
    assert r.returncode == 2 and "CSV not found: missing.csv" in r.stderr


def test_plots_leave_matplotlibs_backend_alone(tmp_path: Path) -> None:
    """Importing the plots and saving a figure neither picks a backend nor loads pyplot,
    so a notebook's or a GUI's backend stays what its user chose."""
    code = f"""
import sys, matplotlib
matplotlib.use("svg")
from profiler.plots import common
fig, axes = common.new_figure()
axes[0, 0].plot([0, 1], [1, 2])
common.save(fig, {str(tmp_path / 'f.png')!r})
assert matplotlib.get_backend() == "svg", matplotlib.get_backend()
assert "matplotlib.pyplot" not in sys.modules
"""
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
