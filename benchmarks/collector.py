"""How fast the host decodes the logger's stream.

1. Decode throughput of ``StreamDecoder`` on a synthetic logger stream (SAMPLES
   frames of 4 samples, an EDGE every 50 frames, a STATUS every 2500), fed in
   chunks of several sizes. Prints frames/s, samples/s, MB/s and the ratio to
   a 20 kS/s logger stream. Target: >= 2,000,000 frames/s (>= 100x a 20 kS/s
   stream) at 64 KiB chunks, the batch the collector decodes when the line
   floods; 4 KiB chunks show the fixed cost per decode call.
2. The same stream with 1 % of the frames corrupted and 1 % dropped (resync cost).
3. The vectorised CRC alone, in frames/s (41-byte SAMPLES frames).
4. End to end: the stream written into a pty, read by the collector through
   pyserial (reader thread, decode, trace .bin files on disk): samples/s.

    .venv/bin/python benchmarks/collector.py [--frames 500000] [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
import tty
from typing import Any

import numpy as np

from profiler.power import protocol as P
from profiler.power.collector import Collector

TARGET_FRAMES_PER_S = 2_000_000
STREAM_20KSPS_FRAMES_PER_S = 20_000 / P.MAX_SAMPLES_PER_FRAME


def make_stream(n_frames: int, corrupt: float = 0.0, drop: float = 0.0, seed: int = 0) -> tuple[bytes, int]:
    """A logger session: n_frames SAMPLES frames (4 samples each, 50 µs apart),
    EDGE and STATUS frames interleaved; returns the bytes and the samples sent."""
    rng = np.random.default_rng(seed)
    n = n_frames * 4
    t = np.arange(n, dtype=np.int64) * 50 + 1_000
    cur = rng.integers(-2000, 30000, n)
    bus = rng.integers(3800, 4200, n)
    mk = rng.integers(0, 4, n)
    # seq numbers leave room for one EDGE after every 50th frame and STATUS after every 2500th
    extra_before = np.arange(n_frames) // 50 + np.arange(n_frames) // 2500
    seq = (np.arange(n_frames) + extra_before) % P.SEQ_MODULO
    blob, offs = P.encode_sample_frames(seq, t, cur, bus, mk)
    flen = 41
    frames = np.frombuffer(blob, np.uint8).reshape(n_frames, flen)
    parts: list[bytes] = []
    kept = 0
    for start in range(0, n_frames, 50):
        block = frames[start : start + 50].copy()
        r = rng.random(block.shape[0]) if (corrupt or drop) else np.ones(block.shape[0])
        bad = r < corrupt
        block[bad, 20] ^= 0x5A  # a bit error in a payload: the CRC fails
        good = r >= corrupt + drop
        parts.append(block[good | bad].tobytes())  # dropped frames are not sent at all
        kept += int(good.sum()) * 4
        last = start + block.shape[0] - 1
        s = int(seq[last]) + 1
        parts.append(P.encode_edge(s, int(t[last * 4 + 3]) + 5, 1, 1))
        if (last + 1) % 2500 == 0:
            parts.append(P.encode_status(s + 1, int(t[last * 4 + 3]) + 6, (last + 1) * 4, 0, 0))
    return b"".join(parts), kept


def decode_rate(stream: bytes, chunk: int, repeat: int) -> dict[str, float]:
    best = float("inf")
    dec = P.StreamDecoder()
    for _ in range(repeat):
        dec = P.StreamDecoder()
        mv = memoryview(stream)
        t0 = time.perf_counter()
        for i in range(0, len(stream), chunk):
            dec.feed(mv[i : i + chunk])
        best = min(best, time.perf_counter() - t0)
    c = dec.counters
    return {
        "chunk_bytes": chunk,
        "seconds": best,
        "frames": c.frames_ok,
        "samples": c.samples,
        "frames_per_s": c.frames_ok / best,
        "samples_per_s": c.samples / best,
        "mb_per_s": len(stream) / best / 1e6,
        "x_20ksps_stream": (c.samples / best) / 20_000,
        "corrupt_frames": c.corrupt_frames,
        "lost_frames": c.lost_frames,
    }


def crc_rate(n_frames: int, repeat: int) -> float:
    rng = np.random.default_rng(1)
    cols = rng.integers(0, 256, size=(37, n_frames), dtype=np.uint8)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        P.crc16_columns(cols)
        best = min(best, time.perf_counter() - t0)
    return n_frames / best


def end_to_end(stream: bytes, samples: int) -> dict[str, float]:
    """Bytes written into a pty as fast as the kernel takes them; the collector
    reads the other side (pyserial), decodes and writes the trace to disk."""
    master, slave = os.openpty()
    tty.setraw(slave)
    try:
        with tempfile.TemporaryDirectory() as d, Collector(os.ttyname(slave), out_dir=d) as col:
            col.connect()
            col.start(send=False)

            def write() -> None:
                view = memoryview(stream)
                while view:
                    view = view[os.write(master, view[: 1 << 16]) :]

            writer = threading.Thread(target=write, daemon=True)
            t0 = time.perf_counter()
            writer.start()
            while col.counters.bytes_in < len(stream):
                time.sleep(0.001)
            dt = time.perf_counter() - t0
            writer.join()
            trace = col.stop(send=False)
            assert trace.samples.size == samples, (trace.samples.size, samples)
    finally:
        os.close(master)
        os.close(slave)
    return {"seconds": dt, "samples_per_s": samples / dt, "mb_per_s": len(stream) / dt / 1e6,
            "x_20ksps_stream": samples / dt / 20_000}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=500_000, help="SAMPLES frames in the stream")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is kept")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)

    stream, samples = make_stream(args.frames)
    results: dict[str, Any] = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                    "python": sys.version.split()[0], "numpy": np.__version__},
        "stream": {"frames": args.frames, "bytes": len(stream), "samples": samples},
        "target_frames_per_s": TARGET_FRAMES_PER_S,
        "decode": [],
    }
    print(f"stream: {args.frames} SAMPLES frames + EDGE/STATUS, {len(stream) / 1e6:.1f} MB, "
          f"{samples} samples")
    for chunk in (4096, 65536, 1 << 20):
        r = decode_rate(stream, chunk, args.repeat)
        assert r["samples"] == samples and r["lost_frames"] == 0
        results["decode"].append(r)
        r["us_per_call"] = r["seconds"] / -(-len(stream) // chunk) * 1e6
        if chunk < 1 << 16:
            # Small chunks measure the per-call cost; the collector decodes in
            # batches of >= 10 ms or 64 KiB, so this is not its throughput.
            verdict = f"per call {r['us_per_call']:.0f} us"
        else:
            verdict = "OK" if r["frames_per_s"] >= TARGET_FRAMES_PER_S else "BELOW TARGET"
        print(f"decode, {chunk:>8} B chunks: {r['frames_per_s']:>12,.0f} frames/s "
              f"{r['samples_per_s']:>12,.0f} samples/s {r['mb_per_s']:6.1f} MB/s  "
              f"= {r['x_20ksps_stream']:,.0f}x a 20 kS/s stream  [{verdict}]")

    bad, bad_samples = make_stream(args.frames, corrupt=0.01, drop=0.01, seed=2)
    r = decode_rate(bad, 65536, args.repeat)
    assert r["samples"] == bad_samples
    results["decode_faulty"] = r
    print(f"decode, 1% corrupt + 1% dropped, 64 KiB chunks: {r['frames_per_s']:,.0f} frames/s "
          f"({r['corrupt_frames']} corrupt, {r['lost_frames']} lost detected)")

    crc = crc_rate(min(args.frames, 200_000), args.repeat)
    results["crc_frames_per_s"] = crc
    print(f"CRC-16 alone (37-byte frames): {crc:,.0f} frames/s")

    e2e = end_to_end(stream, samples)
    results["end_to_end_loop"] = e2e
    print(f"end to end (pty -> pyserial reader thread -> decode -> trace on disk): "
          f"{e2e['samples_per_s']:,.0f} samples/s, {e2e['mb_per_s']:.1f} MB/s "
          f"= {e2e['x_20ksps_stream']:,.0f}x a 20 kS/s stream")

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
