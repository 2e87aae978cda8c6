"""Aggregation, CSV + JSON sidecar, and re-rendering a saved run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.errors import BadInputError
from profiler.measure.results import LayerInfo, LayerRun, LayerTimings, RunInfo
from profiler.measure.tables import (
    POWER_COLUMNS,
    read_tables,
    render_text,
    run_tables,
    totals,
    write_tables,
)

BASE_NS = 2**53 + 1  # beyond float64's exact integers: stamps must survive the CSV exactly


def info(**kw: object) -> RunInfo:
    d: dict = dict(board="host", simulated=False, model_path="/m/mobilenet.tflite",
                   model_sha256="ab" * 32, processor="B", processor_name="CPU x2", cores=(0, 1),
                   threads=2, frames=20, warmup=5, runtime="ai-edge-litert", runtime_version="2.3.0",
                   command="coupprof layers")
    d.update(kw)
    return RunInfo(**d)


def make_run(extras: dict | None = None, total_extras: dict | None = None) -> LayerRun:
    """Two layers, 20 frames. Layer 0 takes 1..20 ms (frame f: f+1 ms), layer 1 a constant 3 ms;
    transfers are 0.5 ms into layer 0 and 0.25 ms into layer 1."""
    frames = 20
    ts = np.zeros((frames, 2, 4), dtype=np.int64)
    now = BASE_NS
    for f in range(frames):
        for layer, (xfer_ns, time_ns) in enumerate([(500_000, (f + 1) * 1_000_000),
                                                     (250_000, 3_000_000)]):
            ts[f, layer] = (now, now + xfer_ns, now + xfer_ns + 10, now + xfer_ns + 10 + time_ns)
            now = int(ts[f, layer, 3]) + 7
    layers = [LayerInfo(0, ("CONV_2D",), 1_000_000, 864, 49152, 32768),
              LayerInfo(1, ("DEPTHWISE_CONV_2D", "CONV_2D"), 2_500_000, 1200, 32768, 65536)]
    return LayerRun(info(), layers, LayerTimings(ts), extras or {}, total_extras or {})


def test_layer_aggregates_match_hand_computed_values() -> None:
    t = run_tables(make_run())
    df = t.layers
    assert list(df["layer"]) == [0, 1]
    assert list(df["op_types"]) == ["CONV_2D", "DEPTHWISE_CONV_2D+CONV_2D"]
    r0, r1 = df.iloc[0], df.iloc[1]
    # 1..20 ms: mean 10.5, median 10.5, p95 (linear) 19.05, sample std sqrt(35).
    assert r0.time_ms_mean == pytest.approx(10.5)
    assert r0.time_ms_median == pytest.approx(10.5)
    assert r0.time_ms_p95 == pytest.approx(19.05)
    assert r0.time_ms_std == pytest.approx(35**0.5)
    assert r1.time_ms_mean == pytest.approx(3.0) and r1.time_ms_std == pytest.approx(0.0)
    assert r0.transfer_ms_mean == pytest.approx(0.5) and r1.transfer_ms_median == pytest.approx(0.25)
    assert (r0.bytes_in, r0.bytes_out, r1.macs) == (49152, 32768, 2_500_000)
    for col in POWER_COLUMNS + ("lost_frames",):
        assert col not in df.columns


def test_totals_sum_layers_within_each_frame() -> None:
    tot = totals(make_run())
    # Frame f: compute (f+1) + 3 ms, transfer 0.75 ms.
    assert tot["time_ms_mean"] == pytest.approx(13.5)
    assert tot["time_ms_median"] == pytest.approx(13.5)
    assert tot["transfer_ms_mean"] == pytest.approx(0.75)
    assert tot["latency_ms_mean"] == pytest.approx(14.25)
    assert tot["fps"] == pytest.approx(1000 / 14.25)
    assert tot["macs"] == 3_500_000
    assert "lost_frames" not in tot and "energy_mj" not in tot


def test_csv_rows_and_sidecar(tmp_path: Path) -> None:
    run = make_run()
    csv, js = write_tables(run_tables(run, raw=False), tmp_path / "out" / "layers.csv")
    assert js == tmp_path / "out" / "layers.json"
    df = pd.read_csv(csv)
    assert len(df) == 2 and set(df["kind"]) == {"layer"}
    for col in ("time_ms_mean", "time_ms_median", "time_ms_p95", "time_ms_std",
                "transfer_ms_mean", "bytes_in", "bytes_out", "macs"):
        assert col in df.columns
    assert "start_ns" not in df.columns  # no raw rows asked for
    meta = json.loads(js.read_text())
    for key in ("board", "simulated", "model_path", "model_sha256", "processor", "cores", "threads",
                "frames", "warmup", "runtime", "runtime_version", "python", "numpy", "host",
                "kernel", "coupprof_version", "timestamp", "command", "totals", "units"):
        assert key in meta, key
    assert meta["cores"] == [0, 1] and meta["csv"] == "layers.csv"
    assert meta["totals"]["latency_ms_mean"] == pytest.approx(14.25)


def test_raw_rows_keep_exact_nanoseconds(tmp_path: Path) -> None:
    run = make_run()
    csv, _ = write_tables(run_tables(run, raw=True), tmp_path / "raw.csv")
    back = read_tables(csv)
    assert back.frames is not None and len(back.frames) == 40
    fr = back.frames.sort_values(["layer", "frame"]).reset_index(drop=True)
    expect = run.timings.ts_ns.transpose(1, 0, 2).reshape(40, 4)  # layer-major
    assert [int(v) for v in fr["transfer_start_ns"]] == expect[:, 0].tolist()
    assert [int(v) for v in fr["start_ns"]] == expect[:, 2].tolist()
    assert [int(v) for v in fr["end_ns"]] == expect[:, 3].tolist()
    layer0 = fr[fr["layer"] == 0]
    np.testing.assert_allclose(layer0["time_ms"], np.arange(1, 21))
    # Layer rows read back without the frame-only columns.
    assert "frame" not in back.layers.columns and len(back.layers) == 2


def flat(text: str) -> str:
    """Rendered text with line wrapping undone (titles wrap to the table's width)."""
    return " ".join(text.split())


def test_saved_run_re_renders_identically(tmp_path: Path) -> None:
    fresh = run_tables(make_run(), raw=True)
    csv, js = write_tables(fresh, tmp_path / "a.csv", tmp_path / "meta" / "a-sidecar.json")
    loaded = read_tables(csv, js)
    text = render_text(fresh)
    assert render_text(loaded) == text
    text = flat(text)
    assert "mobilenet.tflite on board host, processor B" in text
    assert "= 70.2 FPS" in text  # 1000 / 14.25
    assert "0 conv 10.500 10.500 19.050 0.500 48.0 32.0 1.00" in text
    assert "1 dwconv+conv 3.000 3.000 3.000 0.250 32.0 64.0 2.50" in text
    assert "total 2 layers 13.500 13.500" in text
    assert "xfer ms" in text and " W " not in text


def test_power_columns_appear_only_when_given(tmp_path: Path) -> None:
    run = make_run(extras={"power_w": np.array([2.0, 1.5]), "energy_mj": np.array([21.0, 4.5]),
                           "samples": np.array([300, 90])},
                   total_extras={"power_w": 1.84, "energy_mj": 25.5, "lost_frames": 0})
    t = run_tables(run)
    assert [c for c in t.layers.columns if c in POWER_COLUMNS] == ["power_w", "energy_mj", "samples"]
    csv, _ = write_tables(t, tmp_path / "p.csv")
    loaded = read_tables(csv)
    assert list(loaded.layers["energy_mj"]) == [21.0, 4.5]
    assert loaded.totals["lost_frames"] == 0
    assert render_text(loaded) == render_text(t)
    text = flat(render_text(loaded))
    assert " W " in text and " mJ " in text and "logger frames lost: 0" in text


def test_fallback_and_lost_frames_are_shown_only_when_they_happened(tmp_path: Path) -> None:
    clean = make_run(extras={"energy_mj": np.array([21.0, 4.5]), "lost_frames": np.array([0, 0]),
                             "fallback": ["no", "no"]})
    text = flat(render_text(run_tables(clean)))
    assert "fallback" not in text and "flag" not in text
    bad = make_run(extras={"energy_mj": np.array([21.0, 4.5]), "lost_frames": np.array([0, 3]),
                           "flagged_windows": np.array([0, 2]), "fallback": ["yes", "no"]})
    t = run_tables(bad)
    lines = render_text(t).splitlines()
    row0 = next(line for line in lines if line.strip().startswith("0 "))
    row1 = next(line for line in lines if line.strip().startswith("1 "))
    assert "CPU" in row0 and "lost" not in row0
    assert "lost 3 frames, 2 windows set aside" in row1 and "CPU" not in row1
    one = make_run(extras={"energy_mj": np.array([21.0, 4.5]), "lost_frames": np.array([1, 0]),
                           "flagged_windows": np.array([1, 0])})
    assert "lost 1 frame, 1 window set aside" in flat(render_text(run_tables(one)))
    csv, _ = write_tables(t, tmp_path / "f.csv")
    assert render_text(read_tables(csv)) == render_text(t)


def test_simulated_runs_say_so() -> None:
    run = make_run()
    run.info = info(simulated=True, board="sim", freq_level=4, freq_khz=600_000)
    text = flat(render_text(run_tables(run)))
    assert "[SIMULATED]" in text and "level 4 = 600 MHz" in text


def test_reading_something_else_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="not found"):
        read_tables(tmp_path / "none.csv")
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(BadInputError, match="not a coupprof layers sidecar"):
        read_tables(tmp_path / "x.csv")


def test_layer_run_rejects_mismatched_shapes() -> None:
    run = make_run()
    with pytest.raises(ValueError, match="1 layers but timestamps for 2"):
        LayerRun(run.info, run.layers[:1], run.timings)


def test_every_row_carries_the_run_identity(tmp_path: Path) -> None:
    run = make_run()
    run.info = info(simulated=True, board="sim", processor="G", freq_level=4, freq_khz=600_000)
    csv, _ = write_tables(run_tables(run, raw=True), tmp_path / "id.csv")
    df = pd.read_csv(csv)
    assert list(df.columns[:7]) == ["kind", "board", "simulated", "model", "processor",
                                    "freq_level", "freq_khz"]
    assert len(df) == 2 + 40  # layer rows and frame rows alike
    assert set(df["board"]) == {"sim"} and set(df["simulated"]) == {True}
    assert set(df["model"]) == {"mobilenet"} and set(df["processor"]) == {"G"}
    assert set(df["freq_level"]) == {4} and set(df["freq_khz"]) == {600_000}
    back = read_tables(csv)
    assert back.layers["freq_khz"].tolist() == [600_000, 600_000]
    assert back.frames is not None and set(back.frames["processor"]) == {"G"}


def test_runs_without_a_frequency_keep_blank_frequency_columns(tmp_path: Path) -> None:
    csv, _ = write_tables(run_tables(make_run(), raw=False), tmp_path / "nofreq.csv")
    df = pd.read_csv(csv)
    assert df["freq_level"].isna().all() and df["freq_khz"].isna().all()
    back = read_tables(csv)
    # Kept (blank) on read-back so runs with and without a level concatenate into one frame.
    assert back.layers["freq_level"].isna().all() and "freq_khz" in back.layers.columns
    both = pd.concat([back.layers, read_tables(csv).layers], ignore_index=True)
    assert list(both.columns[:7]) == list(pd.read_csv(csv).columns[:7])


def test_csv_from_before_the_identity_columns_still_reads_and_renders(tmp_path: Path) -> None:
    run = make_run()
    run.info = info(processor="L", freq_level=2, freq_khz=600_000)
    fresh = run_tables(run, raw=True)
    csv, _ = write_tables(fresh, tmp_path / "old.csv")
    old = pd.read_csv(csv).drop(columns=["board", "simulated", "model", "processor",
                                         "freq_level", "freq_khz"])
    old.to_csv(csv, index=False)
    back = read_tables(csv)
    assert back.layers["processor"].tolist() == ["L", "L"]  # filled from the sidecar
    assert back.layers["freq_level"].tolist() == [2, 2]
    assert render_text(back) == render_text(fresh)
