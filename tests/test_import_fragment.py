"""`coupprof import --format auto` on an ARM-CO-UP log whose first line was cut (the
logger started mid-line): recognised from most of its first lines, the fragment skipped
and reported like any malformed line, and the table the whole log gives. A generic CSV
with a header is never taken for one.

The real B trace is read from ../shared/armcoup (or $COUPPROF_ARMCOUP_DIR); that case
skips when it is absent.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from profiler.recordings.traces import looks_like_armcoup
from tests.test_import_synthetic import cli, make_run

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("COUPPROF_ARMCOUP_DIR") or REPO.parent / "shared" / "armcoup")
B = "BBBBBBBBBBBBBB"


def _cuts(first: str) -> list[str]:
    """What a logger started mid-line leaves of ``pin,millis,mW``: from the first comma
    (``,4487,3000.00``), from the millis' last digit (``7,3000.00``), and the power's
    last four characters (``0.00``)."""
    c1, c2 = first.index(","), first.index(",", first.index(",") + 1)
    return [first[c1:], first[c2 - 1:], first[-4:]]


def _import(path: Path, out: str, *extra: str) -> tuple[pd.DataFrame, pd.DataFrame, str, dict]:
    r = cli("import", str(path), "-o", out, *extra, cwd=path.parent)
    assert r.returncode == 0, r.stderr
    stem = path.stem.removeprefix("power_")
    o = path.parent / out
    return (pd.read_csv(o / f"{stem}.csv"), pd.read_csv(o / f"{stem}_compare.csv"), r.stderr,
            json.loads((o / f"{stem}.json").read_text()))


def _check_cut_logs(whole: Path, tmp_path: Path, *extra: str, cuts: int = 3) -> None:
    """Each cut of the first line: detected, its fragment reported as line 1, the layer
    table the whole log's; the comparison (ARM-CO-UP's method averages the first gap,
    warm-up included) is the log's without that reading."""
    lines = whole.read_text().splitlines(keepends=True)
    assert looks_like_armcoup(whole)
    table, _, _, _ = _import(whole, "whole", *extra)
    dropped = tmp_path / "dropped" / whole.name
    dropped.parent.mkdir()
    dropped.write_text("".join(lines[1:]))
    _, compare, _, _ = _import(dropped, "out", *extra)
    for i, cut in enumerate(_cuts(lines[0].rstrip("\n"))[:cuts]):
        path = tmp_path / f"cut{i}" / whole.name
        path.parent.mkdir()
        path.write_text(cut + "\n" + "".join(lines[1:]))
        assert looks_like_armcoup(path), cut
        got, got_compare, err, meta = _import(path, "out", *extra)
        assert f"1 malformed line skipped in {whole.name}: 1 (" in err, (cut, err)
        assert meta["source"]["format"] == "armcoup" and meta["source"]["skipped_lines"][0][0] == 1
        pd.testing.assert_frame_equal(got, table)
        pd.testing.assert_frame_equal(got_compare, compare)


def test_a_cut_first_line_imports_as_the_whole_log(tmp_path: Path) -> None:
    make_run(12, tmp_path)
    _check_cut_logs(tmp_path / "power_Sim_BBBBBBBB.csv", tmp_path, "--levels", "1-3")


@pytest.mark.skipif(not (DATA / f"power_MobileV1_{B}.csv").is_file(),
                    reason=f"ARM-CO-UP's recordings are not at {DATA} (set COUPPROF_ARMCOUP_DIR)")
def test_a_cut_first_line_of_the_real_trace_imports_as_the_whole(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    for name in (f"power_MobileV1_{B}.csv", f"time_MobileV1_{B}.txt"):
        shutil.copy(DATA / name, tmp_path / "src" / name)
    whole = tmp_path / "src" / f"power_MobileV1_{B}.csv"
    _check_cut_logs(whole, tmp_path, "--console", str(tmp_path / "src" / f"time_MobileV1_{B}.txt"),
                    cuts=1)


@pytest.mark.parametrize("cut", ["1,4", "1,44", "0,4487,30"])
def test_a_cut_last_line_is_dropped_and_said(cut: str, tmp_path: Path) -> None:
    """A logger unplugged mid-write: the last line has no newline. Even where it parses
    (``0,4487,30``: 30 mW of 3000.00) its digits may be cut, so it is dropped and reported,
    and the table is the one of the log without it (it exited 2 before, asking the user
    to cut the file with head -n)."""
    make_run(14, tmp_path)
    whole = tmp_path / "power_Sim_BBBBBBBB.csv"
    table, _, _, _ = _import(whole, "whole", "--levels", "1-3")
    path = tmp_path / "cut" / whole.name
    path.parent.mkdir()
    text = whole.read_text()
    path.write_text(text + cut)
    got, _, err, meta = _import(path, "out", "--levels", "1-3")
    n = text.count("\n") + 1
    assert f"1 malformed line skipped in {whole.name}: {n} (no newline" in err, err
    assert meta["source"]["skipped_lines"] == [[n, "no newline: the logger stopped mid-reading"]]
    pd.testing.assert_frame_equal(got, table)


@pytest.mark.parametrize("text,armcoup", [
    ("0.00\n" + "1,10,3000.00\n" * 3, True),
    ("\n\n,4487,3000.00\n1,4489,5380.00\n", True),
    ("1,10,3000.00\n1,11,3000.00\n1,12,", True),  # a cut last line: the reader says so
    ("0.00\n", False),
    ("pin,millis,mW\n" + "1,10,3000.00\n" * 60, False),  # a header: a generic CSV
    ("t,P,D0\n0,1,0\n1,1,1\n", False),
    ("0.001,3000.0,1,5\n" * 10, False),
    ("1,10,3000.00\n" + "garbage\n" * 5, False),
])
def test_detection_reads_most_of_the_first_lines(text: str, armcoup: bool,
                                                 tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    assert looks_like_armcoup(path) is armcoup


def test_a_generic_csv_with_a_header_is_read_by_its_columns(tmp_path: Path) -> None:
    """A header naming pin, millis and mW columns over ARM-CO-UP-like rows: read as the
    generic CSV it is (by the named columns), the same readings as the log itself."""
    make_run(13, tmp_path)
    log = tmp_path / "power_Sim_BBBBBBBB.csv"
    csv = tmp_path / "csv" / "export.csv"
    csv.parent.mkdir()
    csv.write_text("pin,millis,mW\n" + log.read_text())
    assert not looks_like_armcoup(csv)
    r = cli("import", str(csv), "--order", "BBBBBBBB", "--levels", "1-3", "--board", "rk3399pro",
            "--time-col", "millis", "--time-unit", "ms", "--power-col", "mW", "--power-unit",
            "mW", "--marker-col", "pin", "--active-level", "0", "-o", "out", cwd=csv.parent)
    assert r.returncode == 0, r.stderr
    meta = json.loads((csv.parent / "out/export_BBBBBBBB.json").read_text())
    assert meta["source"]["format"] == "csv" and meta["source"]["skipped_lines"] == []
    whole, _, _, _ = _import(log, "whole", "--levels", "1-3")
    got = pd.read_csv(csv.parent / "out/export_BBBBBBBB.csv")
    pd.testing.assert_frame_equal(got.drop(columns="model"), whole.drop(columns="model"))
