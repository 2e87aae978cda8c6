"""`coupprof import` on recordings made here with known truth (no outside data needed).

The simulated INA260 logger (profiler/sim/ina260.py) samples a piecewise-constant
true power like ARM-CO-UP's Arduino: ~2.7 ms sensor updates, 10 mW steps, readings 1-3 ms
apart, pin 0 while a layer runs. Truth per layer is computed from the true windows.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.recordings.align import Segments, align, segments
from profiler.recordings.attribute import armcoup_method, coupprof_method
from profiler.recordings.layout import RunLayout, Setting
from profiler.recordings.traces import CsvSpec, Recording, read_armcoup_log, read_csv_trace
from profiler.sim.ina260 import SimulatedRun, simulate_run

COUPPROF = str(Path(sys.executable).with_name("coupprof"))
LAYER_MS = np.array([12.0, 30.0, 8.0, 45.0, 20.0, 15.0, 25.0, 10.0])
LAYER_MW = np.array([3400.0, 3900.0, 3300.0, 4100.0, 3600.0, 3500.0, 3800.0, 3700.0])
SPEED = np.array([1.6, 1.25, 1.0])  # three settings, slowest first
POWER = np.array([0.9, 0.95, 1.0])


def layout(n_settings: int = 3) -> RunLayout:
    return RunLayout("B" * LAYER_MS.size, frames=10, warmup=3,
                     settings=tuple(Setting(i + 1) for i in range(n_settings)))


def make_run(seed: int, tmp: Path) -> tuple[SimulatedRun, Recording]:
    lay = layout()
    run = simulate_run(lay, LAYER_MS[None, :] * SPEED[:, None], LAYER_MW[None, :] * POWER[:, None],
                       seed=seed)
    path = tmp / f"power_Sim_{'B' * LAYER_MS.size}.csv"
    path.write_text(run.text)
    return run, read_armcoup_log(path)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COUPPROF, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "160"})


def one_line_error(r: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = [ln for ln in r.stderr.splitlines() if not ln.startswith("coupprof: ")]
    assert len(err) == 1 and err[0].startswith("coupprof import: error: "), r.stderr
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in err[0], (n, err[0])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_default_method_within_2_percent_of_truth(seed: int, tmp_path: Path) -> None:
    run, rec = make_run(seed, tmp_path)
    al = align(rec, run.layout, None)
    assert al.faults == 0 and not al.flagged
    ours = coupprof_method(rec, al)
    theirs = armcoup_method(rec, al)
    # the sensor lags the pin by about one update period plus millis truncation
    assert 2.0 <= (ours.lag_ms or 0) <= 4.5
    err_ours, err_theirs = [], []
    for f, g in zip([f for f in ours.figures if f.metric == "task"],
                    [g for g in theirs.figures if g.metric == "task"], strict=True):
        truth = run.truth_power_mw[f.setting, f.layer]
        if run.truth_time_ms[f.setting, f.layer] >= 10.0:
            err_ours.append(abs(f.power_mw / truth - 1))
            err_theirs.append(abs(g.power_mw / truth - 1))
        # edges are known to a reading (1-3 ms apart): the mean of 10 windows to ~1 ms
        assert f.time_ms_mean == pytest.approx(run.truth_time_ms[f.setting, f.layer], abs=1.0)
    assert max(err_ours) < 0.02, max(err_ours)
    # ARM-CO-UP's unweighted, lagging, warm-up-including means land further off
    assert np.mean(err_theirs) > np.mean(err_ours)


def test_previous_frequency_frame_is_flagged(tmp_path: Path) -> None:
    run, rec = make_run(4, tmp_path)
    ours = coupprof_method(rec, align(rec, run.layout, None))
    assert [s for s, _, _ in ours.previous_frequency] == [1, 2]
    assert "previous frequency" in " ".join(ours.notes)


def _inject(rec: Recording, lay: RunLayout, kind: str, s: int, f: int, k: int,
            segs: Segments | None = None) -> Recording:
    """A copy of `rec` with one edge deleted (the gap before layer k vanishes) or one
    1-reading spurious pulse in the middle of layer k's window (of `segs`, the clean
    recording's segments, when faults are added one after another)."""
    segs = segments(rec) if segs is None else segs
    out = copy.deepcopy(rec)
    if kind == "missed":
        i = s * lay.per_setting + f * lay.per_frame + 2 * k
        a, b = segs.start[i], segs.stop[i]
        out.level[a:b], out.active[a:b] = 0, True
    else:
        i = s * lay.per_setting + f * lay.per_frame + 2 * k + 1
        m = (segs.start[i] + segs.stop[i]) // 2
        out.level[m], out.active[m] = 1, False
    return out


@pytest.mark.parametrize("console", [False, True])
@pytest.mark.parametrize("kind,where,changed", [
    ("missed", (1, 6, 4), {(1, 3), (1, 4)}),
    ("spurious", (2, 9, 3), {(2, 3)}),
    ("missed", (0, 4, 1), {(0, 0), (0, 1)}),
    ("spurious", (1, 12, 6), {(1, 6)}),
])
def test_one_fault_flags_its_frame_only(kind: str, where: tuple[int, int, int],
                                        changed: set[tuple[int, int]], console: bool,
                                        tmp_path: Path) -> None:
    run, rec = make_run(5, tmp_path)
    lay = run.layout
    con = run.console_ms if console else None
    clean = align(rec, lay, con)
    bad = _inject(rec, lay, kind, *where)
    al = align(bad, lay, con)
    assert al.faults == 1
    assert al.flagged == [where[:2]]
    lag = coupprof_method(rec, clean, con).lag_ms
    for method in (armcoup_method, coupprof_method):
        kw = {"lag_ms": lag} if method is coupprof_method else {}
        before = {(f.setting, f.layer): f.power_mw for f in method(rec, clean, con, **kw).figures
                  if f.metric == "task"}
        after = {(f.setting, f.layer): f.power_mw for f in method(bad, al, con, **kw).figures
                 if f.metric == "task"}
        moved = {key for key in before if before[key] != after[key]}
        assert moved == changed, (method.__name__, moved)


def test_estimated_lag_survives_a_fault(tmp_path: Path) -> None:
    run, rec = make_run(6, tmp_path)
    clean = coupprof_method(rec, align(rec, run.layout, None)).lag_ms
    bad = _inject(rec, run.layout, "spurious", 1, 5, 2)
    assert coupprof_method(bad, align(bad, run.layout, None)).lag_ms == clean


def test_truncated_recording_covers_what_it_has(tmp_path: Path) -> None:
    run, rec = make_run(7, tmp_path)
    lines = run.text.splitlines(keepends=True)
    cut = tmp_path / "power_Sim_BBBBBBBB.csv"
    cut.write_text("".join(lines[: int(len(lines) * 0.8)]))
    short = read_armcoup_log(cut)
    al = align(short, run.layout, None)
    assert al.uncovered_settings == [2]
    full = {(f.setting, f.layer): f.power_mw for f in armcoup_method(rec, align(
        rec, run.layout, None)).figures if f.metric == "task"}
    part = {(f.setting, f.layer): f.power_mw for f in armcoup_method(short, al).figures
            if f.metric == "task"}
    assert all(part[k] == full[k] for k in part if k[0] < 2)


def test_generic_csv_reads_the_same_readings(tmp_path: Path) -> None:
    run, rec = make_run(8, tmp_path)
    # The same readings as a PPK2-style export: seconds, current in mA at 5 V, marker high.
    rows = ["t_s,I_mA,V,D0,D1"]
    for t, p, a in zip(rec.t_ms, rec.power_mw, rec.active, strict=True):
        rows.append(f"{t / 1000:.3f},{p / 5.0:.6f},5.0,{int(a)},0")
    path = tmp_path / "export.csv"
    path.write_text("\n".join(rows) + "\n")
    spec = CsvSpec(time_col="t_s", time_unit="s", marker_cols=("D0", "D1"), current_col="I_mA",
                   current_unit="mA", voltage_col="V", voltage_unit="V", active_level=1)
    csv_rec = read_csv_trace(path, spec)
    np.testing.assert_allclose(csv_rec.t_ms, rec.t_ms, atol=1e-6)
    np.testing.assert_allclose(csv_rec.power_mw, rec.power_mw, rtol=1e-9)
    assert (csv_rec.active == rec.active).all()
    a = coupprof_method(csv_rec, align(csv_rec, run.layout, None)).figures
    b = coupprof_method(rec, align(rec, run.layout, None)).figures
    assert [f.power_mw for f in a] == pytest.approx([f.power_mw for f in b], rel=1e-9)
    # and through the command: the same layer table as from the ARM-CO-UP log
    r = cli("import", "export.csv", "--time-col", "t_s", "--time-unit", "s", "--current-col",
            "I_mA", "--current-unit", "mA", "--voltage-col", "V", "--voltage-unit", "V",
            "--marker-col", "D0",
            "--marker-col", "D1", "--order", "B" * LAYER_MS.size, "--model", "Sim",
            "--levels", "1-3", "--board", "rk3399pro", "-o", "csv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = cli("import", f"power_Sim_{'B' * LAYER_MS.size}.csv", "--levels", "1-3", "-o", "log",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    name = f"Sim_{'B' * LAYER_MS.size}.csv"
    via_csv, via_log = pd.read_csv(tmp_path / "csv" / name), pd.read_csv(tmp_path / "log" / name)
    np.testing.assert_allclose(via_csv["power_w"], via_log["power_w"], rtol=1e-9)
    assert json.loads((tmp_path / "csv" / name).with_suffix(".json").read_text())[
        "source"]["format"] == "csv"


def test_malformed_lines_are_skipped_and_listed(tmp_path: Path) -> None:
    run, rec = make_run(9, tmp_path)
    lines = run.text.splitlines(keepends=True)
    lines.insert(100, "garbage\n")
    lines.insert(2000, "1,abc,3000.00\n")
    lines.insert(3000, "7,5000,3000.00\n")
    path = tmp_path / "power_Sim_BBBBBBBB.csv"
    path.write_text("".join(lines))
    got = read_armcoup_log(path)
    assert [s.line for s in got.skipped] == [101, 2001, 3001]
    assert got.readings == rec.readings
    r = cli("import", str(path), "--levels", "1-3", "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "3 malformed lines skipped in power_Sim_BBBBBBBB.csv: 101 (1 fields, 3 expected), " \
        "2001 (not numbers), 3001 (pin 7 is not 0 or 1)" in r.stderr


def test_cli_writes_layer_table_compare_and_sidecar(tmp_path: Path) -> None:
    run, rec = make_run(10, tmp_path)
    path = tmp_path / "power_Sim_BBBBBBBB.csv"
    r = cli("import", str(path), "--levels", "1-3", "-o", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "no missed or spurious edges" in r.stdout and "sensor lag:" in r.stdout
    table = pd.read_csv(tmp_path / "out/Sim_BBBBBBBB.csv")
    meta = json.loads((tmp_path / "out/Sim_BBBBBBBB.json").read_text())
    compare = pd.read_csv(tmp_path / "out/Sim_BBBBBBBB_compare.csv")
    assert meta["source"]["sha256"] == rec.sha256 and meta["format"] == "coupprof-import/1"
    assert meta["method"] == "coupprof" and meta["lag_compensated"] is True
    assert list(table["freq_khz"].unique()) == [408000, 600000, 816000]  # rk3399pro B 1-3
    assert len(table) == 3 * LAYER_MS.size and (table["frames"] == 10).all()
    np.testing.assert_allclose(table["energy_mj"], table["power_w"] * table["time_ms_mean"])
    task = compare[compare["metric"] == "task"]
    np.testing.assert_allclose(task["coupprof_power_mw"].to_numpy(),
                               table["power_w"].to_numpy() * 1000)
    # the efficiency figure (ARM-CO-UP Fig. 16) reads the table as it reads a sweep
    r = cli("plot", "efficiency", "out/Sim_BBBBBBBB.csv", "-o", "fig.png", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "fig.png").stat().st_size > 10_000


@pytest.mark.parametrize("content,needles", [
    ("", ["holds no pin,millis,mW readings"]),
    ("1,10,3000.00", ["holds no whole pin,millis,mW reading"]),  # its one line cut
    ("1,10,3000.00\n1,12,3000.00\n1,11,3000.00\n", ["time runs backwards at line 3"]),
])
def test_bad_armcoup_logs_are_one_line(content: str, needles: list[str], tmp_path: Path) -> None:
    path = tmp_path / "power_Sim_BB.csv"
    path.write_text(content)
    one_line_error(cli("import", str(path), "--format", "armcoup", "--levels", "1", cwd=tmp_path),
                   *needles)


def test_bad_generic_csv_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text("t,P,D0\n0,1,0\n1,1,1\n")
    base = ["import", str(path), "--order", "BB", "--levels", "1", "--time-col", "t",
            "--time-unit", "ms"]
    one_line_error(cli(*base, "--power-col", "Power", "--power-unit", "mW", "--marker-col", "D0",
                       cwd=tmp_path), "no column 'Power'", "its columns: t, P, D0")
    one_line_error(cli(*base, "--marker-col", "D0", cwd=tmp_path), "no power column")
    # units are never assumed: each named column needs its own
    one_line_error(cli(*base, "--power-col", "P", "--marker-col", "D0", cwd=tmp_path),
                   "no unit given for column 'P'", "--power-unit")
    one_line_error(cli(*base[:-2], "--power-col", "P", "--power-unit", "W", "--marker-col", "D0",
                       cwd=tmp_path), "no unit given for column 't'", "--time-unit")
    one_line_error(cli("import", str(path), "--levels", "1", cwd=tmp_path), "--order")
    one_line_error(cli("import", "nope.csv", cwd=tmp_path), "file not found: nope.csv")


def test_help_teaches_with_an_armcoup_example(tmp_path: Path) -> None:
    r = cli("import", "--help", cwd=tmp_path)
    assert r.returncode == 0
    assert "power_MobileV1_BBBBBBBBBBBBBB.csv" in r.stdout and "--method armcoup" in r.stdout


def test_tables_import_feeds_predict(tmp_path: Path) -> None:
    """A small Layers.csv / Transfers.csv in ARM-CO-UP's format, made here."""
    rows = ["Graph,Component,Freq,Freq_Host,Layer,Metric,Time,Power"]
    times = {"B": [10.0, 20.0, 5.0], "L": [15.0, 30.0, 8.0]}
    for comp, ts in times.items():
        for freq in range(8 if comp == "B" else 6):  # every level of rk3399pro's B and L
            rows.append(f"Toy,{comp},{freq},-1,0,in,40.0,3000.0")
            for k, t in enumerate(ts):
                rows.append(f"Toy,{comp},{freq},-1,{k},task,{t / (freq + 1)},{3500 + 100 * k}")
            rows.append(f"Toy,{comp},{freq},-1,2,out,1.0,")
    rows.append(",,,,,,,")
    (tmp_path / "Layers.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "Transfers.csv").write_text(
        "Graph,Layer,Dest,Src,Time\nToy,0,L,B,2.0\nToy,0,L,B,2.0\nToy,1,B,L,3.0\n")
    r = cli("import", "Layers.csv", "Transfers.csv", "-o", "rk", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "1 blank rows of Layers.csv skipped" in r.stdout
    layers = pd.read_csv(tmp_path / "rk/Toy/layers.csv")
    b2 = layers[(layers["processor"] == "B") & (layers["freq_level"] == 2)]
    assert list(b2["time_ms_mean"]) == [5.0, 10.0, 2.5]
    assert list(b2["freq_khz"]) == [600000] * 3
    assert b2["energy_mj"].tolist() == pytest.approx([3.5 * 5.0, 3.6 * 10.0, 3.7 * 2.5])
    assert b2["transfer_ms_mean"].isna().all()  # their table has none: left blank
    tr = pd.read_csv(tmp_path / "rk/Toy/transfers.csv")
    assert tr[["boundary", "src", "dst", "time_ms_mean", "rows"]].values.tolist() == [
        [0, "B", "L", 2.0, 2], [1, "L", "B", 3.0, 1]]
    assert tr["bytes"].isna().all()
    r = cli("predict", "--order", "BLL", "--mode", "switch", "--layers", "rk/Toy/layers.csv",
            "--transfers", "rk/Toy/transfers.csv", "--freq", "max", "--board", "rk3399pro",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # B layer 0 at its top level 8 (10/8 ms) + hand-over B->L (2 ms) + L layers 1 and 2 at
    # their top level 6 ((30 + 8)/6 ms)
    assert f"latency {10 / 8 + 2 + 38 / 6:.3f} ms" in r.stdout
    r = cli("predict", "--single", "--layers", "rk/Toy/layers.csv", "--freq", "max", "--board",
            "rk3399pro", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # each at its top level: B 35/8 ms, L 53/6 ms
    assert f"B at level 8: latency {35 / 8:.3f} ms" in r.stdout
    assert f"L at level 6: latency {53 / 6:.3f} ms" in r.stdout
    assert f"best single processor: B ({35 / 8:.3f} ms)" in r.stdout
    r = cli("predict", "--order", "BLL", "--layers", "rk/Toy/layers.csv", cwd=tmp_path)
    assert r.returncode == 2 and "--order needs --mode" in r.stderr


@pytest.mark.parametrize("console", [False, True])
def test_several_faults_at_random_flag_exactly_their_frames(console: bool, tmp_path: Path) -> None:
    """Three faults per recording, anywhere (warm-up frames, the last frame, two in one
    setting, a pair that cancels out in the count), over several recordings."""
    rng = np.random.default_rng(11)
    for seed in (21, 22, 23, 24):
        run, rec = make_run(seed, tmp_path)
        lay = run.layout
        segs = segments(rec)
        bad, where = rec, set()
        while len(where) < 3:
            s, f = int(rng.integers(len(lay.settings))), int(rng.integers(lay.runs))
            kind = str(rng.choice(["missed", "spurious"]))
            k = int(rng.integers(1 if kind == "missed" else 0, LAYER_MS.size))
            i = s * lay.per_setting + f * lay.per_frame + 2 * k + 1
            if (s, f) in where or kind == "spurious" and segs.stop[i] - segs.start[i] < 3:
                continue  # one fault per frame; a pulse needs a reading either side
            where.add((s, f))
            bad = _inject(bad, lay, kind, s, f, k, segs)
        al = align(bad, lay, run.console_ms if console else None)
        assert al.flagged == sorted(where), (seed, al.flagged, sorted(where))
