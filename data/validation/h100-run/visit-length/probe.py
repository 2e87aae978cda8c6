"""Issue 10: G's fused rounds against a run's frames, with visits of 3 and of 10 calls.

`coupprof run` priced MobileNetV1's G15 at 1.116 ms a frame from the rounds of its own
fused table, and measured 0.953 ms, both at 1980 MHz (`../inprocess/`). The rounds
visit each prefix with 3 calls, the first untimed; the run calls one model frame after
frame. Does a longer visit (10 calls, 2 untimed) bring the rounds' whole-model prefix to
the frames' time? Alternating on one G: frames (the whole model compiled on its own,
`--frames` calls: set the inputs untimed, then run and read every output back, timed,
as a round's call), rounds with visits of 3, frames, rounds with visits of 10, and so on.
The SM clock is sampled through NVML over each phase (`profiler.measure.freq_trace`).

    python3 data/validation/h100-run/visit-length/probe.py MODEL SIZE BUDGET_S [REPEATS [ALPHA]]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from profiler import zoo
from profiler.boards.profiles import load_board
from profiler.executors import make_executor
from profiler.measure.freq_trace import FreqSampler, freq_reader_for
from profiler.measure.fused import FusedSettings, fused_profiler
from profiler.slicing.slicer import slice_model


def main() -> None:
    model, size, budget = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    params = {"alpha": float(sys.argv[5])} if len(sys.argv) > 5 else {}
    # G driven from core 15 alone, B on 0-14: the profile the mapped runs used
    board = load_board(str(Path(__file__).parents[1] / "host-split-11" / "host-split.toml"))
    data = zoo.build(model, size=size, **params)
    sliced = slice_model(data)
    reader = freq_reader_for(board, board.processor("G"))
    assert reader is not None, "no NVML clock reader"
    out: list[dict[str, object]] = []
    with make_executor(board, "G") as ex, reader:
        prof = fused_profiler(ex, data, sliced, FusedSettings(), model_name=model)
        whole = ex.load(data, name="whole model")

        def frame() -> int:
            for i, x in enumerate(prof.inputs):
                whole.set_input(i, x)
            t0 = time.perf_counter_ns()
            whole.run()
            for i in range(len(whole.outputs)):
                np.array(whole.output(i), copy=True)
            return time.perf_counter_ns() - t0

        def frames(n: int = 400) -> dict[str, object]:
            for _ in range(20):
                frame()
            sampler = FreqSampler(reader).start()
            t = np.array([frame() for _ in range(n)]) / 1e6
            tr = sampler.stop()
            return {"phase": "frames", "median_ms": float(np.median(t)),
                    "mean_ms": float(t.mean()), "clock": tr.text() if tr else None}

        for _ in range(repeats):
            for calls, warm in ((3, 1), (10, 2)):
                out.append(frames())
                s = FusedSettings(budget_s=budget, visit_calls=calls, visit_warm=warm,
                                  alone_calls=0, max_rounds=100_000)
                sampler = FreqSampler(reader).start()
                res = prof.measure(s)
                tr = sampler.stop()
                out.append({"phase": f"rounds, visits of {calls} ({warm} untimed)",
                            "rounds": res.rounds, "fixed_ms": res.fixed.time_ms,
                            "whole_prefix_ms": res.whole.time_ms,
                            "layer_sum_ms": res.layer_sum_ms,
                            "below_resolution": sum(x.below_resolution for x in res.layers),
                            "clock": tr.text() if tr else None})
                for row in out[-2:]:
                    print(json.dumps(row), flush=True)
        out.append(frames())
        print(json.dumps(out[-1]), flush=True)
    print(json.dumps({"model": model, "size": size, **params, "layers": len(sliced.layers),
                      "budget_s": budget, "phases": out}))


if __name__ == "__main__":
    main()
