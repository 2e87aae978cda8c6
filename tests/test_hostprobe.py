"""What `--board host` would measure here (profiler.boards.hostprobe), on fake trees both
ways: a board-less machine with a real GPU or cpufreq gets the hint, a bare VM does not."""

from __future__ import annotations

from pathlib import Path

from fake_host import add_nvidia, add_render_node, bare_vm
from fake_sysfs import build

from profiler.boards.hostprobe import host_board_hint, probe_host


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
    assert host_board_hint(sys_root) == ("this machine has a GPU (NVIDIA H100 80GB HBM3): "
                                         "`--board host` measures it")


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
    assert host_board_hint(tree.sys) == ("this machine has cpufreq on 2 CPU policies: "
                                         "`--board host` measures it")


def test_both_and_the_roots_can_be_given_apart(tmp_path: Path) -> None:
    tree = build("rpi5", tmp_path / "a")
    other = tmp_path / "b"
    bare_vm(other)
    add_nvidia(other)
    hw = probe_host(tree.sys, proc_root=other / "proc", dev_root=other / "dev")
    assert hw.describe() == "a GPU (NVIDIA H100 80GB HBM3) and cpufreq on 1 CPU policy"
