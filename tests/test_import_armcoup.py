"""`coupprof import` on ARM-CO-UP's own RK3399Pro recordings (../shared/armcoup/).

The data are not part of the project: they are read from ../shared/armcoup beside the
checkout, or $COUPPROF_ARMCOUP_DIR, and these tests skip when neither exists.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.recordings.align import Alignment, align, segments
from profiler.recordings.attribute import armcoup_method, coupprof_method
from profiler.recordings.console import read_console_log
from profiler.recordings.importer import console_matrix
from profiler.recordings.layout import RunLayout, Setting
from profiler.recordings.traces import Recording, read_armcoup_log

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("COUPPROF_ARMCOUP_DIR") or REPO.parent / "shared" / "armcoup")
COUPPROF = str(Path(sys.executable).with_name("coupprof"))

pytestmark = pytest.mark.skipif(
    not (DATA / "Layers.csv").is_file(),
    reason=f"ARM-CO-UP's recordings are not at {DATA} (set COUPPROF_ARMCOUP_DIR)")

# order -> (levels stepped, Layers.csv rows the trace covers: 'in' + every layer of the
# order's processor, per level; NB keeps only the N rows)
RECORDINGS = {
    "BBBBBBBBBBBBBB": (8, 8 * 15),
    "LLLLLLLLLLLLLL": (6, 6 * 15),
    "NBNBNBNBNBNBNB": (8, 8 * 8),
}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COUPPROF, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "160"})


@pytest.mark.parametrize("order", sorted(RECORDINGS))
def test_armcoup_method_reproduces_layers_csv(order: str, tmp_path: Path) -> None:
    r = cli("import", str(DATA / f"power_MobileV1_{order}.csv"), "--method", "armcoup",
            "--published", str(DATA / "Layers.csv"), "-o", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    compare = pd.read_csv(tmp_path / f"out/MobileV1_{order}_compare.csv")
    covered = compare.dropna(subset=["published_mw"])
    assert len(covered) == RECORDINGS[order][1]
    assert covered["armcoup_vs_published_rel"].max() < 1e-9
    table = pd.read_csv(tmp_path / f"out/MobileV1_{order}.csv")
    meta = json.loads((tmp_path / f"out/MobileV1_{order}.json").read_text())
    assert meta["method"] == "armcoup" and meta["alignment"]["faults"] == 0
    assert meta["source"]["sha256"] and meta["alignment"]["scored_with_console"]
    assert 2.0 <= meta["sensor_lag_ms"] <= 3.5  # ~2 readings, as their data show
    # their Time column is the console's (an NPU layer's: its run only); so is this table's
    raw = pd.read_csv(DATA / "Layers.csv").dropna(how="all")
    raw = raw[(raw["Graph"] == "MobileV1") & (raw["Metric"] == "task")]
    checked = 0
    for row in table.itertuples():
        pub = raw[(raw["Component"] == row.processor) & (raw["Freq"] == row.freq_level - 1)
                  & (raw["Layer"] == row.layer)
                  & (raw["Freq_Host"] == (row.freq_level - 1 if row.processor == "N" else -1))]
        if order.startswith("N") and row.processor != "N":
            continue
        assert len(pub) == 1
        assert row.time_ms_mean == pytest.approx(pub["Time"].iloc[0], rel=1e-9)
        checked += 1
    assert checked == RECORDINGS[order][1] - RECORDINGS[order][0]  # all but the 'in' rows


def _real(order: str) -> tuple[Recording, RunLayout, np.ndarray]:
    rec = read_armcoup_log(DATA / f"power_MobileV1_{order}.csv")
    lay = RunLayout(order, 10, 3, tuple(Setting(i + 1) for i in range(RECORDINGS[order][0])))
    return rec, lay, console_matrix(read_console_log(DATA / f"time_MobileV1_{order}.txt"), lay)


@functools.cache
def _real_aligned(console: bool) -> tuple[Recording, RunLayout, np.ndarray | None, Alignment]:
    """B's real trace aligned as recorded (shared by the fault cases; nothing mutates it)."""
    rec, lay, con = _real("BBBBBBBBBBBBBB")
    con = con if console else None
    return rec, lay, con, align(rec, lay, con)


def _inject(rec: Recording, lay: RunLayout, kind: str, s: int, f: int, k: int) -> Recording:
    segs = segments(rec)
    out = copy.deepcopy(rec)
    if kind == "missed":  # the edges around the gap before layer k are lost
        i = s * lay.per_setting + f * lay.per_frame + 2 * k
        out.level[segs.start[i]:segs.stop[i]] = 0
        out.active[segs.start[i]:segs.stop[i]] = True
    else:  # one reading in the middle of layer k reads the idle level
        i = s * lay.per_setting + f * lay.per_frame + 2 * k + 1
        m = (segs.start[i] + segs.stop[i]) // 2
        out.level[m], out.active[m] = 1, False
    return out


@pytest.mark.parametrize("console", [True, False])
@pytest.mark.parametrize("kind,where,changed", [
    ("missed", (2, 5, 4), {(2, 3), (2, 4)}),
    ("spurious", (4, 7, 3), {(4, 3)}),
])
def test_fault_in_a_real_trace_flags_its_frame_only(kind: str, where: tuple[int, int, int],
                                                    changed: set[tuple[int, int]],
                                                    console: bool) -> None:
    rec, lay, con, clean = _real_aligned(console)
    bad = _inject(rec, lay, kind, *where)
    al = align(bad, lay, con)
    assert clean.faults == 0 and al.faults == 1 and al.flagged == [where[:2]]
    for method in (armcoup_method, coupprof_method):
        before = {(f.setting, f.layer): f.power_mw for f in method(rec, clean, con).figures
                  if f.metric == "task"}
        after = {(f.setting, f.layer): f.power_mw for f in method(bad, al, con).figures
                 if f.metric == "task"}
        assert {k for k in before if before[k] != after[k]} == changed, method.__name__


def test_default_method_against_armcoup(tmp_path: Path) -> None:
    """The corrected figures sit above theirs (their windows take in the lower power of the
    gap before each layer, through the sensor's lag); the comparison names both."""
    r = cli("import", str(DATA / "power_MobileV1_BBBBBBBBBBBBBB.csv"), "-o", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "sensor lag: 2.5 ms" in r.stdout and "compensated" in r.stdout
    cmp = pd.read_csv(tmp_path / "out/MobileV1_BBBBBBBBBBBBBB_compare.csv")
    task = cmp[cmp["metric"] == "task"]
    assert len(task) == 8 * 14 and task["diff_pct"].median() > 2.0
    table = pd.read_csv(tmp_path / "out/MobileV1_BBBBBBBBBBBBBB.csv")
    assert (table["frames"] == 10).all()  # warm-up left out
    assert table["flags"].fillna("").str.contains("previous frequency").any()


def test_predict_on_imported_tables(tmp_path: Path) -> None:
    """For the five CNNs, `predict --single` prints each processor's latency at its top
    level (G and N with their host at its top) and the best single processor: the sums
    of ARM-CO-UP's task times, and their smallest."""
    r = cli("import", str(DATA / "Layers.csv"), str(DATA / "Transfers.csv"), "-o", "rk",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    raw = pd.read_csv(DATA / "Layers.csv").dropna(how="all")
    for model in ("Alex", "Google", "MobileV1", "ResV1_50", "SqueezeV1"):
        task = raw[(raw["Graph"] == model) & (raw["Metric"] == "task")]
        want = {}
        for letter in "LBGN":
            rows = task[task["Component"] == letter]
            if rows.empty:
                continue
            top = rows[rows["Freq"] == rows["Freq"].max()]
            if letter in "GN":
                top = top[top["Freq_Host"] == top["Freq_Host"].max()]
            want[letter] = top["Time"].sum()
        r = cli("predict", "--single", "--layers", f"rk/{model}/layers.csv", "--transfers",
                f"rk/{model}/transfers.csv", "--freq", "max", "--board", "rk3399pro", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        got = {ln[0]: float(ln.split("latency ", 1)[1].split(" ms")[0])
               for ln in r.stdout.splitlines() if re.match(r"^[LBGN] at level \d+: latency", ln)}
        assert got == pytest.approx(want, abs=1e-3), model
        best = min(want, key=lambda k: want[k])
        assert f"best single processor: {best} (" in r.stdout, model
    # coupprof plot reads the imported tables as its own (Fig. 16, 17 and 18)
    for kind, src, extra in (("efficiency", "layers", ()), ("layers", "layers", ("--level", "max")),
                             ("transfers", "transfers", ())):
        r = cli("plot", kind, f"rk/MobileV1/{src}.csv", *extra, "-o", f"{kind}.png", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / f"{kind}.png").stat().st_size > 10_000
    # one mapping through --order gives the same latency as --single's line for it
    n = 14
    r = cli("predict", "--order", "B" * n, "--mode", "switch", "--layers",
            "rk/MobileV1/layers.csv", "--transfers", "rk/MobileV1/transfers.csv", "--freq", "max",
            "--board", "rk3399pro", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    latency = float(r.stdout.split("latency ", 1)[1].split(" ms", 1)[0])
    b = raw[(raw["Graph"] == "MobileV1") & (raw["Metric"] == "task") & (raw["Component"] == "B")]
    assert latency == pytest.approx(b[b["Freq"] == 7]["Time"].sum(), abs=1e-3)
