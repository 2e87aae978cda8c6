"""Which operators a GPU or NPU runtime compiles into one kernel, and so which layers.

LiteRT's GPU delegate (and NPU compilers alike) link an element-wise operator (an ADD,
a MUL, an activation) into the kernel of the convolution or fully connected layer whose
output it reads, when that output has no other reader and is not a model output: the
intermediate tensor never goes to memory, and the pair is one kernel. Where a cut falls
between the two, no call of a prefix or a sliced layer sees them apart as the whole
model does, so their times cannot be split; `kernel_groups` names the layers to report
as one row (nn-Meter reports kernels for the same reason). The simulated board prices
such a pair by the same rule (`profiler.sim.work`). docs/fused.md ("Rows that
alternate").
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from profiler.slicing.graph import ModelView

#: Operators that write a kernel's output an element-wise op can be linked into.
PRODUCERS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV"})
#: Element-wise operators linked into their producer's kernel.
LINKABLE = frozenset({"ADD", "SUB", "MUL", "RELU", "RELU6", "RELU_N1_TO_1", "LEAKY_RELU",
                      "LOGISTIC", "TANH", "HARD_SWISH", "PRELU"})


def fused_input(g: ModelView, i: int, ops: Collection[int] | None = None) -> int | None:
    """The tensor through which operator ``i`` is linked into its producer's kernel when
    the operators ``ops`` (default: all) run in one call, or None: ``i`` is element-wise,
    the tensor's producer is a convolution or fully connected op in ``ops``, ``i`` is its
    only reader and it is not an output of the model."""
    if g.op_names[i] not in LINKABLE:
        return None
    for t in g.op_inputs(i):
        p = g.producer.get(t)
        if p is None or g.op_names[p] not in PRODUCERS or (ops is not None and p not in ops):
            continue
        if g.consumers.get(t, []) == [i] and t not in g.outputs:
            return t
    return None


def kernel_groups(g: ModelView, layers: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """(first, last) of every run of consecutive layers (each given by its operator
    indices) that linked pairs join: from the layer of a producer to the later layer of
    the operator linked into it, overlapping runs merged. Layers that share no kernel
    are in no group."""
    layer_of = {i: k for k, ops in enumerate(layers) for i in ops}
    spans = []
    for k, ops in enumerate(layers):
        for i in ops:
            t = fused_input(g, i)
            p = layer_of.get(g.producer[t]) if t is not None else None
            if p is not None and p < k:
                spans.append((p, k))
    groups: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if groups and a <= groups[-1][1]:
            groups[-1] = (groups[-1][0], max(b, groups[-1][1]))
        else:
            groups.append((a, b))
    return groups
