"""`coupprof doctor` on fake board trees, a fake /dev and the virtual logger's pty."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fake_host import add_nvidia, bare_vm
from fake_sysfs import build
from udev_model import add_gpio_chip, add_usb_serial, apply_rules

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
        assert all("run as root" in i.fix and "--udev" in i.fix for i in probs)
    finally:
        for p in [base, *base.rglob("*")]:
            if not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(base)


def test_doctor_reads_the_logger_identity_over_a_pty(tmp_path):
    from profiler.sim.virtual_logger import VirtualLogger

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


def doctor_cli(sys_root: Path, dev: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), COUPPROF_SYSFS_ROOT=str(sys_root))
    return subprocess.run([sys.executable, "-m", "profiler", "doctor", "--no-identify",
                           "--dev-root", str(dev), *args],
                          env=env, capture_output=True, text=True, timeout=60)


def test_doctor_on_a_gpu_machine_with_no_board_says_host_measures_it(tmp_path):
    sys_root = bare_vm(tmp_path)
    add_nvidia(tmp_path)
    r = collect(sys_root, tmp_path / "dev", None, ports=[], identify=False)
    assert items(r, "board")["this machine"].detail == \
        "a GPU (NVIDIA H100 80GB HBM3) (`--board host` measures it)"
    out = doctor_cli(sys_root, tmp_path / "dev")
    assert out.returncode == 0, out.stderr
    assert ("hint: this machine has a GPU (NVIDIA H100 80GB HBM3): `--board host` measures "
            "it; 'sim', used here, is simulated and its numbers are modelled") in out.stdout
    assert "without sudo" not in out.stdout  # the simulated board needs no rule


def test_doctor_on_a_bare_vm_gives_no_host_hint(tmp_path):
    sys_root = bare_vm(tmp_path)
    r = collect(sys_root, tmp_path / "dev", None, ports=[], identify=False)
    assert items(r, "board")["this machine"].detail == "no cpufreq and no GPU"
    assert r.hints == []
    out = doctor_cli(sys_root, tmp_path / "dev")
    assert out.returncode == 0 and "hint:" not in out.stdout


def test_doctor_prints_the_rule_and_group_for_the_board(tmp_path):
    tree = build("rk3399pro", tmp_path)
    add_gpio_chip(tmp_path, 0, "gpio0")
    add_usb_serial(tmp_path, "ttyACM0", "2341", "0043", "85539313231351E0E1A1", port="1-2")
    out = doctor_cli(tree.sys, tmp_path / "dev", "--port", "/dev/ttyACM0")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "run coupprof on rk3399pro without sudo" in text
    assert "  sudo groupadd --system coupprof\n" in text
    install = ("  coupprof doctor --board rk3399pro --port /dev/ttyACM0 --udev | sudo tee "
               "/etc/udev/rules.d/99-coupprof.rules\n")
    assert install in text
    # The rule file shown is what the install command writes, byte for byte.
    udev = doctor_cli(tree.sys, tmp_path / "dev", "--board", "rk3399pro", "--port",
                      "/dev/ttyACM0", "--udev")
    assert udev.returncode == 0 and udev.stderr == ""
    shown = text.split("--udev` prints it):\n", 1)[1]
    assert shown == "".join(f"  {line}\n" if line else "\n"
                            for line in udev.stdout.splitlines())
    eff = apply_rules(udev.stdout, tmp_path)
    assert (tree.sys / "devices/system/cpu/cpufreq/policy4/scaling_setspeed") in eff.writable
    assert set(eff.nodes) == {tmp_path / "dev/gpiochip0", tmp_path / "dev/ttyACM0"}


def test_doctor_udev_on_the_simulated_board_is_one_line_and_exit_2(tmp_path):
    sys_root = bare_vm(tmp_path)
    out = doctor_cli(sys_root, tmp_path / "dev", "--udev")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "coupprof doctor: error: board 'sim' is simulated: it needs no udev rule; name the "
        "real board with --board NAME (or --board host)"]
    bad = doctor_cli(sys_root, tmp_path / "dev", "--udev", "--board", "rpi5", "--group", "x y")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
