"""The `rapl` power source: x86 RAPL energy counters through Linux powercap.

Each zone ``/sys/class/powercap/intel-rapl:N[:M]`` has ``name`` (``package-0``,
``core``, ``uncore``, ``dram``, ``psys``), ``energy_uj`` (a counter in µJ that
wraps at ``max_energy_range_uj``) and refreshes about every millisecond. AMD
processors expose the same tree. Selection (``rapl:ZONE``):

* ``rapl``: every package zone (``package-N``), summed;
* ``rapl:NAME``: every zone with that name, summed (``rapl:dram``,
  ``rapl:psys``, ``rapl:package-0``);
* ``rapl:intel-rapl:0:2``: one zone by directory name.

Wraps are unfolded on every read, so reads must come less than one wrap period
apart (minutes to hours at typical power); `read_energy_mj` is monotone.

Since Linux 5.10 (CVE-2020-8694) ``energy_uj`` is readable by root only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from profiler.clock import Clock, perf_clock
from profiler.errors import HardwareError, PermissionDeniedError, PowerSourceError
from profiler.power.sources.base import CounterSource, SourceInfo

DEFAULT_ROOT = Path("/sys/class/powercap")
#: RAPL refreshes its counters about every 976 µs.
UPDATE_INTERVAL_NS = 1_000_000


@dataclass
class _Zone:
    directory: Path
    name: str
    max_range_uj: int
    fd: int = -1
    last_uj: int = 0
    total_uj: int = 0


def list_zones(root: str | os.PathLike[str] = DEFAULT_ROOT) -> list[tuple[str, str]]:
    """``(directory name, zone name)`` of every RAPL zone under ``root``."""
    root = Path(root)
    if not root.is_dir():
        return []
    out = []
    for d in sorted(root.iterdir()):
        if d.name.startswith("intel-rapl:") and (d / "energy_uj").exists():
            name = (d / "name").read_text().strip() if (d / "name").exists() else d.name
            out.append((d.name, name))
    return out


class RaplSource(CounterSource):
    """Energy of the selected RAPL zones (summed), from their counters."""

    kind = "rapl"
    update_interval_ns = UPDATE_INTERVAL_NS

    def __init__(self, zone: str | None = None, spec: str | None = None,
                 root: str | os.PathLike[str] = DEFAULT_ROOT, clock: Clock = perf_clock) -> None:
        super().__init__(spec or ("rapl" if zone is None else f"rapl:{zone}"), clock)
        self.zone = zone
        self.root = Path(root)
        self._zones: list[_Zone] = []

    def _select(self) -> list[tuple[str, str]]:
        zones = list_zones(self.root)
        if not zones:
            raise HardwareError(f"no RAPL zones under {self.root} (not an x86 machine, or the "
                                "intel_rapl driver is not loaded)",
                                fix="modprobe intel_rapl_msr, or use another --power source")
        if self.zone is None:
            chosen = [z for z in zones if z[1].startswith("package-")]
        else:
            chosen = [z for z in zones if self.zone in z]
        if not chosen:
            have = ", ".join(f"{d} ({n})" for d, n in zones)
            raise HardwareError(f"no RAPL zone {self.zone or 'package-N'!r} under {self.root}; "
                                f"found {have}", fix="pick one with --power rapl:NAME")
        return chosen

    def _open_device(self) -> None:
        try:
            for dirname, name in self._select():
                d = self.root / dirname
                max_uj = int((d / "max_energy_range_uj").read_text())
                zone = _Zone(d, name, max_uj)
                self._zones.append(zone)  # so a failure below closes it
                try:
                    zone.fd = os.open(d / "energy_uj", os.O_RDONLY)
                except PermissionError as err:
                    raise _denied(d) from err
                zone.last_uj = self._read_uj(zone)
        except BaseException:
            self._close_device()
            raise

    def _close_device(self) -> None:
        for zone in self._zones:
            if zone.fd >= 0:
                os.close(zone.fd)
        self._zones = []

    def _read_uj(self, zone: _Zone) -> int:
        try:
            return int(os.pread(zone.fd, 32, 0))
        except PermissionError as err:
            raise _denied(zone.directory) from err
        except (OSError, ValueError) as err:
            raise PowerSourceError(f"reading {zone.directory}/energy_uj failed: {err}",
                                   fix="check the intel_rapl driver") from err

    def read_energy_mj(self) -> float:
        self._require_open()
        total = 0
        for zone in self._zones:
            raw = self._read_uj(zone)
            delta = raw - zone.last_uj
            if delta < 0:  # the counter wrapped at max_energy_range_uj
                delta += zone.max_range_uj
            zone.total_uj += delta
            zone.last_uj = raw
            total += zone.total_uj
        return total / 1000.0

    def info(self) -> SourceInfo:
        names = "+".join(z.name for z in self._zones)
        return SourceInfo(spec=self.spec, kind=self.kind, mode=self.mode,
                          device=", ".join(str(z.directory) for z in self._zones),
                          update_interval_ns=self.update_interval_ns,
                          energy_resolution_mj=0.001, hardware_energy_counter=True,
                          detail=f"zones {names}")


def _denied(directory: Path) -> PermissionDeniedError:
    return PermissionDeniedError(
        f"{directory}/energy_uj is readable by root only",
        fix=f"run as root, or `sudo chmod a+r {directory.parent}/intel-rapl:*/energy_uj` "
            "(until reboot)")

