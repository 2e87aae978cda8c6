"""The simavr rig: the real logger firmware on a simulated ATmega328P (``firmware/sim``).

``Rig`` starts ``firmware/sim/build/coupprof_rig`` with a firmware ELF and a
current/voltage waveform, and talks to it: ``rig.port`` is the UART's pty (open it with
pyserial), ``set_markers`` / ``set_pin`` / ``set_markers_nowait`` move the marker pins,
and ``ground_truth()`` gives the exact energy of every marked window. It runs paced to the
wall clock, or with ``fast=True`` as fast as it can (``run_fast``).

The channels and options in full: docs/power.md ("The simavr rig"); the rig's commands:
firmware/sim/README.md.
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from profiler.errors import BadInputError, HardwareError, PowerSourceError
from profiler.resources import source_dir, source_missing

# The rig and the firmware are built in a checkout (./setup.sh), never shipped in the
# wheel: $COUPPROF_SOURCE_DIR points an installed coupprof at one.
SIM_DIR = source_dir() / "firmware" / "sim"
RIG_BINARY = SIM_DIR / "build" / "coupprof_rig"
TESTPROG_ELF = SIM_DIR / "build" / "testprog.elf"
FIRMWARE_BUILD = source_dir() / "firmware" / "build"
INA226_ELF = FIRMWARE_BUILD / "coupprof_logger_ina226.elf"
A0_ELF = FIRMWARE_BUILD / "coupprof_logger_a0.elf"

#: Marker k is PD(2+k), as in firmware/coupprof_logger/fw_config.h.
MARKER_COUNT = 4

_START_TIMEOUT_S = 10.0
_REPLY_TIMEOUT_S = 10.0


def missing(*paths: Path) -> str | None:
    """Why the rig cannot run with these files (None when all exist), in one line that
    says how to get them: for test skips and the benchmarks."""
    no_checkout = source_missing()
    if no_checkout and not all(p.exists() for p in (RIG_BINARY, *paths)):
        return f"the simavr rig and the firmware are not in the coupprof package: {no_checkout}"
    for p in (RIG_BINARY, *paths):
        if not p.exists():
            what = "the rig" if p == RIG_BINARY else p.name
            how = "make -C firmware/sim" if p.is_relative_to(SIM_DIR) else "make -C firmware"
            return f"{what} is not built ({p}); run `{how}` (setup.sh does)"
    return None


# ---------------------------------------------------------------------------
# Waveform


@dataclass(frozen=True)
class Waveform:
    """Current and bus voltage in simulated time; see firmware/sim/README.md.

    ``points`` are ``(t_us, current_a)`` or ``(t_us, current_a, bus_v)``,
    linear in between (two points at one time make a step); before the first
    and after the last point the value holds. With ``period_us`` the points
    (first at t = 0) repeat, ramping from the last point back to the first.
    ``state_current_a[s]`` is added while the marker pins read state ``s``
    (bit k = marker k), so the energy depends on which layer runs.
    """

    points: tuple[tuple[float, ...], ...] = ()
    period_us: float | None = None
    bus_v: float = 5.0
    state_current_a: Mapping[int, float] = field(default_factory=dict)

    @classmethod
    def constant(cls, current_a: float, bus_v: float = 5.0,
                 state_current_a: Mapping[int, float] | None = None) -> Waveform:
        return cls(((0.0, current_a),), None, bus_v, dict(state_current_a or {}))

    def to_text(self) -> str:
        lines = ["# coupprof rig waveform"]
        if self.period_us is not None:
            lines.append(f"period_us {self.period_us!r}")
        lines.append(f"bus_v {self.bus_v!r}")
        for state, amps in sorted(self.state_current_a.items()):
            lines.append(f"state {int(state)} {float(amps)!r}")
        for p in self.points:
            lines.append(" ".join(repr(float(x)) for x in p))
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> Path:
        path.write_text(self.to_text())
        return path

    # -- evaluation in Python, independent of the rig's C code (for checks) --

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not self.points:
            return np.zeros(1), np.zeros(1), np.full(1, self.bus_v)
        t = np.array([p[0] for p in self.points], dtype=float)
        i = np.array([p[1] for p in self.points], dtype=float)
        v = np.array([p[2] if len(p) > 2 else self.bus_v for p in self.points], dtype=float)
        order = np.argsort(t, kind="stable")
        t, i, v = t[order], i[order], v[order]
        if self.period_us is not None:
            t = np.append(t, self.period_us)
            i = np.append(i, i[0])
            v = np.append(v, v[0])
        return t, i, v

    def base(self, t_us: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """Current (A) and bus voltage (V) of the points alone at times t_us."""
        t_pts, i_pts, v_pts = self._arrays()
        t = np.asarray(t_us, dtype=float)
        if self.period_us is not None:
            t = np.mod(t, self.period_us)
        # np.interp takes the right-hand value at a step, as the rig does
        return np.interp(t, t_pts, i_pts), np.interp(t, t_pts, v_pts)

    def power_w(self, t_us: np.ndarray | float, state: np.ndarray | int = 0) -> np.ndarray:
        i, v = self.base(t_us)
        extra = np.vectorize(lambda s: self.state_current_a.get(int(s), 0.0), otypes=[float])(
            np.asarray(state))
        return (i + extra) * v


# ---------------------------------------------------------------------------
# Ground truth (the rig's log)


@dataclass(frozen=True)
class PinChange:
    """Marker pins applied at t_us; charge/energy integrate the waveform from 0 to t_us."""

    t_us: float
    state: int
    charge_c: float
    energy_j: float
    source: str


@dataclass(frozen=True)
class MarkerWindow:
    """One high period of a marker line, with its exact integrals."""

    marker: int
    start_us: float
    end_us: float
    energy_j: float
    charge_c: float

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


@dataclass
class GroundTruth:
    """The rig's log, parsed (format in firmware/sim/README.md)."""

    config: dict[str, str]
    pins: list[PinChange]
    #: periodic samples: t_us, marker state, current_a, bus_v, cumulative charge_c, energy_j
    gt: dict[str, np.ndarray]
    #: INA226 register updates: t_us, shunt, bus, current, mean_current_a, mean_bus_v
    ina: dict[str, np.ndarray]
    #: ADC samples (A0 front end): t_us (sample-and-hold), code, current_a
    adc: dict[str, np.ndarray]
    notes: list[str]
    end_us: float | None
    end_energy_j: float | None

    def windows(self, marker: int) -> list[MarkerWindow]:
        """Every complete high period of marker ``marker``, in order."""
        bit = 1 << marker
        out: list[MarkerWindow] = []
        opened: PinChange | None = None
        prev_state = 0
        for pc in self.pins:
            rising = pc.state & bit and not prev_state & bit
            falling = prev_state & bit and not pc.state & bit
            if rising:
                opened = pc
            elif falling and opened is not None:
                out.append(MarkerWindow(marker, opened.t_us, pc.t_us,
                                        pc.energy_j - opened.energy_j,
                                        pc.charge_c - opened.charge_c))
                opened = None
            prev_state = pc.state
        return out

    def changes(self) -> list[PinChange]:
        """Pin changes applied by the host (the initial 'init' record left out)."""
        return [p for p in self.pins if p.source != "init"]


def _columns(rows: list[list[str]], names: Sequence[str], ints: Iterable[str] = ()) -> dict[
        str, np.ndarray]:
    int_names = set(ints)
    out: dict[str, np.ndarray] = {}
    for k, name in enumerate(names):
        col = [r[k] for r in rows]
        out[name] = np.array(col, dtype=np.int64 if name in int_names else float) if col else \
            np.zeros(0, dtype=np.int64 if name in int_names else float)
    return out


def parse_log(path: Path) -> GroundTruth:
    """Parse a rig log file (a running rig's too: its last line may be half-written,
    and is left out)."""
    config: dict[str, str] = {}
    pins: list[PinChange] = []
    gt_rows: list[list[str]] = []
    ina_rows: list[list[str]] = []
    adc_rows: list[list[str]] = []
    notes: list[str] = []
    end_us = end_e = None
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.endswith("\n"):
                continue
            parts = line.split()
            if not parts:
                continue
            kind = parts[0]
            if kind == "gt":
                gt_rows.append(parts[1:7])
            elif kind == "pins":
                pins.append(PinChange(float(parts[1]), int(parts[2]), float(parts[3]),
                                      float(parts[4]), parts[5] if len(parts) > 5 else ""))
            elif kind == "ina":
                ina_rows.append(parts[1:7])
            elif kind == "adc":
                adc_rows.append(parts[1:4])
            elif kind == "config":
                config.update(zip(parts[1::2], parts[2::2], strict=False))
            elif kind in ("note", "behind"):
                notes.append(line.rstrip("\n"))
            elif kind == "end":
                end_us, end_e = float(parts[1]), float(parts[4])
    return GroundTruth(
        config=config,
        pins=pins,
        gt=_columns(gt_rows, ("t_us", "state", "current_a", "bus_v", "charge_c", "energy_j"),
                    ints=("state",)),
        ina=_columns(ina_rows, ("t_us", "shunt", "bus", "current", "mean_current_a",
                                "mean_bus_v"), ints=("shunt", "bus", "current")),
        adc=_columns(adc_rows, ("t_us", "code", "current_a"), ints=("code",)),
        notes=notes,
        end_us=end_us,
        end_energy_j=end_e,
    )


# ---------------------------------------------------------------------------
# The rig process


class Rig:
    """A running rig; use as a context manager (``with Rig(elf, wave) as rig: ...``)."""

    def __init__(self, elf: Path | str, waveform: Waveform | Path | str | None = None, *,
                 fast: bool = False, seconds: float | None = None,
                 workdir: Path | str | None = None, log_sensor: bool = False,
                 gt_period_us: float = 1000.0, shunt_ohm: float = 0.1,
                 amp_gain: float = 50.0, amp_offset_v: float = 0.0,
                 ina_alert: str = "B0", script: Path | str | None = None,
                 uart_out: Path | str | None = None, extra_args: Sequence[str] = (),
                 binary: Path | str | None = None, nice: int | None = -10) -> None:
        self.elf = Path(elf)
        # A paced rig stands in for a logger with its own CPU: on a shared host it
        # runs at a higher priority (niceness) where allowed, so it keeps the wall
        # clock's pace. None leaves it at ours.
        self.nice = None if fast else nice
        self.priority = "inherited"  # what _raise_priority managed
        self.binary = Path(binary) if binary else RIG_BINARY
        self.fast = fast
        self.seconds = seconds
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="coupprof-rig-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self._own_workdir:  # the log outlives stop(); the directory goes with the object
            weakref.finalize(self, shutil.rmtree, str(self.workdir), True)
        self.log_path = self.workdir / "rig.log"
        self.stderr_path = self.workdir / "rig.stderr"
        self.marker_fifo = self.workdir / "markers.fifo"
        self.uart_out = Path(uart_out) if uart_out else None
        if isinstance(waveform, Waveform):
            self.waveform_path: Path | None = waveform.write(self.workdir / "waveform.txt")
        else:
            self.waveform_path = Path(waveform) if waveform else None
        self.waveform = waveform if isinstance(waveform, Waveform) else None
        self._args = [
            "--log", str(self.log_path), "--gt-period-us", repr(float(gt_period_us)),
            "--shunt-ohm", repr(float(shunt_ohm)), "--amp-gain", repr(float(amp_gain)),
            "--amp-offset-v", repr(float(amp_offset_v)), "--ina-alert", ina_alert,
        ]
        if self.waveform_path:
            self._args += ["--waveform", str(self.waveform_path)]
        if log_sensor:
            self._args.append("--log-sensor")
        if script:
            self._args += ["--script", str(script)]
        if self.uart_out:
            self._args += ["--uart-out", str(self.uart_out)]
        if seconds is not None:
            self._args += ["--seconds", repr(float(seconds))]
        if fast:
            self._args.append("--fast")
        else:
            self._args += ["--marker-fifo", str(self.marker_fifo)]
        self._args += list(extra_args)
        self.port: str | None = None
        self.returncode: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stdout_buf = b""
        self._lock = threading.Lock()
        self._fifo_fd: int | None = None

    # -- lifecycle --

    def start(self) -> Rig:
        no_checkout = source_missing()
        if no_checkout and not self.binary.exists():
            raise HardwareError("the simavr rig is not in the coupprof package: " + no_checkout)
        for p, what in ((self.binary, "the rig"), (self.elf, "firmware ELF")):
            if not p.exists():
                raise HardwareError(f"{what} {p} does not exist",
                                    fix="run ./setup.sh (or `make -C firmware all sim`)")
        if self.waveform_path and not self.waveform_path.exists():
            raise BadInputError(f"waveform {self.waveform_path} does not exist",
                                fix="pass a Waveform or an existing waveform file")
        cmd = [str(self.binary), *self._args, str(self.elf)]
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr, bufsize=0)
        if self.nice is not None:
            self._raise_priority(self._proc.pid, self.nice)
        try:
            pty_line = self._read_line(_START_TIMEOUT_S)
            ready = self._read_line(_START_TIMEOUT_S)
        except PowerSourceError:
            rc = self.stop()
            why = self._tail()
            if rc == 2:  # the rig refused its arguments or files
                raise BadInputError(f"rig: {why}",
                                    fix="check the waveform, script and ELF given") from None
            raise PowerSourceError(f"the rig did not start (exit {rc}): {why}",
                                   fix=f"run `{' '.join(cmd)}` by hand to see why") from None
        if not pty_line.startswith("pty ") or not ready.startswith("ready"):
            self.stop()
            raise PowerSourceError(f"the rig said {pty_line!r}, {ready!r} on start",
                                   fix=f"run `{' '.join(cmd)}` by hand to see why")
        port = pty_line.split(maxsplit=1)[1]
        self.port = None if port == "-" else port
        return self

    def _raise_priority(self, pid: int, nice: int) -> None:
        """Real-time FIFO scheduling where allowed (the rig sleeps whenever it is ahead
        of the wall clock, so it takes only the CPU it needs), else a lower niceness,
        else nothing (not root, no CAP_SYS_NICE): then the rig runs at our priority."""
        try:
            os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(1))
            self.priority = "SCHED_FIFO 1"
            return
        except (OSError, AttributeError):
            pass
        try:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
            self.priority = f"nice {nice}"
        except OSError:
            pass

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """Ask the rig to quit (it writes its log's 'end' line); returns its exit code."""
        proc = self._proc
        if proc is None:
            return self.returncode
        if self._fifo_fd is not None:
            os.close(self._fifo_fd)
            self._fifo_fd = None
        stdin = proc.stdin
        assert stdin is not None  # started with stdin=PIPE
        if proc.poll() is None:
            try:
                if not self.fast:
                    stdin.write(b"quit\n")
                stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        else:
            stdin.close()
        if proc.stdout:
            proc.stdout.close()
        self._stderr.close()
        self.returncode = proc.returncode
        self._proc = None
        return self.returncode

    def wait(self, timeout_s: float | None = None) -> int:
        """Wait for a rig started with ``seconds`` to finish; returns its exit code."""
        assert self._proc is not None, "rig not started"
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as err:
            raise PowerSourceError(f"the rig did not finish in {timeout_s} s",
                                   fix="give it fewer simulated seconds") from err
        return self.stop() or 0

    def __enter__(self) -> Rig:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def cleanup(self) -> None:
        """Remove the working directory if the rig made it."""
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    # -- control channel --

    def _read_line(self, timeout_s: float) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        fd = self._proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._stdout_buf:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise PowerSourceError(
                        f"the rig did not answer within {timeout_s} s: {self._tail()}",
                        fix="see the rig's stderr above")
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise PowerSourceError(f"the rig exited: {self._tail()}",
                                           fix="see the rig's stderr above")
                self._stdout_buf += chunk
        line, self._stdout_buf = self._stdout_buf.split(b"\n", 1)
        return line.decode()

    def _tail(self) -> str:
        text = self.stderr_text().strip().splitlines()
        return " | ".join(text[-3:]) if text else "(no stderr)"

    def command(self, line: str, timeout_s: float = _REPLY_TIMEOUT_S) -> float:
        """Send one control command; returns the simulated time (us) of its reply."""
        if self._proc is None or self.fast:
            raise PowerSourceError("the rig takes commands only while running paced",
                                   fix="start it (not fast) and use it inside `with`")
        stdin = self._proc.stdin
        assert stdin is not None  # started with stdin=PIPE
        with self._lock:
            try:
                stdin.write(line.encode() + b"\n")
            except (BrokenPipeError, OSError) as err:
                raise PowerSourceError(f"the rig is gone: {self._tail()}",
                                       fix="see the rig's stderr") from err
            reply = self._read_line(timeout_s)
        if reply.startswith("ok"):
            return float(reply.split()[1])
        raise BadInputError(f"rig command {line!r}: {reply.removeprefix('err ').strip()}")

    def set_markers(self, bits: int) -> float:
        """Drive marker k to bit k of ``bits``; returns the simulated time (us) applied."""
        return self.command(f"pins {int(bits) & ((1 << MARKER_COUNT) - 1)}")

    def set_pin(self, k: int, level: int) -> float:
        return self.command(f"pin {int(k)} {1 if level else 0}")

    def set_markers_nowait(self, bits: int) -> None:
        """Like set_markers through the marker FIFO: no reply, no waiting."""
        if self._fifo_fd is None:
            self._fifo_fd = os.open(self.marker_fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.write(self._fifo_fd, f"pins {int(bits) & ((1 << MARKER_COUNT) - 1)}\n".encode())

    def time_us(self) -> float:
        return self.command("time")

    def send_uart(self, data: bytes) -> float:
        """Inject bytes into the firmware's receiver (the pty does the same)."""
        return self.command("send " + data.hex())

    def ground_truth(self) -> GroundTruth:
        """The log so far (flushed first when the rig is running)."""
        if self.running and not self.fast:
            self.command("sync")
        return parse_log(self.log_path)


@dataclass
class FastRun:
    """Result of ``run_fast``: the bytes the firmware sent and the ground truth."""

    uart: bytes
    truth: GroundTruth
    stderr: str
    returncode: int
    wall_s: float


def run_fast(elf: Path | str, seconds: float, script_lines: Iterable[str] = (),
             waveform: Waveform | Path | str | None = None, workdir: Path | str | None = None,
             timeout_s: float | None = None, **kwargs: Any) -> FastRun:
    """Run ``seconds`` of simulated time unthrottled with timed commands ('T_US CMD').

    Without ``workdir`` the files live in a temporary directory removed afterwards."""
    own = workdir is None
    wd = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="coupprof-rig-"))
    wd.mkdir(parents=True, exist_ok=True)
    try:
        return _run_fast(elf, seconds, script_lines, waveform, wd, timeout_s, **kwargs)
    finally:
        if own:
            shutil.rmtree(wd, ignore_errors=True)


def _run_fast(elf: Path | str, seconds: float, script_lines: Iterable[str],
              waveform: Waveform | Path | str | None, wd: Path, timeout_s: float | None,
              **kwargs: Any) -> FastRun:
    script = wd / "script.txt"
    script.write_text("".join(f"{ln}\n" for ln in script_lines))
    uart = wd / "uart.bin"
    rig = Rig(elf, waveform, fast=True, seconds=seconds, workdir=wd, script=script,
              uart_out=uart, **kwargs)
    t0 = time.monotonic()
    rig.start()
    rc = rig.wait(timeout_s)
    wall = time.monotonic() - t0
    if rc != 0:
        raise PowerSourceError(f"the rig failed (exit {rc}): {rig._tail()}",
                               fix="see its stderr in " + str(rig.stderr_path))
    return FastRun(uart.read_bytes(), parse_log(rig.log_path), rig.stderr_text(), rc, wall)
