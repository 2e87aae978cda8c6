"""The layer CSV's one time per layer (coupprof-layers/2, issue 26 item 0): a fused run's
time_ms_mean is its fused figure and its totals one call of the whole model; a fixed row
without measured energy is priced from the sliced frames' power; files of the /1 format
(data/validation holds many) load in today's columns and totals, and a /1 sweep is not
resumed into."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.errors import BadInputError
from profiler.measure.fused import Estimate, FusedLayer, FusedResult, FusedSettings
from profiler.measure.results import LayerInfo, LayerRun, LayerTimings, RunInfo
from profiler.measure.tables import (
    fixed_row,
    frame_figures,
    read_tables,
    render_text,
    results_frame,
    run_tables,
    with_fused,
)
from profiler.plots.common import read_csv
from profiler.sweep.schema import read_sidecar, read_sweep

DATA = Path(__file__).resolve().parents[1] / "data" / "validation"
# /1 files: a fused B16 table whose energy came from prefix energies (nvml), a fused G
# table without a power source, and a sweep of three fused pairs.
V1_ENERGY = DATA / "h100-fused-2" / "layers-default-B16-fused.csv"
V1_PLAIN = DATA / "h100-fused" / "layers-default-G-fused.csv"
V1_SWEEP = DATA / "explore-googlenet-sim" / "swf-goog"


def sliced_with_power(n: int = 3) -> tuple[LayerRun, np.ndarray]:
    """n layers of 4 sliced frames, layer k 2 + k ms a call; a logger's power per layer."""
    ts = np.zeros((4, n, 4), dtype=np.int64)
    now = 0
    for f in range(4):
        for k in range(n):
            ts[f, k] = (now, now + 10_000, now + 10_000, now + 10_000 + (2 + k) * 1_000_000)
            now = int(ts[f, k, 3]) + 1_000
    power = np.array([3.0, 4.0, 5.0])[:n]
    t_ms = ts[:, :, 3].astype(float).mean(axis=0) / 1e6 - ts[:, :, 2].mean(axis=0) / 1e6
    energy = power * t_ms
    info = RunInfo(board="b", simulated=False, model_path="m.tflite", model_sha256="ab" * 32,
                   processor="G", processor_name="G", cores=(0,), threads=1, frames=4, warmup=0)
    run = LayerRun(info, [LayerInfo(i, ("CONV_2D",), 1, 1, 1, 1) for i in range(n)],
                   LayerTimings(ts),
                   {"power_w": power, "energy_mj": energy, "dynamic_energy_mj": energy * 0.5,
                    "fps_per_w": 1000 / energy},
                   {"power_w": float(energy.sum() / t_ms.sum()), "energy_mj": float(energy.sum()),
                    "baseline_power_w": 1.0})
    return run, t_ms


def test_a_fused_run_without_prefix_energies_prices_its_fixed_row_at_the_sliced_power() -> None:
    run, sliced_ms = sliced_with_power()
    fused_ms = [0.4, 0.9, 1.5]
    res = FusedResult([FusedLayer(k, v, 0.02, False, True) for k, v in enumerate(fused_ms)],
                      Estimate(1.6, 0.01), Estimate(1.6 + sum(fused_ms), 0.03), 7, 1.0, True,
                      FusedSettings())
    tables = with_fused(run_tables(run, raw=False), res)
    df, tot = tables.layers, tables.totals
    # one time per layer: the fused figure leads, the sliced ones are named for what they are
    assert list(df["time_ms_mean"]) == fused_ms
    np.testing.assert_allclose(df["time_ms_sliced_mean"], sliced_ms)
    assert "time_ms_median" not in df.columns and list(df["time_ms_ci95"]) == [0.02] * 3
    np.testing.assert_allclose(df["energy_mj"], df["power_w"] * df["time_ms_mean"])
    # the fixed row: the sliced frames' mean power x the fixed time, and the sidecar says so
    sliced_w = run.total_extras["power_w"]
    assert tot["power_w_sliced"] == sliced_w
    assert tot["fixed_energy_mj"] == pytest.approx(sliced_w * 1.6)
    assert f"sliced frames' mean power ({sliced_w:.3f} W)" in tables.info["fused"]["fixed_energy"]
    # the frame: the fixed row and the layers; W x ms = mJ; FPS/W = 1 / J
    frame_ms = 1.6 + sum(fused_ms)
    assert tot["time_ms_mean"] == tot["latency_ms_mean"] == pytest.approx(frame_ms)
    assert tot["time_ms_ci95"] == 0.03 and tot["fps"] == pytest.approx(1000 / frame_ms)
    assert tot["energy_mj"] == pytest.approx(df["energy_mj"].sum() + sliced_w * 1.6)
    assert tot["power_w"] * frame_ms == pytest.approx(tot["energy_mj"])
    assert tot["fps_per_w"] == pytest.approx(1000 / tot["energy_mj"])
    assert tot["time_ms_sliced_mean"] == pytest.approx(sliced_ms.sum())
    assert "time_ms_median" not in tot and "transfer_ms_mean" not in tot
    # the CSV's rows give the same frame, the fixed row with its power
    rows = results_frame(tables)
    fixed = fixed_row(tables)
    assert fixed is not None
    assert float(fixed["power_w"].iloc[0]) * 1.6 == pytest.approx(tot["fixed_energy_mj"])
    got = frame_figures(rows)
    assert got is not None and got.fixed_ms == 1.6
    assert (got.time_ms, got.energy_mj) == (pytest.approx(frame_ms), pytest.approx(tot["energy_mj"]))
    # the terminal's total row: the sidecar's frame
    total = next(ln.split() for ln in render_text(tables, width=200).splitlines()
                 if ln.split()[:1] == ["total"])
    assert total[5] == f"{frame_ms:.3f}"
    assert {f"{tot['power_w']:.3f}", f"{tot['energy_mj']:.3f}"} <= set(total)


@pytest.mark.parametrize("csv", [V1_ENERGY, V1_PLAIN], ids=lambda p: p.parent.name)
def test_a_format_1_fused_table_reads_in_todays_columns(csv: Path) -> None:
    raw = pd.read_csv(csv)
    old = json.loads(csv.with_suffix(".json").read_text())
    assert old["format"] == "coupprof-layers/1" and "time_ms_fused" in raw.columns
    t = read_tables(csv)
    lay, tot, before = t.layers, t.totals, old["totals"]
    raw_layers = raw[raw["kind"] == "layer"].reset_index(drop=True)
    np.testing.assert_allclose(lay["time_ms_mean"], raw_layers["time_ms_fused"])
    np.testing.assert_allclose(lay["time_ms_ci95"], raw_layers["time_ms_fused_ci95"])
    np.testing.assert_allclose(lay["time_ms_sliced_mean"], raw_layers["time_ms_mean"])
    np.testing.assert_allclose(lay["time_ms_sliced_median"], raw_layers["time_ms_median"])
    assert not {"time_ms_fused", "time_ms_median"} & set(lay.columns)
    # totals: one call (the old sidecar's frame was the sliced one, kept as *_sliced)
    frame_ms = before["fixed_ms"] + before["fused_layer_sum_ms"]
    assert tot["time_ms_mean"] == tot["latency_ms_mean"] == pytest.approx(frame_ms)
    assert tot["fps"] == pytest.approx(1000 / frame_ms)
    assert tot["latency_ms_sliced_mean"] == before["latency_ms_mean"]
    assert tot["time_ms_sliced_median"] == before["time_ms_median"]
    if "whole_energy_mj" in before:  # prefix energies: the layers and the fixed row
        assert tot["energy_mj"] == pytest.approx(before["energy_mj"] + before["fixed_energy_mj"])
        assert tot["power_w"] * frame_ms == pytest.approx(tot["energy_mj"])
        assert tot["fps_per_w"] == pytest.approx(1000 / tot["energy_mj"])
    else:
        assert "energy_mj" not in tot
    assert "per frame, one call of the whole model" in " ".join(render_text(t, 200).split())
    # `coupprof plot` reads the CSV alone, in the same columns
    plotted = read_csv(csv)
    np.testing.assert_allclose(plotted[plotted["kind"] == "layer"]["time_ms_mean"],
                               raw_layers["time_ms_fused"])


def test_a_format_1_sweep_reads_in_todays_columns_and_is_not_resumed(tmp_path: Path) -> None:
    raw = pd.read_csv(V1_SWEEP / "sweep.csv")
    old = json.loads((V1_SWEEP / "sweep.json").read_text())
    assert old["format"] == "coupprof-sweep/1"
    data = read_sweep(V1_SWEEP)
    np.testing.assert_allclose(data.layers["time_ms_mean"], raw["time_ms_fused"])
    np.testing.assert_allclose(data.layers["time_ms_sliced_mean"], raw["time_ms_mean"])
    frames = data.frame_ms().set_index("processor")
    for key, pair in old["pairs"].items():
        t = pair["totals"]
        want = t["fixed_ms"] + t["fused_layer_sum_ms"]
        assert frames.loc[pair["processor"], "frame_ms"] == pytest.approx(want), key
        rows = raw[(raw["processor"] == pair["processor"]) & (raw["freq_level"] == pair["level"])]
        assert want == pytest.approx(t["fixed_ms"] + rows["time_ms_fused"].sum())
    shutil.copytree(V1_SWEEP, tmp_path / "sw")
    with pytest.raises(BadInputError, match="older coupprof .coupprof-sweep/1"):
        read_sidecar(tmp_path / "sw" / "sweep.json")
