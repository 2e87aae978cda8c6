"""What the cache state a call finds does to a CPU layer's time, single thread.

A fused visit calls a prefix back to back and keeps a timed call that follows another
call of the same prefix, so that call finds the prefix's weights and buffers in cache. An
application calling the whole model frame after frame finds, at each layer, whatever the
rest of the frame left: for a model whose weights outgrow the last-level cache (ResNet50:
102 MB), not that layer's weights. This prints, side by side in one run on one pinned
core, each chosen layer's sub-model timed

- warm: right after a call of itself (the state a fused visit measures in);
- after a frame: right after a call of the whole model (the state an application's
  frame leaves);
- sliced: inside a sliced frame (`profiler.measure.runner`, the layer's median over frames),

and the ratios of the first two to the sliced time. No target: it measures why fused
and sliced layers of a cache-bound model differ on a given machine (README, "CPU
targets").

    .venv/bin/python benchmarks/cache_state.py [--model resnet50] [--size 224]
        [--layers 0,45,48,51] [--reps 40] [--core N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from profiler import zoo
from profiler.boards.model import ProcessorKind, ProcessorSpec
from profiler.executors.cpu import CpuExecutor
from profiler.measure.runner import LayerRunner
from profiler.slicing.slicer import slice_model


def _timed(invoke: Callable[[], object]) -> int:
    t0 = time.perf_counter_ns()
    invoke()
    return time.perf_counter_ns() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50", help="zoo model (default: resnet50)")
    ap.add_argument("--size", type=int, default=224, help="input size (default: 224)")
    ap.add_argument("--layers", default=None, metavar="I,J",
                    help="layers to time (default: those of 1 ms or more in a sliced frame)")
    ap.add_argument("--reps", type=int, default=40, help="timed calls per state (default: 40)")
    ap.add_argument("--core", type=int, default=None, help="core to pin to (default: the last)")
    args = ap.parse_args(argv)

    core = args.core if args.core is not None else max(os.sched_getaffinity(0))
    data = zoo.build(args.model, size=args.size)
    sliced = slice_model(data, cache_dir=False)
    print(f"{args.model} {args.size}: {len(sliced.layers)} layers, {len(data) / 1e6:.1f} MB; "
          f"single thread, pinned to core {core}")
    with CpuExecutor(ProcessorSpec("B", ProcessorKind.CPU, f"core {core}", (core,)), threads=1) as ex:
        runner = LayerRunner(sliced, ex, seed=0)
        for _ in range(10):  # warm-up
            runner.run_frame()
        frames = [runner.run_frame() for _ in range(args.reps)]
        sliced_ms = [statistics.median(f[k][3] - f[k][2] for f in frames) / 1e6
                     for k in range(len(sliced.layers))]
        chosen = [int(x) for x in args.layers.split(",")] if args.layers else \
            [k for k, t in enumerate(sliced_ms) if t >= 1.0]
        whole = ex.load(data, name="whole model")
        for i, x in enumerate(runner.inputs.values()):
            whole.set_input(i, x)
        print(f"{'layer':>5} {'warm ms':>8} {'after a frame':>14} {'sliced ms':>10} "
              f"{'warm/sliced':>12} {'frame/sliced':>13}")
        for k in chosen:
            invoke = runner.interpreters[k].invoke
            warm, after = [], []
            for _ in range(args.reps):
                invoke()
                warm.append(_timed(invoke))
                whole.run()
                after.append(_timed(invoke))
            w, a = statistics.median(warm) / 1e6, statistics.median(after) / 1e6
            s = sliced_ms[k]
            print(f"{k:>5} {w:>8.3f} {a:>14.3f} {s:>10.3f} {w / s:>12.3f} {a / s:>13.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
