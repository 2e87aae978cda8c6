"""What `--board host` would measure here (profiler.boards.hostprobe), on fake trees both
ways: a board-less machine with a real GPU or cpufreq gets the hint, a bare VM does not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fake_host import add_nvidia, add_render_node, bare_vm
from fake_sysfs import build

from profiler.boards.hostprobe import host_board_hint, probe_host
from profiler.boards.profiles import select_board

REPO = Path(__file__).resolve().parent.parent


def test_a_bare_vm_has_nothing_host_would_measure(tmp_path: Path) -> None:
    sys_root = bare_vm(tmp_path)
    hw = probe_host(sys_root)
    assert not hw.measurable and hw.describe() == "no cpufreq and no GPU"
    assert host_board_hint(sys_root) is None


def test_an_nvidia_gpu_is_found_in_proc_with_its_model(tmp_path: Path) -> None:
    sys_root = bare_vm(tmp_path)
    add_nvidia(tmp_path)
    hw = probe_host(sys_root)
    assert hw.gpus == ("NVIDIA H100 80GB HBM3",) and hw.cpufreq_policies == ()
    assert host_board_hint(sys_root) == "--board host measures the GPU here"


def test_an_nvidia_device_node_alone_counts(tmp_path: Path) -> None:
    sys_root = bare_vm(tmp_path)
    (tmp_path / "dev/nvidia0").write_text("")
    assert probe_host(sys_root).gpus == ("NVIDIA GPU (/dev/nvidia0)",)


def test_drm_render_nodes_name_vendor_and_driver_and_skip_software_ones(tmp_path: Path) -> None:
    sys_root = bare_vm(tmp_path)
    add_render_node(tmp_path, "0000:03:00.0", "0x1002", "amdgpu", 128)
    add_render_node(tmp_path, "0000:00:09.0", "0x1af4", "vkms", 129)
    assert probe_host(sys_root).gpus == ("AMD GPU (amdgpu, renderD128)",)


def test_nvidias_own_render_node_is_not_a_second_gpu(tmp_path: Path) -> None:
    sys_root = bare_vm(tmp_path)
    add_nvidia(tmp_path)
    add_render_node(tmp_path, "0000:00:06.0", "0x10de", "nvidia", 128)
    assert probe_host(sys_root).gpus == ("NVIDIA H100 80GB HBM3",)


def test_a_render_node_in_dev_without_sysfs_counts(tmp_path: Path) -> None:
    sys_root = bare_vm(tmp_path)
    (tmp_path / "dev/dri").mkdir()
    (tmp_path / "dev/dri/renderD128").write_text("")
    assert probe_host(sys_root).gpus == ("GPU (/dev/dri/renderD128)",)


def test_real_cpufreq_files_count_without_a_gpu(tmp_path: Path) -> None:
    tree = build("rk3399pro", tmp_path)  # the board's cpufreq policies, device tree aside
    hw = probe_host(tree.sys)
    assert hw.cpufreq_policies == ("policy0", "policy4") and hw.gpus == ()
    assert host_board_hint(tree.sys) == "--board host measures the cpufreq here"


def test_both_and_the_roots_can_be_given_apart(tmp_path: Path) -> None:
    tree = build("rpi5", tmp_path / "a")
    other = tmp_path / "b"
    bare_vm(other)
    add_nvidia(other)
    hw = probe_host(tree.sys, proc_root=other / "proc", dev_root=other / "dev")
    assert hw.describe() == "a GPU (NVIDIA H100 80GB HBM3) and cpufreq on 1 CPU policy"


def notice(sys_root: Path) -> str:
    notes: list[str] = []
    board = select_board(None, sys_root, notes.append)
    assert board.name == "sim" and len(notes) == 1
    return notes[0]


def test_the_board_notice_on_a_bare_vm_says_sim_is_modelled(tmp_path: Path) -> None:
    assert notice(bare_vm(tmp_path)) == (
        "using the simulated board 'sim' (no known board; --board NAME to choose)")


def test_the_board_notice_on_a_gpu_machine_points_at_host(tmp_path: Path) -> None:
    sys_root = bare_vm(tmp_path)
    add_nvidia(tmp_path)
    assert notice(sys_root) == (
        "using the simulated board 'sim' (no known board; --board host measures the GPU here)")


def test_the_cli_prints_the_notice_with_the_hint(tmp_path: Path) -> None:
    """A real command in a subprocess on a fake cpufreq machine whose model no profile has."""
    tree = build("rpi5", tmp_path)
    (tree.sys / "firmware/devicetree/base/model").write_bytes(b"Some Other Board\x00")
    env = dict(os.environ, PYTHONPATH=str(REPO), COUPPROF_SYSFS_ROOT=str(tree.sys))
    out = subprocess.run([sys.executable, "-m", "profiler", "pin", "--processor", "B",
                          "--freq", "1", "--", "true"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines()[0] == (
        "coupprof: using the simulated board 'sim' (no profile for 'Some Other Board'; "
        "--board host measures the cpufreq here)")
