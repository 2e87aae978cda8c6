"""`coupprof plot` and profiler.plots on CSVs from real short runs: the figures' data
(panels, lines, bars, shaded windows) are checked against the CSVs, the PNGs are
real images, and a CSV without the needed columns is a one-line exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
from matplotlib.container import BarContainer
from test_sweep_fakehost import B_FREQS_KHZ, L_FREQS_KHZ, build_fake_host

from governors import sim_model
from profiler.boards.profiles import load_board
from profiler.errors import BadInputError
from profiler.plots import (
    efficiency_figure,
    layers_figure,
    read_csv,
    save,
    timeline_figure,
    transfers_figure,
)

COUPPROF = str(Path(sys.executable).with_name("coupprof"))


def cli(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COUPPROF_CACHE": str(cwd / "cache")}
    r = subprocess.run([COUPPROF, *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=300)
    if check:
        assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real short runs on a fake two-cluster host: a sweep, a transfer matrix, and a
    power trace recorded (virtual logger) while `coupprof layers --raw` ran."""
    d = tmp_path_factory.mktemp("plots")
    fake = build_fake_host(d / "fake")
    board = ["--board", "host", "--sysfs-root", str(fake.sys)]
    cli("sweep", *board, "--processors", "L,B", "--frames", "3", "--warmup", "1", "-o", "sweep",
        cwd=d)
    cli("transfer-matrix", *board, "--processors", "L,B", "--frames", "5", "--warmup", "1",
        "--csv", "tm.csv", cwd=d)
    env = {**os.environ, "COUPPROF_CACHE": str(d / "cache")}
    collect = subprocess.Popen([COUPPROF, "collect", "--port", "virtual", "--seconds", "2.5",
                                "-o", "trace.csv"], cwd=d, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    cli("layers", *board, "--processor", "B", "--frames", "1500", "--warmup", "1", "--raw",
        "--csv", "raw.csv", cwd=d)
    out, err = collect.communicate(timeout=60)
    assert collect.returncode == 0, err
    return {"dir": d, "sweep": d / "sweep" / "sweep.csv", "tm": d / "tm.csv",
            "trace": d / "trace.csv", "raw": d / "raw.csv"}


def with_sim_power(sweep_csv: Path, out: Path) -> Path:
    """The host sweep's rows with energy from the simulated board's power model
    (P = P_static + C V^2 f, data/boards/sim.toml) at each row's level.

    Stand-in until `coupprof sweep --board sim` writes power columns itself."""
    df = pd.read_csv(sweep_csv)
    sim = load_board("sim")
    p_w = [sim_model.power_mw(sim.processor(r.processor),
                              sim.processor(r.processor).freqs_khz[int(r.freq_level) - 1]) / 1000
           for r in df.itertuples()]
    df["power_w"] = p_w
    df["energy_mj"] = df["time_ms_mean"] * df["power_w"]
    df["fps_per_w"] = 1000.0 / df["energy_mj"]
    df.to_csv(out, index=False)
    return out


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
    csv = with_sim_power(runs["sweep"], runs["dir"] / "sweep-power.csv")
    df = read_csv(csv)
    fig = efficiency_figure(df, csv)
    axes = visible_axes(fig)
    assert [a.get_title() for a in axes] == ["L (little CPU)", "B (big CPU)"]
    n_layers = df["layer"].nunique()
    for ax, letter, freqs in zip(axes, "LB", (L_FREQS_KHZ, B_FREQS_KHZ), strict=True):
        lines = ax.get_lines()
        assert len(lines) == n_layers
        for line in lines:
            layer = int(line.get_label().split()[-1])
            want = df[(df.processor == letter) & (df.layer == layer)].sort_values("freq_khz")
            np.testing.assert_allclose(line.get_xdata(), np.array(freqs) / 1000)
            np.testing.assert_allclose(line.get_ydata(), want["fps_per_w"])
        assert "MHz" in ax.get_xlabel() and "FPS/W" in ax.get_ylabel()
    out = save(fig, runs["dir"] / "eff.png")
    assert_png(out)


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
    assert [c.get_label() for c in containers] == ["L (little CPU) @ 1200 MHz", "B (big CPU) @ 1800 MHz"]
    for c, letter, top in zip(containers, "LB", (len(L_FREQS_KHZ), len(B_FREQS_KHZ)), strict=True):
        want = df[(df.processor == letter) & (df.freq_level == top)].sort_values("layer")
        np.testing.assert_allclose([p.get_height() for p in c.patches], want["time_ms_mean"])
    low = layers_figure(df, runs["sweep"], level=1)
    heights = [p.get_height() for p in bars(visible_axes(low)[0])[1].patches]
    want = df[(df.processor == "B") & (df.freq_level == 1)].sort_values("layer")["time_ms_mean"]
    np.testing.assert_allclose(heights, want)
    with pytest.raises(BadInputError, match="level 9: processor L was measured at levels 1, 2, 3"):
        layers_figure(df, runs["sweep"], level=9)


def test_layers_with_power_has_three_panels(runs: dict[str, Path]) -> None:
    csv = with_sim_power(runs["sweep"], runs["dir"] / "sweep-power2.csv")
    df = read_csv(csv)
    fig = layers_figure(df, csv)
    axes = visible_axes(fig)
    assert [a.get_ylabel().split("\n")[0] for a in axes] == [
        "time per frame (ms)", "energy per frame (mJ)", "FPS/W (J⁻¹)"]
    want = df[(df.processor == "B") & (df.freq_level == len(B_FREQS_KHZ))].sort_values("layer")
    np.testing.assert_allclose([p.get_height() for p in bars(axes[1])[1].patches],
                               want["energy_mj"])
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
    r = cli("plot", "timeline", str(runs["trace"]), cwd=d, check=False)
    assert r.returncode == 2 and "timeline takes two CSVs" in r.stderr
    r = cli("plot", "layers", "missing.csv", cwd=d, check=False)
    assert r.returncode == 2 and "CSV not found: missing.csv" in r.stderr
