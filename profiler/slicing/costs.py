"""Multiply-accumulate counts and parameter bytes of operators.

MACs count only the compute ops (convolutions, fully connected, matmul), as
papers do; element-wise ops, pooling and activations count 0.
"""

from __future__ import annotations

import math

from profiler.slicing.graph import ModelView
from profiler.slicing.specs import TensorSpec


def _shape(g: ModelView, t: int) -> list[int]:
    s = g.tensor(t).shape
    return [] if s is None else [int(d) for d in s]


def op_macs(g: ModelView, i: int) -> int:
    name = g.op_names[i]
    ins, outs = g.op_inputs(i), g.op_outputs(i)
    if not outs:
        return 0
    out = _shape(g, outs[0])
    out_elems = math.prod(out) if out else 0
    try:
        if name == "CONV_2D":  # filter [Cout, kh, kw, Cin/groups]
            _, kh, kw, cin = _shape(g, ins[1])
            return out_elems * kh * kw * cin
        if name == "DEPTHWISE_CONV_2D":  # filter [1, kh, kw, Cout]
            _, kh, kw, _ = _shape(g, ins[1])
            return out_elems * kh * kw
        if name == "CONV_3D":  # filter [kd, kh, kw, Cin, Cout]
            kd, kh, kw, cin, _ = _shape(g, ins[1])
            return out_elems * kd * kh * kw * cin
        if name == "FULLY_CONNECTED":  # weights [units, in]
            return out_elems * _shape(g, ins[1])[-1]
        if name == "TRANSPOSE_CONV":  # (output_shape, filter [Cout, kh, kw, Cin], input)
            cout, kh, kw, _ = _shape(g, ins[1])
            return math.prod(_shape(g, ins[2])) * kh * kw * cout
        if name == "CONV_3D_TRANSPOSE":  # (output_shape, filter [kd,kh,kw,Cout,Cin], input)
            kd, kh, kw, cout, _ = _shape(g, ins[1])
            return math.prod(_shape(g, ins[2])) * kd * kh * kw * cout
        if name == "BATCH_MATMUL":
            a = _shape(g, ins[0])
            opts = g.op(i).builtinOptions
            k = a[-2] if getattr(opts, "adjX", False) else a[-1]
            return out_elems * k
    except (ValueError, IndexError):  # unknown or dynamic shapes: no estimate
        return 0
    return 0


def constant_bytes(g: ModelView, tensors: set[int] | list[int]) -> int:
    """Bytes of the distinct constant buffers behind `tensors`."""
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if g.is_constant(t):
            b = g.tensor(t).buffer
            if b not in seen:
                seen.add(b)
                buf = g.model.buffers[b]
                total += len(buf.data) if buf.data is not None else int(buf.size or 0)
    return total


def tensor_bytes(g: ModelView, t: int) -> int:
    """Bytes of tensor ``t`` at its stored shape (unknown types count one byte per element)."""
    return TensorSpec.from_tensor(t, g.tensor(t)).nbytes


def op_traffic_bytes(g: ModelView, i: int) -> int:
    """Runtime bytes operator ``i`` reads and writes (constants left out: weights stay put)."""
    ins = [t for t in g.op_inputs(i) if g.is_runtime(t)]
    return sum(tensor_bytes(g, t) for t in ins + g.op_outputs(i))


def model_work(g: ModelView) -> tuple[int, int]:
    """(MACs, runtime bytes moved) of every operator of subgraph 0: the simulated board's
    work model prices a sub-model by these two numbers."""
    ops = range(g.num_ops)
    return sum(op_macs(g, i) for i in ops), sum(op_traffic_bytes(g, i) for i in ops)
