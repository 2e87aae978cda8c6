"""GPIO marker lines that tell the power logger where each layer starts and ends.

``open_marker(spec)`` builds a `Marker` from a spec string (``--marker``):

====================================  =============================================
``gpiod:CHIP:LINES``                  libgpiod v2 character device. CHIP is
                                      ``/dev/gpiochip0``, ``gpiochip0`` or ``0``;
                                      LINES is a comma list of offsets or line
                                      names: ``gpiod:/dev/gpiochip0:17``,
                                      ``gpiod:0:17,27``, ``gpiod:gpiochip4:GPIO17``
``gpiod:LINES``                       same, on ``/dev/gpiochip0``
``sysfs:NUMBERS``                     legacy ``/sys/class/gpio``, global numbers:
                                      ``sysfs:17``, ``sysfs:497,498``
``sim`` / ``sim:N``                   the simulated logger's marker inputs (N lines,
                                      default 1); needs the virtual logger or rig
``none``                              no marker (time-only runs)
====================================  =============================================

With several lines, ``set(level)`` drives line k (in the order given) to bit k,
which the logger reports as marker input k. At most 4 lines.

Use it as a context manager; lines are driven low and released on exit, also on
exceptions::

    with open_marker("gpiod:/dev/gpiochip0:17") as marker:
        marker.set(1); run_layer(); marker.set(0)

A malformed spec raises `BadInputError` (exit 2); a line that cannot be
requested raises `MarkerError` (exit 3) when the marker is opened.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from profiler.errors import BadInputError
from profiler.markers.base import MAX_LINES, Marker
from profiler.markers.gpiod_backend import GpiodMarker
from profiler.markers.none import NoneMarker
from profiler.markers.sim import MarkerSink, SimMarker
from profiler.markers.sysfs import DEFAULT_ROOT, SysfsMarker

__all__ = ["KINDS", "MAX_LINES", "GpiodMarker", "Marker", "MarkerSink", "NoneMarker",
           "SimMarker", "SysfsMarker", "open_marker", "parse_marker_spec"]

#: Back-end names accepted before the first colon of a spec.
KINDS = ("gpiod", "sysfs", "sim", "none")

_FIX = "use gpiod:CHIP:LINES, sysfs:NUMBERS, sim or none (see `coupprof layers --help`)"


def parse_marker_spec(spec: str) -> tuple[str, list[str]]:
    """Split a spec into its kind and fields; raise BadInputError if it is not one."""
    kind, _, rest = spec.strip().partition(":")
    kind = kind.lower()
    if kind not in KINDS:
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
    if kind == "none":
        if fields:
            raise BadInputError(f"marker {spec!r}: none takes no arguments", fix=_FIX)
        return NoneMarker()
    if kind == "sim":
        if len(fields) > 1 or (fields and not fields[0].isdigit()):
            raise BadInputError(f"marker {spec!r}: expected sim or sim:N (N lines)", fix=_FIX)
        width = int(fields[0]) if fields else 1
        if not 1 <= width <= MAX_LINES:
            raise BadInputError(f"marker {spec!r}: N must be 1..{MAX_LINES}", fix=_FIX)
        return SimMarker(sim_sink, spec=spec, width=width)
    if kind == "sysfs":
        if len(fields) != 1:
            raise BadInputError(f"marker {spec!r}: expected sysfs:NUMBERS", fix=_FIX)
        numbers = [int(n) for n in _lines(spec, fields[0], numeric=True)]
        return SysfsMarker(numbers, spec=spec, root=sysfs_root)
    # gpiod
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
