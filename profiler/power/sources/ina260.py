"""`ina260:PORT`: an INA260 on an Arduino printing ``pin,millis,mW`` lines (ARM-CO-UP's
logger), read over serial as a `ReadingSource`.

ARM-CO-UP's sketch prints ``digitalRead(13), millis(), ina260.readPower()`` with no
delay at 115200 baud: a reading every 1-3 ms, the sensor's register updating every
~2.7 ms in 10 mW steps, and no edge timestamps. A lab with that Arduino wires the
board's marker GPIO to its pin 13 and passes ``--power ina260:/dev/ttyACM0 --marker
gpiod:CHIP:LINE``; coupprof drives the line high while a layer runs, so pin 1 is a
layer (their board drove it low: `coupprof import` reads their files with pin 0).
``ina260:PORT:BAUD`` sets another baud rate.

A reader thread keeps every line that arrives during a recording, as it came, in
``<trace dir>/readings.csv`` (the same format as their logs, so `coupprof import` reads
it again) and in memory; `stop_recording` waits until the pin has read idle for
``tail_s`` of the logger's time, so the readings cover the last window (the sensor lags
the pin by ~3 ms), and `CLOSE_MARGIN` times the longest segment recorded after the
first, so that the close stands out of the frames for `coupprof import` to find the
layout (`profiler.recordings.infer`), and returns them as a `Recording`. The run's
attribution is `profiler.recordings.live`.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from pathlib import Path
from typing import TextIO

import serial

from profiler.clock import Clock, perf_clock
from profiler.errors import HardwareError, LoggerTimeoutError, PortLostError
from profiler.power.sources.base import ReadingSource, SourceInfo
from profiler.recordings.traces import Recording, armcoup_recording, parse_armcoup_line

BAUDRATE = 115200
#: ARM-CO-UP sleeps 8 ms after each layer: readings up to 3 ms apart then see every gap.
GAP_NS = 8_000_000
#: The idle a recording ends with, in times the longest segment before it: `coupprof
#: import` takes a segment 2 times longer than every one of a frame for a close
#: (`profiler.recordings.infer.CLOSE_RATIO`); 3 leaves a stretched one room.
CLOSE_MARGIN = 3.0
#: An Arduino Uno resets when its port opens; its bootloader waits ~1.6 s before the sketch.
FIRST_READING_S = 5.0


class Ina260Source(ReadingSource):
    kind = "ina260"
    gap_ns = GAP_NS

    def __init__(self, spec: str, port: str, *, baud: int = BAUDRATE, out_dir: str | Path | None = None,
                 timeout_s: float = FIRST_READING_S, tail_s: float = 0.05,
                 clock: Clock = perf_clock) -> None:
        super().__init__(spec, clock)
        self.port = port
        self.baud = baud
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.timeout_s = timeout_s
        self.tail_s = tail_s
        self.serial: serial.SerialBase | None = None
        self.recording: Recording | None = None  # the last one
        self.readings_per_s: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._valid = threading.Event()  # a whole reading line arrived
        self._last_rx_ns = 0  # host time of the last whole line
        self._lines: list[str] | None = None  # while recording
        self._run: tuple[bool, float] | None = None  # the pin's current run: (active, first millis)
        self._last_ms = 0.0  # the last reading's millis
        # the longest run ended so far, the recording's first left out (None: not ended)
        self._longest_ms: float | None = None
        self._file: TextIO | None = None
        self._path: Path | None = None
        self.error = None

    # -- PowerSource -------------------------------------------------------------------
    def _open_device(self) -> None:
        from profiler.power.collector import open_port

        try:
            self.serial = open_port(self.port, self.baud)
        except HardwareError as err:
            raise type(err)(err.message, fix=f"check the port in --power {self.spec} (list "
                            "ports with `coupprof doctor`)") from None
        self._stop.clear()
        self._thread = threading.Thread(target=self._read, name="ina260-reader", daemon=True)
        self._thread.start()
        if not self._valid.wait(self.timeout_s):
            self._close_device()
            raise LoggerTimeoutError(
                f"no pin,millis,mW readings on {self.port} in {self.timeout_s:g} s",
                fix="check that the Arduino runs the INA260 logger sketch (ARM-CO-UP's "
                    f"Profiling/Arduino) at {self.baud} baud and that no other program holds "
                    "the port")

    def _close_device(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        self._thread = None
        if self.serial is not None:
            with contextlib.suppress(serial.SerialException, OSError):
                self.serial.close()
            self.serial = None
        self._close_file()

    def info(self) -> SourceInfo:
        return SourceInfo(
            spec=self.spec, kind=self.kind, mode=self.mode, device=self.port,
            sample_rate_hz=self.readings_per_s,
            detail=f"pin,millis,mW lines at {self.baud} baud (an INA260 on an Arduino, "
                   f"ARM-CO-UP's logger); pin {self.active_level} = a layer runs")

    # -- the reader thread -------------------------------------------------------------
    def _read(self) -> None:
        ser = self.serial
        assert ser is not None
        pending = b""
        while not self._stop.is_set():
            try:
                data = ser.read(max(1, min(ser.in_waiting, 1 << 16)))
            except (serial.SerialException, OSError, TypeError, AttributeError) as err:
                if not self._stop.is_set():
                    self._lost(err)
                return
            if not data:
                continue
            pending += data
            *whole, pending = pending.split(b"\n")
            if whole:
                self._consume([w.decode("ascii", errors="replace") for w in whole])

    def _consume(self, lines: list[str]) -> None:
        now = self.clock()
        with self._lock:
            if not self._valid.is_set() and any(isinstance(parse_armcoup_line(x), tuple)
                                                for x in lines):
                self._valid.set()
            self._last_rx_ns = now
            if self._lines is None:
                return
            self._lines += lines
            for x in lines:  # how long the pin has read idle, on the logger's clock
                got = parse_armcoup_line(x)
                if isinstance(got, tuple):
                    pin, ms, _ = got
                    active = pin == self.active_level
                    if self._run is None:
                        self._run = (active, ms)
                    elif active != self._run[0]:
                        self._longest_ms = 0.0 if self._longest_ms is None else \
                            max(self._longest_ms, ms - self._run[1])
                        self._run = (active, ms)
                    self._last_ms = ms
            if self._file is not None:
                self._file.write("".join(x.rstrip("\r") + "\n" for x in lines))

    def _lost(self, err: BaseException) -> None:
        with self._lock:
            self.error = PortLostError(
                f"serial port {self.port} vanished ({err})",
                fix="check the USB cable and the logger's power, then re-run; the readings "
                    "recorded until then were kept")

    def poll(self) -> None:
        if self.error is not None:
            raise self.error

    # -- ReadingSource -----------------------------------------------------------------
    def start(self) -> None:
        self._require_open()
        self.poll()
        self._close_file()
        path = None
        if self.out_dir is not None:
            try:
                self.out_dir.mkdir(parents=True, exist_ok=True)
                path = self.out_dir / "readings.csv"
                self._file = open(path, "w", encoding="ascii", newline="\n")  # noqa: SIM115
            except OSError as err:
                raise HardwareError(f"cannot write the recording {path}: {err.strerror}",
                                    fix="choose a writable output directory") from None
        self._path = path
        with self._lock:
            self._lines = []
            self._run = None
            self._longest_ms = None
            self.recording = None

    def stop_recording(self) -> Recording:
        self._require_open()
        # The readings that cover the last window come up to one update period and a
        # reading later: keep recording until the pin has read idle for tail_s on the
        # logger's own clock (lines still on their way on a busy host included), and for
        # CLOSE_MARGIN times the longest segment since the first (a window or gap a busy
        # host stretched included: the close must stand out of the frames), or for that
        # and 2 s more when it does not (a stuck pin, a silent logger).
        start = time.monotonic()
        time.sleep(self.tail_s)
        while self.error is None:
            with self._lock:  # the last windows' lines may still be on their way
                run, last = self._run, self._last_ms
                need_ms = max(1000 * self.tail_s, CLOSE_MARGIN * (self._longest_ms or 0.0))
            if run is not None and not run[0] and last - run[1] >= need_ms:
                break
            if time.monotonic() - start > need_ms / 1000 + 2.0:
                break
            time.sleep(0.005)
        with self._lock:
            lines, self._lines = self._lines or [], None
        self._close_file()
        if not any(isinstance(parse_armcoup_line(x), tuple) for x in lines):
            raise self.error or LoggerTimeoutError(
                f"the logger on {self.port} sent no reading during the run",
                fix="check that its sketch still runs (replug it) and re-run")
        text = "".join(x.rstrip("\r") + "\n" for x in lines)
        path = self._path or Path(f"{self.port} (not saved)")
        rec = armcoup_recording(text, path, hashlib.sha256(text.encode()).hexdigest(),
                                active_level=self.active_level)
        span_s = (rec.t_ms[-1] - rec.t_ms[0]) / 1000.0 if rec.readings > 1 else 0.0
        self.readings_per_s = (rec.readings - 1) / span_s if span_s > 0 else None
        self.recording = rec
        return rec

    def _close_file(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()
