"""ARM-CO-UP ``Layers.csv`` tables from other boards: levels named ``min`` / ``max`` or
given as frequencies map through the board profile, for `coupprof import` and
`coupprof calibrate`; a table listing rows twice (two runs) keeps the copy asked for.

The synthetic tables are made here for bundled profiles; the real table is read from
../shared/armcoup (or $COUPPROF_ARMCOUP_DIR) and those tests skip when it is absent.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.boards.model import Board
from profiler.boards.profiles import load_board
from profiler.calibrate.board import armcoup_measurements
from profiler.recordings.armcoup_tables import layers_table
from profiler.recordings.importer import read_published
from tests.test_import_synthetic import cli

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("COUPPROF_ARMCOUP_DIR") or REPO.parent / "shared" / "armcoup")
real_data = pytest.mark.skipif(
    not (DATA / "Layers.csv").is_file(),
    reason=f"ARM-CO-UP's recordings are not at {DATA} (set COUPPROF_ARMCOUP_DIR)")
HEADER = "Graph,Component,Freq,Freq_Host,Layer,Metric,Time,Power"


def _domain(board: Board, letter: str) -> tuple[int, ...]:
    return board.dvfs_domain(letter).freqs_khz


def test_level_names_and_frequencies_map_through_another_boards_profile(tmp_path: Path) -> None:
    """khadas-vim3: L 11 levels, B 15, G 5 driven from B, N without DVFS (B's levels)."""
    board = load_board("khadas-vim3")
    cells = [  # (Component, Freq, Freq_Host, 0-based level and host level they name)
        ("B", "min", "-1", 0, None), ("B", "max", "", 14, None), ("B", "3", "-1", 3, None),
        ("B", "1512MHz", "-1", 7, None), ("B", "2.208 GHz", "-1", 14, None),
        ("L", "1800000kHz", "-1", 10, None), ("L", "MAX", "-1", 10, None),
        ("G", "max", "min", 4, 0), ("G", "285.714MHz", "max", 0, 14), ("G", "2", "5", 2, 5),
        ("N", "max", "max", 14, 14), ("N", "min", "min", 0, 0),
    ]
    rows = [HEADER] + [f"Toy,{c},{f},{h},{k},task,{10.0 + k},{3000 + 10 * k}"
                       for k, (c, f, h, _, _) in enumerate(cells)]
    (tmp_path / "Layers.csv").write_text("\n".join(rows) + "\n")
    r = cli("import", "Layers.csv", "--board", "khadas-vim3", "-o", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got = pd.read_csv(tmp_path / "out/Toy/layers.csv").set_index("layer")
    for k, (c, _, _, level0, host0) in enumerate(cells):
        row = got.loc[k]
        assert row["processor"] == c and row["freq_level"] == level0 + 1, (k, row)
        assert row["freq_khz"] == _domain(board, c)[level0], k
        if host0 is None:
            assert pd.isna(row["host_level"]), k
        else:
            assert row["host_level"] == host0 + 1 and \
                row["host_freq_khz"] == board.processor("B").freqs_khz[host0], k
        assert row["time_ms_mean"] == 10.0 + k


@pytest.mark.parametrize("command", ["import", "calibrate"])
@pytest.mark.parametrize("cell,column,needles", [
    ("turbo", "Freq", ["Freq 'turbo' at line 3 (Component B)", "min, max",
                       "0-based level 0-7", "1800MHz"]),
    ("8", "Freq", ["Freq '8' at line 3", "0-based level 0-7"]),
    ("1500MHz", "Freq", ["Freq '1500MHz' at line 3", "408MHz, 600MHz"]),
    ("top", "Freq_Host", ["Freq_Host 'top' at line 3 (Component G)", "min, max"]),
])
def test_a_level_the_board_lacks_is_one_line(command: str, cell: str, column: str,
                                             needles: list[str], tmp_path: Path) -> None:
    """rk3399pro's levels (the sim board calibrate maps with has the same): B 0-7."""
    bad = f"Toy,B,{cell},-1,1,task,5.0,3100" if column == "Freq" else \
        f"Toy,G,max,{cell},1,task,5.0,3100"
    (tmp_path / "Layers.csv").write_text(
        f"{HEADER}\nToy,B,max,-1,0,task,5.0,3100\n{bad}\n")
    r = cli(command, "Layers.csv", *(["-o", "x.toml"] if command == "calibrate" else []),
            cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = [ln for ln in r.stderr.splitlines() if not ln.startswith("coupprof: ")]
    assert len(err) == 1 and err[0].startswith(f"coupprof {command}: error: "), r.stderr
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in err[0], (n, err[0])


def _two_runs(tmp_path: Path) -> tuple[dict[tuple[int, int], list[tuple[float, float]]], Path]:
    """A B table listed twice, the second run slower and hungrier; level 8 written as a
    number in one run and ``max`` in the other (the same key). Layer 2 at level 1 is in
    the first run only."""
    copies: dict[tuple[int, int], list[tuple[float, float]]] = {}
    rows = [HEADER]
    for run in (0, 1):
        for freq in (0, 7):
            for layer in (0, 1, 2):
                if run == 1 and (freq, layer) == (0, 2):
                    continue
                t, p = 10.0 + layer + 5.0 * run + freq, 3000.0 + 100 * layer + 250 * run
                name = "max" if (freq == 7 and run == 1) else str(freq)
                rows.append(f"Toy,B,{name},-1,{layer},task,{t},{p}")
                copies.setdefault((freq + 1, layer), []).append((t, p))
        rows.append(",,,,,,,")
    path = tmp_path / "Layers.csv"
    path.write_text("\n".join(rows) + "\n")
    return copies, path


@pytest.mark.parametrize("how", ["default", "first", "last", "mean"])
def test_duplicate_rows_keep_the_copy_asked_for(how: str, tmp_path: Path) -> None:
    copies, _ = _two_runs(tmp_path)
    extra = sum(len(c) - 1 for c in copies.values())
    keys = sum(len(c) > 1 for c in copies.values())
    assert (extra, keys) == (5, 5)
    r = cli("import", "Layers.csv", "-o", "out",
            *(["--duplicates", how] if how != "default" else []), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    note = f"Layers.csv lists {keys} rows more than once ({extra} extra copies"
    assert note in r.stderr and "2 blank rows of Layers.csv skipped" in r.stdout
    assert note in json.loads((tmp_path / "out/Toy/layers.json").read_text())["notes"][0]
    got = pd.read_csv(tmp_path / "out/Toy/layers.csv")
    assert len(got) == len(copies)
    for (level, layer), c in copies.items():
        row = got[(got["freq_level"] == level) & (got["layer"] == layer)].iloc[0]
        t, p = {"first": c[0], "mean": tuple(np.mean(c, axis=0))}.get(how, c[-1])
        assert row["time_ms_mean"] == pytest.approx(t, rel=1e-12), (level, layer)
        assert row["power_w"] == pytest.approx(p / 1000, rel=1e-12), (level, layer)
        assert row["energy_mj"] == pytest.approx(p / 1000 * t, rel=1e-12), (level, layer)
    # --published reads the table the same way: one row per key, levels as numbers
    pub = read_published(tmp_path / "Layers.csv", load_board("rk3399pro"),
                         "last" if how == "default" else how)
    assert pub is not None and len(pub) == len(copies)
    assert sorted(set(pub["Freq"])) == [0, 7]


@real_data
def test_real_table_with_level_names_and_two_runs_imports_and_calibrates(
        tmp_path: Path) -> None:
    """ARM-CO-UP's Layers.csv with every lowest level written ``min``, every top level
    ``max`` and level 3 as its frequency in MHz, Freq_Host too: the same tables and the
    same measurements calibrate fits (SqueezeV1's) as the numbers give. Then a second run of
    SqueezeV1's B rows appended, 10 % slower: calibrate fits the copy asked for."""
    board = load_board("rk3399pro")
    lines = (DATA / "Layers.csv").read_text().splitlines()
    named, renamed = [lines[0]], 0

    def name(cell: str, freqs: tuple[int, ...]) -> str:
        i = int(float(cell))
        return {0: "min", len(freqs) - 1: "max", 3: f"{freqs[3] // 1000}MHz"}.get(i, cell)

    for ln in lines[1:]:
        f = ln.split(",")
        if f[0]:
            host = board.processor(f[1]).host
            f[2] = name(f[2], _domain(board, f[1]))
            if host and float(f[3]) >= 0:
                f[3] = name(f[3], _domain(board, host))
            renamed += f[2] in ("min", "max") or f[3] in ("min", "max")
        named.append(",".join(f))
    assert renamed > 4000
    (tmp_path / "Named.csv").write_text("\n".join(named) + "\n")
    r = cli("import", "Named.csv", "-o", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    want, _ = layers_table(DATA / "Layers.csv", board, "rk3399pro")
    for graph, table in want.items():
        got = pd.read_csv(tmp_path / f"out/{graph}/layers.csv")
        pd.testing.assert_frame_equal(got, pd.read_csv(io.StringIO(table.to_csv(index=False))),
                                      check_dtype=False)
    sim = load_board("sim")
    ref = armcoup_measurements(DATA / "Layers.csv", sim, ["SqueezeV1"])
    got_ms = armcoup_measurements(tmp_path / "Named.csv", sim, ["SqueezeV1"])
    assert list(got_ms) == list(ref) == ["L", "B", "G"]
    for p in ref:
        pd.testing.assert_frame_equal(got_ms[p].rows, ref[p].rows)
    # a second run of SqueezeV1 on B, 10 % slower, appended
    again = [ln.split(",") for ln in named[1:]]
    again = [f for f in again if f[0] == "SqueezeV1" and f[1] == "B"]
    for f in again:
        f[6] = repr(float(f[6]) * 1.1)
    (tmp_path / "Twice.csv").write_text(
        "\n".join(named + [",".join(f) for f in again]) + "\n")
    base = ref["B"].rows[ref["B"].rows["model"] == "SqueezeV1"]["time_ms"].to_numpy()
    for how, scale in (("first", 1.0), ("last", 1.1), ("mean", 1.05)):
        notes: list[str] = []
        ms = armcoup_measurements(tmp_path / "Twice.csv", sim, ["SqueezeV1"], how, notes)
        np.testing.assert_allclose(ms["B"].rows["time_ms"].to_numpy(), base * scale,
                                   rtol=1e-12)
        assert f"Twice.csv lists {len(again)} rows more than once" in notes[0]
    # one fast CLI fit: B on SqueezeV1 alone, no validation
    r = cli("calibrate", "Twice.csv", "--processors", "B", "--models", "SqueezeV1",
            "--no-validate", "--duplicates", "mean", "-o", "b.toml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"Twice.csv lists {len(again)} rows more than once" in r.stderr
    assert "averaged Time and Power" in r.stderr
    assert load_board(str(tmp_path / "b.toml")).simulated
