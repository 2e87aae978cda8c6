"""The committed validation data (data/validation/, made by benchmarks/validation_gpu.py on
a machine with an NVIDIA GPU) re-renders and feeds predictions: every layer table loads
with its sidecar and renders, NVML energy is present and positive where the sidecar
says NVML measured it, every transfer table has all (boundary, src, dst) rows and
renders, and a mapping over the measured processors predicts.

COUPPROF_VALIDATION_DIR points the test at another directory (e.g. a fresh run)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from profiler.cli.transfer_matrix import render_matrix
from profiler.mapping.predict import predict, read_layer_tables
from profiler.mapping.spec import Mapping
from profiler.mapping.transfer import read_transfer_csv
from profiler.measure.tables import read_tables, render, sliced_stat

# data/validation stays in the checkout (it is not package data).
REPO_ROOT = Path(__file__).resolve().parents[1]
DIR = Path(os.environ.get("COUPPROF_VALIDATION_DIR", REPO_ROOT / "data" / "validation"))
LAYER_CSVS = sorted(DIR.rglob("layers-*.csv")) if DIR.is_dir() else []
# Kept as the evidence of a bug not yet fixed (issue 26): on the H200's G, ResNet50's
# prefixes held in 14 blocks of 384 MiB gave rows adding up to 0.553 of the whole model
# and 1853 mJ a frame against the whole call's 484 (955 W). data/validation/h200-run/.
BLOCK_BUG = DIR / "h200-run" / "resnet50" / "layers-resnet50-G-fused.csv"
LAYER_PARAMS = [
    pytest.param(p, marks=pytest.mark.xfail(
        strict=True, reason="G ResNet50 in blocks: energies do not add up (issue 26)"))
    if p == BLOCK_BUG else p for p in LAYER_CSVS]
TRANSFER_CSVS = sorted(DIR.rglob("transfers-*.csv")) if DIR.is_dir() else []


def text(renderable) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


@pytest.mark.skipif(not LAYER_CSVS, reason=f"no layer tables under {DIR}")
@pytest.mark.parametrize("csv", LAYER_PARAMS, ids=lambda p: p.name)
def test_layer_tables_re_render(csv: Path) -> None:
    t = read_tables(csv)
    shown = text(render(t))
    # every layer ran on its own (a fused table's time_ms_mean may dip below 0 in its interval)
    assert len(t.layers) >= 2 and (sliced_stat(t.layers, "mean") > 0).all()
    assert str(t.layers["layer"].iloc[-1]) in shown
    if str(t.info.get("power_source", "none")).startswith("nvml"):
        if "whole_energy_mj" in t.totals:
            # Prefix energies (profiler.measure.fused.energy_by_prefix): the layers and the fixed row
            # add up to the whole call's energy; a layer's power is its energy over its time.
            lay, tot = t.layers, t.totals
            assert tot["energy_mj"] == pytest.approx(tot["whole_energy_mj"])
            assert lay["energy_mj"].sum() + tot["fixed_energy_mj"] == pytest.approx(tot["energy_mj"])
            assert tot["power_w"] * tot["time_ms_mean"] == pytest.approx(tot["energy_mj"])
            pos = lay["time_ms_mean"] > 0
            np.testing.assert_allclose(lay["power_w"][pos],
                                       lay["energy_mj"][pos] / lay["time_ms_mean"][pos])
        elif t.info.get("method") == "fused":
            # Energy = the layer's repeat-window power x its fused (in-frame) time, and a
            # fused time is a difference of prefix times, which may be below zero within
            # its interval: the sign follows the time, the power is positive.
            lay = t.layers
            assert (lay["power_w"] > 0).all()
            np.testing.assert_allclose(lay["energy_mj"], lay["power_w"] * lay["time_ms_mean"],
                                       rtol=1e-9, atol=1e-12)
            assert (lay["energy_mj_sliced"] > 0).all()
        else:
            assert (t.layers["energy_mj"] > 0).all()
            assert (t.layers["repeats"] >= 1).all()
    if t.info.get("processor") == "G":
        assert "fallback" in t.layers.columns


@pytest.mark.skipif(not TRANSFER_CSVS, reason=f"no transfer tables under {DIR}")
@pytest.mark.parametrize("csv", TRANSFER_CSVS, ids=lambda p: p.name)
def test_transfer_tables_are_complete_and_re_render(csv: Path) -> None:
    df = read_transfer_csv(csv)
    letters = sorted(set(df["src"]))
    bounds = sorted(set(df["boundary"]))
    meta = json.loads(csv.with_suffix(".json").read_text())
    assert bounds == meta["boundaries"]  # every boundary, or those asked for
    assert len(df) == len(bounds) * len(letters) ** 2
    if meta.get("method") == "fused":  # the producer's read-back at a cut: 0 on a CPU
        assert (df.loc[df["src"] == "B", "readout_ms"] == 0).all()
        assert df["readout_ms"].notna().all()
    assert (df["time_ms_mean"] > 0).all()
    shown = "".join(text(t) for t in render_matrix(df, csv.name))
    assert all(f"{s}" in shown for s in letters)


@pytest.mark.skipif(not (LAYER_CSVS and TRANSFER_CSVS), reason=f"no tables under {DIR}")
def test_a_mapping_over_the_measured_processors_predicts() -> None:
    for tr in TRANSFER_CSVS:
        model = tr.stem.removeprefix("transfers-")
        layers = [p for p in LAYER_CSVS if p.name.startswith(f"layers-{model}-")]
        if not layers:
            continue
        costs = read_layer_tables(layers)
        df = read_transfer_csv(tr)
        letters = sorted(set(df["src"]) & set(costs.table["processor"]))
        n = int(costs.table["layer"].max()) + 1
        order = letters[0] * (n // 2) + letters[-1] * (n - n // 2)
        for mode in ("switch", "pipeline"):
            p = predict(Mapping(order), mode, costs, df)
            assert p.latency_ms > 0 and p.throughput_fps > 0 and not p.missing


FUSED_CSVS = [p for p in LAYER_CSVS if p.name.endswith("-fused.csv")]


@pytest.mark.skipif(not FUSED_CSVS, reason=f"no fused layer tables under {DIR}")
def test_a_prediction_from_a_table_that_knows_its_whole_model_poorly_says_so() -> None:
    """Noted exactly when the table's whole model in its rounds has a 95 % interval wider
    than 5 % of it (ResNet50 on B in host-split-2 and -6: 10 and 14 rounds)."""
    from profiler.mapping.predict import RESOLUTION_REL

    noted = 0
    for csv in FUSED_CSVS:
        tot = json.loads(csv.with_suffix(".json").read_text())["totals"]
        if "whole_ms_ci95" not in tot:
            continue
        costs = read_layer_tables([csv])
        letter = str(costs.table["processor"].iloc[0])
        n = int(costs.table["layer"].max()) + 1
        p = predict(Mapping(letter * n), "switch", costs)
        wide = tot["whole_ms_ci95"] > RESOLUTION_REL * tot["whole_ms"]
        said = [x for x in p.notes if "knows its whole model only to" in x]
        assert bool(said) == wide, (csv, tot["whole_ms"], tot["whole_ms_ci95"])
        if wide:
            noted += 1
            assert f"+-{100 * tot['whole_ms_ci95'] / tot['whole_ms']:.1f} %" in said[0]
    if DIR == REPO_ROOT / "data" / "validation":
        assert noted >= 2


PIPELINE_RUNS = sorted(DIR.rglob("run-*pipeline*.json")) if DIR.is_dir() else []


@pytest.mark.skipif(not PIPELINE_RUNS, reason=f"no pipeline runs under {DIR}")
def test_the_queueing_model_gives_each_recorded_pipelines_latency() -> None:
    """Every recorded multi-stage Pipeline run whose stages set its pace (its FPS within
    5 % of 1000 / its slowest measured stage): `profiler.mapping.queueing` on the run's own mean
    stage times, its frames and queue depth, gives its measured mean latency within 10 %
    (data/validation/pipeline_latency.py prints them all; on the committed H100 runs
    the worst is 7.7 %, and the serial sum the predictions used before missed by up to
    79 %, frames waiting in the full queues before the slowest stage)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "pipeline_latency", REPO_ROOT / "data" / "validation" / "pipeline_latency.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    checked = waited = 0
    for r in script.runs(DIR):
        if not r["paced"] or r["stages"] < 2:
            continue
        checked += 1
        assert r["own_stages_ms"] == pytest.approx(r["measured_ms"], rel=0.10), r
        waited += r["measured_ms"] > 1.5 * r["serial_ms"]
    if DIR == REPO_ROOT / "data" / "validation":
        assert checked >= 38 and waited >= 15, (checked, waited)


def test_a_table_whose_rows_do_not_add_up_says_so() -> None:
    """The caption warns where rows plus fixed row miss the whole model measured beside
    them by over 5 % and three of its intervals, in time or in prefix energy: the committed
    H200 ResNet50 G table made in blocks (time 1.939 of 3.509 ms, energy 1852.7 of 484.4 mJ),
    and not the same model's G table with every prefix loaded (1.000)."""
    from profiler.measure.tables import _sum_warning

    if not BLOCK_BUG.is_file():
        pytest.skip(f"{BLOCK_BUG} is not here")
    table = read_tables(BLOCK_BUG)
    tot = table.totals
    said = text(render(table))
    assert "WARNING" in " ".join(said.split())
    want_t = tot["time_ms_mean"] / tot["whole_ms"]
    want_e = tot["energy_mj"] / tot["whole_energy_mj"]
    assert round(want_t, 3) == 0.553 and round(want_e, 3) == 3.825
    w = _sum_warning(tot)
    assert f"time adds up to {want_t:.3f}" in w and f"energy adds up to {want_e:.3f}" in w
    whole = DIR / "h200-fused-rows" / "run1" / "resnet50-G-1.csv"
    assert _sum_warning(read_tables(whole).totals) == ""
    # the bounds: 5 % and three intervals, both needed
    base = {"time_ms_mean": 1.06, "whole_ms": 1.0, "whole_ms_ci95": 0.01}
    assert "1.060" in _sum_warning(base)
    assert _sum_warning({**base, "time_ms_mean": 1.04}) == ""
    assert _sum_warning({**base, "whole_ms_ci95": 0.03}) == ""


def test_a_table_whose_blocks_were_tied_far_from_one_says_so() -> None:
    """The same model's G table made after the blocks were tied (data/validation/h200-run-2):
    its rows add up (no warning), and its caption notes the ties' scales, which ran far
    from 1 (a bias per block that compounds); a table in one block, or whose ties stayed
    near 1, gets no note."""
    from profiler.measure.tables import _chain_warning

    tied = DIR / "h200-run-2" / "resnet50" / "layers-resnet50-G-fused.csv"
    if not tied.is_file():
        pytest.skip(f"{tied} is not here")
    table = read_tables(tied)
    scales = table.info["fused"]["block_chain"]["block_scales"]
    said = " ".join(text(render(table)).split())
    assert "WARNING" not in said and max(scales) > 1.25
    assert f"scales of {min(scales):.2f}-{max(scales):.2f}" in said
    assert _chain_warning(read_tables(DIR / "h200-fused-rows" / "run1" / "resnet50-G-1.csv")
                          .info["fused"]) == ""
    near = {"block_chain": {"block_scales": [1.2, 0.81, 1.0]}}
    assert _chain_warning(near) == ""
    assert "0.79-1.00" in _chain_warning({"block_chain": {"block_scales": [0.79, 1.0]}})


def test_a_prediction_from_rows_that_do_not_add_up_says_so() -> None:
    """`predict` from the H200 ResNet50 G table made in blocks before the ties (rows and
    fixed row 1.939 of its whole model's 3.509 ms) notes it beside the prediction, which
    it underprices by as much (2.142 ms; the run took 3.50); from the table made after
    the ties (h200-run-2), no such note, and G54 priced at its whole model."""
    if not BLOCK_BUG.is_file():
        pytest.skip(f"{BLOCK_BUG} is not here")
    p = predict(Mapping("G" * 54), "switch", read_layer_tables([BLOCK_BUG]))
    said = [n for n in p.notes if "add up to" in n]
    assert len(said) == 1 and "0.553 of its whole model" in said[0] and "1.939 against 3.509" in said[0]
    tied = DIR / "h200-run-2" / "resnet50" / "layers-resnet50-G-fused.csv"
    if not tied.is_file():
        pytest.skip(f"{tied} is not here")
    q = predict(Mapping("G" * 54), "switch", read_layer_tables([tied]))
    whole = read_tables(tied).totals["whole_ms"]
    assert not [n for n in q.notes if "add up to" in n]
    stage = q.stages[0]  # its compute (rows and fixed row) is the whole model (CSV rounding)
    assert stage.compute_ms == pytest.approx(whole, rel=1e-6)
    assert q.latency_ms == pytest.approx(stage.compute_ms + stage.transfer_ms, rel=1e-9)
