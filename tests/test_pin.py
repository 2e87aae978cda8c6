"""`coupprof pin` and the restore guarantee, in real subprocesses on fake board trees.

Each test starts a real process with COUPPROF_SYSFS_ROOT pointing at a fake tree,
lets it set the level, checks the tree while the command runs, signals it (or lets
it end), then compares every file of the tree with its original byte for byte. The
fake kernel's `settle()` plays the kernel's part at the moments we look.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_sysfs import build, snapshot

REPO = Path(__file__).resolve().parent.parent
COUPPROF = [sys.executable, "-m", "profiler"]
B = "sys/devices/system/cpu/cpufreq/policy4"


def env_for(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["COUPPROF_SYSFS_ROOT"] = str(root / "sys")
    env["PYTHONPATH"] = str(REPO)
    return env


def start(args: list[str], root: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(args, env=env_for(root), cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for_line(proc: subprocess.Popen[str], needle: str, timeout_s: float = 30) -> list[str]:
    """Read stderr lines until one contains `needle` (the process announces each step)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    proc.kill()
    raise AssertionError(f"never saw {needle!r}; stderr so far: {''.join(lines)}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_pin_holds_816_mhz_then_restores_every_file_when_signalled(tmp_path, sig):
    tree = build("rk3399pro", tmp_path)
    before = snapshot(tmp_path)
    proc = start([*COUPPROF, "pin", "--board", "rk3399pro", "--processor", "B", "--freq", "3",
                  "--", "sleep", "5"], tmp_path)
    lines = wait_for_line(proc, "running: sleep 5")
    assert any("pinned B at level 3 (816 MHz)" in ln for ln in lines)
    tree.kernel.settle()  # the kernel acts on what coupprof wrote
    pol = tmp_path / B
    assert (pol / "scaling_governor").read_text() == "userspace\n"
    assert (pol / "scaling_setspeed").read_text() == "816000\n"
    assert (pol / "scaling_cur_freq").read_text() == "816000\n"
    t0 = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 4, "the signal was not forwarded to sleep"
    assert proc.returncode == 128 + sig, err
    assert "restored B's governor state" in err
    tree.kernel.settle()
    assert snapshot(tmp_path) == before


def test_pin_exit_code_is_the_commands_and_files_come_back(tmp_path):
    tree = build("rk3399pro", tmp_path)
    before = snapshot(tmp_path)
    # The command itself checks the pinned state (the fake kernel is not running, so it
    # reads what coupprof wrote) and fails with 7.
    script = (f"test \"$(cat {B}/scaling_setspeed)\" = 1800000 && "
              f"test \"$(cat {B}/scaling_governor)\" = userspace && exit 7")
    out = subprocess.run([*COUPPROF, "pin", "--board", "rk3399pro", "-p", "B", "--freq", "max",
                          "--", "sh", "-c", script], env=env_for(tmp_path), cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 7, out.stderr
    tree.kernel.settle()
    assert snapshot(tmp_path) == before


def test_pin_gpu_on_qcs6490_kgsl_and_restore(tmp_path):
    tree = build("qcs6490", tmp_path)
    before = snapshot(tmp_path)
    kg = "sys/class/kgsl/kgsl-3d0"
    script = f"test \"$(cat {kg}/max_pwrlevel) $(cat {kg}/min_pwrlevel)\" = '2 2'"
    out = subprocess.run([*COUPPROF, "pin", "-p", "G", "--freq", "4", "--", "sh", "-c", script],
                         env=env_for(tmp_path), cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    # level 4 of 315/450/550/608/700/812 MHz is 608 MHz = kgsl power level 2; board detected
    assert out.returncode == 0, out.stderr
    assert "608 MHz" in out.stderr and "kgsl" in out.stderr
    tree.kernel.settle()
    assert snapshot(tmp_path) == before


def test_out_of_range_level_exits_2_listing_levels_in_mhz(tmp_path):
    build("rk3399pro", tmp_path)
    before = snapshot(tmp_path)
    out = subprocess.run([*COUPPROF, "pin", "--board", "rk3399pro", "--processor", "B",
                          "--freq", "9", "--", "true"], env=env_for(tmp_path), cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "--freq 9 is out of range" in out.stderr
    assert "1=408 MHz" in out.stderr and "8=1800 MHz" in out.stderr
    assert snapshot(tmp_path) == before  # nothing was touched


def test_pin_without_command_or_with_unknown_board_is_bad_input(tmp_path):
    build("rk3399pro", tmp_path)
    for args in (["-p", "B", "--freq", "3"], ["--board", "nope", "-p", "B", "--freq", "3", "--",
                                              "true"]):
        out = subprocess.run([*COUPPROF, "pin", *args], env=env_for(tmp_path), cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, out.stderr
        assert "Traceback" not in out.stderr


GUARD_PROGRAM = """
import sys, time
from pathlib import Path
from governors import RestoreGuard, make_governor
from profiler.boards.profiles import load_board
board = load_board("rk3399pro")
govs = [make_governor(board, board.processor(x), Path(sys.argv[1])) for x in "LBG"]
with RestoreGuard(govs):
    for g in govs:
        g.request_khz(g.proc.freqs_khz[0])
    print("set", flush=True)
    time.sleep(30)
"""


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, -signal.SIGINT), (signal.SIGTERM, 143),
                                      (signal.SIGHUP, 129)])
def test_library_guard_restores_all_domains_on_signal(tmp_path, sig, code):
    """A program using RestoreGuard directly: SIGINT -> KeyboardInterrupt (Python then dies of
    SIGINT), SIGTERM/SIGHUP ->
    exit 128+n; every file of the tree is back either way."""
    tree = build("rk3399pro", tmp_path)
    before = snapshot(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", GUARD_PROGRAM, str(tmp_path / "sys")],
                            env=env_for(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "set\n"
    tree.kernel.settle()
    assert (tmp_path / B / "scaling_cur_freq").read_text() == "408000\n"
    assert snapshot(tmp_path) != before
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    if sig == signal.SIGINT:
        assert "KeyboardInterrupt" in err
    tree.kernel.settle()
    assert snapshot(tmp_path) == before
