"""The `gpiod` marker: lines on a GPIO character device through libgpiod v2.

Uses the ``gpiod`` Python bindings (PyPI ``gpiod>=2.1``, the `gpio` extra:
``pip install 'coupprof[gpio]'``). ``open()`` requests all lines in one request
as outputs driven low, with the consumer name ``coupprof`` (shown by
``gpioinfo``), and precomputes the ``{offset: Value}`` mapping of every level,
so ``set(level)`` is a single ``LineRequest.set_values`` call: one ioctl that
changes all lines at once. ``close()`` drives them low and releases the request.

Lines are offsets on the chip (``17``) or line names from the device tree
(``GPIO17``), which libgpiod resolves once at request time.
"""

from __future__ import annotations

import errno
from types import ModuleType
from typing import TYPE_CHECKING

from profiler.errors import HardwareError, MarkerError, PermissionDeniedError
from profiler.markers.base import Marker

if TYPE_CHECKING:
    from gpiod import LineRequest

CONSUMER = "coupprof"


def chip_path(chip: str) -> str:
    """``/dev/gpiochip0``, ``gpiochip0`` and ``0`` all name the same chip."""
    if chip.startswith("/"):
        return chip
    if chip.isdigit():
        return f"/dev/gpiochip{chip}"
    return f"/dev/{chip}"


def _import_gpiod() -> ModuleType:
    try:
        import gpiod
    except ImportError as err:
        raise MarkerError("the gpiod marker needs the libgpiod v2 Python bindings, which are "
                          "not installed",
                          fix="pip install 'coupprof[gpio]' (gpiod>=2.1), or use --marker sysfs:N"
                          ) from err
    if not hasattr(gpiod, "request_lines"):  # the unrelated v1 bindings share the name
        raise MarkerError(f"the installed gpiod module ({getattr(gpiod, '__file__', '?')}) is "
                          "libgpiod v1; coupprof needs the v2 API",
                          fix="pip install 'gpiod>=2.1' (and remove python3-libgpiod v1)")
    return gpiod


class GpiodMarker(Marker):
    """Marker lines on ``chip`` (a path under /dev) requested through libgpiod v2."""

    kind = "gpiod"

    def __init__(self, chip: str, lines: list[int | str], spec: str | None = None,
                 consumer: str = CONSUMER) -> None:
        path = chip_path(chip)
        super().__init__(spec or f"gpiod:{path}:" + ",".join(map(str, lines)), len(lines))
        if len(set(lines)) != len(lines):
            raise MarkerError(f"marker {self.spec!r} names a line twice",
                              fix="give each marker line once")
        self.chip = path
        self.lines = list(lines)
        self.consumer = consumer
        self._request: LineRequest | None = None

    def _open_lines(self) -> None:
        gpiod = _import_gpiod()
        from gpiod.line import Direction, Value

        settings = gpiod.LineSettings(direction=Direction.OUTPUT, output_value=Value.INACTIVE)
        try:
            request = gpiod.request_lines(self.chip, consumer=self.consumer,
                                          config={tuple(self.lines): settings})
        except (OSError, ValueError) as err:
            raise self._translate(err) from err
        self._request = request
        # Resolve names to offsets once; order follows self.lines (bit k = line k).
        offsets = list(request.offsets)
        levels = (Value.INACTIVE, Value.ACTIVE)
        table = [{off: levels[(level >> bit) & 1] for bit, off in enumerate(offsets)}
                 for level in range(1 << len(offsets))]
        mask = len(table) - 1
        set_values = request.set_values

        def set_level(level: int) -> None:
            set_values(table[level & mask])

        self._low = table[0]
        self._bind(set_level)

    def _close_lines(self) -> None:
        request, self._request = self._request, None
        if request is None:
            return
        try:
            request.set_values(self._low)
        except OSError as err:
            raise self._translate(err) from err
        finally:
            request.release()

    def _translate(self, err: Exception) -> HardwareError:
        """The one place libgpiod errors become coupprof errors."""
        lines = ",".join(map(str, self.lines))
        code = getattr(err, "errno", None)
        if isinstance(err, FileNotFoundError) or code == errno.ENOENT:
            return MarkerError(f"GPIO chip {self.chip} does not exist",
                               fix="list chips with `gpiodetect` and pass "
                                   "--marker gpiod:/dev/gpiochipN:LINE")
        if isinstance(err, PermissionError) or code in (errno.EACCES, errno.EPERM):
            return PermissionDeniedError(f"no permission to request lines {lines} on {self.chip}",
                                         fix="add your user to the gpio group (or a udev rule "
                                             "for /dev/gpiochip*), or run as root")
        if code in (errno.ENODEV, errno.ENOTTY):
            return MarkerError(f"{self.chip} is not a GPIO character device",
                               fix="pass a /dev/gpiochipN listed by `gpiodetect`")
        if code == errno.EBUSY:
            return MarkerError(f"line(s) {lines} on {self.chip} are busy (requested by another "
                               "consumer or a kernel driver)",
                               fix="see `gpioinfo` for the consumer, or choose other lines")
        if code == errno.EINVAL or isinstance(err, ValueError):
            return MarkerError(f"line(s) {lines} do not exist on {self.chip}: {err}",
                               fix="check offsets and names with `gpioinfo`")
        return MarkerError(f"cannot drive lines {lines} on {self.chip}: {err}",
                           fix="check the chip and lines with `gpioinfo`")
