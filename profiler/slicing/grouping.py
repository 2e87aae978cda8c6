"""Which operators form a layer.

The default grouping (``granularity="layer"``) counts layers as CNN papers do: a layer
starts at every compute operator (a DEPTHWISE_CONV_2D and the 1x1 CONV_2D after it are one
layer; a PAD that feeds only the next compute op opens its layer), every other operator
joins the layer being built, and operators fed only by constants are copied into every
layer that reads them. ``granularity="op"`` gives one layer per operator; explicit
``cuts`` are op indices where new layers start. Op order is never changed, so the chain is
a valid topological order.

The rules one by one: docs/slicing.md ("The default grouping").
"""

from __future__ import annotations

from collections.abc import Sequence

from profiler.errors import BadInputError
from profiler.slicing.graph import ModelView

COMPUTE_OPS: frozenset[str] = frozenset({
    "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "BATCH_MATMUL",
    "CONV_3D", "CONV_3D_TRANSPOSE", "LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM",
    "BIDIRECTIONAL_SEQUENCE_LSTM", "RNN", "UNIDIRECTIONAL_SEQUENCE_RNN",
    "BIDIRECTIONAL_SEQUENCE_RNN", "SVDF", "STABLEHLO_CONVOLUTION", "STABLEHLO_DOT_GENERAL",
})
PAD_OPS: frozenset[str] = frozenset({"PAD", "PADV2", "MIRROR_PAD"})
GRANULARITIES = ("layer", "op")


def is_compute(name: str) -> bool:
    if name.startswith("CUSTOM:"):
        return "conv" in name.lower()
    return name in COMPUTE_OPS


def default_groups(g: ModelView) -> list[list[int]]:
    layer_of: list[int] = []  # layer index of each op
    current = -1  # layer being built
    kind = ""  # compute op that opened the current layer ("" while it has none yet)
    pw_joined = False  # the current depthwise layer already took its pointwise conv
    for i, name in enumerate(g.op_names):
        if is_compute(name):
            if current < 0 or kind == "":  # leading ops or a PAD opened this layer
                current = max(current, 0)
                kind = name
            elif _joins_depthwise(g, i, name, kind, pw_joined, layer_of, current):
                pw_joined = True
            else:
                current, kind, pw_joined = current + 1, name, False
        elif name in PAD_OPS and _pads_next_compute(g, i) and kind != "":
            current, kind, pw_joined = current + 1, "", False
        elif current < 0:
            current = 0
        layer_of.append(current)
    groups: list[list[int]] = [[] for _ in range(max(layer_of, default=-1) + 1)]
    for i, k in enumerate(layer_of):
        groups[k].append(i)
    return [grp for grp in groups if grp]


def _joins_depthwise(g: ModelView, i: int, name: str, kind: str, pw_joined: bool,
                     layer_of: list[int], current: int) -> bool:
    """A 1x1 CONV_2D right after a depthwise conv, reading its layer's output."""
    if name != "CONV_2D" or kind != "DEPTHWISE_CONV_2D" or pw_joined:
        return False
    ins = g.op_inputs(i)
    if len(ins) < 2:
        return False
    filt = g.tensor(ins[1]).shape
    if filt is None or len(filt) != 4 or int(filt[1]) != 1 or int(filt[2]) != 1:
        return False
    src = g.producer.get(ins[0])
    return src is not None and layer_of[src] == current


def _pads_next_compute(g: ModelView, i: int) -> bool:
    outs = g.op_outputs(i)
    if len(outs) != 1 or outs[0] in g.outputs:
        return False
    readers = g.consumers.get(outs[0], [])
    return bool(readers) and readers[0] == i + 1 and all(
        is_compute(g.op_names[r]) for r in readers)


def constant_ops(g: ModelView) -> list[int]:
    """Ops whose inputs are all constants or outputs of such ops (e.g. DEQUANTIZE of
    fp16 weights) and whose outputs are read by other ops only."""
    derived: set[int] = set()
    found: list[int] = []
    for i in range(g.num_ops):
        ins, outs = g.op_inputs(i), g.op_outputs(i)
        if ins and all(g.is_constant(t) or t in derived for t in ins):
            derived.update(outs)
            if outs and all(g.consumers.get(t) and t not in g.outputs for t in outs):
                found.append(i)
    return found


def attach_constant_ops(g: ModelView, groups: list[list[int]]) -> list[list[int]]:
    """Give every layer its own copy of the constant ops it reads.

    Weights derived from constants then never cross a layer boundary (XNNPACK
    folds such ops into the weights, so their outputs cannot be passed around),
    and a layer made only of them disappears.
    """
    floating = set(constant_ops(g))
    if not floating:
        return groups
    result = []
    for grp in groups:
        keep = [i for i in grp if i not in floating]
        if not keep:
            continue
        needed: set[int] = set()
        todo = list(keep)
        while todo:
            for t in g.op_inputs(todo.pop()):
                src = g.producer.get(t)
                if src in floating and src not in needed:
                    needed.add(src)
                    todo.append(src)
        result.append(sorted({*keep, *needed}))
    return result or groups


def groups_from_cuts(num_ops: int, cuts: Sequence[int]) -> list[list[int]]:
    """Contiguous groups starting at op 0 and at every cut."""
    bad = [c for c in cuts if not 0 <= int(c) < num_ops]
    if bad:
        raise BadInputError(
            f"cut {bad[0]} is out of range: the model has {num_ops} operators "
            f"(valid cuts are 1..{num_ops - 1})",
            "pass op indices as listed by `coupprof slice MODEL --granularity op`",
        )
    starts = sorted({0, *(int(c) for c in cuts)})
    bounds = [*starts, num_ops]
    return [list(range(a, b)) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def group_ops(g: ModelView, granularity: str = "layer",
              cuts: Sequence[int] | None = None) -> list[list[int]]:
    """Op indices of each layer, in execution order."""
    if g.num_ops == 0:
        raise BadInputError("the model has no operators to slice", "pass a model with operators")
    if cuts is not None:
        groups = groups_from_cuts(g.num_ops, cuts)
    elif granularity == "op":
        groups = [[i] for i in range(g.num_ops)]
    elif granularity == "layer":
        groups = default_groups(g)
    else:
        raise BadInputError(f"unknown granularity {granularity!r}",
                            f"use one of: {', '.join(GRANULARITIES)}")
    return attach_constant_ops(g, groups)
