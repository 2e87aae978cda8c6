"""What each operator of a model does, in the terms the simulated board's timing model prices.

An `OpWork` is one operator's kind (how a runtime computes it), its multiply-accumulates,
the runtime bytes it reads and writes, the constant (weight) bytes it reads and the
pixels of its output map. The kinds follow what ARM Compute Library (the runtime behind
ARM-CO-UP's measurements) does differently:

- ``conv1x1`` (a plain GEMM), ``conv3x3s1`` (Winograd-eligible: whether a processor's
  runtime takes Winograd also depends on the input channels, see
  `perf.TimingParams.winograd_min_in_channels`), ``conv`` (any other kernel or stride:
  im2col + GEMM or direct), ``depthwise``, ``fc`` (GEMV: weight-bound;
  a 1x1 conv on a 1x1 map, as MobileNet's and TF-slim ResNet's classifiers are, is one);
- ``pool`` (max/average pooling), ``lrn``: window work counted as MACs;
- ``reduce`` (MEAN, SUM, REDUCE_*): one streaming read of the input;
- ``view``: concatenation, reshape, split and the like, which such runtimes lay out in
  place (sub-tensors) and so cost nothing but their dispatch;
- ``elementwise``: everything else (ADD, activations, softmax, ...), memory traffic only.

Three of an operator's figures depend on the call it runs in (`model_works` of a set of
operators): the outputs it hands out of the call (read back at the call's end on a GPU
or NPU, synchronised at a multi-threaded call's end), and the bytes it keeps on chip when
a GPU or NPU runtime links an element-wise op into the convolution that feeds it
(`profiler.slicing.fusion`; only when both run in the same call).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from profiler.slicing.costs import OpFeatures, op_features, tensor_bytes
from profiler.slicing.fusion import fused_input
from profiler.slicing.graph import ModelView

#: Kinds whose MACs are priced at a per-kind rate (MACs per cycle).
COMPUTE_KINDS = ("conv", "conv1x1", "conv3x3s1", "depthwise", "fc", "pool", "lrn")
KINDS = (*COMPUTE_KINDS, "reduce", "view", "elementwise")

_VIEW_OPS = {"CONCATENATION", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "SPLIT", "SPLIT_V",
             "SLICE", "STRIDED_SLICE", "PACK", "UNPACK", "IDENTITY"}
_POOL_OPS = {"MAX_POOL_2D", "AVERAGE_POOL_2D", "L2_POOL_2D"}
_REDUCE_OPS = {"MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY"}


@dataclass(frozen=True)
class OpWork:
    kind: str
    macs: int
    act_bytes: int  # runtime tensors read and written
    weight_bytes: int  # constant tensors read (weights, biases)
    out_pixels: int  # H x W of the output map (1 when it has none)
    in_channels: int = 0  # a convolution's input channels per group; 0 for other ops
    # In the call it runs in (`model_works`): its output tensors handed out of the call,
    # and their bytes; the bytes of its input linked from its producer's kernel, and of
    # its output linked into its consumer's (kept on chip, `profiler.slicing.fusion`).
    out_tensors: int = 0
    out_bytes: int = 0
    fused_in_bytes: int = 0
    fused_out_bytes: int = 0


def kind_of(f: OpFeatures) -> str:
    """Which of `KINDS` an operator is."""
    name = f.builtin
    if name == "CONV_2D":
        if f.kernel == (1, 1) and len(f.output_shape) == 4 and f.output_shape[1:3] == (1, 1):
            return "fc"  # a 1x1 conv on a 1x1 map is a fully connected layer (a classifier)
        if f.kernel == (1, 1):
            return "conv1x1"
        if f.kernel == (3, 3) and f.stride == (1, 1):
            return "conv3x3s1"
        return "conv"
    if name == "DEPTHWISE_CONV_2D":
        return "depthwise"
    if name in ("FULLY_CONNECTED", "BATCH_MATMUL"):
        return "fc"
    if name in _POOL_OPS:
        return "pool"
    if name in _REDUCE_OPS:
        return "reduce"
    if name == "LOCAL_RESPONSE_NORMALIZATION":
        return "lrn"
    if name in _VIEW_OPS:
        return "view"
    return "elementwise"


def op_work(g: ModelView, i: int) -> OpWork:
    f = op_features(g, i)
    kind = kind_of(f)
    out_elems = math.prod(f.output_shape) if f.output_shape else 0
    macs = f.macs
    if kind == "pool":  # window work: output elements x window
        kh, kw = f.kernel or (1, 1)
        macs = out_elems * kh * kw
    elif kind == "lrn":  # output elements x (2 radius + 1)
        macs = out_elems * (2 * int(getattr(g.op(i).builtinOptions, "radius", 2)) + 1)
    pixels = f.output_shape[1] * f.output_shape[2] if len(f.output_shape) == 4 else 1
    in_channels = 0
    if kind.startswith("conv") and f.kernel and out_elems:
        # MACs per output element = kh x kw x Cin/groups
        in_channels = round(f.macs / out_elems / (f.kernel[0] * f.kernel[1]))
    return OpWork(kind, int(macs), f.input_bytes + f.output_bytes, f.weight_bytes, int(pixels),
                  in_channels)


def model_works(g: ModelView, ops: Iterable[int] | None = None) -> list[OpWork]:
    """The work of operators `ops` (default: all of subgraph 0), in order, as one call
    runs them: the outputs each hands out of the call (read by an operator outside `ops`,
    or an output of the model) and the pairs linked into one kernel within it."""
    order = list(range(g.num_ops) if ops is None else ops)
    inside = set(order)
    linked = {i: fused_input(g, i, inside) for i in order}
    into = {g.producer[t]: t for t in linked.values() if t is not None}  # producer -> tensor
    out: list[OpWork] = []
    for i in order:
        leaving = [t for t in g.op_outputs(i)
                   if t in g.outputs or any(c not in inside for c in g.consumers.get(t, []))]
        t_in, t_out = linked[i], into.get(i)
        out.append(replace(
            op_work(g, i), out_tensors=len(leaving),
            out_bytes=sum(tensor_bytes(g, t) for t in leaving),
            fused_in_bytes=tensor_bytes(g, t_in) if t_in is not None else 0,
            fused_out_bytes=tensor_bytes(g, t_out) if t_out is not None else 0))
    return out
