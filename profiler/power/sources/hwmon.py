"""The `hwmon` power source: INA2xx / INA3221 current monitors through Linux hwmon.

Boards with an on-board power monitor (Jetson: INA3221; many dev kits: INA219,
INA226, INA260, INA238) expose it under ``/sys/class/hwmon/hwmonN``. Per channel
N, in hwmon's units:

* ``powerN_input`` µW, where the driver computes power (ina2xx, ina238);
* otherwise ``currN_input`` mA × ``inN_input`` mV (ina3221: in1..3 are the
  bus voltages of channels 1..3, in4..6 their shunt voltages);
* ``energyN_input`` µJ, where the driver keeps an energy counter (ina238
  family); else energy is integrated in software from polled power;
* ``update_interval`` ms: how often the chip produces a new reading.

Selection (``hwmon[:DEVICE[:CHANNEL]]``):

* ``hwmon``: the first device whose ``name`` is a known power monitor;
* ``hwmon:ina226``: by driver name; ``hwmon:hwmon3``: by directory;
  ``hwmon:1-0040``: by I2C device (bus-address) for boards with several;
* ``...:2`` channel number (default 1), or ``...:VDD_IN`` a channel label
  (``inN_label`` / ``currN_label`` / ``powerN_label``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from profiler.clock import Clock, perf_clock
from profiler.errors import BadInputError, HardwareError, PermissionDeniedError, PowerSourceError
from profiler.power.sources.base import CounterSource, PowerIntegrator, SourceInfo

DEFAULT_ROOT = Path("/sys/class/hwmon")

#: hwmon ``name`` values of power-monitor drivers (ina2xx, ina238, ina3221, ina209).
KNOWN_MONITORS = ("ina209", "ina219", "ina220", "ina226", "ina230", "ina231", "ina233",
                  "ina234", "ina237", "ina238", "ina260", "ina3221", "sq52206", "sy24655")
#: Polling period when the driver gives no ``update_interval``.
DEFAULT_INTERVAL_NS = 2_000_000
#: Never poll faster than this: each read is an I2C transaction.
MIN_POLL_NS = 1_000_000


@dataclass(frozen=True)
class HwmonDevice:
    directory: Path
    name: str
    i2c: str  # e.g. "1-0040", "" if not an I2C device


def list_devices(root: str | os.PathLike[str] = DEFAULT_ROOT) -> list[HwmonDevice]:
    root = Path(root)
    if not root.is_dir():
        return []
    out = []
    for d in sorted(root.iterdir(), key=lambda p: (len(p.name), p.name)):
        name_file = d / "name"
        if not name_file.exists():
            continue
        dev = d / "device"
        i2c = os.path.basename(os.path.realpath(dev)) if dev.exists() else ""
        out.append(HwmonDevice(d, name_file.read_text().strip(), i2c))
    return out


def find_power_monitor(root: str | os.PathLike[str] = DEFAULT_ROOT) -> HwmonDevice | None:
    """The first known power monitor under ``root``, for auto-detection."""
    for dev in list_devices(root):
        if dev.name in KNOWN_MONITORS:
            return dev
    return None


class HwmonSource(CounterSource):
    """One channel of an hwmon power monitor."""

    kind = "hwmon"

    def __init__(self, device: str | None = None, channel: str | int = 1,
                 spec: str | None = None, root: str | os.PathLike[str] = DEFAULT_ROOT,
                 clock: Clock = perf_clock) -> None:
        super().__init__(spec or "hwmon" + (f":{device}" if device else "")
                         + (f":{channel}" if channel != 1 else ""), clock)
        self.device_id = device
        self.channel_id = str(channel)
        self.root = Path(root)
        self.device: HwmonDevice | None = None
        self.channel = 0
        self.how = ""
        self._fds: dict[str, int] = {}
        self._integrator: PowerIntegrator | None = None
        self._energy_base_uj = 0

    # --- selection ----------------------------------------------------------
    def _find(self) -> HwmonDevice:
        devices = list_devices(self.root)
        if self.device_id is None:
            dev = next((d for d in devices if d.name in KNOWN_MONITORS), None)
        else:
            dev = next((d for d in devices if self.device_id in
                        (d.name, d.directory.name, d.i2c)), None)
        if dev is None:
            have = ", ".join(f"{d.directory.name} ({d.name})" for d in devices) or "none"
            want = self.device_id or "a power monitor (" + "/".join(KNOWN_MONITORS[:4]) + "...)"
            raise HardwareError(f"no hwmon device {want} under {self.root}; found: {have}",
                                fix="load the sensor's driver (device-tree overlay or "
                                    "modprobe ina2xx / ina3221) or name it: --power hwmon:NAME")
        return dev

    def _resolve_channel(self, d: Path) -> int:
        if self.channel_id.isdigit():
            return int(self.channel_id)
        for label in sorted(d.glob("*_label")):
            if label.read_text().strip() == self.channel_id:
                stem = label.name[: -len("_label")]
                digits = stem.lstrip("abcdefghijklmnopqrstuvwxyz")
                if digits.isdigit():
                    return int(digits)
        labels = sorted({p.read_text().strip() for p in d.glob("*_label")})
        raise BadInputError(f"hwmon device {d} has no channel labelled {self.channel_id!r}; "
                            f"labels: {', '.join(labels) or 'none'}",
                            fix="use a channel number or one of those labels")

    # --- open/close ---------------------------------------------------------
    def _open_device(self) -> None:
        dev = self._find()
        d = dev.directory
        n = self._resolve_channel(d)
        files = {}
        if (d / f"power{n}_input").exists():
            files["power"] = d / f"power{n}_input"
            self.how = f"power{n}_input"
        elif (d / f"curr{n}_input").exists() and (d / f"in{n}_input").exists():
            files["curr"], files["volt"] = d / f"curr{n}_input", d / f"in{n}_input"
            self.how = f"curr{n}_input x in{n}_input"
        else:
            raise HardwareError(f"{d} ({dev.name}) has neither power{n}_input nor "
                                f"curr{n}_input and in{n}_input",
                                fix="pick another channel: --power hwmon:NAME:CHANNEL")
        if (d / f"energy{n}_input").exists():
            files["energy"] = d / f"energy{n}_input"
        interval = self._read_interval(d)
        self.update_interval_ns = interval
        try:
            for key, path in files.items():
                try:
                    self._fds[key] = os.open(path, os.O_RDONLY)
                except PermissionError as err:
                    raise PermissionDeniedError(f"{path} is not readable",
                                                fix="run as root or add a udev rule") from err
            self.device, self.channel = dev, n
            if "energy" in self._fds:
                self._energy_base_uj = self._read_int("energy")
            else:
                self._integrator = PowerIntegrator(self.read_power_w,
                                                   max(interval, MIN_POLL_NS), self.clock,
                                                   name=f"hwmon-{d.name}")
                self._integrator.start()
        except BaseException:
            self._close_device()
            raise

    @staticmethod
    def _read_interval(d: Path) -> int:
        try:
            return int((d / "update_interval").read_text()) * 1_000_000
        except (OSError, ValueError):
            return DEFAULT_INTERVAL_NS

    def _close_device(self) -> None:
        if self._integrator is not None:
            self._integrator.stop()
            self._integrator = None
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}

    # --- reading ------------------------------------------------------------
    def _read_int(self, key: str) -> int:
        try:
            return int(os.pread(self._fds[key], 32, 0))
        except (OSError, ValueError) as err:
            where = self.device.directory if self.device else self.root
            raise PowerSourceError(f"reading {key} of {where} failed: {err}",
                                   fix="check the sensor's wiring and I2C bus (dmesg)") from err

    def read_power_w(self) -> float:
        """The sensor's latest power reading, in W."""
        if not self._fds:
            self._require_open()
        if "power" in self._fds:
            return self._read_int("power") * 1e-6  # uW
        return self._read_int("curr") * self._read_int("volt") * 1e-6  # mA * mV

    def read_energy_mj(self) -> float:
        self._require_open()
        if self._integrator is not None:
            return self._integrator.energy_mj()
        return (self._read_int("energy") - self._energy_base_uj) / 1000.0

    def info(self) -> SourceInfo:
        dev = self.device
        hw = "energy" in self._fds
        return SourceInfo(
            spec=self.spec, kind=self.kind, mode=self.mode,
            device=f"{dev.directory} ({dev.name}{', ' + dev.i2c if dev.i2c else ''})"
            if dev else "",
            update_interval_ns=self.update_interval_ns,
            energy_resolution_mj=0.001 if hw else None,
            hardware_energy_counter=hw,
            detail=f"channel {self.channel}: {self.how}"
                   + ("" if hw else "; energy integrated from polled power"),
        )
