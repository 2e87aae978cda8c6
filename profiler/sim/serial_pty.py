"""The serial port a simulated logger is read through: a raw pseudo-terminal, and
`PtyDevice`, the lifecycle both virtual loggers share."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
import tty
from typing import Protocol, TypeVar

from profiler.clock import Clock
from profiler.power.clockmap import ClockMap


def open_raw_pty() -> tuple[int, int, str]:
    """(master fd, non-blocking; slave fd; the slave's path, the port a reader opens)."""
    master, slave = os.openpty()
    tty.setraw(slave)  # no echo, no line editing: a byte pipe
    fl = fcntl.fcntl(master, fcntl.F_GETFL)
    fcntl.fcntl(master, fcntl.F_SETFL, fl | os.O_NONBLOCK)
    return master, slave, os.ttyname(slave)


def close_fds(*fds: int) -> None:
    """Close each open fd (-1: none), ignoring one already gone."""
    for fd in fds:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


class _Sent(Protocol):
    bytes_sent: int


D = TypeVar("D", bound="PtyDevice")


class PtyDevice:
    """A simulated serial device on a raw pty, served by a thread of its own.

    What the virtual loggers share: the port a reader opens (``port``), the device's
    clock, which runs at ``1 + drift_ppm * 1e-6`` times the host's from ``start_us``
    (``true_clock()`` is the exact device -> host map), a transmit buffer written as the
    pty takes it, start and close (also as a context manager), and the faults of the
    port itself: ``freeze()`` and ``close_port()``. A subclass serves the port in
    ``_serve()`` (until ``_stop`` is set or the pty is gone) and may queue its first
    bytes in ``_on_start()``; an exception in the thread is kept in ``error``.
    """

    thread_name = "virtual-device"
    counters: _Sent

    def __init__(self, *, start_us: int, drift_ppm: float, clock: Clock, tick_s: float,
                 tx_buffer_bytes: int) -> None:
        self.start_us = int(start_us)
        self.drift_ppm = float(drift_ppm)
        self.clock = clock
        self.tick_s = tick_s
        self.tx_buffer_bytes = tx_buffer_bytes
        self.port = ""
        self.error: BaseException | None = None
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._origin_ns = 0
        self._master = self._slave = -1
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._frozen = threading.Event()
        self._tx = bytearray()
        self._level = 0  # the marker inputs the host drives

    def true_clock(self) -> ClockMap:
        """The exact device µs -> host ns map (ground truth for tests)."""
        return ClockMap(device_ref_us=self.start_us, host_ref_ns=self._origin_ns,
                        ns_per_us=1000.0 / (1.0 + self.drift_ppm * 1e-6))

    # -- lifecycle ---------------------------------------------------------------------
    def start(self: D) -> D:
        self._master, self._slave, self.port = open_raw_pty()
        self._origin_ns = self.clock()
        self._on_start()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def _on_start(self) -> None:
        """Once the clock runs, before the thread starts serving."""

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._close_fds()

    def __enter__(self: D) -> D:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- faults of the port ------------------------------------------------------------
    def freeze(self) -> None:
        """Hang: send and answer nothing more, but keep the port open (a crashed sketch)."""
        self._frozen.set()

    def close_port(self) -> None:
        """Pull the cable: close the pty; the host sees the port vanish."""
        self._stop.set()
        if self._thread is None or not self._thread.is_alive():
            self._close_fds()
        self.closed.wait(timeout=5)

    # -- the thread --------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as err:  # surfaced to tests via .error
            self.error = err
        finally:
            self._close_fds()

    def _serve(self) -> None:
        raise NotImplementedError

    def _flush(self) -> bool:
        """Write what the pty takes now; False when the pty is gone."""
        if not self._tx:
            return True
        try:
            n = os.write(self._master, self._tx)
        except OSError as err:
            return err.errno in (errno.EAGAIN, errno.EINTR)
        self.counters.bytes_sent += n
        del self._tx[:n]
        return True

    def _close_fds(self) -> None:
        close_fds(self._master, self._slave)
        self._master = self._slave = -1
        self.closed.set()
