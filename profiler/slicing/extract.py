"""Build a sub-model from a group of operators of subgraph 0.

The sub-model holds copies of the group's operators, only the tensors and
buffers they use (buffer 0 stays the empty sentinel), and subgraph
inputs/outputs given by the caller. Quantization parameters are shared with
the source tensors, so they are kept exactly. Metadata and the source's
signature defs no longer apply and are dropped; one signature
("serving_default") naming the new inputs and outputs is rebuilt.
`profiler.tflite.model_io.serialize_model` writes it with the weights aligned.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import SupportsInt

from profiler.slicing.graph import ModelView
from profiler.tflite import schema_py_generated as schema


def boundaries(g: ModelView,
               groups: Sequence[Sequence[int]]) -> list[tuple[list[int], list[int]]]:
    """(inputs, outputs) tensor indices of every group.

    inputs: runtime tensors its ops read but that are produced outside it (or are
    model inputs), in order of first use. outputs: tensors produced in it that a
    later group takes as input or that are model outputs, in order of production.
    An op may sit in several groups only if it is a constant op (see grouping).
    """
    members = [set(grp) for grp in groups]
    all_inputs: list[list[int]] = []
    for k, grp in enumerate(groups):
        inputs: list[int] = []
        for i in sorted(grp):
            for t in g.op_inputs(i):
                if t not in inputs and g.is_runtime(t) and g.producer.get(t) not in members[k]:
                    inputs.append(t)
        all_inputs.append(inputs)
    wanted_later: list[set[int]] = [set() for _ in groups]
    for k in range(len(groups) - 2, -1, -1):
        wanted_later[k] = wanted_later[k + 1] | set(all_inputs[k + 1])
    model_outputs = set(g.outputs)
    result = []
    for k, grp in enumerate(groups):
        outputs: list[int] = []
        dead_ends: list[int] = []
        for i in sorted(grp):
            for t in g.op_outputs(i):
                if t in model_outputs or t in wanted_later[k]:
                    if t not in outputs:
                        outputs.append(t)
                elif not g.consumers.get(t):
                    dead_ends.append(t)
        # A group whose results nobody reads still needs outputs to be a valid model.
        result.append((all_inputs[k], outputs or dead_ends))
    return result


def build_submodel(g: ModelView, ops: Sequence[int], inputs: Sequence[int],
                   outputs: Sequence[int], description: str = "") -> schema.ModelT:
    model, src = g.model, g.subgraph
    tensors: list[schema.TensorT] = []
    tmap: dict[int, int] = {}
    buffers: list[schema.BufferT] = [schema.BufferT()]  # buffer 0: the empty sentinel
    bmap: dict[int, int] = {}

    def new_buffer(old: int) -> int:
        if old not in bmap:
            bmap[old] = len(buffers)
            buffers.append(schema.BufferT(data=model.buffers[old].data))
        return bmap[old]

    def buffer_of(tensor: schema.TensorT) -> int:
        old = tensor.buffer
        if not old:
            return 0
        data = model.buffers[old].data
        return new_buffer(old) if data is not None and len(data) > 0 else 0

    def tensor(t: int) -> int:
        if t < 0:
            return t
        if t not in tmap:
            tt = copy.copy(src.tensors[t])
            tt.buffer = buffer_of(src.tensors[t])
            tmap[t] = len(tensors)
            tensors.append(tt)
        return tmap[t]

    for t in inputs:
        tensor(t)
    code_map: dict[int, int] = {}
    codes: list[schema.OperatorCodeT] = []

    def opcode(old: int) -> int:
        if old not in code_map:
            code_map[old] = len(codes)
            codes.append(model.operatorCodes[old])
        return code_map[old]

    new_ops = []
    for i in sorted(ops):
        op = copy.copy(src.operators[i])
        op.opcodeIndex = opcode(op.opcodeIndex)
        op.inputs = [tensor(int(t)) for t in _ints(op.inputs)]
        op.outputs = [tensor(int(t)) for t in _ints(op.outputs)]
        if op.intermediates is not None and len(op.intermediates):
            op.intermediates = [tensor(int(t)) for t in op.intermediates]
        op.debugMetadataIndex = -1
        new_ops.append(op)

    sg = schema.SubGraphT()
    sg.tensors, sg.operators = tensors, new_ops
    sg.inputs = [tmap[t] for t in inputs]
    sg.outputs = [tensor(t) for t in outputs]
    sg.name = src.name
    sg.debugMetadataIndex = -1

    # Control-flow ops (WHILE, IF, CALL_ONCE) name other subgraphs by index: keep them all.
    others = [_copy_subgraph(other, buffer_of, opcode) for other in model.subgraphs[1:]]

    sub = schema.ModelT()
    sub.version = model.version
    sub.operatorCodes = codes
    sub.subgraphs = [sg, *others]
    sub.description = description
    sub.buffers = buffers
    sub.signatureDefs = [signature(tensors, sg.inputs, sg.outputs)]
    return sub


def _copy_subgraph(other: schema.SubGraphT, buffer_of, opcode) -> schema.SubGraphT:  # noqa: ANN001
    sg = copy.copy(other)
    sg.tensors = []
    for t in other.tensors or []:
        tt = copy.copy(t)
        tt.buffer = buffer_of(t)
        sg.tensors.append(tt)
    sg.operators = []
    for op in other.operators or []:
        new = copy.copy(op)
        new.opcodeIndex = opcode(op.opcodeIndex)
        new.debugMetadataIndex = -1
        sg.operators.append(new)
    sg.debugMetadataIndex = -1
    return sg


def signature(tensors: list[schema.TensorT], ins: list[int], outs: list[int]) -> schema.SignatureDefT:
    used: set[str] = set()

    def entry(t: int, fallback: str) -> schema.TensorMapT:
        name = tensors[t].name
        name = name.decode() if isinstance(name, bytes) else (name or "")
        if not name or name in used:
            name = fallback
        used.add(name)
        m = schema.TensorMapT()
        m.name, m.tensorIndex = name, t
        return m

    sig = schema.SignatureDefT()
    sig.inputs = [entry(t, f"input_{n}") for n, t in enumerate(ins)]
    sig.outputs = [entry(t, f"output_{n}") for n, t in enumerate(outs)]
    sig.signatureKey = "serving_default"
    sig.subgraphIndex = 0
    return sig


def _ints(values: Iterable[SupportsInt] | None) -> list[int]:
    return [] if values is None else [int(v) for v in values]
