"""Turn a `GraphBuilder` plus its constant data into a LiteRT `ModelT` (and .tflite bytes).

Weights are drawn here, in tensor order, from one seeded numpy RNG, so a given
(architecture, parameters, seed) always yields the same bytes. The same emitter
writes FP32 models and int8 ones (`quantize.py` supplies the int8 data and the
per-tensor quantization parameters).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from profiler.tflite import schema_py_generated as schema
from profiler.tflite.model_io import serialize_model
from profiler.zoo.graph import GraphBuilder

# Operator versions as the TFLite converter writes them (FP32, int8).
OP_VERSIONS: dict[str, tuple[int, int]] = {
    "CONV_2D": (1, 3),
    "DEPTHWISE_CONV_2D": (1, 3),
    "FULLY_CONNECTED": (1, 4),
    "MAX_POOL_2D": (1, 2),
    "AVERAGE_POOL_2D": (1, 2),
    "ADD": (1, 2),
    "CONCATENATION": (1, 2),
    "RESHAPE": (1, 1),
    "SOFTMAX": (1, 2),
    "LOCAL_RESPONSE_NORMALIZATION": (1, 1),
}

TENSOR_TYPES = {
    np.dtype(np.float32): schema.TensorType.FLOAT32,
    np.dtype(np.int8): schema.TensorType.INT8,
    np.dtype(np.int32): schema.TensorType.INT32,
}

@dataclass(frozen=True)
class QuantParams:
    """Affine quantization of one tensor: real = scale * (q - zero_point)."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    dim: int = 0  # quantized dimension for per-channel parameters

    def to_schema(self) -> schema.QuantizationParametersT:
        q = schema.QuantizationParametersT()
        q.scale = [float(s) for s in self.scale]
        q.zeroPoint = [int(z) for z in self.zero_point]
        q.quantizedDimension = self.dim
        return q


def draw_constants(graph: GraphBuilder, seed: int) -> dict[int, np.ndarray]:
    """Draw every constant tensor of `graph` from one RNG, in tensor order."""
    rng = np.random.default_rng(seed)
    data: dict[int, np.ndarray] = {}
    for t in graph.tensors:
        if t.init is None:
            continue
        if t.init.kind == "normal":
            arr = rng.standard_normal(t.shape, dtype=np.float32)
            arr *= np.float32(t.init.std)
        elif t.init.kind == "values":
            arr = np.asarray(t.init.values, dtype=np.dtype(t.dtype)).reshape(t.shape)
        else:  # pragma: no cover - GraphBuilder only creates the two kinds
            raise ValueError(f"unknown init {t.init.kind!r} for {t.name}")
        data[t.index] = arr
    return data


def _padding(p: str) -> int:
    return schema.Padding.SAME if p == "SAME" else schema.Padding.VALID


def _act(a: str) -> int:
    return getattr(schema.ActivationFunctionType, a)


def _options(kind: str, o: dict[str, Any]) -> tuple[int, Any]:
    bo = schema.BuiltinOptions
    if kind == "CONV_2D":
        opt = schema.Conv2DOptionsT()
        opt.padding, opt.strideH, opt.strideW = _padding(o["padding"]), o["stride"], o["stride"]
        opt.fusedActivationFunction = _act(o["act"])
        return bo.Conv2DOptions, opt
    if kind == "DEPTHWISE_CONV_2D":
        opt = schema.DepthwiseConv2DOptionsT()
        opt.padding, opt.strideH, opt.strideW = _padding(o["padding"]), o["stride"], o["stride"]
        opt.depthMultiplier = o["multiplier"]
        opt.fusedActivationFunction = _act(o["act"])
        return bo.DepthwiseConv2DOptions, opt
    if kind in ("MAX_POOL_2D", "AVERAGE_POOL_2D"):
        opt = schema.Pool2DOptionsT()
        opt.padding, opt.strideH, opt.strideW = _padding(o["padding"]), o["stride"], o["stride"]
        opt.filterHeight = opt.filterWidth = o["kernel"]
        opt.fusedActivationFunction = _act(o["act"])
        return bo.Pool2DOptions, opt
    if kind == "ADD":
        opt = schema.AddOptionsT()
        opt.fusedActivationFunction = _act(o["act"])
        return bo.AddOptions, opt
    if kind == "CONCATENATION":
        opt = schema.ConcatenationOptionsT()
        opt.axis, opt.fusedActivationFunction = o["axis"], _act(o["act"])
        return bo.ConcatenationOptions, opt
    if kind == "RESHAPE":
        opt = schema.ReshapeOptionsT()
        opt.newShape = list(o["new_shape"])
        return bo.ReshapeOptions, opt
    if kind == "FULLY_CONNECTED":
        opt = schema.FullyConnectedOptionsT()
        opt.fusedActivationFunction = _act(o["act"])
        return bo.FullyConnectedOptions, opt
    if kind == "SOFTMAX":
        opt = schema.SoftmaxOptionsT()
        opt.beta = o["beta"]
        return bo.SoftmaxOptions, opt
    if kind == "LOCAL_RESPONSE_NORMALIZATION":
        opt = schema.LocalResponseNormalizationOptionsT()
        opt.radius, opt.bias, opt.alpha, opt.beta = o["radius"], o["bias"], o["alpha"], o["beta"]
        return bo.LocalResponseNormalizationOptions, opt
    raise ValueError(f"no emitter for operator {kind}")


def to_model(
    graph: GraphBuilder,
    constants: dict[int, np.ndarray],
    *,
    activation_dtype: type = np.float32,
    quant: dict[int, QuantParams] | None = None,
    outputs: list[int] | None = None,
    metadata: dict[str, Any] | None = None,
) -> schema.ModelT:
    """Build the `ModelT` for `graph`.

    `constants` holds the data of every constant tensor (its dtype sets the tensor
    type); activations get `activation_dtype`. `outputs` overrides the subgraph's
    outputs (calibration exposes every activation). `metadata` is stored as JSON in
    a `coupprof_zoo` metadata buffer so a file says how it was made.
    """
    quant = quant or {}
    int8 = np.dtype(activation_dtype) == np.dtype(np.int8)
    model = schema.ModelT()
    model.version = 3
    model.description = f"coupprof zoo: {graph.name}"
    model.buffers = [schema.BufferT()]  # buffer 0: the empty sentinel

    def new_buffer(raw: bytes | None) -> int:
        data = None if raw is None else np.frombuffer(raw, dtype=np.uint8)
        model.buffers.append(schema.BufferT(data=data))
        return len(model.buffers) - 1

    sg = schema.SubGraphT()
    sg.name = "main"
    sg.tensors = []
    for t in graph.tensors:
        tt = schema.TensorT()
        tt.name = t.name
        tt.shape = list(t.shape)
        if t.is_const:
            arr = constants[t.index]
            tt.type = TENSOR_TYPES[arr.dtype]
            tt.buffer = new_buffer(np.ascontiguousarray(arr).tobytes())
        else:
            tt.type = TENSOR_TYPES[np.dtype(activation_dtype)]
            tt.buffer = new_buffer(None)  # one empty buffer per tensor, as the converter does
        if t.index in quant:
            tt.quantization = quant[t.index].to_schema()
        sg.tensors.append(tt)

    codes: dict[str, int] = {}
    model.operatorCodes = []
    sg.operators = []
    for op in graph.ops:
        if op.kind not in codes:
            oc = schema.OperatorCodeT()
            code = getattr(schema.BuiltinOperator, op.kind)
            oc.builtinCode = code
            oc.deprecatedBuiltinCode = min(code, 127)
            oc.version = OP_VERSIONS[op.kind][1 if int8 else 0]
            codes[op.kind] = len(model.operatorCodes)
            model.operatorCodes.append(oc)
        o = schema.OperatorT()
        o.opcodeIndex = codes[op.kind]
        o.inputs, o.outputs = list(op.inputs), list(op.outputs)
        o.builtinOptionsType, o.builtinOptions = _options(op.kind, op.options)
        sg.operators.append(o)

    sg.inputs = list(graph.inputs)
    sg.outputs = list(outputs if outputs is not None else graph.outputs)
    model.subgraphs = [sg]

    if outputs is None:
        sig = schema.SignatureDefT()
        sig.signatureKey = "serving_default"
        sig.subgraphIndex = 0
        sig.inputs = [_tensor_map(n, i) for n, i in zip(graph.input_names, graph.inputs, strict=True)]
        sig.outputs = [_tensor_map(n, i) for n, i in zip(graph.output_names, graph.outputs, strict=True)]
        model.signatureDefs = [sig]

    if metadata is not None:
        md = schema.MetadataT()
        md.name = "coupprof_zoo"
        md.buffer = new_buffer(json.dumps(metadata, sort_keys=True).encode())
        model.metadata = [md]
    return model


def _tensor_map(name: str, index: int) -> schema.TensorMapT:
    m = schema.TensorMapT()
    m.name, m.tensorIndex = name, index
    return m


def to_bytes(model: schema.ModelT) -> bytes:
    """The .tflite bytes, weights 16-byte aligned like the converter writes them."""
    return serialize_model(model)
