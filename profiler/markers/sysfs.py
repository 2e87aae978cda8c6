"""The `sysfs` marker: legacy ``/sys/class/gpio`` lines (kernels with CONFIG_GPIO_SYSFS).

Opening line N writes ``N`` to ``export`` (unless ``gpioN`` already exists: then
someone else exported it and it is left exported on close), waits for ``gpioN/``
to appear and become writable (udev may fix its permissions a little later),
writes ``low`` to ``direction`` (output, driven low, in one step), and keeps an
``O_WRONLY`` descriptor on ``value``. ``set()`` is then one ``pwrite`` per line.
Closing drives the lines low, restores the original direction of lines it did
not export, and writes ``N`` to ``unexport`` for lines it exported.

Numbers are the kernel's global GPIO numbers (chip base + offset, see
``/sys/class/gpio/gpiochip*/base``), not header pin numbers.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

from profiler.errors import HardwareError, MarkerError, PermissionDeniedError
from profiler.markers.base import Marker

DEFAULT_ROOT = Path("/sys/class/gpio")
_LEVEL_BYTES = (b"0", b"1")


@dataclass
class _Line:
    number: int
    directory: Path
    exported_by_us: bool
    original_direction: str | None = None
    fd: int = -1


class SysfsMarker(Marker):
    """Marker lines through ``/sys/class/gpio`` (``root`` is passed in for tests)."""

    kind = "sysfs"

    def __init__(self, numbers: list[int], spec: str | None = None,
                 root: str | os.PathLike[str] = DEFAULT_ROOT, export_timeout_s: float = 2.0,
                 ) -> None:
        super().__init__(spec or "sysfs:" + ",".join(map(str, numbers)), len(numbers))
        if len(set(numbers)) != len(numbers):
            raise MarkerError(f"marker {self.spec!r} names a GPIO twice",
                              fix="give each marker line once")
        self.numbers = list(numbers)
        self.root = Path(root)
        self.export_timeout_s = export_timeout_s
        self._lines: list[_Line] = []

    # --- open -------------------------------------------------------------
    def _open_lines(self) -> None:
        if not (self.root / "export").exists():
            raise MarkerError(f"{self.root}/export does not exist (kernel without "
                              "CONFIG_GPIO_SYSFS, or sysfs not mounted)",
                              fix="use --marker gpiod:/dev/gpiochipN:LINE instead")
        try:
            for number in self.numbers:
                self._acquire(number)
        except BaseException:
            self._release_all(errors=[])
            raise
        fds = [line.fd for line in self._lines]
        if len(fds) == 1:
            fd = fds[0]

            def set_level(level: int) -> None:
                os.pwrite(fd, _LEVEL_BYTES[level & 1], 0)
        else:
            pairs = list(enumerate(fds))

            def set_level(level: int) -> None:
                for bit, line_fd in pairs:
                    os.pwrite(line_fd, _LEVEL_BYTES[(level >> bit) & 1], 0)

        self._bind(set_level)

    def _acquire(self, number: int) -> None:
        directory = self.root / f"gpio{number}"
        line = _Line(number, directory, exported_by_us=not directory.exists())
        if line.exported_by_us:
            _write(self.root / "export", f"{number}\n", number, "export")
        else:
            line.original_direction = _read(directory / "direction")
        # From here on a failure must undo the export: _release_all sees the line.
        self._lines.append(line)
        if line.exported_by_us:
            self._wait_exported(line)
        # "low" = output, initially low, without a glitch high.
        _write(directory / "direction", "low", number, "set the direction of")
        try:
            line.fd = os.open(directory / "value", os.O_WRONLY)
        except OSError as err:
            raise _translate(err, directory / "value", number, "open") from err

    def _wait_exported(self, line: _Line) -> None:
        deadline = time.monotonic() + self.export_timeout_s
        value, direction = line.directory / "value", line.directory / "direction"
        while True:
            if os.access(value, os.W_OK) and os.access(direction, os.W_OK):
                return
            if time.monotonic() > deadline:
                raise MarkerError(f"exported GPIO {line.number} but {line.directory} did not "
                                  f"appear writable within {self.export_timeout_s:g} s",
                                  fix="check the udev rules for /sys/class/gpio (or run as "
                                      "root), or use --marker gpiod:CHIP:LINE")
            time.sleep(0.001)

    # --- close ------------------------------------------------------------
    def _close_lines(self) -> None:
        errors: list[str] = []
        self._release_all(errors)
        if errors:
            raise MarkerError("releasing sysfs marker lines failed: " + "; ".join(errors),
                              fix=f"check {self.root} and unexport the lines by hand")

    def _release_all(self, errors: list[str]) -> None:
        # Drive every line low first so the logger sees the run end, then release.
        for line in self._lines:
            if line.fd >= 0:
                try:
                    os.pwrite(line.fd, b"0", 0)
                except OSError as err:
                    errors.append(f"GPIO {line.number} value: {err.strerror}")
                os.close(line.fd)
                line.fd = -1
        for line in self._lines:
            try:
                if line.exported_by_us:
                    _write(self.root / "unexport", f"{line.number}\n", line.number,
                           "unexport")
                elif line.original_direction:
                    _write(line.directory / "direction", line.original_direction,
                           line.number, "restore the direction of")
            except MarkerError as err:
                errors.append(str(err))
        self._lines = []


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _write(path: Path, text: str, number: int, what: str) -> None:
    # O_TRUNC without O_CREAT: like `echo N > export`, and a missing file is an
    # error instead of a new regular file.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    except OSError as err:
        raise _translate(err, path, number, what) from err
    try:
        os.write(fd, text.encode())
    except OSError as err:
        raise _translate(err, path, number, what) from err
    finally:
        os.close(fd)


def _translate(err: OSError, path: Path, number: int, what: str) -> HardwareError:
    """One place that turns sysfs errnos into messages with a fix."""
    if err.errno in (errno.EACCES, errno.EPERM):
        return PermissionDeniedError(
            f"cannot {what} GPIO {number}: {path} is not writable",
            fix="add your user to the gpio group (udev rule for /sys/class/gpio) or run as root")
    if err.errno == errno.EBUSY:
        return MarkerError(
            f"GPIO {number} is busy: the kernel refused to {what} it at {path} (a driver or "
            "another process holds the line)",
            fix="see `gpioinfo` for its consumer, free it, or choose another line")
    if err.errno == errno.EINVAL and what == "export":
        return MarkerError(
            f"GPIO {number} does not exist ({path} rejected it)",
            fix="sysfs numbers are chip base + offset: see /sys/class/gpio/gpiochip*/base")
    if err.errno == errno.ENOENT:
        return MarkerError(f"cannot {what} GPIO {number}: {path} does not exist",
                           fix="check the GPIO number, or use --marker gpiod:CHIP:LINE")
    return MarkerError(f"cannot {what} GPIO {number} at {path}: {err.strerror or err}",
                       fix="check the line with `gpioinfo`, or use --marker gpiod:CHIP:LINE")
