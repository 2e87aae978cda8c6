"""One layer of ResNet50 224 on one thread, and each of its operators alone: each called
in turn (round-robin, 30 s), then each 300 times back to back (its buffers hot).
Usage: python layer_ops.py LAYER (README.md here)."""

import sys
import time

import numpy as np

from profiler import zoo
from profiler.runtime import make_interpreter
from profiler.slicing.prefix import tensor_values
from profiler.slicing.slicer import slice_model

data = zoo.build("resnet50", size=224)
layer = slice_model(data, "layer").layers[int(sys.argv[1])]
ops = [op for op in slice_model(data, "op").layers if set(op.op_indices) <= set(layer.op_indices)]
whole = make_interpreter(data, num_threads=1)
whole.allocate_tensors()
rng = np.random.default_rng(0)
x = [rng.standard_normal(d["shape"]).astype(d["dtype"]) for d in whole.get_input_details()]
need = sorted({int(s.index) for sub in [layer, *ops] for s in sub.inputs})
values = dict(zip(need, tensor_values(data, x, need), strict=True))


def loaded(sub):  # noqa: ANN001, ANN201
    it = make_interpreter(sub.model_bytes, num_threads=1)
    it.allocate_tensors()
    for d, s in zip(it.get_input_details(), sub.inputs, strict=True):
        it.set_tensor(d["index"], values[int(s.index)])
    it.invoke()
    return it


calls = {"layer": loaded(layer), **{f"op {o.op_indices[0]} {o.op_types}": loaded(o) for o in ops}}
times: dict[str, list[int]] = {k: [] for k in calls}
end = time.monotonic() + 30
while time.monotonic() < end:
    for k, it in calls.items():
        t0 = time.perf_counter_ns()
        it.invoke()
        times[k].append(time.perf_counter_ns() - t0)
for k, v in times.items():
    print(f"round-robin {k}: {np.median(v) / 1e6:.3f} ms")
for k, it in calls.items():
    v = []
    for _ in range(300):
        t0 = time.perf_counter_ns()
        it.invoke()
        v.append(time.perf_counter_ns() - t0)
    print(f"back to back {k}: {np.median(v) / 1e6:.3f} ms")
