"""The `host` board: this machine's CPU clusters, read from sysfs.

Cores are grouped into clusters by their maximum frequency (cpufreq
``cpuinfo_max_freq``), or by ``cpu_capacity`` where cpufreq is absent, or else
all online cores form one cluster. Processor ``B`` is the fastest cluster (all
online cores on a uniform machine) and ``L`` the slowest one, if there is more
than one. Frequency tables come from ``scaling_available_frequencies`` when the
driver lists them; without a table the processor has no DVFS levels.

The sysfs root is a parameter so tests can build fake trees under tmp_path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from profiler.boards.model import Board, GovernorSpec, ProcessorKind, ProcessorSpec
from profiler.errors import BoardError

CPU_DIR = "devices/system/cpu"
#: Environment variable that moves the sysfs root (tests, containers).
SYSFS_ROOT_ENV = "COUPPROF_SYSFS_ROOT"

# MIDR part numbers of common Arm cores (implementer 0x41), for readable names.
ARM_PARTS: dict[int, str] = {
    0xD03: "Cortex-A53", 0xD04: "Cortex-A35", 0xD05: "Cortex-A55", 0xD07: "Cortex-A57",
    0xD08: "Cortex-A72", 0xD09: "Cortex-A73", 0xD0A: "Cortex-A75", 0xD0B: "Cortex-A76",
    0xD0D: "Cortex-A77", 0xD41: "Cortex-A78", 0xD44: "Cortex-X1", 0xD46: "Cortex-A510",
    0xD47: "Cortex-A710", 0xD48: "Cortex-X2", 0xD4B: "Cortex-A78C", 0xD4D: "Cortex-A715",
    0xD4E: "Cortex-X3", 0xD80: "Cortex-A520", 0xD81: "Cortex-A720", 0xD82: "Cortex-X4",
}


def sysfs_root_from_env(default: str = "/sys") -> Path:
    """The sysfs root: $COUPPROF_SYSFS_ROOT if set, else /sys."""
    return Path(os.environ.get(SYSFS_ROOT_ENV) or default)


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """'0-3,6,8-9' (cpulist files) or '0 1 2 3' (related_cpus) -> (0, 1, 2, 3, ...)."""
    cpus: set[int] = set()
    for part in text.replace(",", " ").split():
        lo, _, hi = part.partition("-")
        try:
            cpus.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise BoardError(f"cannot read CPU list {text.strip()!r}",
                             "check the sysfs tree given with --sysfs-root") from None
    return tuple(sorted(cpus))


def format_cpu_list(cpus: tuple[int, ...] | list[int]) -> str:
    """(0, 1, 2, 5) -> '0-2,5'."""
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text, 0) if text else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Cluster:
    cores: tuple[int, ...]
    max_freq_khz: int | None
    capacity: int | None
    policies: tuple[str, ...]  # cpufreq dirs relative to the sysfs root
    freqs_khz: tuple[int, ...]
    core_name: str | None


def _online_cpus(cpu_dir: Path) -> tuple[int, ...]:
    text = _read(cpu_dir / "online")
    if text is not None:
        return parse_cpu_list(text)
    # Old kernels: every cpuN dir whose `online` file is absent (cpu0) or says 1.
    cpus = []
    for d in cpu_dir.glob("cpu[0-9]*"):
        if d.name[3:].isdigit() and _read(d / "online") in (None, "1"):
            cpus.append(int(d.name[3:]))
    return tuple(sorted(cpus))


def _policy_dirs(root: Path, cpu_dir: Path, cpus: tuple[int, ...]) -> dict[int, Path]:
    """cpu -> its cpufreq policy directory (policyN via related_cpus, else cpuN/cpufreq)."""
    found: dict[int, Path] = {}
    for pol in sorted((cpu_dir / "cpufreq").glob("policy*")):
        related = _read(pol / "related_cpus") or _read(pol / "affected_cpus")
        for c in parse_cpu_list(related) if related else ():
            found.setdefault(c, pol)
    for c in cpus:
        d = cpu_dir / f"cpu{c}" / "cpufreq"
        if c not in found and d.is_dir():
            # Usually a symlink to ../cpufreq/policyN; keep the resolved dir if it is in the tree.
            real = d.resolve()
            found[c] = real if real.is_relative_to(root.resolve()) else d
    return found


def _core_name(cpu_dir: Path, cpu: int) -> str | None:
    midr = _read_int(cpu_dir / f"cpu{cpu}" / "regs" / "identification" / "midr_el1")
    if midr is None:
        return None
    implementer, part = (midr >> 24) & 0xFF, (midr >> 4) & 0xFFF
    return ARM_PARTS.get(part) if implementer == 0x41 else None


def read_clusters(sysfs_root: str | Path = "/sys") -> list[Cluster]:
    """This machine's online CPU clusters, slowest first."""
    root = Path(sysfs_root)
    cpu_dir = root / CPU_DIR
    if not cpu_dir.is_dir():
        raise BoardError(f"no CPU topology at {cpu_dir}",
                         "pass --sysfs-root pointing at a sysfs tree (default /sys)")
    cpus = _online_cpus(cpu_dir)
    if not cpus:
        raise BoardError(f"no online CPU cores listed under {cpu_dir}",
                         "pass --sysfs-root pointing at a sysfs tree (default /sys)")
    policies = _policy_dirs(root, cpu_dir, cpus)
    max_freq = {c: _read_int(policies[c] / "cpuinfo_max_freq") if c in policies else None
                for c in cpus}
    capacity = {c: _read_int(cpu_dir / f"cpu{c}" / "cpu_capacity") for c in cpus}
    # Group by max frequency where every core reports one, else by capacity, else one group.
    if all(v is not None for v in max_freq.values()):
        key = max_freq
    elif all(v is not None for v in capacity.values()):
        key = capacity
    else:
        key = dict.fromkeys(cpus, 0)
    groups: dict[int, list[int]] = {}
    for c in cpus:
        groups.setdefault(key[c] or 0, []).append(c)

    clusters = []
    for _, cores in sorted(groups.items()):
        pols = tuple(dict.fromkeys(
            os.path.relpath(policies[c], root) for c in cores if c in policies))
        freqs: set[int] = set()
        for c in cores:
            if c in policies:
                text = _read(policies[c] / "scaling_available_frequencies") or ""
                freqs.update(int(f) for f in text.split() if f.isdigit())
        names = {_core_name(cpu_dir, c) for c in cores}
        clusters.append(Cluster(
            cores=tuple(cores),
            max_freq_khz=max_freq[cores[0]],
            capacity=capacity[cores[0]],
            policies=pols,
            freqs_khz=tuple(sorted(freqs)),
            core_name=names.pop() if len(names) == 1 else None,
        ))
    return clusters


def _processor(letter: str, cluster: Cluster) -> ProcessorSpec:
    label = cluster.core_name or "CPU"
    name = f"{label} x{len(cluster.cores)} (cores {format_cpu_list(cluster.cores)})"
    if cluster.max_freq_khz:
        name += f", max {cluster.max_freq_khz / 1000:g} MHz"
    gov = GovernorSpec("cpufreq", cluster.policies[0]) if cluster.policies else None
    return ProcessorSpec(
        letter=letter,
        kind=ProcessorKind.CPU,
        name=name,
        cores=cluster.cores,
        freqs_khz=cluster.freqs_khz,
        governor=gov,
        extra={"cpufreq_policies": cluster.policies, "max_freq_khz": cluster.max_freq_khz,
               "capacity": cluster.capacity},
    )


def host_board(sysfs_root: str | Path = "/sys") -> Board:
    """Board `host`: B = fastest cluster (or all online cores), L = slowest cluster if any."""
    clusters = read_clusters(sysfs_root)
    procs = {"B": _processor("B", clusters[-1])}
    if len(clusters) > 1:
        procs["L"] = _processor("L", clusters[0])
    middle = [format_cpu_list(c.cores) for c in clusters[1:-1]]
    desc = f"this machine, read from {Path(sysfs_root) / CPU_DIR}"
    if middle:
        desc += f" (clusters not mapped to B/L: cores {'; '.join(middle)})"
    return Board(name="host", description=desc, processors=procs, simulated=False,
                 extra={"sysfs_root": str(sysfs_root), "unmapped_clusters": middle})
