"""`coupprof doctor` on fake board trees, a fake /dev and the virtual logger's pty."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fake_sysfs import build

from profiler.cli.doctor import collect

REPO = Path(__file__).resolve().parent.parent


def items(report, section):
    return {i.name: i for i in report.items if i.section == section}


def test_doctor_on_a_rock_pi_tree(tmp_path):
    tree = build("rk3399pro", tmp_path)
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "gpiochip0").write_text("")
    (tree.sys / "bus/gpio/devices/gpiochip0").mkdir(parents=True)
    (tree.sys / "bus/gpio/devices/gpiochip0/label").write_text("gpio0\n")
    r = collect(tree.sys, dev, None, ports=[], identify=True)
    board = items(r, "board")
    assert board["device tree model"].detail == "Radxa ROCK Pi N10"
    assert board["detected"].detail == "rk3399pro"
    gov = items(r, "governors")
    assert gov["L"].ok and gov["B"].ok and gov["G"].ok
    assert "policy4" in gov["B"].detail and "userspace" in gov["B"].detail
    assert gov["N"].ok is None
    assert items(r, "gpio")["gpiochip0"].detail == "label gpio0"
    delegate = items(r, "accelerators")["N delegate"]
    assert delegate.ok is False and "librknn_delegate.so" in delegate.fix
    assert items(r, "runtime")["inference runtime"].ok


def test_doctor_reports_levels_the_kernel_does_not_offer(tmp_path):
    tree = build("rk3399pro", tmp_path)
    avail = tree.sys / "devices/system/cpu/cpufreq/policy4/scaling_available_frequencies"
    avail.write_text("408000 600000 816000 1008000 1200000 1416000 1800000 \n")
    r = collect(tree.sys, tmp_path / "dev", "rk3399pro", ports=[], identify=False)
    bad = items(r, "governors")["B levels"]
    assert bad.ok is False and "1608 MHz are not offered" in bad.detail
    assert "freqs_khz" in bad.fix


def test_doctor_names_unwritable_governor_files_and_the_fix():
    base = Path(tempfile.mkdtemp(prefix="coupprof-doc-"))
    try:
        base.chmod(0o755)
        tree = build("rpi5", base)
        for p in [*base.rglob("*")]:
            if not p.is_symlink():
                p.chmod(0o755 if p.is_dir() else 0o444)
        uid = os.geteuid()
        if uid == 0:
            os.seteuid(65534)
        try:
            r = collect(tree.sys, base / "dev", None, ports=[], identify=False)
        finally:
            if uid == 0:
                os.seteuid(0)
        probs = [i for i in r.problems if i.section == "governors"]
        assert probs, r.items
        assert any("scaling_governor" in i.detail for i in probs)
        assert all("run as root" in i.fix and "chmod" in i.fix for i in probs)
    finally:
        for p in [base, *base.rglob("*")]:
            if not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(base)


def test_doctor_reads_the_logger_identity_over_a_pty(tmp_path):
    from profiler.power.virtual_logger import VirtualLogger

    empty = tmp_path / "sys"
    empty.mkdir()
    with VirtualLogger(fw_version="doc-1.2", rate_hz=2000) as logger:
        r = collect(empty, tmp_path / "dev", None, ports=[logger.port, "loop://"],
                    identify=True)
    serial = items(r, "serial")
    ok = serial[f"{logger.port} logger"]
    assert ok.ok and "firmware doc-1.2" in ok.detail and "2000 Hz" in ok.detail
    silent = serial["loop:// logger"]
    assert silent.ok is False and silent.fix
    assert items(r, "board")["using"].detail.startswith("sim:")


def test_doctor_cli_exit_codes(tmp_path):
    tree = build("rk3399pro", tmp_path)
    env = dict(os.environ, PYTHONPATH=str(REPO), COUPPROF_SYSFS_ROOT=str(tree.sys))
    cmd = [sys.executable, "-m", "profiler", "doctor", "--no-identify", "--dev-root",
           str(tmp_path / "dev")]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "coupprof doctor" in out.stdout and "problem(s)" in out.stdout
    assert "fix: install librknn_delegate.so" in out.stdout
    strict = subprocess.run([*cmd, "--strict"], env=env, capture_output=True, text=True,
                            timeout=60)
    assert strict.returncode == 1
