"""The logger's binary serial protocol (firmware/PROTOCOL.md, version 1).

Constants, CRC-16/CCITT-FALSE (scalar and vectorised over many frames), frame
and command encoding, the payload records (IDENT, ACK, STATUS), and
``StreamDecoder``: a numpy decoder that turns an arbitrary sequence of byte
chunks into samples, edges, gaps and control messages.

Decoding is vectorised: sync candidates are found with array comparisons, the
CRC of all candidate frames of one length is computed column by column with a
16-bit table (two bytes per step), and sample fields are gathered straight out
of the frame matrix. A Python loop only runs in the rare case of two CRC-valid
candidate frames overlapping (a sync pattern inside a payload whose CRC also
passes).
"""

from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

PROTOCOL_VERSION = 1
BAUDRATE = 2_000_000

SYNC0 = 0xA5
SYNC1 = 0x5A
SYNC = bytes((SYNC0, SYNC1))
HEADER_LEN = 10  # sync(2) type len seq(2) t_us(4)
CRC_LEN = 2
FRAME_OVERHEAD = HEADER_LEN + CRC_LEN
MAX_FRAME_LEN = FRAME_OVERHEAD + 255
COMMAND_OVERHEAD = 6  # sync(2) cmd len crc(2)

MAX_SAMPLES_PER_FRAME = 4
SAMPLE_BYTES = 7  # dt_us u16, current i16, bus u16, markers u8
SEQ_MODULO = 1 << 16
T_US_MODULO = 1 << 32


class FrameType(IntEnum):
    SAMPLES = 0x01
    EDGE = 0x02
    IDENT = 0x03
    ACK = 0x04
    STATUS = 0x05


class Command(IntEnum):
    IDENTIFY = 0x81
    START = 0x82
    STOP = 0x83
    SET_RATE = 0x84
    SET_CAL = 0x85


class AckStatus(IntEnum):
    OK = 0
    BAD_CRC = 1
    UNKNOWN_COMMAND = 2
    BAD_ARGUMENT = 3
    BUSY = 4


class FrontEnd(IntEnum):
    INA226 = 1
    SHUNT_AMP = 2
    SYNTHETIC = 3


IDENT_LEN = 30
ACK_LEN = 2
STATUS_LEN = 12
EDGE_LEN = 2

# Payload length each known frame type must have (SAMPLES: 1 + 7 n, checked apart).
_FIXED_LEN = {
    FrameType.EDGE: EDGE_LEN,
    FrameType.IDENT: IDENT_LEN,
    FrameType.ACK: ACK_LEN,
    FrameType.STATUS: STATUS_LEN,
}

# --------------------------------------------------------------------------- records

#: One decoded sample: device time (unwrapped µs), raw current and bus counts, marker bits.
SAMPLE_DTYPE = np.dtype(
    [("t_us", "<i8"), ("current", "<i2"), ("bus", "<u2"), ("markers", "u1")]
)
#: One marker edge: device time (unwrapped µs), marker levels after it, bits that changed.
EDGE_DTYPE = np.dtype([("t_us", "<i8"), ("markers", "u1"), ("changed", "u1")])
#: A run of lost frames: ``missing`` frames were emitted between the frame with
#: device time ``t_before_us`` and the one with ``t_after_us``; the data they
#: carried lies strictly inside that interval. ``seq_after`` is the u16 seq of
#: the first frame received after the gap.
GAP_DTYPE = np.dtype(
    [("t_before_us", "<i8"), ("t_after_us", "<i8"), ("missing", "<u4"), ("seq_after", "<u2")]
)


@dataclass(frozen=True)
class LoggerInfo:
    """The IDENT payload: who the logger is and how to scale its raw counts."""

    protocol: int
    front_end: int
    marker_count: int
    flags: int
    rate_hz: int
    shunt_uohm: int
    current_lsb_na: int
    bus_lsb_uv: int
    bus_nominal_mv: int
    fw_version: str

    _STRUCT = struct.Struct("<BBBBIIiIH8s")

    @property
    def streaming(self) -> bool:
        return bool(self.flags & 0x01)

    @property
    def bus_measured(self) -> bool:
        return bool(self.flags & 0x02) and self.bus_lsb_uv != 0

    @property
    def front_end_name(self) -> str:
        try:
            return {1: "ina226", 2: "shunt-amp-a0", 3: "synthetic"}[self.front_end]
        except KeyError:
            return f"unknown({self.front_end})"

    def current_a(self, raw: np.ndarray) -> np.ndarray:
        return np.asarray(raw, dtype=np.float64) * (self.current_lsb_na * 1e-9)

    def bus_v(self, raw: np.ndarray) -> np.ndarray:
        raw = np.asarray(raw)
        if self.bus_lsb_uv:
            return raw.astype(np.float64) * (self.bus_lsb_uv * 1e-6)
        return np.full(raw.shape, self.bus_nominal_mv * 1e-3)

    def power_w(self, current_raw: np.ndarray, bus_raw: np.ndarray) -> np.ndarray:
        return self.current_a(current_raw) * self.bus_v(bus_raw)

    def to_payload(self) -> bytes:
        return self._STRUCT.pack(
            self.protocol, self.front_end, self.marker_count, self.flags, self.rate_hz,
            self.shunt_uohm, self.current_lsb_na, self.bus_lsb_uv, self.bus_nominal_mv,
            self.fw_version.encode("ascii")[:8],
        )

    @classmethod
    def from_payload(cls, payload: bytes) -> LoggerInfo:
        if len(payload) != IDENT_LEN:
            raise ValueError(f"IDENT payload must be {IDENT_LEN} bytes, got {len(payload)}")
        (protocol, front_end, marker_count, flags, rate_hz, shunt_uohm, current_lsb_na,
         bus_lsb_uv, bus_nominal_mv, fw) = cls._STRUCT.unpack(payload)
        return cls(protocol, front_end, marker_count, flags, rate_hz, shunt_uohm,
                   current_lsb_na, bus_lsb_uv, bus_nominal_mv,
                   fw.rstrip(b"\0").decode("ascii", "replace"))

    def to_dict(self) -> dict[str, int | str]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if not k.startswith("_")}

    @classmethod
    def from_dict(cls, d: dict) -> LoggerInfo:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if not k.startswith("_")})


@dataclass(frozen=True)
class Ident:
    seq: int
    t_us: int
    info: LoggerInfo


@dataclass(frozen=True)
class Ack:
    seq: int
    t_us: int
    cmd: int
    status: int


@dataclass(frozen=True)
class Status:
    seq: int
    t_us: int
    samples_total: int
    samples_dropped: int
    edges_total: int


@dataclass(frozen=True)
class OtherFrame:
    """A CRC-valid frame of a type this host does not know (kept, not decoded)."""

    type: int
    seq: int
    t_us: int
    payload: bytes


Message = Ident | Ack | Status | OtherFrame

# --------------------------------------------------------------------------- CRC


def _make_tables() -> tuple[np.ndarray, np.ndarray]:
    t8 = np.zeros(256, dtype=np.uint32)
    for i in range(256):
        c = i << 8
        for _ in range(8):
            c = ((c << 1) ^ 0x1021) if c & 0x8000 else (c << 1)
        t8[i] = c & 0xFFFF
    # t16[x] = register x shifted through 16 zero bits; one step eats two bytes:
    # crc' = t16[crc ^ (b0 << 8 | b1)] (the shift is linear over GF(2)).
    x = np.arange(1 << 16, dtype=np.uint32)
    t16 = t8[x >> 8] ^ ((x & 0xFF) << 8)
    t16 = t8[t16 >> 8] ^ ((t16 & 0xFF) << 8)
    return t8.astype(np.uint16), t16.astype(np.uint16)


CRC_TABLE8, CRC_TABLE16 = _make_tables()
CRC_INIT = 0xFFFF


def crc16(data: bytes | bytearray | memoryview, crc: int = CRC_INIT) -> int:
    """CRC-16/CCITT-FALSE of ``data`` (check: ``crc16(b"123456789") == 0x29B1``).

    The standard library's CRC-CCITT (poly 0x1021, MSB first, no final xor) started
    at 0xFFFF is exactly this CRC, in C: 21x faster than a Python table loop."""
    return binascii.crc_hqx(data, crc)


def crc16_columns(cols: np.ndarray) -> np.ndarray:
    """CRC of many equal-length messages at once.

    ``cols`` is uint8 of shape (message_length, n_messages): column j is message
    j, so each step of the loop reads one contiguous row. Returns uint16 (n,).
    """
    length, n = cols.shape
    crc = np.full(n, CRC_INIT, dtype=np.uint16)
    start = 0
    if length % 2:
        crc = ((crc << 8) & 0xFFFF) ^ CRC_TABLE8[(crc >> 8) ^ cols[0]]
        crc = crc.astype(np.uint16)
        start = 1
    if length - start:
        words = (cols[start::2].astype(np.uint16) << 8) | cols[start + 1 :: 2]
        for w in words:
            crc = CRC_TABLE16.take(crc ^ w)
    return crc


# --------------------------------------------------------------------------- encoding


def encode_command(cmd: int, payload: bytes = b"") -> bytes:
    """A host -> device command: ``A5 5A cmd len payload crc``."""
    if len(payload) > 255:
        raise ValueError("command payload is at most 255 bytes")
    body = bytes((cmd, len(payload))) + payload
    return SYNC + body + crc16(body).to_bytes(2, "little")


def encode_set_rate(rate_hz: int) -> bytes:
    return encode_command(Command.SET_RATE, struct.pack("<I", rate_hz))


def encode_set_cal(shunt_uohm: int, current_lsb_na: int) -> bytes:
    return encode_command(Command.SET_CAL, struct.pack("<Ii", shunt_uohm, current_lsb_na))


def encode_frame(ftype: int, seq: int, t_us: int, payload: bytes) -> bytes:
    """A device -> host frame."""
    if len(payload) > 255:
        raise ValueError("frame payload is at most 255 bytes")
    body = struct.pack("<BBHI", ftype, len(payload), seq % SEQ_MODULO, t_us % T_US_MODULO)
    body += payload
    return SYNC + body + crc16(body).to_bytes(2, "little")


def encode_samples(
    seq: int, t_us: int, dt_us: list[int], current: list[int], bus: list[int], markers: list[int]
) -> bytes:
    n = len(dt_us)
    if not 1 <= n <= MAX_SAMPLES_PER_FRAME:
        raise ValueError("a SAMPLES frame holds 1 to 4 samples")
    payload = bytes((n,)) + b"".join(
        struct.pack("<HhHB", dt_us[i], current[i], bus[i], markers[i]) for i in range(n)
    )
    return encode_frame(FrameType.SAMPLES, seq, t_us, payload)


def encode_edge(seq: int, t_us: int, markers: int, changed: int) -> bytes:
    return encode_frame(FrameType.EDGE, seq, t_us, bytes((markers & 0xFF, changed & 0xFF)))


def encode_ident(seq: int, t_us: int, info: LoggerInfo) -> bytes:
    return encode_frame(FrameType.IDENT, seq, t_us, info.to_payload())


def encode_ack(seq: int, t_us: int, cmd: int, status: int) -> bytes:
    return encode_frame(FrameType.ACK, seq, t_us, bytes((cmd & 0xFF, status & 0xFF)))


def encode_status(
    seq: int, t_us: int, samples_total: int, samples_dropped: int, edges_total: int
) -> bytes:
    payload = struct.pack(
        "<III", samples_total % T_US_MODULO, samples_dropped % T_US_MODULO,
        edges_total % T_US_MODULO,
    )
    return encode_frame(FrameType.STATUS, seq, t_us, payload)


def encode_sample_frames(
    seq0: int | np.ndarray,
    t_us: np.ndarray,
    current: np.ndarray,
    bus: np.ndarray,
    markers: np.ndarray,
    per_frame: int = MAX_SAMPLES_PER_FRAME,
) -> tuple[bytes, np.ndarray]:
    """Pack samples into consecutive SAMPLES frames, vectorised.

    ``len(t_us)`` must be a multiple of ``per_frame`` (the last partial frame is
    the caller's business: use ``encode_samples``). ``seq0`` is the first
    frame's seq (then +1 per frame) or an array with each frame's seq. Returns
    the bytes and the byte offset of each frame. Sample times within a frame must lie within
    65535 µs of its first sample.
    """
    t_us = np.asarray(t_us, dtype=np.int64)
    n = t_us.size
    if n % per_frame or not 1 <= per_frame <= MAX_SAMPLES_PER_FRAME:
        raise ValueError("sample count must be a multiple of per_frame (1..4)")
    k = n // per_frame
    plen = 1 + SAMPLE_BYTES * per_frame
    flen = FRAME_OVERHEAD + plen
    m = np.zeros((k, flen), dtype=np.uint8)
    m[:, 0] = SYNC0
    m[:, 1] = SYNC1
    m[:, 2] = FrameType.SAMPLES
    m[:, 3] = plen
    seq = (seq0 + np.arange(k) if np.ndim(seq0) == 0 else np.asarray(seq0)) % SEQ_MODULO
    m[:, 4:6] = seq.astype("<u2").view(np.uint8).reshape(k, 2)
    t = t_us.reshape(k, per_frame)
    m[:, 6:10] = (t[:, 0] % T_US_MODULO).astype("<u4").view(np.uint8).reshape(k, 4)
    m[:, 10] = per_frame
    rec = np.zeros((k, per_frame), dtype=[("dt", "<u2"), ("c", "<i2"), ("b", "<u2"), ("m", "u1")])
    rec["dt"] = t - t[:, :1]
    rec["c"] = np.asarray(current).reshape(k, per_frame)
    rec["b"] = np.asarray(bus).reshape(k, per_frame)
    rec["m"] = np.asarray(markers).reshape(k, per_frame)
    m[:, 11 : 11 + SAMPLE_BYTES * per_frame] = rec.view(np.uint8).reshape(k, -1)
    crc = crc16_columns(np.ascontiguousarray(m[:, 2 : flen - 2].T))
    m[:, flen - 2 :] = crc.astype("<u2").view(np.uint8).reshape(k, 2)
    return m.tobytes(), np.arange(k) * flen


# --------------------------------------------------------------------------- command parsing


@dataclass(frozen=True)
class ParsedCommand:
    cmd: int  # 0 when the CRC failed
    payload: bytes
    crc_ok: bool


class CommandParser:
    """Device side: split host bytes into commands (used by the virtual logger)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[ParsedCommand]:
        self._buf += data
        out: list[ParsedCommand] = []
        buf = self._buf
        while True:
            i = buf.find(SYNC)
            if i < 0:
                # keep a trailing A5 that may start the next sync
                del buf[: max(0, len(buf) - 1) if buf[-1:] == b"\xa5" else len(buf)]
                break
            del buf[:i]
            if len(buf) < 4 or len(buf) < COMMAND_OVERHEAD + buf[3]:
                break
            n = COMMAND_OVERHEAD + buf[3]
            body = bytes(buf[2 : n - 2])
            if crc16(body) == int.from_bytes(buf[n - 2 : n], "little"):
                out.append(ParsedCommand(body[0], body[2:], True))
                del buf[:n]
            else:
                out.append(ParsedCommand(0, b"", False))
                del buf[:1]  # resync after the failed command's first byte
        return out


# --------------------------------------------------------------------------- decoding


@dataclass
class DecodedChunk:
    """What one ``StreamDecoder.feed`` call produced, each kind in stream order."""

    samples: np.ndarray  # SAMPLE_DTYPE
    edges: np.ndarray  # EDGE_DTYPE
    gaps: np.ndarray  # GAP_DTYPE
    messages: list[Message] = field(default_factory=list)  # IDENT/ACK/STATUS/other
    frames: int = 0
    corrupt: int = 0
    lost: int = 0


@dataclass
class DecoderCounters:
    bytes_in: int = 0
    frames_ok: int = 0
    corrupt_frames: int = 0  # runs of rejected bytes between good frames
    lost_frames: int = 0  # missing seq numbers (includes frames rejected as corrupt)
    garbage_bytes: int = 0  # bytes between good frames that belong to none
    skipped_bytes: int = 0  # bytes before the first good frame (joined mid-stream)
    seq_restarts: int = 0  # seq jumped backwards (device rebooted): not counted as loss
    unknown_frames: int = 0  # CRC-valid frames of a type this host does not know
    samples: int = 0
    edges: int = 0


_T_SAMPLES = int(FrameType.SAMPLES)
_T_EDGE = int(FrameType.EDGE)
_EMPTY_SAMPLES = np.zeros(0, SAMPLE_DTYPE)
_EMPTY_EDGES = np.zeros(0, EDGE_DTYPE)
_EMPTY_GAPS = np.zeros(0, GAP_DTYPE)
# One sample as it travels in a SAMPLES payload (7 bytes, packed).
_WIRE_SAMPLE = np.dtype([("dt", "<u2"), ("current", "<i2"), ("bus", "<u2"), ("markers", "u1")])
_ANY_LEN = -1  # unknown types: any length, CRC decides
_SAMPLES_LEN = -2  # SAMPLES: 1 + 7 n, checked apart
_EXPECTED_LEN = np.full(256, _ANY_LEN, dtype=np.int64)
for _t, _ln in _FIXED_LEN.items():
    _EXPECTED_LEN[_t] = _ln
_EXPECTED_LEN[FrameType.SAMPLES] = _SAMPLES_LEN
# Groups of at most this many frames of one length get their CRC in plain Python.
_SCALAR_MAX = 3
# Seq steps of half the u16 range or more are a restart, not half a minute of loss.
_SEQ_RESTART = SEQ_MODULO // 2


class StreamDecoder:
    """Incremental decoder for the device -> host byte stream.

    ``feed(chunk)`` accepts any split of the stream: a frame may straddle
    chunks (the undecided tail, < MAX_FRAME_LEN bytes, is carried over).
    The result equals the sequential rule of PROTOCOL.md: at a frame boundary,
    a frame is accepted when its length fits its type and its CRC passes; after
    a failure the search resumes at the next ``A5 5A`` after the failed start.

    Counting:

    - ``corrupt_frames``: each run of rejected bytes between two good frames
      counts once (bytes before the very first good frame are
      ``skipped_bytes``, not corruption: the host may join mid-frame).
    - ``lost_frames``: missing u16 ``seq`` numbers between consecutive good
      frames, wrap-aware; a frame rejected as corrupt is also lost. Each gap is
      reported as a GAP_DTYPE record with the device times around it.
    - ``t_us`` is unwrapped to int64 by signed 32-bit differences, so frames
      slightly out of time order (an EDGE sent while a SAMPLES frame was
      filling) are not mistaken for a wrap.
    """

    def __init__(self) -> None:
        self.counters = DecoderCounters()
        self._carry = np.zeros(0, dtype=np.uint8)
        self._seen_frame = False
        self._gap_open = False
        self._last_seq = 0
        self._last_t32 = 0
        self._last_t64 = 0

    @property
    def pending_bytes(self) -> int:
        """Bytes held back because they may start a frame not yet complete."""
        return int(self._carry.size)

    def feed(self, data: bytes | bytearray | memoryview | np.ndarray) -> DecodedChunk:
        new = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
        self.counters.bytes_in += new.size
        buf = np.concatenate((self._carry, new)) if self._carry.size else new
        n = buf.size
        if n < 2:
            self._carry = buf.copy()
            return DecodedChunk(_EMPTY_SAMPLES, _EMPTY_EDGES, _EMPTY_GAPS)

        cand = np.flatnonzero((buf[:-1] == SYNC0) & (buf[1:] == SYNC1))
        last = n - 1
        # Indices clipped into the buffer; candidates too short to read are masked below.
        ftype = buf[np.minimum(cand + 2, last)]
        plen = buf[np.minimum(cand + 3, last)].astype(np.int64)
        flen = plen + FRAME_OVERHEAD
        complete = (cand + 4 <= n) & (cand + flen <= n)
        undecided = ~complete
        exp = _EXPECTED_LEN[ftype]
        nsamp = buf[np.minimum(cand + HEADER_LEN, last)].astype(np.int64)
        samples_ok = (nsamp >= 1) & (nsamp <= MAX_SAMPLES_PER_FRAME) & (plen == 1 + SAMPLE_BYTES * nsamp)
        shape_ok = complete & ((exp == plen) | (exp == _ANY_LEN) | ((exp == _SAMPLES_LEN) & samples_ok))

        # CRC per distinct frame length; each group keeps its frame rows for decoding.
        valid = np.zeros(cand.size, dtype=bool)
        groups: list[tuple[int, np.ndarray, np.ndarray]] = []
        idx_ok = np.flatnonzero(shape_ok)
        if idx_ok.size:
            lens = flen[idx_ok]
            uniq = np.unique(lens)
            for L in uniq.tolist():
                gi = idx_ok if uniq.size == 1 else idx_ok[lens == L]
                starts = cand[gi]
                if gi.size <= _SCALAR_MAX:
                    # A few frames (false syncs, control frames): plain Python is cheaper.
                    rows = np.stack([buf[c : c + L] for c in starts.tolist()])
                    good = np.array(
                        [crc16(r[2 : L - 2].tobytes()) == int(r[L - 2]) | (int(r[L - 1]) << 8) for r in rows]
                    )
                else:
                    rows = np.lib.stride_tricks.as_strided(buf, (n - L + 1, L), (1, 1))[starts]
                    crc = crc16_columns(np.ascontiguousarray(rows[:, 2 : L - 2].T))
                    sent = rows[:, L - 2].astype(np.uint16) | (rows[:, L - 1].astype(np.uint16) << 8)
                    good = crc == sent
                if good.all():
                    groups.append((L, gi, rows))
                else:
                    groups.append((L, gi[good], rows[good]))
                valid[gi[good]] = True

        accepted, cut = _accept(cand, flen, valid, undecided)
        if buf[last] == SYNC0:
            # A trailing A5 may be half a sync: undecided unless inside an accepted frame.
            end = int(cand[accepted[-1]] + flen[accepted[-1]]) if accepted.size else 0
            if last >= end:
                cut = min(cut, last)
        return self._emit(buf, cand, flen, ftype, accepted, min(cut, n), groups)

    def _count_garbage(self, starts: np.ndarray, ends: np.ndarray, decided: int) -> int:
        """Update byte counters for the bytes no good frame covers; return corrupt runs."""
        c = self.counters
        if not starts.size:
            if self._seen_frame:
                self._gap_open = self._gap_open or decided > 0
                c.garbage_bytes += decided
            else:
                c.skipped_bytes += decided
            return 0
        holes = starts - np.concatenate(([0], ends[:-1]))
        lead = int(holes[0])
        corrupt = int(np.count_nonzero(holes[1:]))
        if self._seen_frame:
            corrupt += int(lead > 0 or self._gap_open)
            c.garbage_bytes += lead
        else:
            c.skipped_bytes += lead
        tail = max(decided - int(ends[-1]), 0)
        c.garbage_bytes += int(holes[1:].sum()) + tail
        self._gap_open = tail > 0
        return corrupt

    def _emit(
        self, buf: np.ndarray, cand: np.ndarray, flen: np.ndarray, ftype: np.ndarray,
        accepted: np.ndarray, decided: int, groups: list[tuple[int, np.ndarray, np.ndarray]],
    ) -> DecodedChunk:
        c = self.counters
        starts = cand[accepted]
        corrupt = self._count_garbage(starts, starts + flen[accepted], decided)
        c.corrupt_frames += corrupt
        self._carry = buf[decided:].copy()
        if not accepted.size:
            return DecodedChunk(_EMPTY_SAMPLES, _EMPTY_EDGES, _EMPTY_GAPS, corrupt=corrupt)

        k = accepted.size
        seq = buf[starts + 4].astype(np.int64) | (buf[starts + 5].astype(np.int64) << 8)
        t32 = (
            buf[starts + 6].astype(np.int64)
            | (buf[starts + 7].astype(np.int64) << 8)
            | (buf[starts + 8].astype(np.int64) << 16)
            | (buf[starts + 9].astype(np.int64) << 24)
        )
        ftypes = ftype[accepted]

        # Unwrap t_us: the first frame ever keeps its value, then signed 32-bit steps.
        if self._seen_frame:
            prev32, prev64, prev_seq = self._last_t32, self._last_t64, self._last_seq
        else:
            prev32, prev64, prev_seq = int(t32[0]), int(t32[0]), int(seq[0]) - 1
        d = np.diff(t32, prepend=prev32)
        d = (d + (1 << 31)) % T_US_MODULO - (1 << 31)
        t64 = prev64 + np.cumsum(d)

        # Lost frames: gaps in seq (wrap-aware; a backward jump is a restart).
        missing = (np.diff(seq, prepend=prev_seq) - 1) % SEQ_MODULO
        restart = missing >= _SEQ_RESTART
        if restart.any():
            c.seq_restarts += int(restart.sum())
            missing[restart] = 0
        gap_idx = np.flatnonzero(missing)
        gaps = np.zeros(gap_idx.size, GAP_DTYPE)
        if gap_idx.size:
            prev_t = np.concatenate(([prev64], t64[:-1]))
            gaps["t_before_us"] = prev_t[gap_idx]
            gaps["t_after_us"] = t64[gap_idx]
            gaps["missing"] = missing[gap_idx]
            gaps["seq_after"] = seq[gap_idx]
        lost = int(missing.sum())
        self._last_t32, self._last_t64, self._last_seq = int(t32[-1]), int(t64[-1]), int(seq[-1])
        self._seen_frame = True

        # Rank of each accepted candidate in stream order, to place group results.
        rank = np.full(cand.size, -1, dtype=np.int64)
        rank[accepted] = np.arange(k)
        is_s = ftypes == _T_SAMPLES
        nsamp = np.where(is_s, (flen[accepted] - FRAME_OVERHEAD - 1) // SAMPLE_BYTES, 0)
        offs = np.cumsum(nsamp) - nsamp
        n_samples = int(nsamp.sum())
        is_e = ftypes == _T_EDGE
        edge_pos = np.cumsum(is_e) - 1

        samples = _EMPTY_SAMPLES
        edges = np.empty(int(is_e.sum()), EDGE_DTYPE)
        messages: list[tuple[int, Message]] = []
        for L, gi, rows in groups:
            r = rank[gi]
            keep = r >= 0  # valid frames past the cut, or inside another, are not accepted
            if not keep.all():
                r, rows = r[keep], rows[keep]
            if not r.size:
                continue
            ft = ftypes[r]
            ns, rem = divmod(L - FRAME_OVERHEAD - 1, SAMPLE_BYTES)
            sm = ft == _T_SAMPLES
            if rem == 0 and 1 <= ns <= MAX_SAMPLES_PER_FRAME and sm.any():
                all_s = bool(sm.all())
                rs = r if all_s else r[sm]
                wire = np.ascontiguousarray((rows if all_s else rows[sm])[:, 11 : 11 + SAMPLE_BYTES * ns])
                wire = wire.view(_WIRE_SAMPLE)  # (frames, ns)
                out = np.empty(wire.shape, SAMPLE_DTYPE)
                out["t_us"] = t64[rs][:, None] + wire["dt"]
                out["current"] = wire["current"]
                out["bus"] = wire["bus"]
                out["markers"] = wire["markers"]
                if out.size == n_samples:
                    samples = out.reshape(-1)  # the usual case: one group holds every sample
                else:
                    if samples is _EMPTY_SAMPLES:
                        samples = np.empty(n_samples, SAMPLE_DTYPE)
                    samples[(offs[rs][:, None] + np.arange(ns)).reshape(-1)] = out.reshape(-1)
            if L == FRAME_OVERHEAD + EDGE_LEN:
                em = ft == _T_EDGE
                if em.any():
                    re = r[em]
                    dst = edge_pos[re]
                    edges["t_us"][dst] = t64[re]
                    edges["markers"][dst] = rows[em, HEADER_LEN]
                    edges["changed"][dst] = rows[em, HEADER_LEN + 1]
            for j in np.flatnonzero(~sm & (ft != _T_EDGE)).tolist():
                fr = int(r[j])
                msg = _message(int(ft[j]), int(seq[fr]), int(t64[fr]), rows[j, HEADER_LEN : L - 2].tobytes())
                if isinstance(msg, OtherFrame):
                    c.unknown_frames += 1
                messages.append((fr, msg))
        messages.sort(key=lambda x: x[0])

        c.frames_ok += k
        c.lost_frames += lost
        c.samples += n_samples
        c.edges += edges.size
        return DecodedChunk(samples, edges, gaps, [m for _, m in messages], k, corrupt, lost)


def _accept(
    cand: np.ndarray, flen: np.ndarray, valid: np.ndarray, undecided: np.ndarray
) -> tuple[np.ndarray, int]:
    """Greedy left-to-right acceptance of candidate frames.

    Returns the accepted candidate indices and the byte offset where the
    undecided tail starts (a huge number when everything is decided).
    """
    no_cut = 1 << 62
    live = np.flatnonzero(valid | undecided)
    if not live.size:
        return live, no_cut
    s = cand[live]
    v = valid[live]
    e = np.where(v, s + flen[live], s)  # undecided candidates cover nothing
    prev_end = np.maximum.accumulate(np.concatenate(([0], e[:-1])))
    covered = s < prev_end
    if not np.any(covered & v):
        # No two valid frames overlap: every uncovered valid frame before the
        # first uncovered undecided candidate is accepted.
        blockers = np.flatnonzero(~v & ~covered)
        stop, cut = (int(blockers[0]), int(s[blockers[0]])) if blockers.size else (live.size, no_cut)
        return live[:stop][~covered[:stop]], cut
    # Rare: a CRC-valid false frame inside a real one; walk sequentially.
    out: list[int] = []
    last_end = 0
    for j, ci in enumerate(live.tolist()):
        if s[j] < last_end:
            continue
        if not v[j]:
            return np.asarray(out, dtype=np.int64), int(s[j])
        out.append(ci)
        last_end = int(e[j])
    return np.asarray(out, dtype=np.int64), no_cut


def _message(ftype: int, seq: int, t_us: int, payload: bytes) -> Message:
    if ftype == FrameType.IDENT:
        return Ident(seq, t_us, LoggerInfo.from_payload(payload))
    if ftype == FrameType.ACK:
        return Ack(seq, t_us, payload[0], payload[1])
    if ftype == FrameType.STATUS:
        st, dr, ed = struct.unpack("<III", payload)
        return Status(seq, t_us, st, dr, ed)
    return OtherFrame(ftype, seq, t_us, payload)


def decode_all(data: bytes | bytearray | memoryview) -> tuple[DecodedChunk, DecoderCounters]:
    """Decode a complete recording in one call (tests, re-decoding raw captures)."""
    dec = StreamDecoder()
    return dec.feed(data), dec.counters
