"""B's whole ResNet50 call on the host: the distribution of back-to-back calls, and the
statistic the fused table keeps (each pair's fastest, 20 %-trimmed mean).

    python3 stat.py OUT.json BOARD.toml      (make-calls.sh runs it)

A record of what ran (reformatted for ruff). Its printed `pairs_fastest_trimmed` and
`trimmed_all` are wrong (trimmed_estimate already returns ms, and they were divided by
1e6 again, so they printed 0.0); README.md recomputes them from OUT.json.
"""
# ruff: noqa: SIM115
import json
import sys

import numpy as np

from profiler import zoo
from profiler.boards.profiles import load_board
from profiler.executors import make_executor
from profiler.measure.fused import FusedProfiler, trimmed_estimate
from profiler.slicing.prefix import prefix_models
from profiler.slicing.slicer import slice_model

b = load_board(sys.argv[2])
data = zoo.build("resnet50", size=224)
sliced = slice_model(data, cache_dir=False)
out = {}
with make_executor(b, "B") as ex:
    prefixes = prefix_models(data, sliced)
    prof = FusedProfiler([prefixes[0], prefixes[-1]], ex, model_name="r")
    whole = prof.calls[-1]
    for _ in range(20):
        whole()
    for rep in range(3):
        d = np.array([whole() for _ in range(400)]) / 1e6
        pairs = d.reshape(-1, 2).min(axis=1)
        tm, _ = trimmed_estimate(pairs * 1e6)
        row = {"mean": d.mean(), "median": float(np.median(d)), "p10": float(np.percentile(d, 10)),
               "p90": float(np.percentile(d, 90)), "p99": float(np.percentile(d, 99)),
               "min": d.min(), "pairs_fastest_trimmed": float(tm) / 1e6,
               "trimmed_all": float(trimmed_estimate(d * 1e6)[0]) / 1e6}
        print(rep, {k: round(float(v), 3) for k, v in row.items()}, flush=True)
        out[rep] = d.tolist()
json.dump(out, open(sys.argv[1], "w"))
