"""Capturing a trace from a logger over serial (pyserial).

``Collector`` opens a pyserial URL or takes an open pyserial object, and runs one reader
thread that decodes everything the logger sends and streams it to a trace directory, so a
long run never holds its samples in memory; commands are written from the calling thread
and wait for their ACK. Failures keep what was measured: mid-run errors carry the partial
trace as ``err.trace``; corrupt and lost frames are counted and recorded as gaps.

The failures, and a typical use: docs/power.md ("Capturing a trace").
"""

from __future__ import annotations

import contextlib
import errno
import queue
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import serial

from profiler.clock import Clock, perf_clock
from profiler.errors import (
    HardwareError,
    LoggerTimeoutError,
    PermissionDeniedError,
    PortLostError,
    PowerSourceError,
)
from profiler.power import protocol as P
from profiler.power.trace import CaptureCounters, DeviceTrace, TraceWriter

ProgressFn = Callable[[float, CaptureCounters], None]

_CHECK_LOGGER = (
    "check that the logger is plugged into this port and runs the coupprof firmware "
    "(`make -C firmware upload`), that no other program holds the port, and --port"
)


class _MemorySink:
    """Keeps decoded chunks in memory (short captures, tests); same API as TraceWriter."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {"samples": [], "edges": [], "gaps": []}

    def append(self, chunk: P.DecodedChunk) -> None:
        for name, parts in self.parts.items():
            arr = getattr(chunk, name)
            if arr.size:
                parts.append(arr)

    def write_raw(self, data: bytes) -> None:
        pass

    def flush(self) -> None:
        pass

    def write_meta(self, trace: DeviceTrace, complete: bool) -> None:
        pass

    def finish(self, trace: DeviceTrace) -> DeviceTrace:
        dtypes = {"samples": P.SAMPLE_DTYPE, "edges": P.EDGE_DTYPE, "gaps": P.GAP_DTYPE}
        arrays = {
            k: np.concatenate(v) if v else np.zeros(0, dtypes[k]) for k, v in self.parts.items()
        }
        trace.samples, trace.edges, trace.gaps = arrays["samples"], arrays["edges"], arrays["gaps"]
        return trace


def open_port(url: str, baudrate: int = P.BAUDRATE, timeout_s: float = 0.05) -> serial.SerialBase:
    """Open a pyserial URL, translating failures into coupprof errors (exit 3)."""
    try:
        return serial.serial_for_url(url, baudrate=baudrate, timeout=timeout_s, exclusive=True)
    except (serial.SerialException, ValueError, OSError) as err:
        code = getattr(err, "errno", None)
        if code in (errno.EACCES, errno.EPERM):
            raise PermissionDeniedError(
                f"no permission to open serial port {url}",
                fix="add yourself to the dialout group (`sudo usermod -aG dialout $USER`, then log in again)",
            ) from None
        raise HardwareError(
            f"cannot open serial port {url}: {err}",
            fix="check --port (list ports with `ls /dev/ttyACM* /dev/ttyUSB*`; "
            "`--port virtual` uses the virtual logger)",
        ) from None


class Collector:
    """Reads a logger's stream in a background thread; see docs/power.md."""

    def __init__(
        self,
        port: str | serial.SerialBase,
        *,
        baudrate: int = P.BAUDRATE,
        out_dir: str | Path | None = None,
        keep_raw: bool = False,
        timeout_s: float = 3.0,
        silence_s: float = 2.5,
        batch_s: float = 0.01,
        clock: Clock = perf_clock,
    ) -> None:
        self._given = port if isinstance(port, serial.SerialBase) else None
        self.port = port if isinstance(port, str) else str(getattr(port, "port", None) or port)
        self.baudrate = baudrate
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.keep_raw = keep_raw
        self.timeout_s = timeout_s
        self.silence_s = silence_s
        self.batch_s = batch_s
        self.clock = clock
        self.serial: serial.SerialBase | None = None
        self.info: P.LoggerInfo | None = None
        self.counters = CaptureCounters()
        self.error: PowerSourceError | None = None

        self._decoder = P.StreamDecoder()
        self._lock = threading.Lock()
        self._messages: queue.Queue[P.Message] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._sink: TraceWriter | _MemorySink | None = None
        self._recording = False
        self._last_frame_ns = 0
        self._host_start_ns: int | None = None
        self._t_start = 0.0
        self._last_flush = 0.0

    # ----------------------------------------------------------------- lifecycle
    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        """Open the port and start the reader thread (no command sent)."""
        if self.serial is not None:
            return
        self.serial = self._given if self._given is not None else open_port(self.port, self.baudrate)
        if self.serial.timeout is None or self.serial.timeout > 0.1:
            self.serial.timeout = 0.05
        self._stop.clear()
        self._thread = threading.Thread(target=self._reader, name="coupprof-collector", daemon=True)
        self._thread.start()

    def open(self) -> P.LoggerInfo:
        """Connect and identify the logger (stopping it first if it was streaming)."""
        self.connect()
        info = self.identify()
        if info.streaming:  # left running by an earlier session
            self._command(P.encode_command(P.Command.STOP), P.Command.STOP)
            info = self.identify()
        return info

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        if self.serial is not None:
            with contextlib.suppress(serial.SerialException, OSError):
                if self.info is not None and self.info.streaming and not self._lost.is_set():
                    self.serial.write(P.encode_command(P.Command.STOP))
            with contextlib.suppress(serial.SerialException, OSError):
                self.serial.close()
            self.serial = None

    # ----------------------------------------------------------------- reader thread
    def _reader(self) -> None:
        """Read, batch and decode until stopped or the port fails.

        Bytes are decoded in batches of up to ``batch_s`` (or 64 KiB): when the
        stream trickles in, the thread sleeps to let a batch build up (the
        decoder's per-call cost is then negligible); when it floods in, it keeps
        reading the tty (whose buffer is ~4 KiB) and decodes 64 KiB at a time.
        """
        ser = self.serial
        assert ser is not None
        pending = bytearray()
        first = 0.0
        while not self._stop.is_set():
            try:
                data = ser.read(1)
                if data:
                    now = time.monotonic()
                    if not pending:
                        first = now
                    pending += data
                    waiting = ser.in_waiting
                    if waiting < 2048 and now - first < self.batch_s:
                        time.sleep(self.batch_s - (now - first))
                        waiting = ser.in_waiting
                    pending += ser.read(waiting)
            except (serial.SerialException, OSError, TypeError, AttributeError) as err:
                # TypeError/AttributeError: pyserial's fd vanished under it (port closed)
                if pending:
                    self._consume(bytes(pending))
                if not self._stop.is_set():
                    self._port_lost(err)
                return
            if pending and (
                not data or len(pending) >= 1 << 16 or time.monotonic() - first >= self.batch_s
            ):
                self._consume(bytes(pending))
                pending.clear()

    def _consume(self, data: bytes) -> None:
        out = self._decoder.feed(data)
        with self._lock:
            if out.frames:
                self._last_frame_ns = self.clock()
            sink = self._sink if self._recording else None
            if sink is not None:
                sink.write_raw(data)
                sink.append(out)
                now = time.monotonic()
                if now - self._last_flush > 0.5:  # a crash loses at most ~0.5 s
                    sink.flush()
                    self._last_flush = now
            self.counters.update_from(self._decoder.counters)
            for m in out.messages:
                if isinstance(m, P.Ident):
                    self.info = m.info
                elif isinstance(m, P.Status) and self._recording:
                    c = self.counters
                    c.status_frames += 1
                    c.device_samples_total = m.samples_total
                    c.device_samples_dropped = m.samples_dropped
                    c.device_edges_total = m.edges_total
        for m in out.messages:
            # Only ACKs are waited for (_command). STATUS comes once a second for as long
            # as a capture runs, and nothing reads the queue until the next command.
            if isinstance(m, P.Ack):
                self._messages.put(m)

    def _port_lost(self, err: BaseException) -> None:
        with self._lock:
            secs = (time.monotonic() - self._t_start) if self._recording else 0.0
            what = f" after {secs:.1f} s of recording" if self._recording else ""
            self.error = PortLostError(
                f"serial port {self.port} vanished{what} ({err})",
                fix="check the USB cable and the logger's power, then re-run; "
                "the samples measured until then were kept",
            )
        self._lost.set()

    def _lost_error(self) -> PowerSourceError:
        assert self.error is not None  # set before _lost is
        return self.error

    # ----------------------------------------------------------------- commands
    def _write(self, data: bytes) -> None:
        if self._lost.is_set():
            raise self._lost_error()
        assert self.serial is not None
        try:
            self.serial.write(data)
            self.serial.flush()
        except (serial.SerialException, OSError) as err:
            self._port_lost(err)
            raise self._lost_error() from None

    def _drain_messages(self) -> None:
        while True:
            try:
                self._messages.get_nowait()
            except queue.Empty:
                return

    def _command(
        self, data: bytes, cmd: int, *, timeout_s: float | None = None, resend_s: float | None = None
    ) -> P.Ack:
        """Send a command and wait for its ACK (re-sending every ``resend_s``)."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        self._drain_messages()
        deadline = time.monotonic() + timeout
        next_send = 0.0
        while True:
            now = time.monotonic()
            if now >= next_send:
                self._write(data)
                next_send = now + (resend_s if resend_s else float("inf"))
            left = min(deadline, next_send) - now
            if now >= deadline:
                break
            try:
                m = self._messages.get(timeout=max(0.0, min(left, 0.05)))
            except queue.Empty:
                if self._lost.is_set():
                    raise self._lost_error() from None
                continue
            if isinstance(m, P.Ack) and m.cmd == cmd:
                return m
        name = P.Command(cmd).name if cmd in P.Command._value2member_map_ else hex(cmd)
        raise LoggerTimeoutError(
            f"logger on {self.port} did not answer {name} within {timeout:g} s "
            f"({self.counters.bytes_in} bytes received, {self.counters.frames_ok} valid frames)",
            fix=_CHECK_LOGGER,
        )

    def _check_ack(self, ack: P.Ack, what: str) -> None:
        if ack.status != P.AckStatus.OK:
            reason = {1: "bad CRC", 2: "unknown command", 3: "bad argument", 4: "busy (streaming)"}
            from profiler.errors import BadInputError

            raise BadInputError(
                f"logger on {self.port} refused {what}: {reason.get(ack.status, ack.status)}",
                fix="use a value the logger supports (see `coupprof doctor`)",
            )

    def identify(self, timeout_s: float | None = None) -> P.LoggerInfo:
        """IDENTIFY handshake: returns the logger's identity and calibration."""
        with self._lock:
            self.info = None
        self._command(
            P.encode_command(P.Command.IDENTIFY), P.Command.IDENTIFY,
            timeout_s=timeout_s, resend_s=0.25,  # an Arduino may still be in its bootloader
        )
        # IDENT precedes the ACK in the stream, so it has been decoded by now.
        with self._lock:
            info = self.info
        if info is None:
            raise LoggerTimeoutError(
                f"logger on {self.port} acknowledged IDENTIFY but sent no IDENT frame",
                fix=_CHECK_LOGGER,
            )
        if info.protocol != P.PROTOCOL_VERSION:
            from profiler.errors import BadInputError

            raise BadInputError(
                f"logger on {self.port} speaks protocol {info.protocol}, this host {P.PROTOCOL_VERSION}",
                fix="flash the firmware from this checkout (`make -C firmware upload`)",
            )
        return info

    def set_rate(self, rate_hz: int) -> P.LoggerInfo:
        """Ask for a sample rate; returns IDENT with the achieved one."""
        self._check_ack(self._command(P.encode_set_rate(rate_hz), P.Command.SET_RATE), f"rate {rate_hz} Hz")
        return self.identify()

    def set_calibration(self, shunt_uohm: int, current_lsb_na: int) -> P.LoggerInfo:
        ack = self._command(P.encode_set_cal(shunt_uohm, current_lsb_na), P.Command.SET_CAL)
        self._check_ack(ack, f"calibration shunt={shunt_uohm} uOhm lsb={current_lsb_na} nA")
        return self.identify()

    # ----------------------------------------------------------------- capture
    def start(self, send: bool = True) -> None:
        """Begin recording (and send START unless ``send=False``: passive capture)."""
        if self.serial is None:
            self.connect()
        if self.out_dir is not None:
            sink: TraceWriter | _MemorySink = TraceWriter(self.out_dir, keep_raw=self.keep_raw)
        else:
            sink = _MemorySink()
        with self._lock:
            self._sink = sink
            self._recording = True
            self.counters = CaptureCounters()
            self._decoder.counters = P.DecoderCounters()
            self._last_frame_ns = self.clock()
            self._t_start = time.monotonic()
        self._host_start_ns = self.clock()
        if send:
            try:
                ack = self._command(P.encode_command(P.Command.START), P.Command.START)
            except PowerSourceError as err:
                err.trace = self._finish(str(err))
                raise
            self._host_start_ns = self.clock()
            self._check_ack(ack, "START")
            if self.info is not None:
                self.info = _with_streaming(self.info, True)

    def poll(self) -> None:
        """Raise a mid-run failure noticed by the reader thread (or a silent logger)."""
        if self._lost.is_set():
            raise self._lost_error()
        with self._lock:
            silent_ns = self.clock() - self._last_frame_ns
        if self.silence_s and self._recording and silent_ns > self.silence_s * 1e9:
            self.error = LoggerTimeoutError(
                f"logger on {self.port} went silent mid-run: no frame for {silent_ns / 1e9:.1f} s",
                fix=_CHECK_LOGGER,
            )
            raise self.error

    def stop(self, send: bool = True, raise_on_error: bool = True) -> DeviceTrace:
        """Send STOP, wait for the final frames, and return the trace.

        On a failure (now or earlier in the run) the partial trace is still
        finished and attached to the raised error as ``err.trace``; with
        ``raise_on_error=False`` it is returned with ``trace.error`` set.
        """
        err: PowerSourceError | None = self.error
        if err is None and send:
            try:
                self._command(P.encode_command(P.Command.STOP), P.Command.STOP)
            except PowerSourceError as e:
                err = e
        elif err is None:
            self._settle()
        if self.info is not None:
            self.info = _with_streaming(self.info, False)
        trace = self._finish(None if err is None else str(err))
        if err is not None:
            err.trace = trace
            if raise_on_error:
                raise err
        return trace

    def _settle(self, quiet_s: float = 0.1) -> None:
        """Passive stop: wait until the port has been quiet for ``quiet_s``."""
        assert self.serial is not None
        last = -1
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline and not self._lost.is_set():
            n = self.counters.bytes_in
            waiting = 0
            try:
                waiting = self.serial.in_waiting
            except (serial.SerialException, OSError, TypeError, AttributeError):
                break
            if n == last and not waiting:
                return
            last = n
            time.sleep(quiet_s)

    def _finish(self, error: str | None) -> DeviceTrace:
        with self._lock:
            self._recording = False
            sink, self._sink = self._sink, None
            counters = CaptureCounters(**self.counters.to_dict())
        trace = DeviceTrace(
            info=self.info,
            counters=counters,
            port=self.port,
            host_start_ns=self._host_start_ns,
            host_stop_ns=self.clock(),
            error=error,
        )
        if sink is None:
            return trace
        return sink.finish(trace)

    def record(
        self, seconds: float, progress: ProgressFn | None = None, tick_s: float = 0.1
    ) -> DeviceTrace:
        """START, wait ``seconds`` (calling ``progress(elapsed_s, counters)``), STOP."""
        self.start()
        t0 = time.monotonic()
        try:
            while True:
                elapsed = time.monotonic() - t0
                if progress is not None:
                    progress(min(elapsed, seconds), self.counters)
                if elapsed >= seconds:
                    break
                self.poll()
                if self._lost.wait(timeout=min(tick_s, seconds - elapsed)):
                    self.poll()
        except PowerSourceError:
            pass  # stop() finishes the partial trace and raises with it attached
        return self.stop(send=self.error is None)

    # ----------------------------------------------------------------- info
    @property
    def recording(self) -> bool:
        return self._recording


def _with_streaming(info: P.LoggerInfo, on: bool) -> P.LoggerInfo:
    from dataclasses import replace

    return replace(info, flags=(info.flags | 1) if on else (info.flags & ~1))


def default_trace_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="coupprof-trace-"))
