"""A logger in Python that speaks firmware/PROTOCOL.md over a pseudo-terminal.

``VirtualLogger`` serves a pty path (``logger.port``) to whoever opens it with pyserial, as
the real firmware serves ``/dev/ttyACM0``. A thread answers commands and, while streaming,
synthesises samples from ``power_w(t_s, markers)`` on its own drifting clock, with marker
changes from ``set_markers(levels)`` timestamped as EDGE frames; ``true_clock()`` is the
ground truth clock-map fits are checked against. Faults can be injected while it runs.

The clock, the faults and the transmit buffer: profiler/sim/README.md ("The virtual logger").
"""

from __future__ import annotations

import errno
import os
import select
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from profiler.clock import Clock, perf_clock
from profiler.power import protocol as P
from profiler.sim.serial_pty import PtyDevice

#: power_w(t_s, markers) -> watts; vectorised over numpy arrays.
PowerFn = Callable[[np.ndarray, np.ndarray], "np.ndarray | float"]

MAX_RATE_HZ = 100_000


@dataclass
class VirtualCounters:
    samples_total: int = 0
    samples_dropped: int = 0
    edges_total: int = 0
    frames_sent: int = 0
    bytes_sent: int = 0
    commands: int = 0
    frames_corrupted: int = 0
    frames_dropped: int = 0


class VirtualLogger(PtyDevice):
    """A protocol-v1 logger on a pty. Use as a context manager or call start()/close()."""

    thread_name = "virtual-logger"
    counters: VirtualCounters

    def __init__(
        self,
        power_w: PowerFn | float = 2.0,
        *,
        rate_hz: int = 10_000,
        marker_count: int = 4,
        bus_v: float = 5.0,
        current_lsb_na: int = 100_000,
        bus_lsb_uv: int = 1250,
        shunt_uohm: int = 10_000,
        start_us: int = 0,
        drift_ppm: float = 0.0,
        clock: Clock = perf_clock,
        tick_s: float = 0.005,
        status_interval_s: float = 1.0,
        tx_buffer_bytes: int = 1 << 16,
        answer_commands: bool = True,
        boot_ident: bool = True,
        fw_version: str = "virt-1.0",
    ) -> None:
        if not 1 <= marker_count <= 4:
            raise ValueError("marker_count must be 1..4")
        super().__init__(start_us=start_us, drift_ppm=drift_ppm, clock=clock, tick_s=tick_s,
                         tx_buffer_bytes=tx_buffer_bytes)
        self.power_w = power_w
        self.rate_hz = int(rate_hz)
        self.marker_count = marker_count
        self.bus_v = float(bus_v)
        self.current_lsb_na = int(current_lsb_na)
        self.bus_lsb_uv = int(bus_lsb_uv)
        self.shunt_uohm = int(shunt_uohm)
        self.status_interval_us = int(status_interval_s * 1e6)
        self.answer_commands = answer_commands
        self.boot_ident = boot_ident
        self.fw_version = fw_version
        self.counters = VirtualCounters()

        self._parser = P.CommandParser()
        self._seq = 0
        self._streaming = False
        # Marker history since the oldest sample not yet generated: (device µs, level).
        self._hist_t: list[int] = []
        self._hist_lv: list[int] = []
        self._pending_edges: list[tuple[int, int, int]] = []  # (t_us, markers, changed)
        self._next_k = 0  # index of the next sample since START
        self._t_start_us = 0
        self._pend = np.zeros(0, P.SAMPLE_DTYPE)  # samples waiting to fill a frame
        self._next_status_us = 0
        self._corrupt_next = 0
        self._drop_next = 0
        self._emitting = False

    # ----------------------------------------------------------------- clock
    def device_us(self, host_ns: int | None = None) -> int:
        """The logger's clock (unwrapped µs) at host time ``host_ns`` (default: now)."""
        h = self.clock() if host_ns is None else host_ns
        return self.start_us + int((h - self._origin_ns) * (1.0 + self.drift_ppm * 1e-6) // 1000)

    # ----------------------------------------------------------------- lifecycle
    def _on_start(self) -> None:
        if self.boot_ident:
            self._send_now(P.encode_ident(self._take_seq(), self._t32(), self.info()))

    # ----------------------------------------------------------------- host-side API
    def set_markers(self, levels: int) -> None:
        """Drive the marker inputs (bit k = line k); the logger timestamps the change."""
        levels &= (1 << self.marker_count) - 1
        with self._lock:
            if levels == self._level:
                return
            t = self.device_us()
            changed = levels ^ self._level
            self._level = levels
            self._hist_t.append(t)
            self._hist_lv.append(levels)
            if self._streaming:
                self._pending_edges.append((t, levels, changed))
                self.counters.edges_total += 1

    @property
    def markers(self) -> int:
        return self._level

    @property
    def streaming(self) -> bool:
        return self._streaming

    def info(self) -> P.LoggerInfo:
        return P.LoggerInfo(
            protocol=P.PROTOCOL_VERSION,
            front_end=P.FrontEnd.SYNTHETIC,
            marker_count=self.marker_count,
            flags=(0x01 if self._streaming else 0) | (0x02 if self.bus_lsb_uv else 0),
            rate_hz=self.rate_hz,
            shunt_uohm=self.shunt_uohm,
            current_lsb_na=self.current_lsb_na,
            bus_lsb_uv=self.bus_lsb_uv,
            bus_nominal_mv=int(round(self.bus_v * 1000)),
            fw_version=self.fw_version,
        )

    # ----------------------------------------------------------------- faults
    def corrupt_frames(self, n: int = 1) -> None:
        """Flip a bit in each of the next ``n`` frames (their CRC fails on the host)."""
        with self._lock:
            self._corrupt_next += n

    def drop_frames(self, n: int = 1) -> None:
        """Lose the next ``n`` frames on the line (their seq numbers are used up)."""
        with self._lock:
            self._drop_next += n

    def spurious_edge(self, bits: int = 1) -> None:
        """Report an edge on ``bits`` that the host never made (a glitch)."""
        with self._lock:
            if self._streaming:
                t = self.device_us()
                self._pending_edges.append((t, self._level ^ bits, bits))
                self.counters.edges_total += 1

    def wait_emitted(self, timeout_s: float = 2.0) -> bool:
        """Wait until every edge reported so far is on its way (queued as a frame, or
        dropped as a fault says): a test's next fault then strikes later frames, however
        late this thread runs. False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending_edges and not self._emitting:
                    return True
            time.sleep(1e-4)
        return False

    # ----------------------------------------------------------------- thread
    def _take_seq(self) -> int:
        s = self._seq
        self._seq = (self._seq + 1) % P.SEQ_MODULO
        return s

    def _t32(self, t_us: int | None = None) -> int:
        return (self.device_us() if t_us is None else t_us) % P.T_US_MODULO

    def _send_now(self, frame: bytes) -> None:
        """Queue a control frame (never dropped: the firmware sends these blocking)."""
        self._tx += frame
        self.counters.frames_sent += 1

    def _serve(self) -> None:
        while not self._stop.is_set():
            if self._frozen.is_set():
                self._stop.wait(self.tick_s)
                continue
            fd = self._master
            if fd < 0:
                break
            wlist = [fd] if self._tx else []
            try:
                r, w, _ = select.select([fd], wlist, [], self.tick_s)
            except (OSError, ValueError):
                break
            if r:
                try:
                    data = os.read(fd, 4096)
                except OSError as err:
                    if err.errno in (errno.EAGAIN, errno.EINTR):
                        data = b""
                    else:
                        break
                if data:
                    self._handle(self._parser.feed(data))
            if self._streaming:
                self._produce()
            if not self._flush():
                break

    def _handle(self, cmds: list[P.ParsedCommand]) -> None:
        for c in cmds:
            self.counters.commands += 1
            if not self.answer_commands:
                continue
            self._answer(c)

    def _ack(self, cmd: int, status: int) -> None:
        self._send_now(P.encode_ack(self._take_seq(), self._t32(), cmd, status))

    def _answer(self, c: P.ParsedCommand) -> None:
        if not c.crc_ok:
            self._ack(0, P.AckStatus.BAD_CRC)
        elif c.cmd == P.Command.IDENTIFY:
            self._send_now(P.encode_ident(self._take_seq(), self._t32(), self.info()))
            self._ack(c.cmd, P.AckStatus.OK)
        elif c.cmd == P.Command.START:
            self._ack(c.cmd, P.AckStatus.OK)
            if not self._streaming:
                self._begin_stream()
        elif c.cmd == P.Command.STOP:
            if self._streaming:
                self._produce()
                self._end_stream()
            self._send_status()
            self._ack(c.cmd, P.AckStatus.OK)
        elif c.cmd in (P.Command.SET_RATE, P.Command.SET_CAL):
            if self._streaming:
                self._ack(c.cmd, P.AckStatus.BUSY)
            elif c.cmd == P.Command.SET_RATE and len(c.payload) == 4:
                rate = int.from_bytes(c.payload, "little")
                ok = 1 <= rate <= MAX_RATE_HZ
                if ok:
                    self.rate_hz = rate
                self._ack(c.cmd, P.AckStatus.OK if ok else P.AckStatus.BAD_ARGUMENT)
            elif c.cmd == P.Command.SET_CAL and len(c.payload) == 8:
                shunt = int.from_bytes(c.payload[:4], "little")
                lsb = int.from_bytes(c.payload[4:], "little", signed=True)
                ok = shunt > 0 and lsb != 0
                if ok:
                    self.shunt_uohm, self.current_lsb_na = shunt, lsb
                self._ack(c.cmd, P.AckStatus.OK if ok else P.AckStatus.BAD_ARGUMENT)
            else:
                self._ack(c.cmd, P.AckStatus.BAD_ARGUMENT)
        else:
            self._ack(c.cmd, P.AckStatus.UNKNOWN_COMMAND)

    def _begin_stream(self) -> None:
        self._pend = np.zeros(0, P.SAMPLE_DTYPE)
        self._next_k = 0
        with self._lock:
            self.counters.samples_total = self.counters.samples_dropped = 0
            self.counters.edges_total = 0
            now = self.device_us()
            self._t_start_us = now
            self._next_status_us = now + self.status_interval_us
            self._hist_t = [now]
            self._hist_lv = [self._level]
            self._pending_edges = []
            self._streaming = True

    def _end_stream(self) -> None:
        if self._pend.size:  # flush the partial frame (sent blocking, like the firmware)
            self._send_now(self._samples_frame(self._take_seq(), self._pend))
            self._pend = np.zeros(0, P.SAMPLE_DTYPE)
        with self._lock:
            self._streaming = False
            late, self._pending_edges = self._pending_edges, []
        for te, mk, ch in late:  # edges after the last sample, before STOP
            self._send_now(P.encode_edge(self._take_seq(), te, mk, ch))

    def _send_status(self) -> None:
        c = self.counters
        self._send_now(
            P.encode_status(self._take_seq(), self._t32(), c.samples_total, c.samples_dropped, c.edges_total)
        )

    def _sample_times(self, upto_us: int) -> np.ndarray:
        """Device times of samples due by ``upto_us`` (exact integer schedule)."""
        rate = self.rate_hz
        k_end = ((upto_us - self._t_start_us) * rate) // 1_000_000 + 1
        if k_end <= self._next_k:
            return np.zeros(0, np.int64)
        k = np.arange(self._next_k, k_end, dtype=np.int64)
        self._next_k = int(k_end)
        return self._t_start_us + (k * 1_000_000) // rate

    def _produce(self) -> None:
        """Generate everything due up to now and queue it as frames.

        The lock is held only to take the time and the marker history, so a
        host thread in ``set_markers`` never waits for the waveform or encoding.
        """
        with self._lock:
            now = self.device_us()
            t = self._sample_times(now)
            if t.size:
                hist_t = np.asarray(self._hist_t, dtype=np.int64)
                hist_lv = np.asarray(self._hist_lv, dtype=np.int64)
                # keep the level in force at the last sample, plus anything later
                keep = max(int(np.searchsorted(hist_t, t[-1], side="right")) - 1, 0)
                del self._hist_t[:keep], self._hist_lv[:keep]
            edges, self._pending_edges = self._pending_edges, []
            self._emitting = bool(edges)  # (wait_emitted: taken, not yet queued)
        full = self._pend[:0]
        if t.size:
            lv = hist_lv[np.searchsorted(hist_t, t, side="right") - 1]
            pw = self.power_w(t * 1e-6, lv) if callable(self.power_w) else self.power_w
            p = np.broadcast_to(np.asarray(pw, dtype=np.float64), t.shape)
            cur = np.clip(np.rint(p / self.bus_v / (self.current_lsb_na * 1e-9)), -32768, 32767)
            bus = round(self.bus_v / (self.bus_lsb_uv * 1e-6)) if self.bus_lsb_uv else 0
            new = np.empty(t.size, P.SAMPLE_DTYPE)
            new["t_us"], new["current"], new["bus"], new["markers"] = t, cur, min(bus, 65535), lv
            self.counters.samples_total += t.size
            allp = np.concatenate((self._pend, new)) if self._pend.size else new
            n_full = allp.size // P.MAX_SAMPLES_PER_FRAME * P.MAX_SAMPLES_PER_FRAME
            self._pend = allp[n_full:].copy()
            full = allp[:n_full]
        if full.size or edges:
            self._emit_stream(full, edges)
        if edges:
            with self._lock:
                self._emitting = False
        if now >= self._next_status_us:
            self._send_status()
            self._next_status_us = now + self.status_interval_us

    def _emit_stream(self, full: np.ndarray, edges: list[tuple[int, int, int]]) -> None:
        """Queue full SAMPLES frames and EDGE frames in the order the firmware sends
        them (by when each is complete), with tx-buffer drops and injected faults."""
        per = P.MAX_SAMPLES_PER_FRAME
        n_sf = full.size // per
        sf_len = P.FRAME_OVERHEAD + 1 + P.SAMPLE_BYTES * per
        done = np.concatenate((full["t_us"][per - 1 :: per], [e[0] for e in edges])).astype(np.int64)
        order = np.argsort(done, kind="stable").tolist()
        room = self.tx_buffer_bytes - len(self._tx)
        kept: list[int] = []  # frame ids (< n_sf: sample frame, else edge) in send order
        for i in order:
            size = sf_len if i < n_sf else P.FRAME_OVERHEAD + P.EDGE_LEN
            if size > room and kept:
                # After a stall of this thread the frames come all at once; the firmware
                # would have sent them as they completed, into the host's serial buffer
                # (the pty's) as far as it had room. So that buffer fills first.
                self._queue_frames(full, edges, kept)
                kept = []
                self._flush()
                room = self.tx_buffer_bytes - len(self._tx)
            if size > room:
                # Both buffers full: the firmware drops the samples, no seq used.
                self.counters.samples_dropped += per if i < n_sf else 0
                continue
            room -= size
            kept.append(i)
        if kept:
            self._queue_frames(full, edges, kept)

    def _queue_frames(self, full: np.ndarray, edges: list[tuple[int, int, int]],
                      kept: list[int]) -> None:
        """Encode the frames ``kept`` (ids as in _emit_stream) with the next seqs, in that
        order, and queue them, with the injected faults."""
        per = P.MAX_SAMPLES_PER_FRAME
        n_sf = full.size // per
        sf_len = P.FRAME_OVERHEAD + 1 + P.SAMPLE_BYTES * per
        seqs = {i: (self._seq + j) % P.SEQ_MODULO for j, i in enumerate(kept)}
        self._seq = (self._seq + len(kept)) % P.SEQ_MODULO
        sample_ids = [i for i in kept if i < n_sf]
        blob = b""
        if sample_ids:
            ids = np.asarray(sample_ids)
            rows = (ids[:, None] * per + np.arange(per)).reshape(-1)
            sel = full[rows]
            blob, _ = P.encode_sample_frames(
                np.asarray([seqs[i] for i in sample_ids]), sel["t_us"], sel["current"],
                sel["bus"], sel["markers"],
            )
        pos = {i: k * sf_len for k, i in enumerate(sample_ids)}
        for i in kept:
            if i < n_sf:
                frame = blob[pos[i] : pos[i] + sf_len]
            else:
                te, mk, ch = edges[i - n_sf]
                frame = P.encode_edge(seqs[i], te, mk, ch)
            if self._drop_next or self._corrupt_next:
                with self._lock:
                    drop = self._drop_next > 0
                    corrupt = not drop and self._corrupt_next > 0
                    self._drop_next -= drop
                    self._corrupt_next -= corrupt
                if drop:
                    self.counters.frames_dropped += 1
                    continue
                if corrupt:
                    self.counters.frames_corrupted += 1
                    f = bytearray(frame)
                    f[P.HEADER_LEN] ^= 0x10  # first payload byte: the CRC no longer matches
                    frame = bytes(f)
            self._tx += frame
            self.counters.frames_sent += 1

    def _samples_frame(self, seq: int, s: np.ndarray) -> bytes:
        t0 = int(s["t_us"][0])
        return P.encode_samples(
            seq, t0, (s["t_us"] - t0).tolist(), s["current"].tolist(), s["bus"].tolist(),
            s["markers"].tolist(),
        )
