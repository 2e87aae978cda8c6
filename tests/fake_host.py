"""Fake machines that match no board: a VM's sysfs, an NVIDIA GPU in /proc and /dev,
DRM render nodes in sysfs. Roots as in tests/fake_sysfs.py: <root>/sys, /proc, /dev."""

from __future__ import annotations

import os
from pathlib import Path

# /proc/driver/nvidia/gpus/<bus>/information as an H100 machine showed it.
H100_INFO = ("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 41\n"
             "GPU UUID: \t GPU-1536981e-821c-84b4-5da4-a11c3843075e\n"
             "Video BIOS: \t 96.00.da.00.0c\nBus Type: \t PCIe\n")


def bare_vm(root: Path, cpus: int = 2) -> Path:
    """A VM's sysfs: online CPUs, no cpufreq, no DRM; /proc and /dev with no GPU."""
    cpu = root / "sys/devices/system/cpu"
    for c in range(cpus):
        (cpu / f"cpu{c}").mkdir(parents=True)
    (cpu / "online").write_text(f"0-{cpus - 1}\n")
    (root / "proc").mkdir()
    (root / "dev").mkdir()
    (root / "dev/ttyS0").write_text("")
    return root / "sys"


def add_nvidia(root: Path, bus: str = "0000:00:06.0", info: str = H100_INFO) -> None:
    gpu = root / "proc/driver/nvidia/gpus" / bus
    gpu.mkdir(parents=True)
    (gpu / "information").write_text(info)
    (root / "dev/nvidia0").write_text("")
    (root / "dev/nvidiactl").write_text("")


def add_render_node(root: Path, pci: str, vendor: str, driver: str, minor: int = 128) -> None:
    dev = root / "sys/devices/pci0000:00" / pci
    node = dev / "drm" / f"renderD{minor}"
    node.mkdir(parents=True)
    (dev / "vendor").write_text(vendor + "\n")
    drv = root / "sys/bus/pci/drivers" / driver
    drv.mkdir(parents=True, exist_ok=True)
    (dev / "driver").symlink_to(os.path.relpath(drv, dev))
    (node / "device").symlink_to(os.path.relpath(dev, node))
    link = root / "sys/class/drm" / f"renderD{minor}"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(node, link.parent))
