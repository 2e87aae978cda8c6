"""Model slicing: cut a .tflite model into one chained sub-model per layer.

Default grouping of operators into layers (``granularity="layer"``; also in
docs/slicing.md):

1. A layer starts at every compute operator: CONV_2D, DEPTHWISE_CONV_2D,
   FULLY_CONNECTED, TRANSPOSE_CONV, BATCH_MATMUL, CONV_3D(_TRANSPOSE),
   LSTM/RNN/SVDF ops, and custom ops whose name contains "conv".
2. A DEPTHWISE_CONV_2D and the 1x1 CONV_2D right after it (the next compute
   op, reading the depthwise layer's output) are one layer.
3. A PAD/PADV2/MIRROR_PAD that feeds only compute ops, read by the very next
   op, opens that op's layer.
4. Every other operator (activation, pooling, reshape, softmax, element-wise
   ADD/MUL/..., CONCATENATION, ...) joins the layer being built, i.e. its
   producer's layer; ops before the first compute op join the first layer.
5. Ops fed only by constants (e.g. DEQUANTIZE of fp16 weights) are copied
   into every layer that reads them (in all modes), so weights never cross a
   layer boundary. Otherwise the model's op order is kept.

``granularity="op"`` gives one layer per operator (rule 5 aside) and ``cuts=[i, j, k]`` starts
a new layer at each of those op indices. Every runtime tensor that crosses a
layer boundary is an output of the sub-model that produces it and an input of
each later sub-model that reads it.

    sliced = slice_model("model.tflite")            # SlicedModel, cached by sha256
    result = verify(sliced, Path("model.tflite").read_bytes())
"""

from __future__ import annotations

from profiler.slicing.grouping import COMPUTE_OPS, GRANULARITIES
from profiler.slicing.slicer import normalize_cuts, slice_model
from profiler.slicing.specs import Layer, SlicedModel, TensorSpec
from profiler.slicing.verify import VerifyResult, verify

__all__ = [
    "COMPUTE_OPS",
    "GRANULARITIES",
    "Layer",
    "SlicedModel",
    "TensorSpec",
    "VerifyResult",
    "normalize_cuts",
    "slice_model",
    "verify",
]
