"""Pacing probe: do untimed whole-model calls before each visit hold the GPU's clock
where the whole model running back to back holds it, and so bring fused layers + fixed
to the whole model run alone?   python3 pace.py OUT.json MODEL[,MODEL...] BUDGET_S

A record of what ran (make.sh), kept as it ran: the closures are called inside their loop.
"""
# ruff: noqa: B023, SIM115

import json
import sys
import threading
import time

import numpy as np
import pynvml

from profiler import zoo
from profiler.boards.profiles import load_board
from profiler.executors import make_executor, with_accelerators
from profiler.measure.fused import FusedProfiler, FusedSettings
from profiler.slicing.prefix import REDUCE_ABOVE_BYTES, prefix_models
from profiler.slicing.slicer import slice_model

out = sys.argv[1]
models = sys.argv[2].split(",")
budget = float(sys.argv[3])
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
samples: list[tuple[float, int, float]] = []
stop = False


def sampler() -> None:
    while not stop:
        samples.append((time.monotonic(), pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                        pynvml.nvmlDeviceGetPowerUsage(h) / 1000))
        time.sleep(0.02)


threading.Thread(target=sampler, daemon=True).start()
log: dict = {}


def clock_between(t0: float, t1: float) -> list[float]:
    c = [s[1] for s in samples if t0 <= s[0] <= t1]
    p = [s[2] for s in samples if t0 <= s[0] <= t1]
    if not c:
        return [0, 0, 0, 0]
    return [float(np.percentile(c, 10)), float(np.median(c)), float(np.percentile(c, 90)), float(np.median(p))]


b = with_accelerators(load_board("host"))
for model in models:
    data = zoo.build(model, size=224) if model != "default" else zoo.default_model_path().read_bytes()
    sliced = slice_model(data, cache_dir=False)
    prefixes = prefix_models(data, sliced, reduce_above_bytes=REDUCE_ABOVE_BYTES)
    with make_executor(b, "G") as ex:
        prof = FusedProfiler(prefixes, ex, model_name=model, read_outputs=True)
        whole = prof.calls[-1]
        for _ in range(10):
            whole()

        def b2b(name: str, seconds: float) -> None:
            t0 = time.monotonic()
            d = []
            while time.monotonic() < t0 + seconds:
                d.append(whole())
            t1 = time.monotonic()
            d = np.array(d) / 1e6
            row = {"median_ms": float(np.median(d)), "p10": float(np.percentile(d, 10)),
                   "calls": len(d), "clock": clock_between(t0 + 0.5, t1)}
            log[f"{model}/{name}"] = row
            print(model, name, json.dumps(row), flush=True)

        def rounds(name: str, pace: int) -> None:
            s = FusedSettings(budget_s=budget, max_rounds=100000, target_ms=0, target_rel=0,
                              pace_calls=pace)
            t0 = time.monotonic()
            r = prof.measure(s)
            t1 = time.monotonic()
            row = {"pace": pace, "rounds": r.rounds, "fixed": r.fixed.time_ms, "sum": r.layer_sum_ms,
                   "whole_in_rounds": r.whole.time_ms if r.whole else None,
                   "alone": r.whole_alone.time_ms if r.whole_alone else None,
                   "below": sum(1 for L in r.layers if L.below_resolution),
                   "median_ci": float(np.median([L.ci95_ms for L in r.layers])),
                   "clock": clock_between(t0 + 0.5, t1 - 0.3)}
            log[f"{model}/{name}"] = row
            print(model, name, json.dumps(row), flush=True)

        b2b("b2b_a", 3)
        rounds("pace0_a", 0)
        b2b("b2b_b", 3)
        rounds("pace2", 2)
        rounds("pace5", 5)
        b2b("b2b_c", 3)
        rounds("pace0_b", 0)
        rounds("pace2_b", 2)
        b2b("b2b_d", 3)
stop = True
log["samples"] = samples
json.dump(log, open(out, "w"))
