"""What operators cost: multiply-accumulates, bytes, and the per-operator features a
performance model prices (kernel, stride, groups, shapes).

MACs count only the compute ops (convolutions, fully connected, matmul), as papers
do; element-wise ops, pooling and activations count 0. A grouped CONV_2D (filter
[Cout, kh, kw, Cin/groups]) counts Cin/groups per output element, so grouping is
priced right without knowing the groups. `macs_from_shapes` is the one formula: the
zoo's `GraphBuilder` counts with it too.

Everything here is a function of a `ModelView` and op indices, so the same code
prices a whole model, one layer, or any sub-model (`group_features`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from profiler.slicing.graph import ModelView
from profiler.slicing.specs import TensorSpec
from profiler.tflite import schema_py_generated as schema

_PADDINGS = {schema.Padding.SAME: "SAME", schema.Padding.VALID: "VALID"}
_ACTIVATIONS = {v: k for k, v in vars(schema.ActivationFunctionType).items()
                if not k.startswith("_")}
# Option types of 2-D windows: stride and padding (all), kernel (pools only: a
# convolution's kernel is its filter's shape).
_WINDOWED = (schema.Conv2DOptionsT, schema.DepthwiseConv2DOptionsT, schema.Pool2DOptionsT,
             schema.TransposeConvOptionsT)
# Option types with a fused activation.
_FUSED = (*_WINDOWED, schema.FullyConnectedOptionsT, schema.AddOptionsT, schema.SubOptionsT,
          schema.MulOptionsT, schema.DivOptionsT, schema.ConcatenationOptionsT,
          schema.Conv3DOptionsT)


def _shape(g: ModelView, t: int) -> list[int]:
    s = g.tensor(t).shape
    return [] if s is None else [int(d) for d in s]


def macs_from_shapes(name: str, out: Sequence[int], ins: Sequence[Sequence[int]],
                     adj_x: bool = False) -> int:
    """MACs of builtin operator `name` from its first output's shape and its inputs'
    shapes (in operand order); 0 for non-compute ops or shapes it cannot use."""
    out_elems = math.prod(out) if out else 0
    try:
        if name == "CONV_2D":  # filter [Cout, kh, kw, Cin/groups]
            _, kh, kw, cin = ins[1]
            return out_elems * kh * kw * cin
        if name == "DEPTHWISE_CONV_2D":  # filter [1, kh, kw, Cout]
            _, kh, kw, _ = ins[1]
            return out_elems * kh * kw
        if name == "CONV_3D":  # filter [kd, kh, kw, Cin, Cout]
            kd, kh, kw, cin, _ = ins[1]
            return out_elems * kd * kh * kw * cin
        if name == "FULLY_CONNECTED":  # weights [units, in]
            return out_elems * ins[1][-1]
        if name == "TRANSPOSE_CONV":  # (output_shape, filter [Cout, kh, kw, Cin], input)
            cout, kh, kw, _ = ins[1]
            return math.prod(ins[2]) * kh * kw * cout
        if name == "CONV_3D_TRANSPOSE":  # (output_shape, filter [kd,kh,kw,Cout,Cin], input)
            kd, kh, kw, cout, _ = ins[1]
            return math.prod(ins[2]) * kd * kh * kw * cout
        if name == "BATCH_MATMUL":
            a = ins[0]
            return out_elems * (a[-2] if adj_x else a[-1])
    except (ValueError, IndexError):  # unknown or dynamic shapes: no estimate
        return 0
    return 0


def op_macs(g: ModelView, i: int) -> int:
    outs = g.op_outputs(i)
    if not outs:
        return 0
    opts = g.op(i).builtinOptions
    adj_x = bool(opts.adjX) if isinstance(opts, schema.BatchMatMulOptionsT) else False
    return macs_from_shapes(g.op_names[i], _shape(g, outs[0]),
                            [_shape(g, t) for t in g.op_inputs(i)], adj_x)


def constant_bytes(g: ModelView, tensors: Iterable[int]) -> int:
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


def op_input_bytes(g: ModelView, i: int) -> int:
    """Runtime bytes operator ``i`` reads (constants left out: weights stay put)."""
    return sum(tensor_bytes(g, t) for t in g.op_inputs(i) if g.is_runtime(t))


def op_output_bytes(g: ModelView, i: int) -> int:
    return sum(tensor_bytes(g, t) for t in g.op_outputs(i))


def op_traffic_bytes(g: ModelView, i: int) -> int:
    """Runtime bytes operator ``i`` reads and writes (constants left out: weights stay put)."""
    return op_input_bytes(g, i) + op_output_bytes(g, i)


def model_work(g: ModelView) -> tuple[int, int]:
    """(MACs, runtime bytes moved) of every operator of subgraph 0: the simulated board's
    work model prices a sub-model by these two numbers."""
    ops = range(g.num_ops)
    return sum(op_macs(g, i) for i in ops), sum(op_traffic_bytes(g, i) for i in ops)


@dataclass(frozen=True)
class OpFeatures:
    """One operator as a performance model sees it.

    kernel / stride / padding: (h, w) of convolutions and pools, else None.
    groups: input channels per output channel's group count: 1 for a dense conv,
    Cin / filter depth for a grouped CONV_2D, Cin for a depthwise conv; 1 otherwise.
    weight_bytes: its constant operands (weights, biases, shapes), distinct buffers.
    """

    index: int
    builtin: str
    output_name: str
    output_shape: tuple[int, ...]
    macs: int
    input_bytes: int
    output_bytes: int
    weight_bytes: int
    kernel: tuple[int, int] | None
    stride: tuple[int, int] | None
    padding: str | None
    groups: int
    depthwise: bool
    activation: str | None  # fused activation ("NONE", "RELU", "RELU6", ...) where it has one


def op_features(g: ModelView, i: int) -> OpFeatures:
    name, ins, outs = g.op_names[i], g.op_inputs(i), g.op_outputs(i)
    opts = g.op(i).builtinOptions
    kernel = stride = padding = None
    if isinstance(opts, _WINDOWED):
        stride, padding = (int(opts.strideH), int(opts.strideW)), _PADDINGS.get(opts.padding)
        if isinstance(opts, schema.Pool2DOptionsT):
            kernel = (int(opts.filterHeight), int(opts.filterWidth))
        elif len(ins) > 1 and len(_shape(g, ins[1])) == 4:
            _, kh, kw, _ = _shape(g, ins[1])
            kernel = (kh, kw)
    depthwise = name == "DEPTHWISE_CONV_2D"
    groups = 1
    in_shape = _shape(g, ins[0]) if ins else []
    if depthwise and in_shape:
        groups = in_shape[-1]
    elif name == "CONV_2D" and in_shape and len(ins) > 1:
        depth = _shape(g, ins[1])[-1]
        groups = in_shape[-1] // depth if depth else 1
    act = opts.fusedActivationFunction if isinstance(opts, _FUSED) else None
    return OpFeatures(
        index=i, builtin=name,
        output_name=TensorSpec.from_tensor(outs[0], g.tensor(outs[0])).name if outs else "",
        output_shape=tuple(_shape(g, outs[0])) if outs else (),
        macs=op_macs(g, i), input_bytes=op_input_bytes(g, i),
        output_bytes=op_output_bytes(g, i), weight_bytes=constant_bytes(g, ins),
        kernel=kernel, stride=stride, padding=padding, groups=groups, depthwise=depthwise,
        activation=None if act is None else _ACTIVATIONS.get(act, str(act)),
    )


@dataclass(frozen=True)
class GroupFeatures:
    """A group of operators run as one sub-model (a layer, or any slice).

    input_bytes / output_bytes: the runtime tensors crossing its boundary (what a
    sub-model receives and hands on), not the sum over its operators (`traffic_bytes`).
    weight_bytes: distinct constant buffers of all its operators.
    """

    ops: tuple[OpFeatures, ...]
    macs: int
    weight_bytes: int
    traffic_bytes: int
    input_bytes: int
    output_bytes: int

    @property
    def op_indices(self) -> list[int]:
        return [op.index for op in self.ops]

    @property
    def op_counts(self) -> Counter[str]:
        return Counter(op.builtin for op in self.ops)


def group_features(g: ModelView, ops: Iterable[int]) -> GroupFeatures:
    """Features of the operators `ops` of `g` taken as one sub-model."""
    members = sorted(set(ops))
    inside = set(members)
    feats = tuple(op_features(g, i) for i in members)
    inputs: list[int] = []
    outputs: list[int] = []
    for i in members:
        for t in g.op_inputs(i):
            if g.is_runtime(t) and g.producer.get(t) not in inside and t not in inputs:
                inputs.append(t)
        for t in g.op_outputs(i):
            read_outside = any(c not in inside for c in g.consumers.get(t, ()))
            if (read_outside or t in g.outputs) and t not in outputs:
                outputs.append(t)
    return GroupFeatures(
        ops=feats, macs=sum(f.macs for f in feats),
        weight_bytes=constant_bytes(g, (t for i in members for t in g.op_inputs(i))),
        traffic_bytes=sum(f.input_bytes + f.output_bytes for f in feats),
        input_bytes=sum(tensor_bytes(g, t) for t in inputs),
        output_bytes=sum(tensor_bytes(g, t) for t in outputs),
    )
