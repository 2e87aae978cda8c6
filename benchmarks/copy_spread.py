"""How far apart separately loaded copies of the same model run, single thread.

The fused method's sum on a CPU is one compiled copy's time (the whole model's prefix,
less the empty one), and the whole invoke it is compared with is another copy's
(`benchmarks/slicing_overhead.py`). Each copy gets its own packed weights and arena at
its own addresses, so two copies of one model need not run alike. This loads N copies,
visits them in interleaved rounds (alternating order; one untimed invoke, then the
fastest of two timed, as the fused rounds visit a prefix), and prints each copy's 20 %
trimmed mean with its 95 % interval and the largest over the smallest. No target: it
says how close two copies can be expected to agree on this machine.

    .venv/bin/python benchmarks/copy_spread.py [--copies 8] [--rounds 3000] [--core N]
        [--model NAME --size S]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from slicing_overhead import visit_ns  # the benchmarks' folder is on sys.path

from profiler import zoo
from profiler.boards.model import ProcessorKind, ProcessorSpec
from profiler.executors.cpu import CpuExecutor
from profiler.measure.fused import trimmed_estimate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=8, help="copies to load (default: 8)")
    ap.add_argument("--rounds", type=int, default=3000, help="rounds (default: 3000)")
    ap.add_argument("--model", default=None, help="zoo model (default: the bundled default)")
    ap.add_argument("--size", type=int, default=224, help="input size with --model")
    ap.add_argument("--core", type=int, default=None, help="core to pin to (default: the last)")
    args = ap.parse_args(argv)

    core = args.core if args.core is not None else max(os.sched_getaffinity(0))
    data = zoo.build(args.model, size=args.size) if args.model else \
        zoo.default_model_path().read_bytes()
    with CpuExecutor(ProcessorSpec("B", ProcessorKind.CPU, f"core {core}", (core,)), threads=1) as ex:
        subs = [ex.load(data, name=f"copy {i}") for i in range(args.copies)]
        rng = np.random.default_rng(0)
        for sub in subs:
            for i, io in enumerate(sub.inputs):
                sub.set_input(i, rng.uniform(-1, 1, io.shape).astype(io.dtype))
        rows = []
        for r in range(args.rounds):
            order = range(len(subs)) if r % 2 == 0 else range(len(subs) - 1, -1, -1)
            row = [0] * len(subs)
            for i in order:
                row[i] = visit_ns(subs[i].run)
            rows.append(row)
    mean, half = trimmed_estimate(np.array(rows))
    print(f"{args.model or 'default model'}: {args.copies} copies, {args.rounds} rounds, "
          f"single thread on core {core}")
    print("  ".join(f"{m:.4f}±{h:.4f}" for m, h in zip(mean, half, strict=True)) + " ms")
    print(f"largest / smallest copy: {mean.max() / mean.min():.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
