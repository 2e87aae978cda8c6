"""GPU DVFS probe: how the call time of a model on LiteRT's GPU moves with the load
pattern (back to back, duty-cycled, fused rounds with short and long visits).

    python3 dvfs.py OUT.json [MODEL]      (make.sh runs it beside nvidia-smi)

(Reformatted for ruff after the run; the statements are those that ran.)
"""

import json
import sys
import time

import numpy as np

from profiler import zoo
from profiler.boards.profiles import load_board
from profiler.executors import make_executor, with_accelerators
from profiler.measure.fused import FusedProfiler, FusedSettings
from profiler.slicing.prefix import prefix_models
from profiler.slicing.slicer import slice_model

out = sys.argv[1]
model = sys.argv[2] if len(sys.argv) > 2 else "mobilenet_v1"
data = zoo.build(model, size=224)
sliced = slice_model(data, cache_dir=False)
b = with_accelerators(load_board("host"))
log: dict = {"events": []}


def ev(name: str) -> None:
    log["events"].append((name, time.time()))
    print(name, time.time(), flush=True)


with make_executor(b, "G") as ex:
    whole = ex.load(data, "whole")
    rng = np.random.default_rng(0)
    x = [rng.uniform(-1, 1, io.shape).astype(io.dtype) for io in whole.inputs]

    def call() -> tuple[int, int]:
        for i, v in enumerate(x):
            whole.set_input(i, v)
        t0 = time.perf_counter_ns()
        whole.run()
        for i in range(len(whole.outputs)):
            np.array(whole.output(i), copy=True)
        return t0, time.perf_counter_ns() - t0

    for _ in range(5):
        call()

    def phase(name: str, seconds: float, gap_s: float = 0.0) -> None:
        ev(name + " start")
        rows = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rows.append(call())
            if gap_s:
                time.sleep(gap_s)
        ev(name + " end")
        a = np.array(rows)
        log[name] = a.tolist()
        d = a[:, 1] / 1e6
        n = len(d)
        q = [d[: n // 4], d[n // 4: n // 2], d[n // 2: 3 * n // 4], d[3 * n // 4:]]
        print(name, n, "calls; median ms by quarter:",
              [round(float(np.median(v)), 3) for v in q], flush=True)

    time.sleep(3)
    ev("idle")
    phase("b2b_3s", 3.0)
    time.sleep(3)
    phase("gap1ms_3s", 3.0, 0.001)
    time.sleep(3)
    phase("gap5ms_3s", 3.0, 0.005)
    phase("b2b_after_gap", 2.0)
    prefixes = prefix_models(data, sliced)
    prof = FusedProfiler(prefixes, ex, model_name=model)
    for label, vc, vw in (("rounds_v3", 3, 1), ("rounds_v12", 12, 10), ("rounds_v3_again", 3, 1)):
        ev(label + " start")
        res = prof.measure(FusedSettings(min_rounds=10, max_rounds=40, budget_s=8, visit_calls=vc,
                                         visit_warm=vw, alone_calls=10, alone_warm=5))
        ev(label + " end")
        assert res.whole_alone is not None
        print(label, "rounds", res.rounds, "fixed", round(res.fixed.time_ms, 3),
              "whole(in rounds)", round(res.whole.time_ms, 3), "alone",
              round(res.whole_alone.time_ms, 3), "sum", round(res.layer_sum_ms, 3), flush=True)
        log[label] = {"fixed": res.fixed.time_ms, "whole": res.whole.time_ms,
                      "alone": res.whole_alone.time_ms, "layers": res.times_ms().tolist(),
                      "ci": [la.ci95_ms for la in res.layers], "rounds": res.rounds}
    phase("b2b_end", 2.0)
with open(out, "w") as f:
    json.dump(log, f)
