"""Cumulative prefix models: layers 0..k of a sliced model as one sub-model each.

`prefix_models(data, sliced)` gives the empty prefix (a SLICE of a corner of each input: the
fixed per-call cost) and layers 0..k for every k, each taking all the model's inputs. For
processors whose outputs are downloaded, large outputs get a MEAN appended
(``reduce_above_bytes``) so a difference measures the layer, not the read-back. With
``window`` = W the layers are cut into segments with prefixes of their own that start
``lead`` layers early; `tensor_values` gives their inputs from one run of the model.
`LazyPrefixes` builds them only when they are loaded, so that a deep model's n/2 copies
of its weights need not all be in memory at once (`profiler.measure.fused` loads them
in blocks).
``end`` joins a prefix's outputs into one (or one of their corners), so that what a
call's end costs does not change with where it is cut, and `end_models` gives the pair
of models that measures what an end costs (docs/fused.md, "Rows that alternate").

Why, and the figures behind it: docs/fused.md ("The prefix sub-models").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
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

#: One output of a prefix as its end treats it: (how: "corner" | "mean" | "flat", shape,
#: tensor type, quantization); a prefix's `end_spec` is what its end costs depend on.
EndTensor = tuple[str, tuple[int, ...], int, tuple[tuple[float, ...], tuple[int, ...]]]
#: How prefixes hand their outputs out of a call (`prefix_models`).
End = Literal["keep", "one", "corner"]


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
    joined: int = 0  # outputs joined into one on the processor (``end``; 0: none)
    # With an ``end`` other than "keep": how it treats each tensor it hands out (what its
    # end costs depend on; `end_models` measures that), and those tensors in the model.
    end_spec: tuple[EndTensor, ...] = ()
    end_tensors: tuple[int, ...] = ()


@dataclass(frozen=True)
class PrefixSpec:
    """Which layers a prefix holds, before it is built (`PrefixModel`'s fields that do not
    need the sub-model)."""

    first: int
    last: int
    input_tensors: tuple[int, ...]
    role: Literal["layer", "base", "whole"]
    # its layers' constant bytes: about its model's size, and what loading it holds
    weight_bytes: int
    # the largest tensor its operators read or write at run time (0: not known): what
    # the buffers a runtime allocates for its activations scale with
    act_bytes: int = 0


def prefix_specs(data: bytes, sliced: SlicedModel, *, lasts: list[int] | None = None,
                 window: int = 0, lead: int = 1) -> list[PrefixSpec]:
    """The prefixes `prefix_models` builds, in its order, without building them."""
    if lead < 1:
        raise ValueError(f"a window's lead of {lead} layers: give 1 or more")
    g = ModelView.of(parse_model(data, "model"))
    groups = [list(layer.op_indices) for layer in sliced.layers]
    weights = [layer.param_bytes for layer in sliced.layers]
    acts = [max((_nbytes(g.tensor(t)) for i in grp for t in (*g.op_inputs(i), *g.op_outputs(i))
                 if t >= 0 and g.is_runtime(t)), default=0) for grp in groups]
    n = len(groups)
    ins = tuple(int(t) for t in g.inputs)
    in_bytes = max((_nbytes(g.tensor(t)) for t in ins), default=0)

    def spec(first: int, last: int, inputs: tuple[int, ...],
             role: Literal["layer", "base", "whole"]) -> PrefixSpec:
        return PrefixSpec(first, last, inputs, role, sum(weights[first:last + 1]),
                          max([in_bytes, *acts[first:last + 1]]))

    if window <= 0 or window >= n:
        wanted = list(range(-1, n)) if lasts is None else lasts
        return [spec(0, last, ins, "base" if last < 0 else "layer") for last in wanted]
    if lasts is not None:
        raise ValueError("lasts and window exclude each other")
    out = [spec(0, last, ins, "base" if last < 0 else "layer") for last in range(-1, window)]
    for a in range(window, n, window):
        end = min(a + window, n) - 1
        start = max(0, a - lead)
        seg = {i for grp in groups[start:end + 1] for i in grp}
        inputs = ins if start == 0 else tuple(
            boundaries(g, [sorted(seg), [i for i in range(g.num_ops) if i not in seg]])[0][0])
        out += [spec(start, last, inputs, "base" if last < a else "layer")
                for last in range(a - 1, end + 1)]
    out.append(spec(0, n - 1, ins, "whole"))
    return out


def build_prefixes(data: bytes, sliced: SlicedModel, specs: Sequence[PrefixSpec], *,
                   reduce_above_bytes: int | None = REDUCE_ABOVE_BYTES,
                   end: End = "keep") -> list[PrefixModel]:
    """The sub-models of ``specs`` (from `prefix_specs` of the same model and cut);
    ``end``: see `prefix_models`."""
    return list(iter_prefixes(data, sliced, specs, reduce_above_bytes=reduce_above_bytes,
                              end=end))


def iter_prefixes(data: bytes, sliced: SlicedModel, specs: Sequence[PrefixSpec], *,
                  reduce_above_bytes: int | None = REDUCE_ABOVE_BYTES,
                  end: End = "keep", serialize: bool = True) -> Iterator[PrefixModel]:
    """`build_prefixes`, one sub-model at a time (the model parsed once); ``serialize``
    False leaves each one's ``model_bytes`` empty (what it is, not the model)."""
    if not specs:
        return
    g = ModelView.of(parse_model(data, "model", copy=False))  # only read: no copy
    groups = [list(layer.op_indices) for layer in sliced.layers]
    n = len(groups)
    for p in specs:
        yield _prefix(g, sorted({i for grp in groups[p.first:p.last + 1] for i in grp}),
                      p.first, p.last, list(p.input_tensors), sliced.source_sha256,
                      reduce_above_bytes, p.role,
                      "keep" if (p.first, p.last) == (0, n - 1) else end,  # the whole model's own
                      serialize)


def prefix_models(data: bytes, sliced: SlicedModel, *,
                  reduce_above_bytes: int | None = REDUCE_ABOVE_BYTES,
                  lasts: list[int] | None = None, window: int = 0,
                  lead: int = 1, end: End = "keep") -> list[PrefixModel]:
    """The empty prefix, then layers 0..k for k = 0 .. n-1 (see docs/fused.md);
    ``lasts``: only the prefixes ending at these layers (-1: the empty one). ``window``
    W > 0 (and below n): segments of W layers, each with its own prefixes from ``lead``
    layers before it, then the whole model. Every model is built now: `Prefixes` builds
    them when they are wanted, so that they need not all be in memory at once.

    ``end``: how a prefix hands its outputs out of the call, since what a call's end
    costs may depend on how many outputs it has and how large (docs/fused.md, "Rows that
    alternate"): "keep" them as they are (after ``reduce_above_bytes``), join them into
    "one" output on the processor (flattened and concatenated), or hand out one output of
    each's "corner" (a SLICE of a few values, joined: a CPU's outputs stay in memory
    unread). The model run whole (the last prefix, and "whole") keeps its own outputs."""
    specs = prefix_specs(data, sliced, lasts=lasts, window=window, lead=lead)
    return build_prefixes(data, sliced, specs, reduce_above_bytes=reduce_above_bytes, end=end)


class Prefixes(ABC):
    """A model's prefixes (`specs`), whose sub-models are built on request (`build`)."""

    specs: list[PrefixSpec]

    @abstractmethod
    def build(self, positions: Sequence[int]) -> list[PrefixModel]:
        """The sub-models of the prefixes at ``positions`` (indices into `specs`)."""


class BuiltPrefixes(Prefixes):
    """Prefixes already built (`prefix_models`): every model's bytes stay in memory."""

    def __init__(self, models: Sequence[PrefixModel]) -> None:
        self.models = list(models)
        self.specs = [PrefixSpec(m.first, m.last, m.input_tensors, m.role, len(m.model_bytes))
                      for m in self.models]

    def build(self, positions: Sequence[int]) -> list[PrefixModel]:
        return [self.models[p] for p in positions]


class LazyPrefixes(Prefixes):
    """Prefixes built from the model each time they are asked for: a deep model's
    prefixes hold about n/2 copies of its weights, more than a board may have to spare
    (ResNet50 224: 1.16 GB), so only those loaded at the moment are in memory. A build
    parses the model again (ResNet50: 0.07 s) and serializes each prefix (up to 0.5 s)."""

    def __init__(self, data: bytes, sliced: SlicedModel, *,
                 reduce_above_bytes: int | None = REDUCE_ABOVE_BYTES,
                 window: int = 0, lead: int = 1, end: End = "keep") -> None:
        self.data = data
        self.sliced = sliced
        self.reduce_above_bytes = reduce_above_bytes
        self.end: End = end
        self.specs = prefix_specs(data, sliced, window=window, lead=lead)

    def build(self, positions: Sequence[int]) -> list[PrefixModel]:
        return build_prefixes(self.data, self.sliced, [self.specs[p] for p in positions],
                              reduce_above_bytes=self.reduce_above_bytes, end=self.end)

    def each(self, serialize: bool = True) -> Iterator[PrefixModel]:
        """Every prefix built in turn, each dropped before the next is built (unless kept);
        ``serialize`` False: without their bytes (their outputs and ends only: faster, and
        no serializer's buffers)."""
        return iter_prefixes(self.data, self.sliced, self.specs,
                             reduce_above_bytes=self.reduce_above_bytes, end=self.end,
                             serialize=serialize)


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
            end: End = "keep", serialize: bool = True) -> PrefixModel:
    if ops:
        rest = sorted(set(range(g.num_ops)) - set(ops))
        outputs = boundaries(g, [ops, rest] if rest else [ops])[0][1]
    else:
        outputs = list(inputs)
    sub = build_submodel(g, ops, inputs, outputs,
                         description=f"coupprof prefix {first}..{last} of {sha[:12]}")
    corner = not ops or end == "corner"
    spec = _end_spec(sub, corner, reduce_above_bytes) if end != "keep" else ()
    reduced, joined = _apply_end(sub, corner, reduce_above_bytes, end != "keep")
    if not ops:
        reduced = len(outputs)
    read = sum(_nbytes(sub.subgraphs[0].tensors[t]) for t in sub.subgraphs[0].outputs)
    # (serialize False: what it is without its bytes, for `LazyPrefixes.each`)
    return PrefixModel(last, serialize_model(sub) if serialize else b"",
                       len(sub.subgraphs[0].outputs), reduced, read,
                       first, tuple(inputs), role, joined, spec,
                       tuple(outputs) if spec else ())


def _apply_end(sub: schema.ModelT, corner: bool, reduce_above_bytes: int | None,
               join: bool) -> tuple[int, int]:
    """A prefix's end on its outputs: corners, or MEANs of the large ones, then joined
    into one where ``join``; returns (outputs reduced by a MEAN, outputs joined)."""
    reduced = 0
    if corner:
        _slice_corners(sub)
    elif reduce_above_bytes is not None:
        reduced = _reduce_outputs(sub, reduce_above_bytes)
    return reduced, _join_outputs(sub) if join else 0


def _end_spec(sub: schema.ModelT, corner: bool,
              reduce_above_bytes: int | None) -> tuple[EndTensor, ...]:
    sg = sub.subgraphs[0]
    out: list[EndTensor] = []
    for t in [int(t) for t in sg.outputs]:
        tensor = sg.tensors[t]
        shape = tuple(int(d) for d in (tensor.shape if tensor.shape is not None else []))
        how = "corner" if corner else "mean" if reduce_above_bytes is not None and \
            _reduces(tensor, reduce_above_bytes) else "flat"
        out.append((how, shape, int(tensor.type), _quant_key(tensor)))
    return tuple(out)


def end_models(data: bytes, prefix: PrefixModel, *,
               reduce_above_bytes: int | None = REDUCE_ABOVE_BYTES,
               ) -> tuple[PrefixModel, PrefixModel]:
    """What ``prefix``'s end costs, as two models that take its end's tensors (the
    tensors it hands out, before its end) as inputs and do only its end: once, and
    twice over (each tensor reduced, flattened or cornered twice, all joined into one
    output). The second call's time less the first's is the end's own cost, every call's
    fixed cost and upload cancelling (docs/fused.md, "Rows that alternate")."""
    if not prefix.end_tensors:
        raise ValueError(f"prefix {prefix.first}..{prefix.last} keeps its outputs: no end")
    g = ModelView.of(parse_model(data, "model"))
    tensors = list(prefix.end_tensors)
    corner = prefix.end_spec[0][0] == "corner"
    pair = []
    for times in (1, 2):
        sub = build_submodel(g, [], tensors, tensors,
                             description=f"coupprof end x{times} of prefix "
                             f"{prefix.first}..{prefix.last}")
        sg = sub.subgraphs[0]
        sg.outputs = [int(t) for t in sg.outputs] * times
        reduced, joined = _apply_end(sub, corner, reduce_above_bytes, True)
        read = sum(_nbytes(sg.tensors[t]) for t in sg.outputs)
        pair.append(PrefixModel(prefix.last, serialize_model(sub), len(sg.outputs), reduced,
                                read, prefix.first, tuple(tensors), "base", joined))
    return pair[0], pair[1]


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
        _append_op(sg, code, [t, begin_t, size_t], out_t,
                   schema.BuiltinOptions.SliceOptions, schema.SliceOptionsT())
        new_outs.append(out_t)
    sg.outputs = new_outs
    sub.signatureDefs = [signature(sg.tensors, list(sg.inputs), new_outs)]


def _append_op(sg: schema.SubGraphT, opcode: int, inputs: list[int], output: int,
               options_type: int, options: object) -> None:
    """Append one builtin operator with one output to ``sg``."""
    op = schema.OperatorT()
    op.opcodeIndex = opcode
    op.inputs = inputs
    op.outputs = [output]
    op.builtinOptionsType = options_type
    op.builtinOptions = options
    sg.operators.append(op)


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
        axes = _mean_axes(shape)
        if not _reduces(tensor, above_bytes):
            new_outs.append(t)
            continue
        if mean_code is None:
            mean_code = _opcode(sub, schema.BuiltinOperator.MEAN)
        axes_t = _const_int32(sub, sg, np.array(axes, dtype=np.int32), f"coupprof_axes_{t}")
        kept = [d for i, d in enumerate(shape) if i not in axes]
        red_t = _new_tensor(sg, tensor, kept, f"coupprof_mean_{t}")
        opts = schema.ReducerOptionsT()
        opts.keepDims = False
        _append_op(sg, mean_code, [t, axes_t], red_t, schema.BuiltinOptions.ReducerOptions,
                   opts)
        new_outs.append(red_t)
        count += 1
    sg.outputs = new_outs
    sub.signatureDefs = [signature(sg.tensors, list(sg.inputs), new_outs)]
    return count


def _join_outputs(sub: schema.ModelT) -> int:
    """Join the outputs into one where they share a type and quantization: each
    flattened (RESHAPE to [1, size]) and concatenated on the processor, so every call
    hands out one tensor, and every call's end has the same steps (one output is
    flattened and "joined" alone; docs/fused.md, "Rows that alternate"). Returns how many
    were joined (0: types that differ)."""
    sg = sub.subgraphs[0]
    outs = [int(t) for t in sg.outputs]
    if not outs:
        return 0
    tensors = [sg.tensors[t] for t in outs]
    if len({(t.type, _quant_key(t)) for t in tensors}) > 1:
        return 0
    flat: list[int] = []
    reshape = _opcode(sub, schema.BuiltinOperator.RESHAPE)
    for t, tensor in zip(outs, tensors, strict=True):
        size = int(np.prod([int(d) for d in tensor.shape])) if tensor.shape is not None else 1
        shape_t = _const_int32(sub, sg, np.array([1, size], dtype=np.int32), f"coupprof_flat_shape_{t}")
        flat_t = _new_tensor(sg, tensor, [1, size], f"coupprof_flat_{t}")
        opts = schema.ReshapeOptionsT()
        opts.newShape = [1, size]
        _append_op(sg, reshape, [t, shape_t], flat_t, schema.BuiltinOptions.ReshapeOptions,
                   opts)
        flat.append(flat_t)
    total = sum(int(sg.tensors[t].shape[1]) for t in flat)
    out_t = _new_tensor(sg, tensors[0], [1, total], "coupprof_joined")
    cat = schema.ConcatenationOptionsT()
    cat.axis = 1
    _append_op(sg, _opcode(sub, schema.BuiltinOperator.CONCATENATION), flat, out_t,
               schema.BuiltinOptions.ConcatenationOptions, cat)
    sg.outputs = [out_t]
    sub.signatureDefs = [signature(sg.tensors, list(sg.inputs), [out_t])]
    return len(outs)


def _quant_key(t: schema.TensorT) -> tuple[tuple[float, ...], tuple[int, ...]]:
    q = t.quantization
    if q is None:
        return (), ()
    scale = () if q.scale is None else tuple(float(x) for x in q.scale)
    zero = () if q.zeroPoint is None else tuple(int(x) for x in q.zeroPoint)
    return scale, zero


def _mean_axes(shape: list[int]) -> list[int]:
    return list(range(1, len(shape) - 1)) if len(shape) >= 3 else list(range(1, len(shape)))


def _reduces(tensor: schema.TensorT, above_bytes: int) -> bool:
    """Whether an output gets a MEAN: above ``above_bytes``, with inner axes to reduce."""
    shape = [int(d) for d in (tensor.shape if tensor.shape is not None else [])]
    return _nbytes(tensor) > above_bytes and bool(_mean_axes(shape))


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
