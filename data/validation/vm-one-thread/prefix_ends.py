"""Layers of ResNet50 224 on one thread: each alone, and as the difference of the whole
prefixes around it, ending as `END` says (keep: their outputs as they are; corner: a
corner of each, joined). Warm, round-robin for SECONDS. Usage: python prefix_ends.py
9,10,11,12 40 keep|corner (README.md here)."""

import sys
import time

import numpy as np

from profiler import zoo
from profiler.runtime import make_interpreter
from profiler.slicing.prefix import prefix_models, tensor_values
from profiler.slicing.slicer import slice_model

ks = [int(k) for k in sys.argv[1].split(",")]
seconds, end_kind = float(sys.argv[2]), sys.argv[3]
data = zoo.build("resnet50", size=224)
sliced = slice_model(data, "layer")
whole = make_interpreter(data, num_threads=1)
whole.allocate_tensors()
rng = np.random.default_rng(0)
x = [rng.standard_normal(d["shape"]).astype(d["dtype"]) for d in whole.get_input_details()]
lasts = sorted(set(ks) | {k - 1 for k in ks})
pre = {p.last: p for p in prefix_models(data, sliced, lasts=lasts, end=end_kind)}
print("outputs handed out", {k: p.outputs for k, p in pre.items()})
need = sorted({int(s.index) for k in ks for s in sliced.layers[k].inputs})
values = dict(zip(need, tensor_values(data, x, need), strict=True))


def loaded(model: bytes, feeds: list[np.ndarray]):  # noqa: ANN201
    it = make_interpreter(model, num_threads=1)
    it.allocate_tensors()
    for d, v in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(d["index"], v)
    it.invoke()
    return it


calls = {f"L{k}": loaded(sliced.layers[k].model_bytes,
                         [values[int(s.index)] for s in sliced.layers[k].inputs]) for k in ks}
calls.update({f"P{last}": loaded(p.model_bytes, x) for last, p in pre.items()})
times: dict[str, list[int]] = {k: [] for k in calls}
stop = time.monotonic() + seconds
while time.monotonic() < stop:
    for name, it in calls.items():
        t0 = time.perf_counter_ns()
        it.invoke()
        times[name].append(time.perf_counter_ns() - t0)
med = {k: float(np.median(v)) / 1e6 for k, v in times.items()}
print("rounds", len(next(iter(times.values()))))
for k in ks:
    print(f"layer {k} {sliced.layers[k].op_types}: alone {med[f'L{k}']:.3f} ms; "
          f"P{k} - P{k - 1} {med[f'P{k}'] - med[f'P{k - 1}']:.3f} ms")
