"""Prediction maths against hand-computed values, from layer tables written by the real
table writer (CSV + sidecar) and a transfer CSV; the CLI prints the same numbers."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.boards.profiles import load_board
from profiler.errors import BadInputError
from profiler.mapping.pipeline import MappedRun
from profiler.mapping.predict import compare, predict, read_layer_tables
from profiler.mapping.spec import Mapping, parse_freq
from profiler.mapping.transfer import read_transfer_csv
from profiler.measure.results import LayerInfo, LayerRun, LayerTimings, RunInfo
from profiler.measure.tables import run_tables, write_tables

COUPPROF = str(Path(sys.executable).with_name("coupprof"))

# Per processor: layer times, hand-over times (ms), energies and dynamic energies (mJ).
B = dict(time=[1.0, 2.0, 3.0, 4.0], xfer=[0.1, 0.2, 0.3, 0.4], e=[10, 20, 30, 40],
         dyn=[4, 8, 12, 16])
G = dict(time=[0.5, 0.6, 0.7, 0.8], xfer=[0.05, 0.06, 0.07, 0.08], e=[2, 3, 4, 5],
         dyn=[1, 1.5, 2, 2.5])
BASELINE_W = 6.0
TRANSFERS = """boundary,src,dst,bytes,time_ms_mean,energy_mj
0,B,B,1000,0.15,0.5
1,B,G,1000,0.7,5.0
2,G,G,1000,0.06,0.1
1,G,B,1000,0.9,4.0
"""


def write_layer_table(path: Path, letter: str, costs: dict, level: int | None = None,
                      baseline: float | None = BASELINE_W) -> Path:
    frames, n = 3, len(costs["time"])
    ts = np.zeros((frames, n, 4), dtype=np.int64)
    t = 0
    for f in range(frames):
        for i in range(n):
            xfer, run = round(costs["xfer"][i] * 1e6), round(costs["time"][i] * 1e6)
            ts[f, i] = (t, t + xfer, t + xfer, t + xfer + run)
            t += xfer + run
    info = RunInfo(board="sim", simulated=True, model_path="m.tflite", model_sha256="ab" * 32,
                   processor=letter, processor_name=letter, cores=(0,), threads=1,
                   frames=frames, warmup=0, freq_level=level)
    layers = [LayerInfo(i, ("CONV_2D",), 1, 1, 1, 1) for i in range(n)]
    run = LayerRun(info, layers, LayerTimings(ts),
                   layer_extras={"energy_mj": np.array(costs["e"], float),
                                 "dynamic_energy_mj": np.array(costs["dyn"], float)},
                   total_extras={} if baseline is None else {"baseline_power_w": baseline})
    write_tables(run_tables(run, raw=False), path)
    return path


@pytest.fixture()
def tables(tmp_path: Path) -> tuple[list[Path], Path]:
    lb = write_layer_table(tmp_path / "B.csv", "B", B)
    lg = write_layer_table(tmp_path / "G.csv", "G", G)
    tr = tmp_path / "transfers.csv"
    tr.write_text(TRANSFERS)
    return [lb, lg], tr


def test_switch_latency_is_layers_plus_hand_overs(tables) -> None:
    paths, tr = tables
    p = predict(Mapping("BBGG"), "switch", read_layer_tables(paths), read_transfer_csv(tr), method="sliced")
    # layers 1 + 2 (B) + 0.7 + 0.8 (G); hand-overs: input 0.1, B>B 0.15, B>G 0.7, G>G 0.06
    assert p.latency_ms == pytest.approx(5.51)
    assert p.throughput_fps == pytest.approx(1000 / 5.51)
    assert p.handover_ms == pytest.approx([0.1, 0.15, 0.7, 0.06])
    # Board energy of each layer plus each hand-over's: measured (0:B>B 0.5, 1:B>G 5.0,
    # 2:G>G 0.1), or the idle baseline over its time (the input, 6 W x 0.1 ms).
    assert p.energy_mj == pytest.approx(10 + 20 + 4 + 5 + 0.5 + 5.0 + 0.1 + 6.0 * 0.1)
    assert p.missing == []


def test_pipeline_throughput_is_set_by_the_slowest_stage(tables) -> None:
    paths, tr = tables
    p = predict(Mapping("BBGG"), "pipeline", read_layer_tables(paths), read_transfer_csv(tr), method="sliced")
    assert [s.time_ms for s in p.stages] == pytest.approx([3.25, 2.26])  # B: 1+2+0.1+0.15
    assert p.stages[1].transfer_ms == pytest.approx(0.76)  # the B>G hand-over is G's
    assert p.bottleneck.index == 0
    assert p.throughput_fps == pytest.approx(1000 / 3.25)
    # The first stage is the slowest: no frame waits, the latency is the serial sum.
    assert p.latency_ms == pytest.approx(3.25 + 2.26) and p.queue_wait_ms == pytest.approx(0)
    # Overlapping stages: dynamic energies + dynamic hand-over energies (measured minus the
    # baseline over their time; 0 where only the baseline is known) + idle power over one
    # period.
    dyn_transfer = (0.5 - BASELINE_W * 0.15) + (5.0 - BASELINE_W * 0.7) + (0.1 - BASELINE_W * 0.06)
    assert p.energy_mj == pytest.approx(4 + 8 + 2 + 2.5 + dyn_transfer + BASELINE_W * 3.25)


def test_pipeline_energy_without_a_baseline_is_a_flagged_upper_bound(tmp_path: Path) -> None:
    paths = [write_layer_table(tmp_path / "B.csv", "B", B, baseline=None),
             write_layer_table(tmp_path / "G.csv", "G", G, baseline=None)]
    tr = tmp_path / "t.csv"
    tr.write_text(TRANSFERS)
    p = predict(Mapping("BBGG"), "pipeline", read_layer_tables(paths), read_transfer_csv(tr), method="sliced")
    # Layers 39 + measured hand-overs 0.5 + 5.0 + 0.1 (the input's is unknown: 0).
    assert p.energy_mj == pytest.approx(44.6) and "upper bound" in p.energy_note


def test_missing_transfers_count_zero_and_are_listed(tables) -> None:
    paths, tr = tables
    p = predict(Mapping("BGBG"), "switch", read_layer_tables(paths), read_transfer_csv(tr), method="sliced")
    # 0:B>G and 2:B>G are absent; 1:G>B is 0.9.
    assert p.missing == ["0:B->G", "2:B->G"]
    assert p.latency_ms == pytest.approx(1 + 0.6 + 3 + 0.8 + 0.1 + 0 + 0.9 + 0)
    # Without a transfer table, same-processor hand-overs come from the layer tables.
    q = predict(Mapping("BBBB"), "switch", read_layer_tables(paths), method="sliced")
    assert q.latency_ms == pytest.approx(10 + 1.0)


def test_tables_at_several_levels_are_picked_by_the_freq_spec(tmp_path: Path) -> None:
    slow = dict(B, time=[t * 2 for t in B["time"]])
    paths = [write_layer_table(tmp_path / "B4.csv", "B", slow, level=4),
             write_layer_table(tmp_path / "B8.csv", "B", B, level=8)]
    costs = read_layer_tables(paths)
    sim = load_board("sim")
    m = Mapping("BBBB")
    fast = predict(m, "switch", costs, freq=parse_freq("B=8", m, sim), method="sliced")
    assert fast.latency_ms == pytest.approx(10 + 1.0)
    assert predict(m, "switch", costs, freq=parse_freq("B=4", m, sim), method="sliced").latency_ms == \
        pytest.approx(20 + 1.0)


def test_layer_tables_must_cover_the_mapping_and_come_from_one_model(tables,
                                                                     tmp_path: Path) -> None:
    paths, _ = tables
    with pytest.raises(BadInputError, match="no layer table has layer 0 on processor N"):
        predict(Mapping("NBGG"), "switch", read_layer_tables(paths), method="sliced")
    other = write_layer_table(tmp_path / "other.csv", "L", B)
    meta = other.with_suffix(".json")
    meta.write_text(meta.read_text().replace("ab" * 32, "cd" * 32))
    with pytest.raises(BadInputError, match="different models"):
        read_layer_tables([*paths, other])


def _run(latency_ms: list[float], busy_ms: list[list[float]], done_ms: list[float]) -> MappedRun:
    frames, n = len(latency_ms), 4
    ts = np.zeros((frames, n, 4), dtype=np.int64)
    done = np.array([round(d * 1e6) for d in done_ms], dtype=np.int64)
    ts[:, 0, 0] = done - np.array([round(v * 1e6) for v in latency_ms])
    return MappedRun("pipeline", Mapping("BBGG"), ts,
                     np.array([[round(v * 1e6) for v in row] for row in busy_ms]),
                     np.zeros((frames, 2), dtype=np.int64), done, [None] * 4, {}, [[], []], 2, 2)


def test_compare_reports_the_relative_error(tables) -> None:
    paths, tr = tables
    p = predict(Mapping("BBGG"), "pipeline", read_layer_tables(paths), read_transfer_csv(tr), method="sliced")
    run = _run([6.0, 8.0], [[3.0, 2.0], [3.5, 2.5]], [10.0, 13.5])
    df = compare(p, run).set_index("metric")
    assert df.loc["throughput_fps", "measured"] == pytest.approx(1000 / 3.5)
    assert df.loc["throughput_fps", "error_pct"] == pytest.approx(
        (1000 / 3.25 - 1000 / 3.5) / (1000 / 3.5) * 100)
    assert df.loc["stage 0 (B) ms", "measured"] == pytest.approx(3.25)
    assert df.loc["stage 0 (B) ms", "error_pct"] == pytest.approx(0.0)
    assert math.isclose(df.iloc[0]["measured"], 7.0)  # mean latency


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # These tables are sliced: price one call per layer, as they were measured.
    return subprocess.run([COUPPROF, "predict", *args, "--method", "sliced"], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "120"})


def test_cli_prints_the_predictions(tables, tmp_path: Path) -> None:
    paths, tr = tables
    layers = ",".join(map(str, paths))
    r = cli("--order", "B2G2", "--mode", "switch", "--layers", layers, "--transfers", str(tr),
            "--json", str(tmp_path / "p.json"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "latency 5.510 ms" in r.stdout and "throughput 181.49 FPS" in r.stdout
    assert "energy 45.200 mJ/frame" in r.stdout  # as in test_switch_latency_is_layers_plus_hand_overs
    r = cli("--order", "BBGG", "--mode", "pipeline", "--layers", layers, "--transfers", str(tr),
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "throughput 307.69 FPS (slowest stage 0, B)" in r.stdout
    saved = pd.read_json(tmp_path / "p.json", typ="series")
    assert saved["latency_ms"] == pytest.approx(5.51)


@pytest.mark.parametrize("args, needle", [
    (["--order", "BBG"], "maps 3 layers but the model has 4 layers"),
    (["--order", "BBNN"], "processor(s) N but no layer table covers them"),
])
def test_cli_bad_input_is_one_line_exit_2(tables, tmp_path: Path, args: list[str],
                                          needle: str) -> None:
    paths, _ = tables
    r = cli(*args, "--mode", "switch", "--layers", ",".join(map(str, paths)), cwd=tmp_path)
    assert r.returncode == 2
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and needle in err


def write_fused_table(path: Path, letter: str, costs: dict, fused_ms: list[float],
                      fixed_ms: float) -> Path:
    """A layer table as `coupprof layers --method fused` writes it (time_ms_mean the fused
    figure with its time_ms_ci95, the fixed row in the totals)."""
    from profiler.measure.fused import Estimate, FusedLayer, FusedResult, FusedSettings
    from profiler.measure.tables import with_fused

    write_layer_table(path, letter, costs)
    from profiler.measure.tables import read_tables

    t = read_tables(path)
    res = FusedResult([FusedLayer(k, v, 0.01, False, True) for k, v in enumerate(fused_ms)],
                      Estimate(fixed_ms, 0.01), Estimate(fixed_ms + sum(fused_ms), 0.01), 5,
                      1.0, True, FusedSettings())
    write_tables(with_fused(t, res), path)
    return path


def test_fused_tables_price_one_fixed_cost_per_call_and_the_read_back_at_a_cut(
        tmp_path: Path) -> None:
    """BBGG executed fused: two calls. Each pays its processor's fixed row once, its
    layers' fused times, the hand-over into it (none inside a call), and G->B's producer
    pays its read-back at the cut (readout_ms)."""
    gb = write_fused_table(tmp_path / "G.csv", "G", G, [0.2, 0.3, 0.4, 0.5], fixed_ms=1.0)
    bb = write_fused_table(tmp_path / "B.csv", "B", B, [0.9, 1.9, 2.9, 3.9], fixed_ms=0.01)
    tr = tmp_path / "t.csv"
    tr.write_text("boundary,src,dst,bytes,time_ms_mean,readout_ms\n"
                  "1,B,G,1000,0.7,0.0\n1,G,B,1000,0.9,0.25\n")
    costs = read_layer_tables([bb, gb])
    transfers = read_transfer_csv(tr)
    p = predict(Mapping("BBGG"), "switch", costs, transfers)
    # B call: 0.01 + 0.9 + 1.9 + input feed 0.1; G call: 1.0 + 0.4 + 0.5 + B>G 0.7.
    assert p.latency_ms == pytest.approx(0.01 + 2.8 + 0.1 + 1.0 + 0.9 + 0.7)
    assert [s.calls for s in p.stages] == [1, 1]
    assert p.handover_ms == pytest.approx([0.1, 0.0, 0.7, 0.0])
    q = predict(Mapping("GGBB"), "pipeline", costs, transfers)
    # G call: 1.0 + 0.2 + 0.3 + its read-back at the cut 0.25 + input 0.05 (G's table).
    assert q.stages[0].readout_ms == pytest.approx(0.25)
    assert q.stages[0].time_ms == pytest.approx(1.0 + 0.5 + 0.25 + 0.05)
    assert q.stages[1].time_ms == pytest.approx(0.01 + 2.9 + 3.9 + 0.9)
    assert q.throughput_fps == pytest.approx(1000 / (0.01 + 2.9 + 3.9 + 0.9))
    # B, second, is the slowest: in the steady state a frame G takes finds queue 1 full
    # (2 frames) and one in B ahead of it: 3 B periods of waiting, then its own B stage.
    s_g, s_b = 1.0 + 0.5 + 0.25 + 0.05, 0.01 + 2.9 + 3.9 + 0.9
    assert q.latency_ms == pytest.approx(3 * s_b + s_b)
    assert q.queue_wait_ms == pytest.approx(3 * s_b + s_b - s_g - s_b)
    assert predict(Mapping("GGBB"), "pipeline", costs, transfers,
                   queue_depth=1).latency_ms == pytest.approx(2 * s_b + s_b)
    # G in a process of its own, its hand-over to it and back 0.4 ms: G's stage time.
    h = predict(Mapping("GGBB"), "pipeline", costs, transfers, process_ms={0: 0.4})
    assert h.stages[0].time_ms == pytest.approx(s_g + 0.4) and h.stages[0].process_ms == 0.4
    assert h.stages[1].time_ms == pytest.approx(s_b) and h.latency_ms == pytest.approx(4 * s_b)
    assert predict(Mapping("GGBB"), "switch", costs, transfers, process_ms={0: 0.4}
                   ).latency_ms == pytest.approx(s_g + 0.4 + s_b)
    # A run of 3 frames from empty (queue 1 never full yet): G takes frame k at k S_G, B
    # finishes it at S_G + (k + 1) S_B.
    lat = [s_g + (k + 1) * s_b - k * s_g for k in range(3)]
    assert predict(Mapping("GGBB"), "pipeline", costs, transfers,
                   frames=3).latency_ms == pytest.approx(sum(lat) / 3)
    # Sliced execution of the same tables: every layer is a call and pays a fixed row.
    s = predict(Mapping("BBGG"), "switch", costs, transfers, method="sliced")
    assert len(s.calls) == 4 and [st.fixed_ms for st in s.stages] == pytest.approx([0.02, 2.0])
