"""What a sweep costs beyond the frames it measures.

For the same (processor, level) pairs, frames and warm-up:

1. `profiler.sweep.run.Sweep`: slices once, builds each processor's interpreters once,
   changes only the frequency between levels, appends + fsyncs the CSV per pair.
2. A naive loop that does per pair what one `coupprof layers --freq K` run does
   in-process: slice (cache on, as the CLI), open the executor, build every
   layer's interpreter, save/set/restore the governor, run, write the tables.

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

from governors import RestoreGuard, make_governor  # noqa: E402
from profiler.boards.profiles import load_board  # noqa: E402
from profiler.executors.factory import make_executor  # noqa: E402
from profiler.measure.results import LayerInfo, LayerRun, RunInfo  # noqa: E402
from profiler.measure.runner import LayerRunner  # noqa: E402
from profiler.measure.tables import run_tables, write_tables  # noqa: E402
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
        proc = board.processor(pair.processor)
        gov = make_governor(board, board.dvfs_domain(pair.processor), sysfs_root)
        with RestoreGuard([gov]):
            if pair.level is not None:
                gov.set_level(pair.level)
            with make_executor(board, proc.letter) as ex:
                runner = LayerRunner(sliced, ex, model_name=model.name)
                timings = runner.run(frames, warmup)
        measured += frame_time_ns(timings)
        info = RunInfo(board=board.name, simulated=board.simulated, model_path=str(model),
                       model_sha256="", processor=proc.letter, processor_name=proc.name,
                       cores=proc.cores, threads=len(proc.cores), frames=frames, warmup=warmup,
                       freq_level=pair.level, freq_khz=pair.freq_khz)
        run = LayerRun(info, [LayerInfo.from_layer(x) for x in sliced.layers], timings)
        write_tables(run_tables(run, raw=False), out / f"pair{i}.csv")
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
        if args.board is None:
            from test_sweep_fakehost import build_fake_host

            root = build_fake_host(tmpdir / "fake").sys
            board = load_board("host", root)
        else:
            board = load_board(args.board, root)
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
