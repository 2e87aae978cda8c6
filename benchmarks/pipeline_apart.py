"""What running an accelerator stage in its own process buys a Pipeline run.

LiteRT's CompiledModel call holds Python's GIL, so a G stage on a thread stalls the
other stages' Python (hand-overs, read-outs) for the length of each call
(`profiler/mapping/stage_process.py`). This runs the same two-stage pipelines of ResNet50
(B then G, G then B, split in the middle) with the G stage on a thread
(``apart="never"``) and in its own process (``"auto"``), alternating the two a few
times so drift hits both alike, and prints the throughput of each and their ratio.

Without a GPU, G is LiteRT's CPU accelerator through the same CompiledModel path (its
call holds the GIL the same way), on a core of its own where the machine has two.
On the GPU machine: ``--board host`` (G is LiteRT's GPU accelerator when the wheel has
one) or a profile such as ``data/validation/h100-run/host-split-3/host-split.toml``.

    .venv/bin/python benchmarks/pipeline_apart.py [--board PATH|host] [--size 224]
        [--frames 60] [--repeats 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from profiler import zoo
from profiler.boards.model import Board, ProcessorKind, ProcessorSpec
from profiler.mapping.pipeline import MappingRunConfig, run_mapping
from profiler.mapping.spec import parse_order
from profiler.platform import choose_board
from profiler.slicing.slicer import slice_model


def cpu_board() -> Board:
    """This host's B on all cores but the last, G (LiteRT's CPU accelerator through
    CompiledModel) driven from the last."""
    host = choose_board("host", letters=())
    cores = tuple(sorted(os.sched_getaffinity(0)))
    b = replace(host.processor("B"), cores=cores[:-1] or cores)
    g = ProcessorSpec("G", ProcessorKind.GPU, "CompiledModel on LiteRT's CPU accelerator",
                      (cores[-1],), host="B", accelerator="cpu")
    return replace(host, processors={"B": b, "G": g})


def throughput(sliced: Any, data: bytes, board: Board, order: str, apart: str,
               frames: int) -> tuple[float, bool]:
    n = len(sliced.layers)
    run = run_mapping(sliced, board, MappingRunConfig(
        parse_order(order, n, board), "pipeline", frames=frames, warmup=10, method="fused",
        model_bytes=data, apart=apart))
    return run.throughput_fps, any("process" in d for d in run.executors.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--board", default=None,
                    help="board profile (default: this host with G on LiteRT's CPU "
                         "accelerator); 'host' adds the GPU accelerator when LiteRT has one")
    ap.add_argument("--size", type=int, default=224, help="ResNet50 input size")
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    board = cpu_board() if args.board is None else choose_board(args.board)
    data = zoo.build("resnet50", size=args.size)
    sliced = slice_model(data, cache_dir=False)
    n = len(sliced.layers)
    half = n // 2
    orders = {f"B{half}G{n - half}": "B" * half + "G" * (n - half),
              f"G{half}B{n - half}": "G" * half + "B" * (n - half)}
    out: dict[str, Any] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                           "board": board.name, "size": args.size, "orders": {}}
    for name, order in orders.items():
        fps: dict[str, list[float]] = {"never": [], "auto": []}
        for _ in range(args.repeats):
            for apart in ("never", "auto"):
                f, did = throughput(sliced, data, board, order, apart, args.frames)
                assert did == (apart == "auto"), "the G stage did not run where asked"
                fps[apart].append(f)
        thread, proc = statistics.median(fps["never"]), statistics.median(fps["auto"])
        out["orders"][name] = {"thread_fps": fps["never"], "process_fps": fps["auto"],
                               "ratio": proc / thread}
        print(f"ResNet50/{args.size} {name} pipeline: G stage on a thread {thread:8.1f} FPS, "
              f"in its own process {proc:8.1f} FPS: x{proc / thread:.2f} "
              f"(medians of {args.repeats}, {args.frames} frames each)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
