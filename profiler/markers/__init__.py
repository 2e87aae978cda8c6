"""GPIO marker lines that tell the power logger where each layer starts and ends.

``open_marker(spec)`` builds a `Marker` from a spec string (``--marker``): ``gpiod:...``
(libgpiod v2), ``sysfs:...`` (legacy ``/sys/class/gpio``), ``sim`` or ``none``. With
several lines (at most 4), ``set(level)`` drives line k to bit k. Use it as a context
manager; lines are driven low and released on exit, also on exceptions. A malformed spec
raises `BadInputError` (exit 2); a line that cannot be requested, `MarkerError` (exit 3).
Other back ends register with `register_marker_kind(kind, builder)`.

Every spec form: docs/power.md ("Marker lines").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from profiler.errors import BadInputError
from profiler.markers.base import MAX_LINES, Marker
from profiler.markers.gpiod_backend import GpiodMarker
from profiler.markers.none import NoneMarker
from profiler.markers.sim import MarkerSink, SimMarker
from profiler.markers.sysfs import DEFAULT_ROOT, SysfsMarker

__all__ = ["MAX_LINES", "GpiodMarker", "Marker", "MarkerHardware", "MarkerSink", "NoneMarker",
           "SimMarker", "SysfsMarker", "kinds", "open_marker", "parse_marker_spec",
           "register_marker_kind"]

_FIX = "use gpiod:CHIP:LINES, sysfs:NUMBERS, sim or none (see `coupprof layers --help`)"


@dataclass(frozen=True)
class MarkerHardware:
    """What a marker drives, passed in: the ``sim`` marker's sink, the ``sysfs`` root."""

    sim_sink: MarkerSink | Callable[[int], None] | None = None
    sysfs_root: str | os.PathLike[str] = DEFAULT_ROOT


#: builder(spec, the fields after the kind, hardware) -> an unopened marker
MarkerBuilder = Callable[[str, list[str], MarkerHardware], Marker]
_REGISTRY: dict[str, MarkerBuilder] = {}


def register_marker_kind(kind: str, builder: MarkerBuilder) -> None:
    """Add (or replace) a back end, named before the first colon of a spec."""
    _REGISTRY[kind] = builder


def kinds() -> list[str]:
    """The back-end names accepted before the first colon of a spec."""
    return sorted(_REGISTRY)


def parse_marker_spec(spec: str) -> tuple[str, list[str]]:
    """Split a spec into its kind and fields; raise BadInputError if it is not one."""
    kind, _, rest = spec.strip().partition(":")
    kind = kind.lower()
    if kind not in _REGISTRY:
        raise BadInputError(f"unknown marker {spec!r}", fix=_FIX)
    fields = rest.split(":") if rest else []
    return kind, fields


def _lines(spec: str, text: str, numeric: bool) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not text or any(not item for item in items):
        raise BadInputError(f"marker {spec!r} names no line", fix=_FIX)
    if numeric and not all(item.isdigit() for item in items):
        raise BadInputError(f"marker {spec!r}: sysfs lines are GPIO numbers",
                            fix="e.g. --marker sysfs:17 (global number = chip base + offset)")
    if len(items) > MAX_LINES:
        raise BadInputError(f"marker {spec!r} names {len(items)} lines; the logger reads at most "
                            f"{MAX_LINES}", fix="name at most 4 lines")
    return items


def open_marker(spec: str, *, sim_sink: MarkerSink | Callable[[int], None] | None = None,
                sysfs_root: str | os.PathLike[str] = DEFAULT_ROOT) -> Marker:
    """Build (but do not open) the marker a spec names. Hardware is passed in:
    ``sim_sink`` for ``sim``, ``sysfs_root`` for ``sysfs``."""
    kind, fields = parse_marker_spec(spec)
    return _REGISTRY[kind](spec, fields, MarkerHardware(sim_sink, sysfs_root))


# --- built-in back ends -------------------------------------------------------

def _build_none(spec: str, fields: list[str], hw: MarkerHardware) -> Marker:
    if fields:
        raise BadInputError(f"marker {spec!r}: none takes no arguments", fix=_FIX)
    return NoneMarker()


def _build_sim(spec: str, fields: list[str], hw: MarkerHardware) -> Marker:
    # Drives a simulated logger's inputs: the virtual logger's or the simavr rig's.
    if len(fields) > 1 or (fields and not fields[0].isdigit()):
        raise BadInputError(f"marker {spec!r}: expected sim or sim:N (N lines)", fix=_FIX)
    width = int(fields[0]) if fields else 1
    if not 1 <= width <= MAX_LINES:
        raise BadInputError(f"marker {spec!r}: N must be 1..{MAX_LINES}", fix=_FIX)
    return SimMarker(hw.sim_sink, spec=spec, width=width)


def _build_sysfs(spec: str, fields: list[str], hw: MarkerHardware) -> Marker:
    if len(fields) != 1:
        raise BadInputError(f"marker {spec!r}: expected sysfs:NUMBERS", fix=_FIX)
    numbers = [int(n) for n in _lines(spec, fields[0], numeric=True)]
    return SysfsMarker(numbers, spec=spec, root=hw.sysfs_root)


def _build_gpiod(spec: str, fields: list[str], hw: MarkerHardware) -> Marker:
    if len(fields) == 1:
        chip, line_text = "/dev/gpiochip0", fields[0]
    elif len(fields) == 2 and fields[0]:
        chip, line_text = fields
    else:
        raise BadInputError(f"marker {spec!r}: expected gpiod:CHIP:LINES or gpiod:LINES",
                            fix=_FIX)
    lines: list[int | str] = [int(x) if x.isdigit() else x
                              for x in _lines(spec, line_text, numeric=False)]
    return GpiodMarker(chip, lines, spec=spec)


register_marker_kind("gpiod", _build_gpiod)
register_marker_kind("sysfs", _build_sysfs)
register_marker_kind("sim", _build_sim)
register_marker_kind("none", _build_none)
