"""The serial port a simulated logger is read through: a raw pseudo-terminal."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tty


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
