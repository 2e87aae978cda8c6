"""Power sources, built from a spec string (``--power``).

``open_power_source(spec)`` builds a source from a spec (``arduino:PORT``, ``sim``,
``sim:ina260``, ``ina260:PORT``, ``hwmon[:DEVICE[:CH]]``, ``nvml[:INDEX]``,
``rapl[:ZONE]``, ``none``, ``auto``); ``auto`` tries them in `detect_order()`, the most
direct measurement of the board first. Hardware is passed in (`SourceHardware`) so tests
run on fake trees. Other back ends register with `register_source`. A malformed spec
raises `BadInputError` (exit 2); absent or unusable hardware, exit 3 on open.

Every spec and what it measures: docs/power.md ("Power sources").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profiler.clock import Clock, perf_clock
from profiler.errors import BadInputError, ProfilerError
from profiler.power.sources import hwmon, rapl
from profiler.power.sources.base import (
    CounterSource,
    PowerIntegrator,
    PowerSource,
    SourceInfo,
    StreamSource,
    TickTimeoutError,
)
from profiler.power.sources.hwmon import HwmonSource
from profiler.power.sources.none import NoneSource
from profiler.power.sources.nvml import NvmlSource
from profiler.power.sources.rapl import RaplSource

if TYPE_CHECKING:
    from profiler.boards.model import Board

__all__ = ["CounterSource", "HwmonSource", "NoneSource", "NvmlSource", "PowerIntegrator",
           "PowerSource", "RaplSource", "SourceHardware", "SourceInfo",
           "StreamSource", "TickTimeoutError", "detect_order", "detect_power_source",
           "kinds", "open_power_source", "register_source", "spec_fix"]


@dataclass
class SourceHardware:
    """Where the sources find their hardware; defaults are the real machine's."""

    hwmon_root: Path = hwmon.DEFAULT_ROOT
    powercap_root: Path = rapl.DEFAULT_ROOT
    clock: Clock = perf_clock
    board: Board | None = None  # the board measured (the simulated one models its power)
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. a trace folder


#: builder(spec, rest after the first colon, hardware) -> an unopened source
Builder = Callable[[str, str, SourceHardware], PowerSource]
#: detect(hardware) -> a spec if this kind of source is present, else None
Detector = Callable[[SourceHardware], "str | None"]


@dataclass
class _Entry:
    builder: Builder
    detect: Detector | None
    order: int


_REGISTRY: dict[str, _Entry] = {}


def register_source(kind: str, builder: Builder, detect: Detector | None = None,
                    order: int = 50) -> None:
    """Add (or replace) a back end; ``auto`` runs detectors by ascending ``order``."""
    _REGISTRY[kind] = _Entry(builder, detect, order)


def kinds() -> list[str]:
    return sorted(_REGISTRY)


def detect_order() -> list[str]:
    return [k for k, e in sorted(_REGISTRY.items(), key=lambda kv: kv[1].order) if e.detect]


def spec_fix() -> str:
    return "use one of " + ", ".join(kinds() + ["auto"]) + " (see `coupprof layers --help`)"


def open_power_source(spec: str, hardware: SourceHardware | None = None) -> PowerSource:
    """Build (but do not open) the source a spec names; ``auto`` detects one."""
    hw = hardware or SourceHardware()
    spec = spec.strip()
    kind, _, rest = spec.partition(":")
    kind = kind.lower()
    if kind == "auto":
        if rest:
            raise BadInputError(f"power source {spec!r}: auto takes no arguments", fix=spec_fix())
        return open_power_source(detect_power_source(hw), hw)
    entry = _REGISTRY.get(kind)
    if entry is None:
        raise BadInputError(f"unknown power source {spec!r}", fix=spec_fix())
    return entry.builder(spec, rest, hw)


def detect_power_source(hardware: SourceHardware | None = None) -> str:
    """The spec of the first source present, in `detect_order()`; ``none`` otherwise."""
    hw = hardware or SourceHardware()
    for kind in detect_order():
        detect = _REGISTRY[kind].detect
        try:
            found = detect(hw) if detect else None
        except ProfilerError:
            found = None  # present but unusable: try the next
        if found:
            return found
    return "none"


# --- built-in back ends -------------------------------------------------------

def _build_none(spec: str, rest: str, hw: SourceHardware) -> PowerSource:
    if rest:
        raise BadInputError(f"power source {spec!r}: none takes no arguments", fix=spec_fix())
    return NoneSource(spec)


def _build_hwmon(spec: str, rest: str, hw: SourceHardware) -> PowerSource:
    parts = rest.split(":") if rest else []
    if len(parts) > 2 or any(not p for p in parts):
        raise BadInputError(f"power source {spec!r}: expected hwmon[:DEVICE[:CHANNEL]]",
                            fix="e.g. --power hwmon:ina226 or hwmon:ina3221:VDD_IN")
    device = parts[0] if parts else None
    channel = parts[1] if len(parts) == 2 else "1"
    return HwmonSource(device, channel, spec=spec, root=hw.hwmon_root, clock=hw.clock)


def _detect_hwmon(hw: SourceHardware) -> str | None:
    dev = hwmon.find_power_monitor(hw.hwmon_root)
    return f"hwmon:{dev.directory.name}" if dev else None


def _build_nvml(spec: str, rest: str, hw: SourceHardware) -> PowerSource:
    if rest and not rest.isdigit():
        raise BadInputError(f"power source {spec!r}: expected nvml or nvml:INDEX",
                            fix="e.g. --power nvml:0 (indices from `nvidia-smi -L`)")
    return NvmlSource(int(rest or 0), spec=spec, clock=hw.clock)


def _detect_nvml(hw: SourceHardware) -> str | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        return "nvml:0" if pynvml.nvmlDeviceGetCount() > 0 else None
    finally:
        pynvml.nvmlShutdown()


def _build_rapl(spec: str, rest: str, hw: SourceHardware) -> PowerSource:
    return RaplSource(rest or None, spec=spec, root=hw.powercap_root, clock=hw.clock)


def _detect_rapl(hw: SourceHardware) -> str | None:
    root = Path(hw.powercap_root)
    for dirname, name in rapl.list_zones(root):
        if name.startswith("package-") and os.access(root / dirname / "energy_uj", os.R_OK):
            return "rapl"
    return None


register_source("none", _build_none, order=100)
register_source("hwmon", _build_hwmon, _detect_hwmon, order=20)
register_source("nvml", _build_nvml, _detect_nvml, order=30)
register_source("rapl", _build_rapl, _detect_rapl, order=40)


# USB vendor ids of Arduino boards and the USB-serial chips on their clones.
_ARDUINO_VIDS = {0x2341, 0x2A03, 0x1A86, 0x0403, 0x10C4}


def _build_arduino(spec: str, rest: str, hw: SourceHardware) -> PowerSource:
    from profiler.power.sources.arduino import ArduinoSource

    if not rest:
        raise BadInputError(f"power source {spec!r}: expected arduino:PORT",
                            fix="e.g. --power arduino:/dev/ttyACM0 (`coupprof doctor` lists ports)")
    return ArduinoSource(spec, rest, out_dir=hw.extra.get("trace_dir"),
                         rate_hz=hw.extra.get("rate_hz"), clock=hw.clock)


def _detect_arduino(hw: SourceHardware) -> str | None:
    from serial.tools import list_ports

    for port in list_ports.comports():
        if port.vid in _ARDUINO_VIDS:
            return f"arduino:{port.device}"
    return None


_BAUDS = {"9600", "19200", "38400", "57600", "115200", "230400", "250000", "500000", "1000000",
          "2000000"}


def _build_ina260(spec: str, rest: str, hw: SourceHardware) -> PowerSource:
    from profiler.power.sources.ina260 import BAUDRATE, Ina260Source

    head, _, tail = rest.rpartition(":")
    port, baud = (head, tail) if head and tail in _BAUDS else (rest, "")
    if not port:
        raise BadInputError(f"power source {spec!r}: expected ina260:PORT or ina260:PORT:BAUD",
                            fix="e.g. --power ina260:/dev/ttyACM0 (`coupprof doctor` lists ports)")
    return Ina260Source(spec, port, baud=int(baud) if baud else BAUDRATE,
                        out_dir=hw.extra.get("trace_dir"), clock=hw.clock)


register_source("arduino", _build_arduino, _detect_arduino, order=10)
register_source("ina260", _build_ina260, order=60)
