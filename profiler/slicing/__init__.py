"""Model slicing: cut a .tflite model into one chained sub-model per layer.

By default a layer starts at every compute operator (a depthwise conv and the 1x1 conv
after it are one layer, padding opens its conv's layer) and every other operator joins its
producer's layer; ``granularity="op"`` gives one layer per operator and ``cuts=[i, j, k]``
starts a layer at each of those op indices. Every runtime tensor that crosses a layer
boundary is an output of the sub-model that produces it and an input of each later
sub-model that reads it.

    sliced = slice_model("model.tflite")            # SlicedModel, cached by sha256
    result = verify(sliced, Path("model.tflite").read_bytes())

The grouping rules in full: docs/slicing.md.
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
