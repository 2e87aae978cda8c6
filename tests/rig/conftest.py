"""Shared pieces of the simavr rig tests (`pytest -m rig`).

Every test here runs a real AVR program on the rig (firmware/sim): either the
rig's own self-test program (``testprog.elf``) or the logger firmware. They are
skipped, with the reason, when the rig or an ELF has not been built; setup.sh
builds them, so CI runs them.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import serial

from profiler.power import rig as rigmod
from profiler.power.rig import Waveform

pytestmark = pytest.mark.rig


def need(*elfs: Path) -> None:
    why = rigmod.missing(*elfs)
    if why:
        pytest.skip(why)


def hexline(text: str) -> str:
    """A testprog command line as the hex a rig `send` command takes."""
    return (text + "\n").encode().hex()


def text_lines(uart: bytes, prefix: bytes) -> list[list[str]]:
    """Lines of testprog output starting with ``prefix``, split into fields."""
    out = []
    for line in uart.split(b"\n"):
        if line.startswith(prefix):
            out.append(line.decode(errors="replace").split())
    return out


class LineReader:
    """Reads testprog's text replies from a pyserial port, with a deadline."""

    def __init__(self, port: serial.Serial) -> None:
        self.port = port
        self.buf = b""

    def line(self, timeout_s: float = 5.0) -> str:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buf:
            if time.monotonic() > deadline:
                raise AssertionError(f"no reply line within {timeout_s} s (have {self.buf!r})")
            self.buf += self.port.read(max(1, self.port.in_waiting))
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode(errors="replace")

    def until(self, prefix: str, timeout_s: float = 5.0) -> str:
        while True:
            line = self.line(timeout_s)
            if line.startswith(prefix):
                return line


def window_mean(wave: Waveform, start_us: float, end_us: float, state: int = 0,
                step_us: float = 0.25) -> tuple[float, float]:
    """Mean current and bus voltage over [start, end], by dense trapezoids in numpy
    (independent of the rig's exact C integration)."""
    n = max(2, int(round((end_us - start_us) / step_us)) + 1)
    t = np.linspace(start_us, end_us, n)
    i, v = wave.base(t)
    i = i + wave.state_current_a.get(state, 0.0)
    span = end_us - start_us
    dt = np.diff(t)
    return (float(np.sum((i[1:] + i[:-1]) * dt) / 2 / span),
            float(np.sum((v[1:] + v[:-1]) * dt) / 2 / span))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
