"""Layer windows that run on into the idle are flagged, and trimmed by the coupprof method.

On a second board the last layer's marker window ran 7-23x the console's time, into the
idle after it, and the layer's energy came out ~13x too high with nothing flagged. Here
the simulated INA260 logger (truth known) and ARM-CO-UP's own recordings (the clean
trace's figures as truth) get such windows: the last layer's marker stays up 9x its
time after the layer ends (a 10x window) while the board idles.
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

from profiler.recordings.align import align, segments
from profiler.recordings.attribute import armcoup_method, coupprof_method
from profiler.recordings.console import read_console_log
from profiler.recordings.importer import console_matrix
from profiler.recordings.layout import RunLayout, Setting
from profiler.recordings.outliers import find_outliers
from profiler.recordings.traces import Recording, read_armcoup_log
from profiler.sim.ina260 import SimulatedRun, simulate_run

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("COUPPROF_ARMCOUP_DIR") or REPO.parent / "shared" / "armcoup")
COUPPROF = str(Path(sys.executable).with_name("coupprof"))
LAYER_MS = np.array([12.0, 30.0, 8.0, 45.0, 20.0, 15.0, 25.0, 10.0])
LAYER_MW = np.array([3400.0, 3900.0, 3300.0, 4100.0, 3600.0, 3500.0, 3800.0, 3700.0])
SPEED = np.array([1.6, 1.25, 1.0])  # three settings, slowest first
POWER = np.array([0.9, 0.95, 1.0])
LAST = LAYER_MS.size - 1
LAYOUT = RunLayout("B" * LAYER_MS.size, frames=10, warmup=3,
                   settings=tuple(Setting(i + 1) for i in range(SPEED.size)))
REAL = {"BBBBBBBBBBBBBB": 8, "LLLLLLLLLLLLLL": 6, "NBNBNBNBNBNBNB": 8}
needs_real = pytest.mark.skipif(
    not (DATA / "Layers.csv").is_file(),
    reason=f"ARM-CO-UP's recordings are not at {DATA} (set COUPPROF_ARMCOUP_DIR)")


def simulated(seed: int, tmp: Path, overrun_frames: tuple[int, ...] | None = None,
              overrun: bool = True) -> tuple[SimulatedRun, Recording, Path]:
    run = simulate_run(LAYOUT, LAYER_MS[None, :] * SPEED[:, None],
                       LAYER_MW[None, :] * POWER[:, None], seed=seed,
                       overrun_x=9.0 if overrun else 0.0, overrun_frames=overrun_frames)
    path = tmp / f"power_Sim_{LAYOUT.order}.csv"
    path.write_text(run.text)
    return run, read_armcoup_log(path), path


def write_console(run: SimulatedRun, path: Path) -> None:
    """The run's layer times as ARM-CO-UP's console prints them (time_<model>_<order>.txt)."""
    lines = []
    for s, times in enumerate(run.console_ms):
        lines.append(f"{s} Running Graph with {'-'.join(['0'] * times.size)} LW DVFS")
        lines += [f"Layer Number: {k}   time: {t:.4f}" for k, t in enumerate(times)]
    path.write_text("\n".join(lines) + "\n")


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COUPPROF, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "160"})


@pytest.mark.parametrize("console,frames", [
    (True, None),  # the second board's case: every frame's last layer, console log given
    (False, (4, 12)),  # no console: a frame in the middle and the setting's last frame
    (True, (4, 12)),
])
def test_a_window_into_the_idle_is_flagged_and_trimmed(console: bool,
                                                       frames: tuple[int, ...] | None,
                                                       tmp_path: Path) -> None:
    run, rec, _ = simulated(31, tmp_path, frames)
    con = run.console_ms if console else None
    al = align(rec, LAYOUT, con)
    assert al.faults == 0
    out = find_outliers(al, con)
    measured = range(LAYOUT.warmup, LAYOUT.runs)
    want = {(s, f, LAST) for s in range(SPEED.size) for f in measured
            if frames is None or f in frames}
    assert {(o.setting, o.frame, o.layer) for o in out.windows} == want
    assert all(9.0 < o.ratio < 11.5 for o in out.windows)  # 10x the layer, +-jitter
    before = coupprof_method(rec, al, con)
    after = coupprof_method(rec, al, con, trim_ms=out.trimmed_ms())
    for f, g in zip(before.figures, after.figures, strict=True):
        if f.metric != "task":
            continue
        truth_mw = run.truth_power_mw[f.setting, f.layer]
        truth_mj = truth_mw * run.truth_time_ms[f.setting, f.layer] / 1000
        assert g.power_mw == pytest.approx(truth_mw, rel=0.02), (f.setting, f.layer)
        assert g.energy_mj == pytest.approx(truth_mj, rel=0.05), (f.setting, f.layer)
        if f.layer == LAST:  # untrimmed, the idle's energy came in with the window
            assert f.energy_mj > (2 if frames else 8) * truth_mj
            assert g.window_ms_mean == f.window_ms_mean  # the trace's windows, as they are
        else:
            assert g.power_mw == f.power_mw  # no other layer moves


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_clean_simulated_runs_have_no_outlier(seed: int, tmp_path: Path) -> None:
    run, rec, _ = simulated(seed, tmp_path, overrun=False)
    for con in (run.console_ms, None):
        out = find_outliers(align(rec, LAYOUT, con), con)
        assert out.windows == [] and out.judged == SPEED.size * LAYOUT.frames * LAYER_MS.size


def test_import_says_which_windows_and_what_was_done(tmp_path: Path) -> None:
    """Through the command, console log beside the trace: a note line, the sidecar's list,
    the rows' flags; coupprof trims, armcoup keeps its values (ARM-CO-UP's method)."""
    run, rec, path = simulated(32, tmp_path)
    write_console(run, tmp_path / f"time_Sim_{LAYOUT.order}.txt")
    r = cli("import", path.name, "--levels", "1-3", "-o", "ours", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    n = SPEED.size * LAYOUT.frames
    note = [ln for ln in r.stdout.splitlines() if "layer window(s) over 2x" in ln]
    assert len(note) == 1 and note[0].startswith(f"note: {n} layer window(s)")
    assert "trimmed to it from their start edge" in note[0]
    assert "(level 1, frame 3, layer 7)" in note[0] and f"and {n - 6} more" in note[0]
    meta = json.loads((tmp_path / f"ours/Sim_{LAYOUT.order}.json").read_text())
    side = meta["outlier_windows"]
    assert side["action"] == "trimmed" and len(side["windows"]) == n
    assert {(w["level"], w["frame"], w["layer"], w["reference"]) for w in side["windows"]} == {
        (s + 1, f, LAST, "console") for s in range(SPEED.size)
        for f in range(LAYOUT.warmup, LAYOUT.runs)}
    assert note[0][len("note: "):] in meta["notes"]
    table = pd.read_csv(tmp_path / f"ours/Sim_{LAYOUT.order}.csv")
    last = table[table["layer"] == LAST]
    assert (last["outlier_windows"] == LAYOUT.frames).all()
    assert last["flags"].str.contains(f"{LAYOUT.frames} window\\(s\\) over 2x the layer's time "
                                      "trimmed").all()
    assert (table[table["layer"] != LAST]["outlier_windows"] == 0).all()
    truth_mj = run.truth_power_mw[:, LAST] * run.truth_time_ms[:, LAST] / 1000
    np.testing.assert_allclose(last["energy_mj"], truth_mj, rtol=0.05)
    np.testing.assert_allclose(last["power_w"] * 1000, run.truth_power_mw[:, LAST], rtol=0.02)
    # ARM-CO-UP's method keeps the windows and its figures: flagged, not changed
    r = cli("import", path.name, "--levels", "1-3", "--method", "armcoup", "-o", "theirs",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "were kept (the armcoup method reproduces ARM-CO-UP's figures" in r.stdout
    theirs = pd.read_csv(tmp_path / f"theirs/Sim_{LAYOUT.order}.csv")
    meta = json.loads((tmp_path / f"theirs/Sim_{LAYOUT.order}.json").read_text())
    assert meta["outlier_windows"]["action"] == "kept"
    con = console_matrix(read_console_log(tmp_path / f"time_Sim_{LAYOUT.order}.txt"), LAYOUT)
    plain = armcoup_method(rec, align(rec, LAYOUT, con), con)
    want = [f.power_mw / 1000 for f in plain.figures if f.metric == "task"]
    assert theirs["power_w"].tolist() == want
    assert theirs[theirs["layer"] == LAST]["flags"].str.contains("kept").all()


def _with_idle_tails(rec: Recording, lay: RunLayout, frames: tuple[int, ...] | None,
                     ) -> tuple[Recording, set[tuple[int, int, int]]]:
    """A copy of a real trace in which the last layer's marker stays up 9x the layer's
    window after it, in ``frames`` of every setting (all: None); and the measured windows
    so made. The marker stays up over the next gap's first 5 ms of readings (the sensor's
    lagging fall from the layer's power, as recorded), then over the trace's own idle
    readings (from its longest segment, so the sensor's repeats stay as they were) 1.5 ms
    apart (later readings moved on), then drops."""
    segs = segments(rec)
    longest = int(np.argmax(segs.duration_ms))
    idle_mw = rec.power_mw[segs.start[longest] + 100:segs.stop[longest] - 100]
    at, extra, made = [], [], set()
    level = rec.level.copy()
    active = rec.active.copy()
    for s in range(len(lay.settings)):
        for f in range(lay.runs):
            if frames is not None and f not in frames:
                continue
            i = s * lay.per_setting + f * lay.per_frame + lay.per_frame - 1
            a, b = int(segs.stop[i]), int(segs.stop[i + 1])  # the next gap's readings
            up = a + int(np.searchsorted(rec.t_ms[a:b], rec.t_ms[a] + 5.0))
            level[a:up], active[a:up] = level[a - 1], True
            at.append(up)
            extra.append(int(9 * segs.duration_ms[i] / 1.5))
            if f >= lay.warmup:
                made.add((s, f, lay.layers - 1))
    out = copy.deepcopy(rec)
    rec = copy.deepcopy(rec)
    rec.level, rec.active = level, active
    pos = np.repeat(at, extra)
    tick = np.concatenate([np.arange(1, n + 1) * 1.5 for n in extra])
    shift = np.zeros(rec.readings)
    for a, n in zip(at, extra, strict=True):
        shift[a:] += n * 1.5
    base = rec.t_ms[np.array(at) - 1].repeat(extra) + shift[np.array(at) - 1].repeat(extra)
    out.t_ms = np.insert(rec.t_ms + shift, pos, base + tick)
    out.power_mw = np.insert(rec.power_mw, pos,
                             np.concatenate([idle_mw[:n] for n in extra]))
    out.level = np.insert(rec.level, pos, rec.level[np.array(at) - 1].repeat(extra))
    out.active = np.insert(rec.active, pos, True)
    out.line = np.insert(rec.line, pos, -1)
    return out, made


def _real(order: str) -> tuple[Recording, RunLayout, np.ndarray]:
    rec = read_armcoup_log(DATA / f"power_MobileV1_{order}.csv")
    lay = RunLayout(order, 10, 3, tuple(Setting(i + 1) for i in range(REAL[order])))
    return rec, lay, console_matrix(read_console_log(DATA / f"time_MobileV1_{order}.txt"), lay)


@needs_real
@pytest.mark.parametrize("order", sorted(REAL))
def test_no_window_of_the_clean_real_traces_is_an_outlier(order: str) -> None:
    rec, lay, con = _real(order)
    for cm in (con, None):
        out = find_outliers(align(rec, lay, cm), cm)
        assert out.windows == [] and out.judged == REAL[order] * lay.frames * lay.layers
    assert out.console_ratio is None


@needs_real
@pytest.mark.parametrize("console,frames", [(True, None), (False, (5, 12))])
def test_idle_tails_in_a_real_trace(console: bool, frames: tuple[int, ...] | None) -> None:
    """ARM-CO-UP's B trace with idle tails after the last layer: those windows are flagged,
    and the coupprof figures of every layer stay within 2 % of the clean trace's."""
    rec, lay, con = _real("BBBBBBBBBBBBBB")
    cm = con if console else None
    clean_al = align(rec, lay, cm)
    clean = coupprof_method(rec, clean_al, cm)
    bad, made = _with_idle_tails(rec, lay, frames)
    al = align(bad, lay, cm)
    assert al.faults == 0
    out = find_outliers(al, cm)
    assert {(o.setting, o.frame, o.layer) for o in out.windows} == made
    got = coupprof_method(bad, al, cm, clean.lag_ms, trim_ms=out.trimmed_ms())
    untrimmed = coupprof_method(bad, al, cm, clean.lag_ms)
    for f, g, u in zip(clean.figures, got.figures, untrimmed.figures, strict=True):
        if f.metric != "task":
            continue
        assert g.power_mw == pytest.approx(f.power_mw, rel=0.02), (f.setting, f.layer)
        assert g.energy_mj == pytest.approx(f.energy_mj, rel=0.05), (f.setting, f.layer)
        if f.layer == lay.layers - 1:
            assert u.energy_mj > (2 if frames else 5) * f.energy_mj
