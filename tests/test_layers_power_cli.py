"""`coupprof layers --power arduino:PORT` failing, through the real CLI as a subprocess.

The logger is a `VirtualLogger` in this test process speaking the firmware's protocol
on a real pty, so the CLI's pyserial collector talks to it exactly as to
/dev/ttyACM0. Exit codes (README, `coupprof --help`): 4 when the logger fails (silent
from the start, or its port vanishing mid-run: timings are still written), 3 when the
port cannot be opened at all, 2 for a malformed spec or a stream source without a
marker. Errors are one line naming the port, never a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from profiler.sim.virtual_logger import VirtualLogger

COUPPROF = [sys.executable, "-m", "profiler"]


def coupprof(*args: str, cwd: Path, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COUPPROF, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout_s)


def layers(tmp_path: Path, *extra: str) -> list[str]:
    return ["layers", "--board", "sim", "--frames", "3", "--warmup", "0", "--baseline-s", "0.1",
            "--csv", str(tmp_path / "out.csv"), *extra]


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def test_logger_that_never_answers_exits_4_naming_the_port(tmp_path: Path) -> None:
    with VirtualLogger(answer_commands=False) as logger:
        proc = coupprof(*layers(tmp_path, "--power", f"arduino:{logger.port}",
                                "--marker", "sysfs:17"), cwd=tmp_path)
        asked = logger.counters.commands
    assert proc.returncode == 4, proc.stderr
    line = one_line_error(proc)
    assert logger.port in line and "did not answer IDENTIFY" in line
    assert f"--power arduino:{logger.port}" in line  # the fix names the flag to check
    assert asked >= 2  # it asked (and asked again) before giving up
    assert not (tmp_path / "out.csv").exists()  # nothing was measured


def test_port_that_does_not_exist_exits_3(tmp_path: Path) -> None:
    port = str(tmp_path / "ttyACM9")
    proc = coupprof(*layers(tmp_path, "--power", f"arduino:{port}", "--marker", "sysfs:17"),
                    cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    line = one_line_error(proc)
    assert port in line and f"--power arduino:{port}" in line


@pytest.mark.parametrize(("power", "why"), [
    ("arduino", "expected arduino:PORT"),
    ("arduino:/dev/null", "no --marker was given"),
])
def test_bad_power_specs_exit_2(tmp_path: Path, power: str, why: str) -> None:
    proc = coupprof(*layers(tmp_path, "--power", power), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert why in one_line_error(proc)


def fake_gpio(root: Path, number: int) -> Path:
    """A /sys/class/gpio tree with line `number` already exported (as plain files)."""
    gpio = root / "class" / "gpio"
    line = gpio / f"gpio{number}"
    line.mkdir(parents=True)
    for name, text in (("export", ""), ("unexport", ""), (f"gpio{number}/direction", "in"),
                       (f"gpio{number}/value", "0")):
        (gpio / name).write_text(text + "\n" if text else "")
    return line / "value"


@pytest.mark.parametrize("method", ["sliced", "fused"])
def test_port_vanishing_mid_run_exits_4_and_keeps_the_timings(tmp_path: Path,
                                                               method: str) -> None:
    """The pty closes while frames run: exit 4, the CSV with every frame's timings and a
    sidecar recording the power error are still written (by either method: G's default
    is fused)."""
    value = fake_gpio(tmp_path / "sys", 17)
    with VirtualLogger(2.0) as logger:
        def pull_cable() -> None:  # once the marker has gone high, the run is on
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not value.read_text().startswith("1"):
                time.sleep(0.001)
            logger.close_port()

        puller = threading.Thread(target=pull_cable, daemon=True)
        puller.start()
        proc = coupprof(*layers(tmp_path, "--frames", "30", "--power", f"arduino:{logger.port}",
                                "--marker", "sysfs:17", "--sysfs-root", str(tmp_path / "sys"),
                                "--method", method),
                        cwd=tmp_path)
        puller.join(timeout=5)
    assert proc.returncode == 4, proc.stderr
    line = one_line_error(proc)
    assert logger.port in line and "vanished" in line
    csv = (tmp_path / "out.csv").read_text().splitlines()
    # header + a row per layer of the default model (+ the fixed row, fused)
    assert len(csv) == 1 + 15 + (method == "fused")
    meta = json.loads((tmp_path / "out.json").read_text())
    assert logger.port in meta["extra"]["power_error"]
