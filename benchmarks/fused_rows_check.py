#!/usr/bin/env python3
"""Issue 26's done-when checks on fused per-layer tables, through the real CLI.

Runs `coupprof layers --method fused` per model and processor (each as a child
process, so its peak RSS is its own) and prints, per table: rows, rows flagged below
resolution, rows whose interval lies wholly below zero, rows of 0.1 ms or more whose
interval is wider than +-10 %, named groups, (rows + fixed) / whole model alone, the
clock range seen, wall time and peak RSS.

    python benchmarks/fused_rows_check.py --board host --processors G,B \
        --models default,mobilenet_v1,resnet50 --repeats 2 --out /tmp/fr

Models are zoo names (built into --out first) or .tflite paths; `default` is the bundled
model. Extra arguments after `--` go to every `coupprof layers` call.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd


def build(model: str, out: Path) -> str | None:
    if model == "default":
        return None
    if model.endswith(".tflite"):
        return model
    path = out / f"{model}.tflite"
    if not path.exists():
        subprocess.run([sys.executable, "-m", "profiler", "zoo", model, "-o", str(path)],
                       check=True, stdout=subprocess.DEVNULL)
    return str(path)


def run_table(model: str | None, proc: str, tag: str, args: argparse.Namespace,
              extra: list[str]) -> dict[str, object]:
    csv = args.out / f"{tag}.csv"
    cmd = [sys.executable, "-m", "profiler", "layers", "--board", args.board,
           "--processor", proc, "--method", "fused", "--csv", str(csv), "--quiet", *extra]
    if model is not None:
        cmd += ["--model", model]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out_text = p.stdout.read() if p.stdout else ""
    _, status, usage = os.wait4(p.pid, 0)
    wall_s = time.monotonic() - t0
    rc = os.waitstatus_to_exitcode(status)
    row: dict[str, object] = {"table": tag, "rc": rc, "wall_s": round(wall_s, 1),
                              "peak_rss_mb": round(usage.ru_maxrss / 1024)}
    if rc != 0:
        row["error"] = out_text.strip().splitlines()[-1:] if out_text.strip() else ""
        return row
    df = pd.read_csv(csv)
    side = json.loads(csv.with_suffix(".json").read_text())
    fused = side.get("fused", {})
    layers = df[df["kind"] == "layer"]
    in_group = layers["group"].notna()
    # the rows a reader takes as true: layers outside groups, and the group rows
    shown = pd.concat([layers[~in_group], df[df["kind"] == "group"]])
    mean, ci = shown["time_ms_mean"].astype(float), shown["time_ms_ci95"].astype(float)
    big = mean >= 0.1
    whole = float(fused.get("whole_alone_ms") or fused.get("whole_ms") or math.nan)
    total = float(layers["time_ms_mean"].sum()) + float(fused.get("fixed_ms") or 0.0)
    trace = side.get("extra", {}).get("freq_trace") or {}
    row.update({
        "rows": len(shown),
        "flagged": int(shown["below_resolution"].fillna(False).astype(bool).sum()),
        "below_zero": int(((mean + ci) < 0).sum()),
        "wide_10pct": int((big & (ci > 0.10 * mean.abs())).sum()),
        "groups": int((df["kind"] == "group").sum()),
        "layers_in_groups": int(in_group.sum()),
        "sum_over_whole": round(total / whole, 4) if whole > 0 else None,
        "sum_over_rounds": round(total / float(fused["whole_ms"]), 4)
        if fused.get("whole_ms") else None,
        "blocks": len(fused.get("blocks") or []) or 1,
        "block_scales": ((fused.get("block_chain") or {}).get("block_scales")),
        # the whole call's energy over its time in the rounds: a power a card can draw?
        "whole_w": round(energy["prefix_energy_mj"][-1] / float(fused["whole_ms"]), 1)
        if (energy := fused.get("energy")) and fused.get("whole_ms") else None,
        "rounds": fused.get("rounds"),
        "clock_mhz": (f"{trace.get('p10_khz', 0) / 1e3:.0f}-{trace.get('p90_khz', 0) / 1e3:.0f}"
                      f" (median {trace.get('median_khz', 0) / 1e3:.0f})" if trace else "-"),
    })
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", default="host")
    ap.add_argument("--processors", default="G,B")
    ap.add_argument("--models", default="default,mobilenet_v1,resnet50")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("fused-rows"))
    ap.add_argument("--summary", type=Path, default=None, help="JSON summary file")
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for rep in range(1, args.repeats + 1):
        for name in args.models.split(","):
            model = build(name, args.out)
            for proc in args.processors.split(","):
                row = run_table(model, proc, f"{name}-{proc}-{rep}", args, extra)
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.summary:
        args.summary.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
