"""The sysfs marker on a fake /sys/class/gpio tree, with a small fake kernel.

The fake kernel is a thread that does what the kernel does for the files the
marker writes: a number written to ``export`` creates ``gpioN/{direction,value}``
(only for lines the "chip" has), a number written to ``unexport`` removes it.
Values and directions are plain files the test reads back.
"""

from __future__ import annotations

import errno
import os
import select
import shutil
import threading
import time
from pathlib import Path

import pytest

from profiler.errors import MarkerError, PermissionDeniedError
from profiler.markers import open_marker
from profiler.markers.sysfs import SysfsMarker, _translate


class FakeGpioKernel:
    """``export`` and ``unexport`` are FIFOs so that every write reaches the fake
    kernel in order, as the real kernel sees each write to those files."""

    def __init__(self, root: Path, lines: set[int]) -> None:
        self.root = root
        self.lines = lines
        self.log: list[tuple[str, int]] = []
        root.mkdir(parents=True)
        self._fds = {}
        for name in ("export", "unexport"):
            os.mkfifo(root / name)
            # O_RDWR: the pipe always has a writer, so reads never see EOF.
            self._fds[os.open(root / name, os.O_RDWR | os.O_NONBLOCK)] = name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def pre_export(self, number: int, direction: str = "in") -> Path:
        """A line some other process exported before the marker ran.

        The directory appears with its files already written, as the kernel's does:
        made in place, a marker that saw it could open ``value`` while it was still
        empty and then read back what the fake wrote over it (a busy host did that:
        '' for '0', b'1' for b'1\\n')."""
        d = self.root / f"gpio{number}"
        tmp = self.root / f".gpio{number}.new"
        tmp.mkdir()
        (tmp / "direction").write_text(direction + "\n")
        (tmp / "value").write_text("0\n")
        tmp.rename(d)
        return d

    def _handle(self, name: str, number: int) -> None:
        if name == "export" and number in self.lines:
            self.pre_export(number)
        elif name == "unexport":
            shutil.rmtree(self.root / f"gpio{number}", ignore_errors=True)
        self.log.append((name, number))

    def _run(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select(list(self._fds), [], [], 0.01)
            for fd in ready:
                for line in os.read(fd, 4096).decode().split():
                    self._handle(self._fds[fd], int(line))

    def wait_for(self, what: tuple[str, int]) -> None:
        deadline = time.monotonic() + 10
        while what not in self.log:
            assert time.monotonic() < deadline, f"fake kernel never saw {what}"
            time.sleep(0.001)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for fd in self._fds:
            os.close(fd)


@pytest.fixture
def kernel(tmp_path: Path):
    k = FakeGpioKernel(tmp_path / "sys" / "class" / "gpio", lines={17, 27, 22})
    yield k
    k.stop()


def value(kernel: FakeGpioKernel, n: int) -> str:
    return (kernel.root / f"gpio{n}" / "value").read_text().strip()


def test_export_drive_and_unexport(kernel: FakeGpioKernel) -> None:
    marker = open_marker("sysfs:17", sysfs_root=kernel.root)
    with marker:
        gpio = kernel.root / "gpio17"
        assert (gpio / "direction").read_text() == "low"  # output, low, in one write
        assert value(kernel, 17) == "0"
        for level, expect in [(1, "1"), (0, "0"), (1, "1"), (3, "1"), (2, "0")]:
            marker.set(level)
            assert value(kernel, 17) == expect  # one line: bit 0 only
        marker.set(1)
    kernel.wait_for(("unexport", 17))
    assert not (kernel.root / "gpio17").exists()
    assert kernel.log == [("export", 17), ("unexport", 17)]
    with pytest.raises(MarkerError, match="not open"):
        marker.set(1)


def test_two_lines_bit_order(kernel: FakeGpioKernel) -> None:
    with open_marker("sysfs:17,27", sysfs_root=kernel.root) as marker:
        for level in range(4):
            marker.set(level)
            assert (value(kernel, 17), value(kernel, 27)) == (str(level & 1), str(level >> 1))
        # Values must be rewritten in place, never appended.
        marker.set(3)
        assert (kernel.root / "gpio27" / "value").read_bytes() == b"1\n"
    kernel.wait_for(("unexport", 27))
    assert sorted(kernel.log) == [("export", 17), ("export", 27),
                                  ("unexport", 17), ("unexport", 27)]


def test_released_on_exception_and_driven_low(kernel: FakeGpioKernel) -> None:
    d = kernel.pre_export(22, direction="in")  # 22 held by someone else: keep it exported
    with pytest.raises(RuntimeError, match="layer failed"), \
            open_marker("sysfs:17,22", sysfs_root=kernel.root) as marker:
        marker.set(3)
        assert value(kernel, 22) == "1"
        raise RuntimeError("layer failed")
    kernel.wait_for(("unexport", 17))
    assert not (kernel.root / "gpio17").exists()
    # The pre-exported line stays exported, low, with its direction restored.
    assert d.exists()
    assert value(kernel, 22) == "0"
    assert (d / "direction").read_text() == "in"
    assert ("unexport", 22) not in kernel.log


def test_missing_line_unexports_the_ones_already_taken(kernel: FakeGpioKernel) -> None:
    # 99 is not a line of the fake chip: the kernel never creates gpio99.
    marker = SysfsMarker([17, 99], root=kernel.root, export_timeout_s=0.3)
    with pytest.raises(MarkerError, match="GPIO 99.*did not appear"):
        marker.open()
    kernel.wait_for(("unexport", 17))
    assert not marker.is_open
    assert not (kernel.root / "gpio17").exists()
    assert ("unexport", 17) in kernel.log


def test_no_sysfs_gpio(tmp_path: Path) -> None:
    with pytest.raises(MarkerError, match="CONFIG_GPIO_SYSFS.*gpiod"):
        open_marker("sysfs:17", sysfs_root=tmp_path).open()


def test_export_errno_translation(tmp_path: Path) -> None:
    """The kernel answers export with EBUSY (line held by a driver) or EINVAL (no such
    GPIO); a regular file cannot, so the translation is checked on the errnos."""
    p = tmp_path / "export"
    busy = _translate(OSError(errno.EBUSY, os.strerror(errno.EBUSY)), p, 17, "export")
    assert type(busy) is MarkerError and "busy" in str(busy) and "gpioinfo" in str(busy)
    assert busy.exit_code == 3
    bad = _translate(OSError(errno.EINVAL, "Invalid argument"), p, 600, "export")
    assert "does not exist" in str(bad) and "base" in str(bad)
    denied = _translate(PermissionError(errno.EACCES, "Permission denied"), p, 17, "export")
    assert isinstance(denied, PermissionDeniedError) and "gpio group" in str(denied)


def test_value_file_vanishing_is_reported_on_close(kernel: FakeGpioKernel) -> None:
    marker = open_marker("sysfs:17", sysfs_root=kernel.root)
    marker.open()
    # The unexport file vanishes under us (sysfs unmounted mid-run).
    (kernel.root / "unexport").unlink()
    with pytest.raises(MarkerError, match="unexport GPIO 17"):
        marker.close()
    assert not marker.is_open
