"""Cumulative prefix models: layers 0..k of a sliced model as one sub-model each.

`prefix_models(data, sliced)` gives the empty prefix (a SLICE of a corner of each input: the
fixed per-call cost) and layers 0..k for every k, each taking all the model's inputs. For
processors whose outputs are downloaded, large outputs get a MEAN appended
(``reduce_above_bytes``) so a difference measures the layer, not the read-back. With
``window`` = W the layers are cut into segments with prefixes of their own that start
``lead`` layers early; `tensor_values` gives their inputs from one run of the model.

Why, and the figures behind it: docs/fused.md ("The prefix sub-models").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from profiler.runtime import runtime
from profiler.slicing.extract import boundaries, build_submodel, signature
from profiler.slicing.graph import ModelView
from profiler.slicing.specs import SlicedModel, TensorSpec
from profiler.tflite import schema_py_generated as schema
from profiler.tflite.model_io import parse_model, serialize_model

#: Outputs above this many bytes are reduced on the processor before read-back (a
#: classifier's 1000 scores, 4000 bytes, are read as they are).
REDUCE_ABOVE_BYTES = 4 * 1024


@dataclass(frozen=True)
class PrefixModel:
    """Layers first..last of a model as one sub-model (last = first - 1: an empty one;
    first = 0: a prefix of the model)."""

    last: int
    model_bytes: bytes
    outputs: int  # outputs read back per call
    reduced: int  # of which reduced by an appended MEAN
    read_bytes: int  # bytes read back per call
    first: int = 0
    input_tensors: tuple[int, ...] = ()  # the model's tensors it takes, in input order
    # "layer": it ends with layer ``last``, whose time is its difference with the model
    # before it; "base": what a segment's differences start from (the empty prefix, a
    # lead layer alone); "whole": the model run whole, appended after windows.
    role: Literal["layer", "base", "whole"] = "layer"


def prefix_models(data: bytes, sliced: SlicedModel, *,
                  reduce_above_bytes: int | None = REDUCE_ABOVE_BYTES,
                  lasts: list[int] | None = None, window: int = 0,
                  lead: int = 1) -> list[PrefixModel]:
    """The empty prefix, then layers 0..k for k = 0 .. n-1 (see docs/fused.md);
    ``lasts``: only the prefixes ending at these layers (-1: the empty one). ``window``
    W > 0 (and below n): segments of W layers, each with its own prefixes from ``lead``
    layers before it, then the whole model."""
    if lead < 1:
        raise ValueError(f"a window's lead of {lead} layers: give 1 or more")
    g = ModelView.of(parse_model(data, "model"))
    groups = [list(layer.op_indices) for layer in sliced.layers]
    n = len(groups)
    sha = sliced.source_sha256

    def ops_of(first: int, last: int) -> list[int]:
        return sorted({i for grp in groups[first:last + 1] for i in grp})

    def prefix(first: int, last: int, inputs: list[int],
               role: Literal["layer", "base", "whole"]) -> PrefixModel:
        return _prefix(g, ops_of(first, last), first, last, inputs, sha, reduce_above_bytes,
                       role)

    if window <= 0 or window >= n:
        wanted = list(range(-1, n)) if lasts is None else lasts
        return [prefix(0, last, list(g.inputs), "base" if last < 0 else "layer")
                for last in wanted]
    if lasts is not None:
        raise ValueError("lasts and window exclude each other")
    out = [prefix(0, last, list(g.inputs), "base" if last < 0 else "layer")
           for last in range(-1, window)]
    for a in range(window, n, window):
        end = min(a + window, n) - 1
        start = max(0, a - lead)
        seg = set(ops_of(start, end))
        inputs = list(g.inputs) if start == 0 else \
            boundaries(g, [sorted(seg), [i for i in range(g.num_ops) if i not in seg]])[0][0]
        out += [prefix(start, last, inputs, "base" if last < a else "layer")
                for last in range(a - 1, end + 1)]
    out.append(prefix(0, n - 1, list(g.inputs), "whole"))
    return out


def tensor_values(data: bytes, inputs: list[np.ndarray], tensors: list[int]) -> list[np.ndarray]:
    """The values of the model's ``tensors`` (indices in its graph) when it runs on
    ``inputs``: one run on the runtime's reference kernels, which keep every tensor
    (LiteRT's and tflite-runtime's interpreters take the same arguments)."""
    mod = runtime().module
    interp = mod.Interpreter(
        model_content=data, num_threads=1,
        experimental_op_resolver_type=mod.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        experimental_preserve_all_tensors=True)
    interp.allocate_tensors()
    for det, x in zip(interp.get_input_details(), inputs, strict=True):
        interp.set_tensor(det["index"], x)
    interp.invoke()
    return [np.array(interp.get_tensor(t), copy=True) for t in tensors]


def _prefix(g: ModelView, ops: list[int], first: int, last: int, inputs: list[int], sha: str,
            reduce_above_bytes: int | None, role: Literal["layer", "base", "whole"],
            ) -> PrefixModel:
    if ops:
        rest = sorted(set(range(g.num_ops)) - set(ops))
        outputs = boundaries(g, [ops, rest] if rest else [ops])[0][1]
    else:
        outputs = list(inputs)
    sub = build_submodel(g, ops, inputs, outputs,
                         description=f"coupprof prefix {first}..{last} of {sha[:12]}")
    if not ops:
        _slice_corners(sub)
        reduced = len(outputs)
    elif reduce_above_bytes is not None:
        reduced = _reduce_outputs(sub, reduce_above_bytes)
    else:
        reduced = 0
    read = sum(_nbytes(sub.subgraphs[0].tensors[t]) for t in sub.subgraphs[0].outputs)
    return PrefixModel(last, serialize_model(sub), len(outputs), reduced, read, first,
                       tuple(inputs), role)


def _nbytes(tensor: schema.TensorT) -> int:
    return TensorSpec.from_tensor(0, tensor).nbytes


def _slice_corners(sub: schema.ModelT) -> None:
    """Make each output (an input of the empty prefix) a SLICE of its corner: index 0 of
    every axis but the last, at most 256 values of the last."""
    sg = sub.subgraphs[0]
    code = _opcode(sub, schema.BuiltinOperator.SLICE)
    new_outs = []
    for t in [int(t) for t in sg.outputs]:
        tensor = sg.tensors[t]
        shape = [int(d) for d in (tensor.shape if tensor.shape is not None else [])] or [1]
        size = [1] * (len(shape) - 1) + [min(shape[-1], 256)]
        begin_t = _const_int32(sub, sg, np.zeros(len(shape), dtype=np.int32), f"coupprof_begin_{t}")
        size_t = _const_int32(sub, sg, np.array(size, dtype=np.int32), f"coupprof_size_{t}")
        out_t = _new_tensor(sg, tensor, size, f"coupprof_corner_{t}")
        op = schema.OperatorT()
        op.opcodeIndex = code
        op.inputs = [t, begin_t, size_t]
        op.outputs = [out_t]
        op.builtinOptionsType = schema.BuiltinOptions.SliceOptions
        op.builtinOptions = schema.SliceOptionsT()
        sg.operators.append(op)
        new_outs.append(out_t)
    sg.outputs = new_outs
    sub.signatureDefs = [signature(sg.tensors, list(sg.inputs), new_outs)]


def _new_tensor(sg: schema.SubGraphT, like: schema.TensorT, shape: list[int], name: str) -> int:
    """A runtime tensor of ``like``'s type and quantization (the value range is kept)."""
    t = schema.TensorT()
    t.shape = np.array(shape, dtype=np.int32)
    t.type = like.type
    t.quantization = like.quantization
    t.name = name
    sg.tensors.append(t)
    return len(sg.tensors) - 1


def _reduce_outputs(sub: schema.ModelT, above_bytes: int) -> int:
    """Append MEAN over the inner axes to every output above ``above_bytes``; returns
    how many were reduced."""
    sg = sub.subgraphs[0]
    outs = [int(t) for t in sg.outputs]
    new_outs: list[int] = []
    mean_code: int | None = None
    count = 0
    for t in outs:
        tensor = sg.tensors[t]
        shape = [int(d) for d in (tensor.shape if tensor.shape is not None else [])]
        axes = list(range(1, len(shape) - 1)) if len(shape) >= 3 else list(range(1, len(shape)))
        if _nbytes(tensor) <= above_bytes or not axes:
            new_outs.append(t)
            continue
        if mean_code is None:
            mean_code = _opcode(sub, schema.BuiltinOperator.MEAN)
        axes_t = _const_int32(sub, sg, np.array(axes, dtype=np.int32), f"coupprof_axes_{t}")
        kept = [d for i, d in enumerate(shape) if i not in axes]
        red_t = _new_tensor(sg, tensor, kept, f"coupprof_mean_{t}")
        op = schema.OperatorT()
        op.opcodeIndex = mean_code
        op.inputs = [t, axes_t]
        op.outputs = [red_t]
        op.builtinOptionsType = schema.BuiltinOptions.ReducerOptions
        opts = schema.ReducerOptionsT()
        opts.keepDims = False
        op.builtinOptions = opts
        sg.operators.append(op)
        new_outs.append(red_t)
        count += 1
    sg.outputs = new_outs
    sub.signatureDefs = [signature(sg.tensors, list(sg.inputs), new_outs)]
    return count


def _opcode(sub: schema.ModelT, builtin: int) -> int:
    for i, code in enumerate(sub.operatorCodes):
        if max(code.builtinCode, code.deprecatedBuiltinCode) == builtin:
            return i
    code = schema.OperatorCodeT()
    code.builtinCode = builtin
    code.deprecatedBuiltinCode = min(builtin, 127)
    code.version = 1
    sub.operatorCodes.append(code)
    return len(sub.operatorCodes) - 1


def _const_int32(sub: schema.ModelT, sg: schema.SubGraphT, value: np.ndarray, name: str) -> int:
    buf = schema.BufferT()
    buf.data = np.frombuffer(value.astype("<i4").tobytes(), dtype=np.uint8)
    sub.buffers.append(buf)
    t = schema.TensorT()
    t.shape = np.array(value.shape, dtype=np.int32)
    t.type = schema.TensorType.INT32
    t.buffer = len(sub.buffers) - 1
    t.name = name
    sg.tensors.append(t)
    return len(sg.tensors) - 1
