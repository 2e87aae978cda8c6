"""Pipeline latency in the committed mapped runs, against the queueing model.

For every `run-*-pipeline.json` under this directory (with its CSV): the measured mean
latency; the prediction the run printed then (the serial sum of its predicted stages,
"without queueing"); the queueing model (`profiler.mapping.queueing`) on those same predicted
stages, for the run's frames and queue depth, as `coupprof run` predicts it now; and the
model on the run's own measured stage times (is the model right, given the stages?).
`paced` says whether the stages set the pace: measured FPS within 5 % of 1000 / the
slowest measured stage. Usage (from the checkout): python data/validation/pipeline_latency.py
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from profiler.mapping.queueing import pipeline_latency_ms


def runs(root: Path) -> list[dict[str, object]]:
    out = []
    for js in sorted(root.rglob("run-*pipeline*.json")):
        doc = json.loads(js.read_text())
        pred = doc.get("prediction")
        if not pred or doc.get("mode") != "pipeline":
            continue
        measured, fps, stage_ms = None, None, []
        with open(js.with_suffix(".csv")) as f:
            for r in csv.DictReader(f):
                if r["kind"] == "summary" and r["metric"] == "latency_ms_mean":
                    measured = float(r["measured"])
                if r["kind"] == "summary" and r["metric"] == "throughput_fps":
                    fps = float(r["measured"])
                if r["kind"] == "stage":
                    stage_ms.append(float(r["time_ms_mean"]))
        q, n = int(doc["queue_depth"]), int(doc["frames"])
        predicted = [float(s["time_ms"]) for s in pred["stages"]]
        out.append({"run": str(js.relative_to(root).with_suffix("")), "frames": n, "depth": q,
                    "stages": len(stage_ms),
                    "measured_ms": measured, "serial_ms": sum(predicted),
                    "queued_ms": pipeline_latency_ms(predicted, q, n),
                    "own_stages_ms": pipeline_latency_ms(stage_ms, q, n),
                    "paced": abs(fps * max(stage_ms) / 1000 - 1) <= 0.05})
    return out


def main() -> None:
    def err(x: float, m: float) -> str:
        return f"{(x - m) / m * 100:+.1f} %"

    print("| run | measured ms | serial sum of predicted stages | queued (now) | queued, own stages | paced |")
    print("|---|---|---|---|---|---|")
    for r in runs(Path(__file__).parent):
        m = float(r["measured_ms"])  # type: ignore[arg-type]
        print(f"| {r['run']} | {m:.3f} | {r['serial_ms']:.3f} ({err(r['serial_ms'], m)}) | "
              f"{r['queued_ms']:.3f} ({err(r['queued_ms'], m)}) | {r['own_stages_ms']:.3f} "
              f"({err(r['own_stages_ms'], m)}) | {'yes' if r['paced'] else 'no'} |")


if __name__ == "__main__":
    main()
