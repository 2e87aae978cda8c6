#!/usr/bin/env python3
"""Is the fused table's whole model the model `coupprof run` calls? On one processor,
in one process: the original model and its last cumulative prefix (what the fused
rounds call as the whole model), loaded side by side and called back to back in
alternating bursts, each call as `run` makes it (inputs written, run, outputs read
back); prints each one's median, p10 and p90 per burst and the processor's clock
(NVML) after each burst.

    python benchmarks/gpu_whole_vs_prefix.py --model mobilenet_v1 --processor G
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="mobilenet_v1", help="zoo name or .tflite path")
    ap.add_argument("--processor", default="G")
    ap.add_argument("--board", default="host")
    ap.add_argument("--bursts", type=int, default=6)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()

    from profiler.executors import make_executor
    from profiler.executors.base import app_call
    from profiler.measure.freq_trace import freq_reader_for
    from profiler.measure.runner import random_input
    from profiler.platform import choose_board
    from profiler.slicing.prefix import prefix_models
    from profiler.slicing.slicer import slice_model

    path = Path(args.model)
    if not args.model.endswith(".tflite"):
        path = Path(tempfile.mkdtemp()) / f"{args.model}.tflite"
        subprocess.run([sys.executable, "-m", "profiler", "zoo", args.model, "-o", str(path)],
                       check=True, stdout=subprocess.DEVNULL)
    data = path.read_bytes()
    prefix = prefix_models(data, slice_model(data, cache_dir=False))[-1]
    board = choose_board(args.board)
    proc = board.processor(args.processor)
    reader = freq_reader_for(board, proc)
    out: dict[str, list[dict[str, float]]] = {"original": [], "prefix": []}
    with make_executor(board, args.processor) as ex:
        subs = {"original": ex.load(data, name="original"),
                "prefix": ex.load(prefix.model_bytes, name="whole prefix")}
        rng = np.random.default_rng(0)
        inputs = [random_input(io.shape, io.dtype, rng) for io in subs["original"].inputs]
        for b in range(args.bursts):
            for name in (("original", "prefix") if b % 2 == 0 else ("prefix", "original")):
                call = app_call(subs[name], inputs)
                times = [call() for _ in range(args.calls + 20)][20:]
                ms = np.array(times) / 1e6
                khz = reader.read_khz() if reader is not None else None
                row = {"burst": b, "median_ms": round(float(np.median(ms)), 4),
                       "p10_ms": round(float(np.percentile(ms, 10)), 4),
                       "p90_ms": round(float(np.percentile(ms, 90)), 4),
                       "clock_mhz": None if khz is None else khz / 1000}
                out[name].append(row)
                print(name, json.dumps(row), flush=True)
    for name, rows in out.items():
        print(name, "median of medians", round(float(np.median([r["median_ms"] for r in rows])), 4))
    return 0


if __name__ == "__main__":
    sys.exit(main())
