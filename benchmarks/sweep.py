"""What a sweep costs beyond the frames it measures.

For the same (processor, level) pairs, frames and warm-up:

1. `profiler.sweep.run.Sweep`: slices once, builds each processor's interpreters once,
   changes only the frequency between levels, appends + fsyncs the CSV per pair.
2. A naive loop that does per pair what one `coupprof layers --freq K` run does
   in-process (`profiler.measure.layers.measure_layers`): slice (cache on, as the
   CLI), save/set/restore the governor, open the executor, build every layer's
   interpreter, run, write the tables.

Each prints (wall time) / (sum of the recorded frames' times), where a frame's
time is last layer end - first transfer start. Warm-up frames are not recorded,
so the floor is about (frames + warmup) / frames; the script prints that too.

Default: the `host` board on a temporary fake sysfs tree with writable cpufreq
files (tests/test_sweep_fakehost.py), two one-core clusters, every level. Pass
--board sim (or another board) and --processors/--freqs to measure elsewhere.

    .venv/bin/python benchmarks/sweep.py [--frames 20] [--warmup 2] [--repeats 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the fake host tree builder

from profiler.measure.layers import LayerSettings, ModelUnderTest, measure_layers  # noqa: E402
from profiler.measure.tables import write_tables  # noqa: E402
from profiler.platform import choose_board  # noqa: E402
from profiler.slicing.slicer import slice_model  # noqa: E402
from profiler.sweep.plan import parse_freqs, parse_processors, plan_pairs  # noqa: E402
from profiler.sweep.run import Sweep, SweepSettings, frame_time_ns  # noqa: E402
from profiler.zoo import default_model_path  # noqa: E402


def naive(board: Any, model: Path, pairs: list, out: Path, frames: int, warmup: int,
          sysfs_root: Path | None) -> tuple[int, int]:
    """(wall ns, recorded frame ns) for one `coupprof layers`-like run per pair."""
    measured = 0
    t0 = time.perf_counter_ns()
    for i, pair in enumerate(pairs):
        sliced = slice_model(model)
        level = (pair.level, pair.freq_khz) if pair.level is not None else None
        m = measure_layers(board, pair.processor,
                           ModelUnderTest.of(model, model.read_bytes(), sliced),
                           LayerSettings(frames=frames, warmup=warmup), level=level,
                           sysfs_root=sysfs_root, sample_freq=False)
        measured += frame_time_ns(m.run.timings)
        write_tables(m.tables(), out / f"pair{i}.csv")
    return time.perf_counter_ns() - t0, measured


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", default=None, help="board (default: host on a fake cpufreq tree)")
    ap.add_argument("--sysfs-root", type=Path, default=None)
    ap.add_argument("--processors", default=None)
    ap.add_argument("--freqs", default="all")
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="runs of each, the median is printed")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    model = args.model or default_model_path()
    with tempfile.TemporaryDirectory(prefix="coupprof-bench-sweep-") as tmp:
        tmpdir = Path(tmp)
        root = args.sysfs_root
        wanted = args.processors.split(",") if args.processors else ()  # as `coupprof sweep`
        if args.board is None:
            from test_sweep_fakehost import build_fake_host

            root = build_fake_host(tmpdir / "fake").sys
            board = choose_board("host", root, letters=wanted)
        else:
            board = choose_board(args.board, root, letters=wanted)
        pairs = plan_pairs(board, parse_processors(args.processors, board), parse_freqs(args.freqs))
        slice_model(model)  # fill the slice cache once, as a user's earlier runs would
        ratios: dict[str, list[float]] = {"sweep": [], "naive": []}
        walls: dict[str, list[float]] = {"sweep": [], "naive": []}
        for rep in range(args.repeats):
            res = Sweep(board, model, pairs, tmpdir / f"sweep{rep}",
                        SweepSettings(frames=args.frames, warmup=args.warmup),
                        sysfs_root=root).run()
            ratios["sweep"].append(res.wall_ns / res.measured_ns)
            walls["sweep"].append(res.wall_ns / 1e9)
            (tmpdir / f"naive{rep}").mkdir()
            wall, measured = naive(board, model, pairs, tmpdir / f"naive{rep}", args.frames,
                                   args.warmup, root)
            ratios["naive"].append(wall / measured)
            walls["naive"].append(wall / 1e9)

    floor = (args.frames + args.warmup) / args.frames
    out = {
        "board": board.name, "model": model.name, "pairs": len(pairs),
        "layers": len(slice_model(model).layers), "frames": args.frames, "warmup": args.warmup,
        "repeats": args.repeats, "floor": floor,
        "sweep_ratio": statistics.median(ratios["sweep"]),
        "naive_ratio": statistics.median(ratios["naive"]),
        "sweep_wall_s": statistics.median(walls["sweep"]),
        "naive_wall_s": statistics.median(walls["naive"]),
        "python": platform.python_version(), "machine": platform.machine(),
    }
    print(f"{out['pairs']} pairs of {model.name} ({out['layers']} layers) on board {board.name}, "
          f"{args.frames} frames + {args.warmup} warm-up per pair, median of {args.repeats}")
    print(f"  floor (frames run / frames recorded):        {floor:.2f}")
    print(f"  sweep: wall / sum of recorded frame time:    {out['sweep_ratio']:.2f}"
          f"  ({out['sweep_wall_s']:.2f} s)")
    print(f"  naive loop: wall / sum of recorded frame time: {out['naive_ratio']:.2f}"
          f"  ({out['naive_wall_s']:.2f} s)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
