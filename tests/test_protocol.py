"""The logger protocol: PROTOCOL.md's worked examples, CRC, encoding, and the
numpy stream decoder against an independent byte-by-byte reference decoder
(written here from the spec, sharing no code with profiler.power.protocol)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from profiler.power import protocol as P

# Worked examples, copied from firmware/PROTOCOL.md.
EX_SAMPLES = bytes.fromhex(
    "a5 5a 01 0f 07 00 40 42 0f 00 02 00 00 90 01 a0 0f 01 18 01 f4 ff a1 0f 03 ea 66"
)
EX_EDGE = bytes.fromhex("a5 5a 02 02 08 00 bb 42 0f 00 03 02 14 2b")
EX_IDENTIFY = bytes.fromhex("a5 5a 81 00 a6 35")
EX_START = bytes.fromhex("a5 5a 82 00 f5 60")
EX_SET_RATE_3000 = bytes.fromhex("a5 5a 84 04 b8 0b 00 00 74 d1")


def ref_crc(data: bytes) -> int:
    """Bit-by-bit CRC-16/CCITT-FALSE, straight from the definition."""
    crc = 0xFFFF
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def ref_decode(stream: bytes) -> dict:
    """Sequential reference decoder following PROTOCOL.md literally."""
    expected_len = {2: 2, 3: 30, 4: 2, 5: 12}
    frames = []
    pos = 0
    corrupt_runs = 0
    in_garbage = False
    seen = False
    while pos + 1 < len(stream):
        if stream[pos] == 0xA5 and stream[pos + 1] == 0x5A and pos + 4 <= len(stream):
            ftype, ln = stream[pos + 2], stream[pos + 3]
            end = pos + 12 + ln
            if end > len(stream):
                break
            body = stream[pos + 2 : end - 2]
            ok = ref_crc(body) == int.from_bytes(stream[end - 2 : end], "little")
            if ftype in expected_len:
                ok &= ln == expected_len[ftype]
            if ftype == 1:
                ok &= ln >= 1 and 1 <= body[8] <= 4 and ln == 1 + 7 * body[8]
            if ok:
                if in_garbage and seen:
                    corrupt_runs += 1
                in_garbage = False
                seen = True
                seq, t = struct.unpack_from("<HI", body, 2)
                frames.append((ftype, seq, t, body[8:]))
                pos = end
                continue
        in_garbage = True
        pos += 1
    samples, edges = [], []
    lost = 0
    prev_seq = None
    t64 = None
    prev_t = None
    for ftype, seq, t, payload in frames:
        if prev_seq is not None:
            lost += (seq - prev_seq - 1) % 65536
        prev_seq = seq
        if t64 is None:
            t64 = t
        else:
            step = (t - prev_t) % (1 << 32)
            t64 += step - (1 << 32) if step >= (1 << 31) else step
        prev_t = t
        if ftype == 1:
            for i in range(payload[0]):
                dt, cur, bus, mk = struct.unpack_from("<HhHB", payload, 1 + 7 * i)
                samples.append((t64 + dt, cur, bus, mk))
        elif ftype == 2:
            edges.append((t64, payload[0], payload[1]))
    return {"samples": samples, "edges": edges, "frames": len(frames), "lost": lost,
            "corrupt": corrupt_runs}


def feed_chunks(data: bytes, sizes) -> tuple[list, list, P.DecoderCounters, list]:
    dec = P.StreamDecoder()
    samples, edges, msgs = [], [], []
    pos = 0
    for size in sizes:
        if pos >= len(data):
            break
        out = dec.feed(data[pos : pos + size])
        pos += size
        samples += out.samples.tolist()
        edges += out.edges.tolist()
        msgs += out.messages
    if pos < len(data):
        out = dec.feed(data[pos:])
        samples += out.samples.tolist()
        edges += out.edges.tolist()
        msgs += out.messages
    return samples, edges, dec.counters, msgs


# ----------------------------------------------------------------------------- spec examples


def test_crc_check_value_and_tables() -> None:
    assert P.crc16(b"123456789") == 0x29B1 == ref_crc(b"123456789")
    rng = np.random.default_rng(1)
    for n in (0, 1, 2, 7, 64, 301):  # the scalar CRC (binascii's) on any length, and chained
        data = rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
        assert P.crc16(data) == ref_crc(data)
        assert P.crc16(data[n // 2:], P.crc16(data[: n // 2])) == ref_crc(data)
    msgs = rng.integers(0, 256, size=(37, 50), dtype=np.uint8)  # odd length: 8-bit step + words
    got = P.crc16_columns(msgs)
    assert got.tolist() == [ref_crc(msgs[:, j].tobytes()) for j in range(50)]
    even = msgs[:36]
    assert P.crc16_columns(even).tolist() == [ref_crc(even[:, j].tobytes()) for j in range(50)]


def test_worked_examples_decode_exactly() -> None:
    out, counters = P.decode_all(EX_SAMPLES + EX_EDGE)
    assert out.samples.tolist() == [(1_000_000, 400, 4000, 1), (1_000_280, -12, 4001, 3)]
    assert out.edges.tolist() == [(1_000_123, 0b11, 0b10)]
    assert counters.frames_ok == 2
    assert counters.lost_frames == counters.corrupt_frames == 0
    assert counters.garbage_bytes == counters.skipped_bytes == 0


def test_worked_examples_encode_exactly() -> None:
    assert P.encode_samples(7, 1_000_000, [0, 280], [400, -12], [4000, 4001], [1, 3]) == EX_SAMPLES
    assert P.encode_edge(8, 1_000_123, 0b11, 0b10) == EX_EDGE
    assert P.encode_command(P.Command.IDENTIFY) == EX_IDENTIFY
    assert P.encode_command(P.Command.START) == EX_START
    assert P.encode_set_rate(3000) == EX_SET_RATE_3000


def test_vectorised_frame_encoder_matches_scalar_one() -> None:
    t = np.array([10, 60, 110, 170, 220, 270, 330, 400])
    cur = np.array([1, -2, 3, -4, 5, -6, 7, -32768])
    bus = np.array([4000, 4001, 4002, 4003, 0, 65535, 7, 8])
    mk = np.array([0, 1, 2, 3, 4, 5, 15, 0])
    blob, offs = P.encode_sample_frames(65535, t, cur, bus, mk)
    want = P.encode_samples(65535, 10, [0, 50, 100, 160], cur[:4].tolist(), bus[:4].tolist(), mk[:4].tolist())
    want += P.encode_samples(0, 220, [0, 50, 110, 180], cur[4:].tolist(), bus[4:].tolist(), mk[4:].tolist())
    assert blob == want
    assert offs.tolist() == [0, 41]


def test_ident_ack_status_roundtrip() -> None:
    info = P.LoggerInfo(1, 1, 4, 0b11, 3571, 2000, 25_000, 1250, 5000, "1.0.0")
    blob = (
        P.encode_ident(1, 5, info)
        + P.encode_ack(2, 6, P.Command.IDENTIFY, P.AckStatus.OK)
        + P.encode_status(3, 7, 100, 2, 9)
        + P.encode_frame(0x7E, 4, 8, b"future")
    )
    out, c = P.decode_all(blob)
    assert out.messages == [
        P.Ident(1, 5, info),
        P.Ack(2, 6, 0x81, 0),
        P.Status(3, 7, 100, 2, 9),
        P.OtherFrame(0x7E, 4, 8, b"future"),
    ]
    assert c.unknown_frames == 1
    assert info.streaming and info.bus_measured
    # bus_v = raw * 1.25 mV; current = raw * 25 uA
    assert info.power_w(np.array([4000]), np.array([4000]))[0] == pytest.approx(0.1 * 5.0)
    silent_bus = P.LoggerInfo(1, 2, 1, 0, 10000, 0, 1000, 0, 3300, "x")
    assert silent_bus.bus_v(np.array([123, 9]))[1] == pytest.approx(3.3)


def test_command_parser_splits_and_flags_bad_crc() -> None:
    parser = P.CommandParser()
    bad = bytearray(EX_START)
    bad[-1] ^= 0xFF
    stream = b"\x00\xa5" + EX_IDENTIFY + bytes(bad) + EX_SET_RATE_3000
    got = []
    for b in stream:  # byte by byte
        got += parser.feed(bytes([b]))
    assert [(c.cmd, c.payload, c.crc_ok) for c in got] == [
        (0x81, b"", True),
        (0, b"", False),
        (0x84, struct.pack("<I", 3000), True),
    ]


# ----------------------------------------------------------------------------- stream decoding


def make_stream(rng: np.random.Generator, n_frames: int, seq0: int = 0, t0: int = 0):
    """Random mix of SAMPLES (1..4 samples), EDGE and STATUS frames, as a list of frames."""
    frames = []
    seq, t = seq0, t0
    for _ in range(n_frames):
        kind = rng.choice(3, p=[0.8, 0.15, 0.05])
        if kind == 0:
            n = int(rng.integers(1, 5))
            dts = np.concatenate(([0], np.cumsum(rng.integers(1, 400, n - 1)))).tolist()
            cur = rng.integers(-32768, 32768, n).tolist()
            bus = rng.integers(0, 65536, n).tolist()
            mk = rng.integers(0, 16, n).tolist()
            frames.append(P.encode_samples(seq, t, dts, cur, bus, mk))
            t += dts[-1] + int(rng.integers(1, 300))
        elif kind == 1:
            # EDGEs may carry a time slightly before the previous frame's
            frames.append(P.encode_edge(seq, t - int(rng.integers(0, 200)), int(rng.integers(16)), 1))
        else:
            frames.append(P.encode_status(seq, t, seq, 0, 3))
        seq += 1
        t %= 1 << 32
    return frames


@pytest.mark.parametrize("seed", range(6))
def test_decoder_matches_reference_under_corruption_drops_and_any_chunking(seed: int) -> None:
    rng = np.random.default_rng(seed)
    # start near the u16 seq and u32 clock wraps so both wrap inside the stream
    frames = make_stream(rng, 600, seq0=65500, t0=(1 << 32) - 30_000)
    stream = bytearray()
    for f in frames:
        r = rng.random()
        if r < 0.03:
            continue  # dropped frame
        f = bytearray(f)
        if r < 0.08:
            f[int(rng.integers(len(f)))] ^= 1 << int(rng.integers(8))  # bit error
        elif r < 0.10:
            f = f[: int(rng.integers(1, len(f)))]  # truncated frame
        elif r < 0.12:
            f = b"\xa5\x5a" + bytes(rng.integers(0, 256, int(rng.integers(1, 20)), dtype=np.uint8)) + f
        stream += f
    stream = bytes(stream)
    want = ref_decode(stream)
    sizes = rng.integers(1, 300, size=len(stream)).tolist()
    samples, edges, c, _ = feed_chunks(stream, sizes)
    assert samples == want["samples"]
    assert edges == want["edges"]
    assert c.frames_ok == want["frames"]
    assert c.lost_frames == want["lost"]
    assert c.corrupt_frames == want["corrupt"]
    # the whole stream at once gives the same
    one, c1 = P.decode_all(stream)
    assert one.samples.tolist() == want["samples"]
    assert c1.lost_frames == want["lost"] and c1.corrupt_frames == want["corrupt"]


def test_time_unwraps_across_u32_wrap_and_seq_across_u16_wrap() -> None:
    t0 = (1 << 32) - 150
    blob = (
        P.encode_samples(65534, t0, [0, 100], [1, 2], [3, 4], [0, 0])
        + P.encode_samples(65535, t0 + 200, [0, 100], [5, 6], [7, 8], [0, 0])  # crosses the wrap
        + P.encode_samples(1, t0 + 400, [0], [9], [9], [1])  # seq 0 lost
    )
    out, c = P.decode_all(blob)
    assert out.samples["t_us"].tolist() == [t0, t0 + 100, t0 + 200, t0 + 300, t0 + 400]
    assert c.lost_frames == 1
    assert out.gaps.tolist() == [(t0 + 200, t0 + 400, 1, 1)]


def test_split_frames_are_carried_over_byte_by_byte() -> None:
    blob = EX_SAMPLES + EX_EDGE + EX_SAMPLES.replace(b"\x07\x00", b"\x09\x00", 1)
    blob = blob[:-2] + P.crc16(blob[-27 + 2 : -2]).to_bytes(2, "little")
    samples, edges, c, _ = feed_chunks(blob, [1] * len(blob))
    assert len(samples) == 4 and len(edges) == 1
    assert c.frames_ok == 3 and c.lost_frames == 0 and c.corrupt_frames == 0


def test_joining_mid_stream_is_skipped_not_corrupt() -> None:
    blob = EX_SAMPLES[5:] + EX_EDGE
    out, c = P.decode_all(blob)
    assert c.skipped_bytes == len(EX_SAMPLES) - 5
    assert c.corrupt_frames == 0 and c.frames_ok == 1


def test_sync_inside_payload_does_not_derail() -> None:
    # current = 0x5AA5 puts "A5 5A" inside the payload of a good frame
    f1 = P.encode_samples(1, 100, [0, 1], [0x5AA5, 0x5AA5], [0x5AA5, 0x5AA5], [0, 0])
    f2 = P.encode_edge(2, 150, 1, 1)
    samples, edges, c, _ = feed_chunks(f1 + f2, [13, 1, 7, 100])
    assert len(samples) == 2 and samples[0][1] == 0x5AA5
    assert len(edges) == 1
    assert c.corrupt_frames == 0 and c.garbage_bytes == 0


def test_seq_restart_is_not_counted_as_loss() -> None:
    blob = P.encode_edge(500, 10, 1, 1) + P.encode_edge(0, 20, 0, 1)  # device rebooted
    _, c = P.decode_all(blob)
    assert c.lost_frames == 0 and c.seq_restarts == 1


def test_valid_frame_nested_in_a_payload_is_not_decoded_twice() -> None:
    inner = P.encode_edge(99, 5, 1, 1)
    outer = P.encode_frame(0x7E, 1, 0, b"xx" + inner + b"yy")  # CRC-valid frame inside a frame
    blob = outer + P.encode_edge(2, 10, 0, 1)
    for sizes in ([len(blob)], [1] * len(blob), [20, 3, 100]):
        _, edges, c, msgs = feed_chunks(blob, sizes)
        assert edges == [(10, 0, 1)]
        assert [m.type for m in msgs] == [0x7E]
        assert c.frames_ok == 2 and c.lost_frames == 0 and c.corrupt_frames == 0
    # if the outer frame is corrupt, the nested one is found (resync after the failed start)
    bad = bytearray(outer)
    bad[-1] ^= 1
    out, c = P.decode_all(bytes(bad) + P.encode_edge(100, 10, 0, 1))
    assert out.edges.tolist() == [(5, 1, 1), (10, 0, 1)]
