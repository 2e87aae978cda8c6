"""Peak memory of a fused per-layer table of ResNet50 224, per processor (issue 26, item 5).

A fused table's prefixes hold about n/2 copies of the model's weights together: for
ResNet50 224 (54 layers, 102 MB of weights) 1.16 GB of prefix models, and what the
runtime adds per loaded prefix (its own packed copy of the weights, activation buffers).
`--loaded-mb` bounds what is loaded at once: beyond it the prefixes are built, loaded and
measured in blocks (`profiler.measure.fused.FusedProfiler`; docs/fused.md, "Memory").

Each run is `coupprof layers --method fused` in a child process of its own, one at a
time, whose peak resident set (the child's ``ru_maxrss``, from ``wait4``) is read when it
ends, the whole command counted: slicing, the sliced frames, the prefixes' rounds. Per
processor it runs the prefixes all at once (``--loaded-mb 0``, as before the bound) and in
blocks (``--loaded-mb`` given, default the command's), and prints the two side by side
with their ratio, the blocks, rounds, wall time and rows + fixed over the whole model.
Few rounds (``--min-rounds 3 --budget-s``): the peak comes from what is loaded, not from
how long it is measured. Every child runs under an address-space limit (``--limit-gb``).
Not run by CI (tests/ holds the tests; this takes minutes per processor).

    .venv/bin/python benchmarks/fused_memory.py [--board sim] [--processors B,L,G,N]
        [--freq max] [--loaded-mb 384] [--modes all,blocks] [--budget-s 5]
        [--size 224] [--limit-gb 8] [--json FILE]

On a machine with a GPU: ``--board host --processors B,G --freq none``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from profiler import zoo

TARGET_MB = 1024  # issue 26: a fused ResNet50 224 table peaks under 1 GB on every processor


def run_layers(model: Path, board: str, letter: str, freq: str | None, loaded_mb: float,
               budget_s: float, limit_gb: float, out: Path) -> dict[str, Any]:
    """One `coupprof layers --method fused` in a child; its peak RSS and what it wrote."""
    csv = out / f"layers-{letter}-{loaded_mb:g}.csv"
    cmd = [sys.executable, "-m", "profiler", "layers", "--board", board, "--model", str(model),
           "--processor", letter, "--method", "fused", "--budget-s", f"{budget_s:g}",
           "--min-rounds", "3", "--frames", "2", "--warmup", "0", "--power", "none",
           "--loaded-mb", f"{loaded_mb:g}", "--csv", str(csv), "--quiet"]
    if freq:
        cmd += ["--freq", freq]
    limit = int(limit_gb * 2**30)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    t0 = time.monotonic()
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=limited)
    _, status, usage = os.wait4(child.pid, 0)
    wall_s = time.monotonic() - t0
    stderr = child.stderr.read().decode(errors="replace") if child.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    row: dict[str, Any] = {"processor": letter, "loaded_mb": loaded_mb, "exit": code,
                           "peak_rss_mb": usage.ru_maxrss / 1024, "wall_s": wall_s,
                           "command": " ".join(cmd[1:])}
    if code != 0:
        row["error"] = stderr.strip().splitlines()[-1:] or ["?"]
        return row
    fused = json.loads(csv.with_suffix(".json").read_text())["fused"]
    row.update({"blocks": len(fused.get("blocks") or []) or 1, "rounds": fused["rounds"],
                "loaded_model_mb": fused.get("loaded_bytes_max", 0) / 2**20,
                "sum_over_whole": (fused["fixed_ms"] + fused["layer_sum_ms"]) / fused["whole_ms"],
                "rounds_s": fused["elapsed_s"]})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", default="sim")
    ap.add_argument("--processors", default="B,L,G,N")
    ap.add_argument("--freq", default="max", help="--freq of each run ('none': leave it)")
    ap.add_argument("--loaded-mb", type=float, default=None,
                    help="the bound in blocks (default: the command's own)")
    ap.add_argument("--modes", default="all,blocks",
                    help="all: --loaded-mb 0 (every prefix at once); blocks: the bound")
    ap.add_argument("--budget-s", type=float, default=5.0)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--limit-gb", type=float, default=8.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    from profiler.measure.fused import FusedSettings

    bound = args.loaded_mb if args.loaded_mb is not None else FusedSettings().loaded_mb
    model_bytes = zoo.build("resnet50", size=args.size)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / f"resnet50_{args.size}.tflite"
        model.write_bytes(model_bytes)
        for letter in [p.strip() for p in args.processors.split(",") if p.strip()]:
            for mode in modes:
                mb = 0.0 if mode == "all" else bound
                row = run_layers(model, args.board, letter,
                                 None if args.freq == "none" else args.freq, mb,
                                 args.budget_s, args.limit_gb, Path(tmp))
                row["mode"] = mode
                rows.append(row)
                print(f"  {letter} {mode:6s} peak {row['peak_rss_mb']:7.0f} MB  "
                      f"{row['wall_s']:6.1f} s  exit {row['exit']}"
                      + (f"  {row.get('error')}" if row["exit"] else ""), flush=True)
    print(f"\nResNet50 {args.size} fused on board {args.board} ({len(model_bytes) / 2**20:.0f} MB "
          f"model), peak RSS of `coupprof layers` (target under {TARGET_MB} MB); "
          f"blocks: --loaded-mb {bound:g}")
    print(f"{'proc':4s} {'all at once MB':>14s} {'in blocks MB':>12s} {'ratio':>6s} "
          f"{'blocks':>6s} {'loaded MB':>9s} {'rounds':>6s} {'wall s (all/blocks)':>20s} "
          f"{'sum/whole (all/blocks)':>23s}  target")
    by = {(r["processor"], r["mode"]): r for r in rows}
    for letter in dict.fromkeys(r["processor"] for r in rows):
        a, b = by.get((letter, "all")), by.get((letter, "blocks"))

        def f(r: dict[str, Any] | None, key: str, fmt: str) -> str:
            return "-" if r is None or key not in r else format(r[key], fmt)

        ratio = f"{a['peak_rss_mb'] / b['peak_rss_mb']:.2f}" if a and b else "-"
        ok = b is not None and b["exit"] == 0 and b["peak_rss_mb"] < TARGET_MB
        print(f"{letter:4s} {f(a, 'peak_rss_mb', '.0f'):>14s} {f(b, 'peak_rss_mb', '.0f'):>12s} "
              f"{ratio:>6s} {f(b, 'blocks', 'd'):>6s} {f(b, 'loaded_model_mb', '.0f'):>9s} "
              f"{f(b, 'rounds', 'd'):>6s} "
              f"{f(a, 'wall_s', '.0f') + ' / ' + f(b, 'wall_s', '.0f'):>20s} "
              f"{f(a, 'sum_over_whole', '.3f') + ' / ' + f(b, 'sum_over_whole', '.3f'):>23s}  "
              f"{'ok' if ok else ('-' if b is None else 'OVER')}")
    if args.json:
        args.json.write_text(json.dumps({"board": args.board, "size": args.size,
                                         "loaded_mb": bound, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
