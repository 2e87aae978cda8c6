"""The committed GoogLeNet explore run on the calibrated simulated board
(data/validation/explore-googlenet-sim/, made by its make.sh on a 16-core machine;
docs/explore.md quotes it): the searches still pick the same mappings on those tables,
and the measured picks hold their predictions and beat every processor alone."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from profiler.boards.profiles import load_board
from profiler.explore.pipeline import enumerate_front
from profiler.explore.space import freq_spec, order_string
from profiler.explore.switch import search_switch
from profiler.explore.tables import load_tables

DIR = Path(__file__).resolve().parent.parent / "data" / "validation" / "explore-googlenet-sim"
pytestmark = pytest.mark.skipif(not DIR.is_dir(), reason="data/validation is not in this tree")


def _measured(name: str, metric: str) -> float:
    df = pd.read_csv(DIR / name)
    return float(df[(df["kind"] == "summary") & (df["metric"] == metric)]["measured"].iloc[0])


def test_the_searches_pick_what_was_measured() -> None:
    t = load_tables(DIR / "swf-goog", load_board("sim"), DIR / "tmf-goog.csv")
    fast = search_switch(t, objective="latency")
    assert fast.optimal and fast.best is not None
    assert order_string(t, fast.best.candidate) == "G4L7"
    assert fast.best.latency_ms == pytest.approx(140.29, abs=0.01)
    top = enumerate_front(t).front[0]
    assert (order_string(t, top.candidate), freq_spec(t, top.candidate)) == ("G3B3L5", "5/8/6")


def test_measured_picks_hold_their_predictions_and_beat_each_processor_alone() -> None:
    sw = pd.read_csv(DIR / "g-lat-measured.csv").iloc[0]
    pipe = pd.read_csv(DIR / "g-pipe-measured.csv").iloc[0]
    for row, col in ((sw, "latency_ms"), (sw, "energy_mj"), (pipe, "throughput_fps"),
                     (pipe, "energy_mj")):
        assert abs(row[col] / row[f"predicted_{col}"] - 1) < 0.10, (row["order"], col)
    alone = {p: _measured(f"r-{p}11.csv", "latency_ms_mean") for p in "LBG"}
    reruns = [_measured(f"r-pick-{k}.csv", "latency_ms_mean") for k in (2, 3)]
    assert max(sw["latency_ms"], *reruns) < min(alone.values())
    assert pipe["throughput_fps"] > _measured("r-pL11.csv", "throughput_fps")
    assert _measured("r-ppick-2.csv", "throughput_fps") > 2.5 * _measured("r-pL11.csv",
                                                                           "throughput_fps")


@pytest.mark.parametrize("readout_ms", [None, 0.5])
def test_explore_and_predict_price_the_read_back_at_a_cut_alike(tmp_path: Path,
                                                                 readout_ms: float | None
                                                                 ) -> None:
    """A fused G call that ends at a cut pays the transfer matrix's readout_ms (the
    producer's read-back in full): explore's costs and `coupprof predict` agree on the
    committed tables (whose simulated read-backs are noise just below 0, counted as 0),
    and with every G read-back set to 0.5 ms both add exactly that per G call ending at
    a cut (G4L7: one; G3B3L5: one, in G's stage)."""
    import json
    import subprocess
    import sys

    from profiler.explore.space import candidate_for, evaluate

    tr = pd.read_csv(DIR / "tmf-goog.csv")
    if readout_ms is not None:
        tr.loc[tr["src"] == "G", "readout_ms"] = readout_ms
    tr.to_csv(tmp_path / "tm.csv", index=False)
    board = load_board("sim")
    base = load_tables(DIR / "swf-goog", board, DIR / "tmf-goog.csv")
    t = load_tables(DIR / "swf-goog", board, tmp_path / "tm.csv")
    extra = readout_ms or 0.0
    coupprof = str(Path(sys.executable).with_name("coupprof"))
    for order, freq, mode in (("G4L7", "5,5,5,5,6,6,6,6,6,6,6", "switch"),
                              ("G3B3L5", "5/8/6", "pipeline")):
        ev = evaluate(t, candidate_for(t, order, freq, mode))
        ev0 = evaluate(base, candidate_for(base, order, freq, mode))
        assert ev.latency_ms == pytest.approx(ev0.latency_ms + extra, abs=1e-9)
        if mode == "pipeline":
            assert ev.stage_ms[0] == pytest.approx(ev0.stage_ms[0] + extra, abs=1e-9)
            assert ev.stage_ms[1:] == pytest.approx(ev0.stage_ms[1:], abs=1e-9)
        out = tmp_path / f"p-{order}.json"
        r = subprocess.run([coupprof, "predict", "--board", "sim", "--layers",
                            str(DIR / "swf-goog"), "--transfers", str(tmp_path / "tm.csv"),
                            "--order", order, "--mode", mode, "--freq", freq,
                            "--json", str(out)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        got = json.loads(out.read_text())
        assert got["latency_ms"] == pytest.approx(ev.latency_ms, rel=1e-9)
        assert got["throughput_fps"] == pytest.approx(ev.throughput_fps, rel=1e-9)
