"""What each operator of a model does, in the terms the simulated board's timing model prices.

An `OpWork` is one operator's kind (how a runtime computes it), its multiply-accumulates,
the runtime bytes it reads and writes, the constant (weight) bytes it reads and the
pixels of its output map. The kinds follow what ARM Compute Library (the runtime behind
ARM-CO-UP's measurements) does differently:

- ``conv1x1`` (a plain GEMM), ``conv3x3s1`` (Winograd-eligible), ``conv`` (any other
  kernel or stride: im2col + GEMM or direct), ``depthwise``, ``fc`` (GEMV: weight-bound);
- ``pool`` (max/average pooling), ``lrn``: window work counted as MACs;
- ``reduce`` (MEAN, SUM, REDUCE_*): one streaming read of the input;
- ``view``: concatenation, reshape, split and the like, which such runtimes lay out in
  place (sub-tensors) and so cost nothing but their dispatch;
- ``elementwise``: everything else (ADD, activations, softmax, ...), memory traffic only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from profiler.slicing.costs import constant_bytes, op_macs, tensor_bytes
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


def _shape(g: ModelView, t: int) -> list[int]:
    s = g.tensor(t).shape
    return [] if s is None else [int(d) for d in s]


def op_kind(g: ModelView, i: int) -> str:
    name = g.op_names[i]
    if name == "CONV_2D":
        ins = g.op_inputs(i)
        _, kh, kw, _ = (_shape(g, ins[1]) + [0, 0, 0, 0])[:4]
        opts = g.op(i).builtinOptions
        stride = (getattr(opts, "strideH", 1), getattr(opts, "strideW", 1))
        if (kh, kw) == (1, 1):
            return "conv1x1"
        if (kh, kw) == (3, 3) and stride == (1, 1):
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


def _window_macs(g: ModelView, i: int, kind: str) -> int:
    """Pooling and LRN do window work: output elements x window size."""
    outs = g.op_outputs(i)
    out_elems = math.prod(_shape(g, outs[0])) if outs else 0
    opts = g.op(i).builtinOptions
    if kind == "lrn":
        return out_elems * (2 * int(getattr(opts, "radius", 2)) + 1)
    fh, fw = getattr(opts, "filterHeight", 1), getattr(opts, "filterWidth", 1)
    return out_elems * int(fh) * int(fw)


def op_work(g: ModelView, i: int) -> OpWork:
    kind = op_kind(g, i)
    macs = op_macs(g, i) if kind not in ("pool", "lrn") else _window_macs(g, i, kind)
    ins = g.op_inputs(i)
    runtime = [t for t in ins if g.is_runtime(t)]
    outs = g.op_outputs(i)
    act = sum(tensor_bytes(g, t) for t in runtime + outs)
    out_shape = _shape(g, outs[0]) if outs else []
    pixels = out_shape[1] * out_shape[2] if len(out_shape) == 4 else 1
    return OpWork(kind, int(macs), int(act), int(constant_bytes(g, ins)), int(pixels))


def model_works(g: ModelView, ops: Iterable[int] | None = None) -> list[OpWork]:
    """The work of operators `ops` (default: all of subgraph 0), in order."""
    return [op_work(g, i) for i in (range(g.num_ops) if ops is None else ops)]
