"""Spans: consecutive layers of a sliced model as one sub-model each.

An application that maps layers 3..9 to one processor runs them as one model on it:
one compiled model, one call, one read-back. `span_models(data, sliced, spans)` cuts
the original model at the spans' edges instead of at every layer, so a mapped run
(`profiler.mapping.pipeline`, fused execution) pays a processor's fixed per-call cost once
per span, not once per layer.

A span's sub-model holds the operators of its layers (a constant op copied into
several layers is held once); its inputs are the runtime tensors its layers read that
no layer of the span produces (in order of first use), its outputs the tensors it
produces that a later layer reads or that are model outputs (in order of production),
so spans chain as layers do and a span of one layer is that layer's own cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from profiler.slicing.extract import build_submodel
from profiler.slicing.graph import ModelView
from profiler.slicing.specs import SlicedModel, TensorSpec
from profiler.tflite.model_io import parse_model, serialize_model


@dataclass(frozen=True)
class Span:
    """Layers ``first..last`` (positions in the sliced model) as one sub-model."""

    first: int
    last: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    model_bytes: bytes = field(repr=False)

    @property
    def index(self) -> int:
        """The span's first layer (what messages and names call it)."""
        return self.first

    @property
    def layers(self) -> range:
        return range(self.first, self.last + 1)


def check_spans(spans: Sequence[tuple[int, int]], n_layers: int) -> None:
    """Spans must be non-empty, in order, and not overlap."""
    prev = -1
    for first, last in spans:
        if not (prev < first <= last < n_layers):
            raise ValueError(f"span {first}..{last} is empty, out of order or outside "
                             f"layers 0..{n_layers - 1}")
        prev = last


def span_io(sliced: SlicedModel, first: int, last: int) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """(inputs, outputs) of layers first..last as one sub-model (module docstring)."""
    layers = sliced.layers
    produced: dict[int, TensorSpec] = {}
    inputs: list[TensorSpec] = []
    for layer in layers[first:last + 1]:
        for t in layer.inputs:
            if int(t.index) not in produced and all(int(t.index) != int(x.index) for x in inputs):
                inputs.append(t)
        for t in layer.outputs:
            produced.setdefault(int(t.index), t)
    later = {int(t.index) for layer in layers[last + 1:] for t in layer.inputs}
    later |= {int(t.index) for t in sliced.model_outputs}
    outputs = [t for idx, t in produced.items() if idx in later]
    if not outputs:  # nothing read later: keep the last layer's outputs (a valid model)
        outputs = list(layers[last].outputs)
    return inputs, outputs


def span_models(data: bytes, sliced: SlicedModel,
                spans: Sequence[tuple[int, int]]) -> list[Span]:
    """One sub-model per (first, last) span of ``sliced``, cut from ``data`` (the model
    ``sliced`` was cut from)."""
    check_spans(spans, len(sliced.layers))
    g = ModelView.of(parse_model(data, "model"))
    out: list[Span] = []
    for first, last in spans:
        ops = sorted({i for layer in sliced.layers[first:last + 1] for i in layer.op_indices})
        ins, outs = span_io(sliced, first, last)
        sub = build_submodel(g, ops, [int(t.index) for t in ins], [int(t.index) for t in outs],
                             description=f"coupprof layers {first}..{last} of "
                                         f"{sliced.source_sha256[:12]}")
        out.append(Span(first, last, ins, outs, serialize_model(sub)))
    return out
