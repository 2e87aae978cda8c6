"""Links between devices measured over MPI (two simulated devices on this machine, one
host core each), fitted, and used by `predict --devices` and `explore --devices`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.devices.launch import mpi_installed
from profiler.devices.link_probe import BoundaryTensors, measure_links
from profiler.devices.linkfit import fit_probe
from profiler.devices.spec import parse_devices
from tests.cli_runs import run_coupprof

pytestmark = [
    pytest.mark.skipif(not mpi_installed(), reason="MPI not installed (the devices extra)"),
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two host cores"),
    pytest.mark.alone,  # two ranks, a core each
]


def _two(latency_ms: float, bandwidth_mb_s: float) -> str:
    return ("[[device]]\nname = 'd0'\ncores = [0]\n[[device]]\nname = 'd1'\ncores = [1]\n"
            f"[[link]]\nlatency_ms = {latency_ms}\nbandwidth_mb_s = {bandwidth_mb_s}\n")


def test_probe_recovers_a_simulated_link() -> None:
    """On the one host clock. (By round trips, as across hosts, the sender's wait for each
    acknowledgement is timed too, which a loaded 2-core machine preempts: checked by hand,
    docs/devices.md, not here.)"""
    one_clock = True
    devices = parse_devices(_two(0.5, 100.0))
    # small tensors pin the latency, large ones the bandwidth
    sizes = [500, 1_000, 2_000, 4_000, 16_000, 64_000, 256_000, 1_000_000]
    bounds = [BoundaryTensors(b, (((n // 4,), "float32"),)) for b, n in enumerate(sizes)]
    probe = measure_links(devices, bounds, reps=40, warmup=2, echo=False,
                          one_clock=one_clock)
    rows = probe.rows
    assert probe.one_clock == one_clock
    assert sorted(set(rows["pass"])) == ["added", "link", "local"]
    assert rows.loc[rows["pass"] == "link", "bytes"].tolist() == sizes
    fitted = fit_probe(rows)
    added = fitted.added[frozenset(("d0", "d1"))]
    assert added.latency_ms == pytest.approx(0.5, rel=0.05)
    assert added.bandwidth_mb_s == pytest.approx(100.0, rel=0.05)
    # a run sees the real local transfer on top of the model, at every size
    total = fitted.fits[frozenset(("d0", "d1"))]
    assert all(total.time_ms(n) > added.time_ms(n) for n in sizes)
    # Each hand-over's energy on both devices, from each one's own virtual logger, against
    # its simulated board's true energy over the same windows; longer hand-overs cost more.
    timed = rows[rows["pass"] != "added"]
    for side in ("src", "dst"):
        got, truth = timed[f"energy_mj_{side}"], timed[f"true_energy_mj_{side}"]
        assert (truth > 0).all()
        assert np.allclose(got, truth, rtol=0.02), (side, list(got), list(truth))
    link = rows[rows["pass"] == "link"]
    assert link["energy_mj_dst"].iloc[-1] > 5 * link["energy_mj_dst"].iloc[0]
    assert rows.loc[rows["pass"] == "added", "energy_mj_src"].isna().all()


def _table(path: Path, t_ms: np.ndarray) -> None:
    n = t_ms.size
    pd.DataFrame({"processor": "B", "layer": range(n), "time_ms_mean": t_ms,
                  "transfer_ms_mean": 0.05, "energy_mj": 2.0 * t_ms,
                  "param_bytes": 1000, "bytes_in": 4096, "bytes_out": 4096}).to_csv(path,
                                                                                    index=False)


def test_cli_links_then_predict_and_explore(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (tmp_path / "devices.toml").write_text(_two(0.5, 20.0))
    run_coupprof(("transfer-matrix", "--devices", "devices.toml", "--frames", "20",
                  "--warmup", "1", "--csv", "links.csv", "-q"), tmp_path, cache)
    side = json.loads((tmp_path / "links.json").read_text())
    (link,) = side["links"]
    assert link["modelled"] == {"latency_ms": 0.5, "bandwidth_mb_s": 20.0}
    assert link["added"]["latency_ms"] == pytest.approx(0.5, rel=0.05)
    assert 1000 / link["added"]["ms_per_mb"] == pytest.approx(20.0, rel=0.05)
    rows = pd.read_csv(tmp_path / "links.csv")
    # the default model's 14 boundaries: with the link, without, and their paired difference
    assert len(rows) == 3 * 14
    # predict across the devices on per-device tables, the cut priced as measured
    t0, t1 = np.linspace(0.5, 2.0, 15), np.linspace(2.0, 0.5, 15)
    _table(tmp_path / "d0.csv", t0)
    _table(tmp_path / "d1.csv", 1.5 * t1)
    r = run_coupprof(("predict", "--devices", "devices.toml", "--order", "d0:B7 d1:B8",
                      "--mode", "pipeline", "--layers", "d0=d0.csv", "--layers", "d1=d1.csv",
                      "--links", "links.csv", "--json", "pred.json"), tmp_path, cache)
    pred = json.loads((tmp_path / "pred.json").read_text())
    cut = rows[(rows["pass"] == "link") & (rows["boundary"] == 6)]["time_ms_median"].iloc[0]
    parts = [t0[:7].sum() + 0.05, 1.5 * t1[7:].sum() + 0.05]
    assert pred["links"][0]["time_ms"] == pytest.approx(cut)
    assert pred["throughput_fps"] == pytest.approx(1000 / max(*parts, cut))
    assert pred["latency_ms"] == pytest.approx(sum(parts) + cut)
    assert "throughput" in r.stdout
    # explore: the whole space of one cut and a processor each, its fastest split first
    run_coupprof(("explore", "--devices", "devices.toml", "--layers", "d0=d0.csv",
                  "--layers", "d1=d1.csv", "--links", "links.csv", "--csv", "ex.csv", "-q"),
                 tmp_path, cache)
    ex = pd.read_csv(tmp_path / "ex.csv")
    front = ex[ex["kind"] == "front"]
    assert front["throughput_fps"].iloc[0] == front["throughput_fps"].max()
    assert front["throughput_fps"].max() > ex[ex["kind"] == "single"]["throughput_fps"].max()
    bad = run_coupprof(("predict", "--devices", "devices.toml", "--order", "d0:B7 d1:B8",
                        "--mode", "pipeline", "--layers", "d0=d0.csv"), tmp_path, cache,
                       check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "no layer tables for device(s) d1" in bad.stderr
