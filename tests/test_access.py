"""Least privilege: the udev rule and group `coupprof doctor --udev` prints, read by a
small model of udev (tests/udev_model.py) against every fake board tree, and used: a
normal user (nobody) pins each processor after the rule's commands ran, not before."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_sysfs import BUILDERS, build, snapshot
from udev_model import add_gpio_chip, add_mali_node, add_uart, add_usb_serial, apply_rules

from governors import RestoreGuard, SysfsIO
from governors.factory import KINDS
from profiler.boards.profiles import load_board
from profiler.errors import BadInputError
from profiler.platform.access import (
    NO_EVENT,
    gpio_chip_name,
    plan_access,
)

REPO = Path(__file__).resolve().parent.parent
GROUP = "nogroup"  # a group every Debian system has; the plan takes any name
NOBODY = 65534
ARDUINO = ("2341", "0043", "85539313231351E0E1A1")
CH340 = ("1a86", "7523", None)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")


def with_devices(root: Path, board: str) -> None:
    """What a real board has beside its governor files: GPIO chips, the logger on USB,
    another USB serial adapter, a UART, and on the VIM3 the Mali node."""
    add_gpio_chip(root, 0, "gpio0")
    add_gpio_chip(root, 1, "gpio1")
    add_usb_serial(root, "ttyACM0", *ARDUINO, port="1-2")
    add_usb_serial(root, "ttyUSB0", *CH340, port="1-3")
    add_uart(root, "ttyS0")
    if board == "khadas-vim3":
        add_mali_node(root)


def governor_writes(board_name: str, tree) -> set[Path]:
    """Every file the board's governors write while setting every level by every method
    (cpufreq and devfreq: userspace and clamp) and restoring, as files of the tree."""
    board = load_board(board_name)
    tree.kernel.writes.clear()
    for proc in board.processors.values():
        spec = proc.governor
        if spec is None or spec.kind not in KINDS:
            continue
        methods = ["userspace", "clamp"] if spec.kind in ("cpufreq", "devfreq") else [None]
        for method in methods:
            kw = {"method": method} if method else {}
            gov = KINDS[spec.kind](proc, SysfsIO(tree.sys, tree.kernel.on_write), spec.path, **kw)
            with RestoreGuard([gov]):
                for level in range(1, len(proc.freqs_khz) + 1):
                    gov.set_level(level, settle_s=0)
    return {(tree.sys / rel).resolve() for rel, _ in tree.kernel.writes}


def may_write(board_name: str, tree) -> set[Path]:
    """The files each governor snapshots before writing: all it may ever write."""
    board = load_board(board_name)
    out = set()
    for proc in board.processors.values():
        spec = proc.governor
        if spec is not None and spec.kind in KINDS:
            gov = KINDS[spec.kind](proc, SysfsIO(tree.sys), spec.path)
            out |= {(tree.sys / spec.path / f).resolve() for f in gov.state_files()}
    return out


@pytest.mark.parametrize("board_name", sorted(BUILDERS))
def test_the_rule_grants_exactly_what_the_governors_write(board_name: str, tmp_path: Path
                                                         ) -> None:
    tree = build(board_name, tmp_path)
    with_devices(tmp_path, board_name)
    plan = plan_access(load_board(board_name), tree.sys, group=GROUP, ports=["/dev/ttyACM0"])
    eff = apply_rules(plan.rules_text(), tmp_path)
    granted = {p.resolve() for p in eff.writable}
    written = governor_writes(board_name, tree)
    no_event = {p for p in written if any(str(p).endswith(f) for fs in NO_EVENT.values()
                                          for f in fs)}
    assert written - no_event <= granted, sorted(map(str, written - no_event - granted))
    assert granted <= may_write(board_name, tree)  # nothing else
    assert all(p.is_file() for p in granted)  # the paths the rule names are the tree's
    # Every granted file gets the group; the root-only read is cpufreq's hardware readback.
    assert {p.resolve() for p in eff.groups} == granted | {p.resolve() for p in eff.readable}
    assert all(eff.groups[p] == GROUP for p in eff.groups)
    assert {p.name for p in eff.readable} <= {"cpuinfo_cur_freq"}
    cpufreq_dirs = {p.parent for p in granted if p.name == "scaling_governor"}
    assert {p.resolve().parent for p in eff.readable} == cpufreq_dirs
    # Device nodes: the marker's chip and the logger's port, no other chip, port or UART.
    assert eff.nodes == {tmp_path / "dev/gpiochip0": (GROUP, "0660"),
                         tmp_path / "dev/ttyACM0": (GROUP, "0660")}


def test_cpufreq_rules_hang_on_the_policys_first_cpu_and_set_attributes_by_run(
        tmp_path: Path) -> None:
    tree = build("rk3399pro", tmp_path)
    text = plan_access(load_board("rk3399pro"), tree.sys, ports=[]).rules_text()
    rules = [line for line in text.splitlines() if line and not line.startswith("#")]
    b = next(r for r in rules if 'KERNEL=="cpu4"' in r)
    assert b.startswith('ACTION!="remove", SUBSYSTEM=="cpu", KERNEL=="cpu4", RUN+="/bin/chgrp '
                        'coupprof /sys/devices/system/cpu/cpufreq/policy4/scaling_governor ')
    assert 'RUN+="/bin/chmod g+r /sys/devices/system/cpu/cpufreq/policy4/cpuinfo_cur_freq"' in b
    assert "GROUP=" not in b and "MODE=" not in b  # they would only touch a /dev node
    g = next(r for r in rules if 'SUBSYSTEM=="devfreq"' in r)
    assert 'KERNEL=="ff9a0000.gpu"' in g and "set_freq" not in g
    assert "/sys/class/devfreq/ff9a0000.gpu/min_freq" in g
    chip = next(r for r in rules if 'SUBSYSTEM=="gpio"' in r)
    assert chip == 'SUBSYSTEM=="gpio", KERNEL=="gpiochip0", GROUP="coupprof", MODE="0660"'
    assert "userspace/set_freq appears root-only" in text  # said, not silently left out


def test_without_ports_every_usb_serial_port_counts_but_no_uart(tmp_path: Path) -> None:
    tree = build("rpi5", tmp_path)
    with_devices(tmp_path, "rpi5")
    plan = plan_access(load_board("rpi5"), tree.sys, group=GROUP, ports=None)
    eff = apply_rules(plan.rules_text(), tmp_path)
    assert set(eff.nodes) == {tmp_path / f"dev/{n}" for n in ("gpiochip0", "ttyACM0", "ttyUSB0")}
    text = plan.rules_text()
    assert 'ATTRS{idVendor}=="2341", ATTRS{idProduct}=="0043", ATTRS{serial}=="85539313231351E0E1A1"' \
        in text
    assert 'ATTRS{idVendor}=="1a86", ATTRS{idProduct}=="7523", GROUP=' in text  # no serial number


def test_no_logger_plugged_in_is_said_in_the_file(tmp_path: Path) -> None:
    tree = build("rpi5", tmp_path)
    plan = plan_access(load_board("rpi5"), tree.sys, ports=None)
    assert "no USB serial port found" in plan.rules_text()
    assert not any(g.subsystem == "tty" for g in plan.grants)


@pytest.mark.parametrize("marker,chip", [
    (None, "gpiochip0"), ("gpiod:17", "gpiochip0"), ("gpiod:gpiochip4:17", "gpiochip4"),
    ("gpiod:/dev/gpiochip1:17,27", "gpiochip1"), ("gpiod:2:GPIO17", "gpiochip2"),
    ("sysfs:17", None), ("none", None),
])
def test_the_gpio_chip_is_the_markers(marker: str | None, chip: str | None) -> None:
    assert gpio_chip_name(load_board("rpi5"), marker) == chip


def test_the_simulated_board_needs_nothing(tmp_path: Path) -> None:
    plan = plan_access(load_board("sim"), tmp_path)
    assert plan.grants == [] and "needs no privileges" in plan.rules_text()


def test_a_bad_group_name_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="not a valid group name"):
        plan_access(load_board("rpi5"), tmp_path, group="Bad Group")


def test_setup_commands_trigger_the_subsystems_of_the_rules(tmp_path: Path) -> None:
    tree = build("qcs6490", tmp_path)
    with_devices(tmp_path, "qcs6490")
    cmds = plan_access(load_board("qcs6490"), tree.sys, ports=["/dev/ttyACM0"]).setup_commands()
    assert cmds[0] == "sudo groupadd --system coupprof"
    assert ("coupprof doctor --board qcs6490 --port /dev/ttyACM0 --udev | sudo tee "
            "/etc/udev/rules.d/99-coupprof.rules") in cmds  # makes the same rules again
    assert cmds[-1] == ("sudo udevadm control --reload && sudo udevadm trigger "
                        "--subsystem-match=cpu --subsystem-match=gpio --subsystem-match=kgsl "
                        "--subsystem-match=tty")


# ---- as a normal user ---------------------------------------------------------------

@pytest.fixture
def kernel_owned_tree() -> Iterator[Path]:
    """A directory nobody can traverse into (pytest's tmp_path is 0700), for trees whose
    files are root's with the kernel's modes: 0644, cpuinfo_cur_freq 0400."""
    base = Path(tempfile.mkdtemp(prefix="coupprof-access-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base)


def kernel_modes(root: Path) -> None:
    for p in root.rglob("*"):
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o400 if p.name == "cpuinfo_cur_freq" else 0o644)


# The CLI in a subprocess whose effective user and group are nobody's, with no other
# group. The drop comes after Python has started and loaded the command: the interpreter
# may live where nobody cannot read (here /root/.pyenv); file access is checked against
# the effective ids, so the governors meet the tree as a normal user would.
AS_NOBODY = f"""
import os, sys
from profiler.cli import build_parser, main
build_parser(sys.argv[1:])
os.setgroups([])
os.setegid({NOBODY})
os.seteuid({NOBODY})
sys.exit(main(sys.argv[1:]))
"""


def pin_as_nobody(tree_sys: Path, board: str, letter: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), COUPPROF_SYSFS_ROOT=str(tree_sys),
               PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(
        [sys.executable, "-c", AS_NOBODY, "pin", "--board", board, "--processor", letter,
         "--freq", "1", "--", "true"],
        env=env, capture_output=True, text=True, timeout=60, cwd="/")


@as_root
@pytest.mark.parametrize("board_name", ["rk3399pro", "qcs6490", "khadas-vim3"])
def test_a_normal_user_pins_every_processor_once_the_rule_ran(board_name: str,
                                                              kernel_owned_tree: Path) -> None:
    root = kernel_owned_tree
    tree = build(board_name, root)
    with_devices(root, board_name)
    kernel_modes(root)
    board = load_board(board_name)
    letters = [p.letter for p in board.processors.values() if p.has_dvfs]
    refused = pin_as_nobody(tree.sys, board_name, letters[0])
    assert refused.returncode == 3, refused.stderr
    assert "permission denied" in refused.stderr or "not writable" in refused.stderr

    before = snapshot(root)
    plan = plan_access(board, tree.sys, group=GROUP, ports=["/dev/ttyACM0"])
    eff = apply_rules(plan.rules_text(), root, execute=True)
    for letter in letters:
        out = pin_as_nobody(tree.sys, board_name, letter)
        assert out.returncode == 0, (letter, out.stderr)
        assert "restored" in out.stderr
        tree.kernel.settle()  # what the kernel does after the writes (setspeed, cur_freq)
    assert snapshot(root) == before  # every value put back
    for node in eff.nodes:  # and the nodes are the group's, read-write
        st = node.stat()
        assert st.st_gid == NOBODY and st.st_mode & 0o777 == 0o660


@as_root
def test_devfreq_clamps_when_the_kernel_makes_set_freq_root_only(kernel_owned_tree: Path
                                                                ) -> None:
    """In process, with the fake kernel acting as root: it creates userspace/set_freq 0644
    root's when the userspace governor starts, as the real one does, with no udev event."""
    root = kernel_owned_tree
    tree = build("rk3399pro", root)
    kernel_modes(root)
    board = load_board("rk3399pro")
    apply_rules(plan_access(board, tree.sys, group=GROUP, ports=[]).rules_text(), root,
                execute=True)
    before = snapshot(root)
    gpu = tree.sys / "class/devfreq/ff9a0000.gpu"

    def kernel_as_root(path: Path, value: str) -> None:
        os.seteuid(0)
        os.setegid(0)
        try:
            tree.kernel.on_write(path, value)
        finally:
            os.setegid(NOBODY)
            os.seteuid(NOBODY)

    gov = KINDS["devfreq"](board.processor("G"), SysfsIO(tree.sys, kernel_as_root),
                           "class/devfreq/ff9a0000.gpu")
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        with RestoreGuard([gov]):
            res = gov.set_khz(300000, settle_s=0)
            assert gov.method == "clamp"
            assert any("not writable by this user" in n for n in gov.notes)
            assert (gpu / "min_freq").read_text() == (gpu / "max_freq").read_text() \
                == "300000000\n"
            assert (gpu / "governor").read_text() == "simple_ondemand\n"
            assert res.ok and res.effective_khz == 300000
    finally:
        os.seteuid(0)
        os.setegid(0)
    assert snapshot(root) == before
