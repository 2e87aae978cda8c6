"""Board profiles: schema validation, the bundled boards, detection, `coupprof boards`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fake_sysfs import build

from profiler.boards.model import resolve_level
from profiler.boards.profiles import (
    BOARDS_DIR,
    detect_board,
    list_boards,
    load_board,
    load_profile,
    select_board,
)
from profiler.errors import BoardError

REPO = Path(__file__).resolve().parent.parent
COUPPROF = [sys.executable, "-m", "profiler"]

# ARM-CO-UP Table 9, typed from the paper (MHz, mV); big level 6 is printed 1417 there.
TABLE9 = {
    "L": [(408, 800), (600, 800), (816, 850), (1008, 925), (1200, 1000), (1416, 1125)],
    "B": [(408, 800), (600, 800), (816, 825), (1008, 875), (1200, 950), (1416, 1025),
          (1608, 1100), (1800, 1200)],
    "G": [(200, 800), (300, 800), (400, 825), (600, 925), (800, 1100)],
}


def test_every_bundled_profile_validates():
    names = [p.stem for p in BOARDS_DIR.glob("*.toml")]
    assert set(names) == {"rk3399pro", "qcs6490", "rpi5", "khadas-vim3", "jetson-orin-nano", "sim"}
    assert set(list_boards()) == {*names, "host"}
    for name in names:
        board = load_board(name)
        assert board.name == name and board.description
        for p in board.processors.values():
            if p.kind != "cpu":
                assert p.host in board.processors and board.processor(p.host).kind == "cpu"
                assert p.accelerator or p.delegate or board.simulated
            assert list(p.freqs_khz) == sorted(set(p.freqs_khz))


@pytest.mark.parametrize("name", ["rk3399pro", "sim"])
def test_rk3399pro_and_sim_carry_arm_co_up_table_9(name):
    board = load_board(name)
    for letter, rows in TABLE9.items():
        p = board.processor(letter)
        assert [(f // 1000, v) for f, v in zip(p.freqs_khz, p.volts_mv, strict=True)] == rows
    assert board.processor("B").cores == (4, 5) and board.processor("L").cores == (0, 1, 2, 3)
    assert set(board.processors) == {"L", "B", "G", "N"}
    assert board.processor("N").host == "B"


def test_rk3399pro_sysfs_paths_and_qcs6490_topology():
    rk = load_board("rk3399pro")
    assert rk.processor("L").governor.path.endswith("policy0")
    assert rk.processor("B").governor.path.endswith("policy4")
    assert rk.processor("G").governor.path == "class/devfreq/ff9a0000.gpu"
    assert rk.processor("N").delegate
    qc = load_board("qcs6490")
    assert qc.processor("B").freqs_khz[-1] == 2400000      # 3x A78 at 2.4 GHz
    assert qc.processor("L").freqs_khz[-1] == 1900800      # 4x A55 at 1.9 GHz
    assert len(qc.processor("L").cores) == 4 and len(qc.processor("B").cores) == 3
    assert qc.processor("G").governor.kind == "kgsl"
    assert qc.processor("N").accelerator == "npu"
    assert load_board("khadas-vim3").processor("G").governor.kind == "mpgpu"


def test_freq_9_on_rk3399pro_big_lists_levels_in_mhz():
    b = load_board("rk3399pro").processor("B")
    assert resolve_level(b, "3", "rk3399pro") == (3, 816000)
    with pytest.raises(BoardError) as info:
        resolve_level(b, "9", "rk3399pro")
    assert "1=408 MHz" in str(info.value) and "8=1800 MHz" in str(info.value)
    assert info.value.exit_code == 2


GOOD = """
[board]
description = "test board"
[processors.B]
kind = "cpu"
name = "A72"
cores = [0, 1]
freqs_khz = [408000, 816000]
volts_mv = [800, 900]
governor = { kind = "cpufreq", path = "devices/system/cpu/cpufreq/policy0" }
[processors.G]
kind = "gpu"
name = "Mali"
host = "B"
freqs_khz = [200000]
governor = { kind = "devfreq", path = "class/devfreq/gpu" }
accelerator = "gpu"
"""

BAD = [
    # (replace this, with that, key named, problem text)
    ('name = "A72"', 'name = "A72"\nturbo = true', "processors.B.turbo", "unknown key"),
    ("[408000, 816000]", "[816000, 408000]", "processors.B.freqs_khz", "must ascend"),
    ("[408000, 816000]", "[408, 816]", "processors.B.freqs_khz", "looks like MHz"),
    ("[800, 900]", "[800]", "processors.B.volts_mv", "has 1 entries but freqs_khz has 2"),
    ('host = "B"', 'host = "L"', "processors.G.host", "'L' is not a CPU processor"),
    ('kind = "devfreq"', 'kind = "cpufreqz"', "processors.G.governor.kind", "must be one of"),
    ('kind = "devfreq"', 'kind = "sim"', "processors.G.governor.kind", "only for simulated"),
    ('description = "test board"', "", "board.description", "missing"),
    ("[processors.B]", "[processors.X]", "processors.X", "must be one of L, B, G, N"),
    ('path = "class/devfreq/gpu"', 'path = "/sys/class/devfreq/gpu"',
     "processors.G.governor.path", "relative to the sysfs root"),
    ('governor = { kind = "cpufreq", path = "devices/system/cpu/cpufreq/policy0" }', "",
     "processors.B.governor", "needs a governor"),
    ("cores = [0, 1]", "cores = [0, 0]", "processors.B.cores", "distinct"),
    ('accelerator = "gpu"', 'accelerator = "tpu"', "processors.G.accelerator", "must be one of"),
    ('description = "test board"', 'description = "test board"\nsim = { idle_power_mw = 1 }',
     "board.sim", "only simulated boards"),
]


@pytest.mark.parametrize("old,new,key,problem", BAD)
def test_invalid_profile_names_file_key_and_problem(tmp_path, old, new, key, problem):
    assert old in GOOD
    path = tmp_path / "myboard.toml"
    path.write_text(GOOD.replace(old, new, 1))
    with pytest.raises(BoardError) as info:
        load_profile(path)
    msg = str(info.value)
    assert str(path) in msg and f"'{key}'" in msg and problem in msg, msg


def test_good_profile_loads_with_defaults(tmp_path):
    path = tmp_path / "myboard.toml"
    path.write_text(GOOD)
    board = load_profile(path)
    assert board.name == "myboard" and board.source == path
    assert board.processor("G").cores == (0, 1)  # borrowed from its host
    assert load_board(str(path)).processors.keys() == board.processors.keys()


def _set_key(text: str, table: str, key: str, value: str | None) -> str:
    """`text` with `key` of `[table]` set to `value` (None: the line removed)."""
    head = text.index(f"[{table}]\n")
    m = re.compile(rf"^{key} = .*\n", re.M).search(text, head)
    assert m is not None and "\n[" not in text[head + 1:m.start()], f"{table}.{key} not found"
    return text[:m.start()] + ("" if value is None else f"{key} = {value}\n") + text[m.end():]


def test_sim_profile_rules(tmp_path):
    text = (BOARDS_DIR / "sim.toml").read_text()
    for table, k, value, key, problem in [
        ("processors.B.sim.timing", "roofline_p", "0.5", "processors.B.sim.timing.roofline_p",
         "at least 1"),
        ("processors.B.sim.timing", "act_gb_s", "-1", "processors.B.sim.timing.act_gb_s",
         "[0, 1e+09]"),
        ("processors.G.sim.timing", "call_us", None, "processors.G.sim.timing.call_us",
         "missing"),
        ("processors.L.sim.timing.macs_per_cycle", "depthwise", "0",
         "processors.L.sim.timing.macs_per_cycle.depthwise", "[1e-09, 1e+06]"),
        ("processors.B.sim.power", "ceff_nf", '"big"', "processors.B.sim.power.ceff_nf",
         "must be a number"),
        ("processors.N.sim", "nominal_khz", None, "processors.N.sim.nominal_khz", "missing"),
        ("processors.B.sim", "dvfs_delay_up_us", "[3811, 193]",
         "processors.B.sim.dvfs_delay_up_us", "[shortest, longest]"),
    ]:
        path = tmp_path / "s.toml"
        path.write_text(_set_key(text, table, k, value))
        with pytest.raises(BoardError) as info:
            load_profile(path)
        assert f"'{key}'" in str(info.value) and problem in str(info.value), str(info.value)


def test_invalid_toml_and_unknown_board(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[board\n")
    with pytest.raises(BoardError, match=r"broken\.toml is not valid TOML"):
        load_profile(path)
    with pytest.raises(BoardError, match=r"unknown board 'nope'.*rk3399pro"):
        load_board("nope")


def test_select_board_detects_overrides_and_falls_back_to_sim(tmp_path):
    notes: list[str] = []
    empty = tmp_path / "empty" / "sys"
    empty.mkdir(parents=True)
    assert select_board(None, empty, notes.append).name == "sim"
    assert "no known board" in notes[0] and "'sim'" in notes[0]
    tree = build("khadas-vim3", tmp_path / "vim")
    assert detect_board(tree.sys) == "khadas-vim3"
    assert select_board(None, tree.sys, notes.append).name == "khadas-vim3"
    assert select_board("rpi5", tree.sys, notes.append).name == "rpi5"  # --board wins
    assert len(notes) == 1


def test_host_board_from_a_fake_tree(tmp_path):
    tree = build("rk3399pro", tmp_path)
    host = load_board("host", tree.sys)
    assert host.processor("L").cores == (0, 1, 2, 3)
    assert host.processor("B").cores == (4, 5)
    assert host.processor("B").freqs_khz == load_board("rk3399pro").processor("B").freqs_khz


def run_cli(*args: str, root: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if root is not None:
        env["COUPPROF_SYSFS_ROOT"] = str(root)
    else:
        env.pop("COUPPROF_SYSFS_ROOT", None)
    return subprocess.run([*COUPPROF, *args], env=env, capture_output=True, text=True, timeout=60)


def test_boards_cli_lists_and_marks_the_detected_board(tmp_path):
    tree = build("qcs6490", tmp_path)
    out = run_cli("boards", root=tree.sys)
    assert out.returncode == 0, out.stderr
    for name in ("rk3399pro", "qcs6490", "rpi5", "khadas-vim3", "jetson-orin-nano", "sim", "host"):
        assert name in out.stdout
    assert "qcs6490*" in out.stdout and "RUBIK Pi 3" in out.stdout
    assert "[simulated]" in out.stdout  # printed as text, not read as markup


def test_boards_show_prints_levels_in_mhz_and_validates_paths(tmp_path):
    out = run_cli("boards", "show", "rk3399pro")
    assert out.returncode == 0, out.stderr
    assert "1800 / 1200" in out.stdout and "600 / 925" in out.stdout
    assert "class/devfreq/ff9a0000.gpu" in out.stdout
    sim = run_cli("boards", "show", "sim")
    assert "simulated" in sim.stdout and "MAC/cycle" in sim.stdout and "C_eff nF" in sim.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text(GOOD.replace("[408000, 816000]", "[816000, 408000]"))
    out = run_cli("boards", "show", str(bad))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "processors.B.freqs_khz" in out.stderr and "must ascend" in out.stderr
    out = run_cli("boards", "show", "nope")
    assert out.returncode == 2 and "unknown board 'nope'" in out.stderr
