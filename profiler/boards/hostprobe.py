"""What real hardware this machine has that the `host` board can measure.

On a machine that matches no bundled profile coupprof uses the simulated board `sim`,
whose numbers are modelled. When the machine has a real GPU or real cpufreq files,
`--board host` measures it instead, and the board notice and `coupprof doctor` say so.

Looked for (every root is a parameter, so tests run on fake trees):

- cpufreq policies: ``<sysfs>/devices/system/cpu/cpufreq/policy*`` (or, on old
  kernels, ``cpuN/cpufreq``) with a ``scaling_driver``;
- NVIDIA GPUs: ``<proc>/driver/nvidia/gpus/*`` (the model from ``information``), else
  ``<dev>/nvidia[0-9]*`` device nodes;
- DRM render nodes: ``<sysfs>/class/drm/renderD*`` (driver and PCI vendor read there),
  else ``<dev>/dri/renderD*``; software-only DRM drivers (vgem, vkms) do not count.

The proc and dev roots default to ``proc`` and ``dev`` beside the sysfs root (``/proc``
and ``/dev`` for ``/sys``), as `read_model_string` finds the device tree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CPU_DIR = "devices/system/cpu"
PCI_VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel", "0x5143": "Qualcomm"}
# DRM drivers with a render node but no GPU behind it.
SOFTWARE_DRM = {"vgem", "vkms"}


@dataclass(frozen=True)
class HostHardware:
    cpufreq_policies: tuple[str, ...]  # policy directory names, e.g. ("policy0", "policy4")
    gpus: tuple[str, ...]  # one readable line each, e.g. "NVIDIA H100 80GB HBM3"

    @property
    def measurable(self) -> bool:
        return bool(self.cpufreq_policies or self.gpus)

    def describe(self) -> str:
        """E.g. 'a GPU (NVIDIA H100 80GB HBM3) and cpufreq on 2 CPU policies'."""
        parts = []
        if self.gpus:
            n = len(self.gpus)
            parts.append(f"{'a GPU' if n == 1 else f'{n} GPUs'} ({'; '.join(self.gpus)})")
        if self.cpufreq_policies:
            n = len(self.cpufreq_policies)
            parts.append(f"cpufreq on {n} CPU polic{'y' if n == 1 else 'ies'}")
        return " and ".join(parts) or "no cpufreq and no GPU"

    def short(self) -> str:
        """E.g. 'GPU and cpufreq', '2 GPUs': the board notice's few words."""
        n = len(self.gpus)
        parts = ([f"{n} GPUs" if n > 1 else "GPU"] if n else []) + \
            (["cpufreq"] if self.cpufreq_policies else [])
        return " and ".join(parts)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def cpufreq_policies(sysfs_root: Path) -> tuple[str, ...]:
    cpu = sysfs_root / CPU_DIR
    pols = [p for p in sorted((cpu / "cpufreq").glob("policy*")) if (p / "scaling_driver").exists()]
    if not pols:  # kernels without policyN directories
        pols = [p for p in sorted(cpu.glob("cpu[0-9]*/cpufreq"))
                if (p / "scaling_driver").exists()]
    return tuple(p.name if p.name != "cpufreq" else p.parent.name for p in pols)


def nvidia_gpus(proc_root: Path, dev_root: Path) -> list[str]:
    found = []
    for gpu in sorted((proc_root / "driver/nvidia/gpus").glob("*")):
        info = _read(gpu / "information") or ""
        model = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                      if line.startswith("Model:")), "")
        found.append(model or f"NVIDIA GPU at {gpu.name}")
    if not found:
        found = [f"NVIDIA GPU (/dev/{n.name})" for n in sorted(dev_root.glob("nvidia[0-9]*"))]
    return found


def drm_gpus(sysfs_root: Path, dev_root: Path, skip_vendors: set[str]) -> list[str]:
    found = []
    nodes = sorted((sysfs_root / "class/drm").glob("renderD*"))
    for node in nodes:
        dev = node / "device"
        driver = os.path.basename(os.readlink(dev / "driver")) if (dev / "driver").is_symlink() \
            else "unknown driver"
        vendor = PCI_VENDORS.get((_read(dev / "vendor") or "").lower(), "")
        if driver in SOFTWARE_DRM or vendor in skip_vendors:
            continue
        found.append(f"{vendor + ' ' if vendor else ''}GPU ({driver}, {node.name})")
    if not nodes:
        found = [f"GPU (/dev/dri/{n.name})" for n in sorted((dev_root / "dri").glob("renderD*"))]
    return found


def probe_host(sysfs_root: str | Path, proc_root: str | Path | None = None,
               dev_root: str | Path | None = None) -> HostHardware:
    """What `--board host` would measure on the machine under these roots."""
    sys_root = Path(sysfs_root)
    proc = Path(proc_root) if proc_root is not None else sys_root.parent / "proc"
    dev = Path(dev_root) if dev_root is not None else sys_root.parent / "dev"
    nvidia = nvidia_gpus(proc, dev)
    # NVIDIA's render node (nvidia-drm) is the same GPU as its /proc entry.
    gpus = nvidia + drm_gpus(sys_root, dev, {"NVIDIA"} if nvidia else set())
    return HostHardware(cpufreq_policies(sys_root), tuple(gpus))


def host_board_hint(sysfs_root: str | Path, proc_root: str | Path | None = None,
                    dev_root: str | Path | None = None) -> str | None:
    """One short clause for the board notice when `--board host` would measure real
    hardware (`coupprof doctor` names it in full)."""
    hw = probe_host(sysfs_root, proc_root, dev_root)
    if not hw.measurable:
        return None
    return f"--board host measures the {hw.short()} here"
