"""A small model builder on LiteRT's schema object API, for odd test topologies.

FP32 by default; with ``int8=True`` every activation is int8 (per-tensor scale),
conv/depthwise weights int8 per output channel, biases int32, as LiteRT's
converter writes them. Scales are chosen so values spread over the int8 range
rather than saturate (weights have variance 1/fan-in, so activations keep
their magnitude from layer to layer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import flatbuffers
import numpy as np

from profiler.tflite import schema_py_generated as schema

OP = schema.BuiltinOperator
ACT = schema.ActivationFunctionType
PAD = schema.Padding
TT = schema.TensorType
_DTYPES = {np.dtype("float32"): TT.FLOAT32, np.dtype("int32"): TT.INT32,
           np.dtype("int8"): TT.INT8, np.dtype("float16"): TT.FLOAT16, np.dtype("int64"): TT.INT64}

ACT_RANGE = 4.0  # real range +-4 for int8 activations without ReLU
RELU_RANGE = 6.0  # [0, 6] after ReLU / ReLU6


def _quant(scale: Sequence[float], zero_point: Sequence[int], axis: int = 0):
    q = schema.QuantizationParametersT()
    q.scale = [float(s) for s in scale]
    q.zeroPoint = [int(z) for z in zero_point]
    q.quantizedDimension = axis
    return q


class ModelBuilder:
    def __init__(self, seed: int = 0, int8: bool = False) -> None:
        self.rng = np.random.default_rng(seed)
        self.int8 = int8
        self.tensors: list[schema.TensorT] = []
        self.buffers: list[schema.BufferT] = [schema.BufferT()]
        self.ops: list[schema.OperatorT] = []
        self.codes: list[schema.OperatorCodeT] = []
        self.code_index: dict[tuple[int, str], int] = {}
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.names: dict[str, int] = {}

    # ---- tensors -------------------------------------------------------------------------
    def tensor(self, shape: Sequence[int], name: str, ttype: int = TT.FLOAT32,
               data: np.ndarray | None = None, quant=None) -> int:  # noqa: ANN001
        t = schema.TensorT()
        t.shape = [int(d) for d in shape]
        t.type, t.name, t.quantization = ttype, name, quant
        if data is not None:
            buf = schema.BufferT()
            buf.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), dtype=np.uint8)
            t.buffer = len(self.buffers)
            self.buffers.append(buf)
        self.tensors.append(t)
        self.names[name] = len(self.tensors) - 1
        return len(self.tensors) - 1

    def const(self, array: np.ndarray, name: str, quant=None) -> int:  # noqa: ANN001
        return self.tensor(array.shape, name, _DTYPES[array.dtype], array, quant)

    def act(self, shape: Sequence[int], name: str, relu: bool = False) -> int:
        """A runtime activation tensor (int8 in int8 mode)."""
        if not self.int8:
            return self.tensor(shape, name)
        if relu:
            return self.tensor(shape, name, TT.INT8, quant=_quant([RELU_RANGE / 255], [-128]))
        return self.tensor(shape, name, TT.INT8, quant=_quant([ACT_RANGE / 128], [0]))

    def input(self, shape: Sequence[int], name: str, ttype: int | None = None) -> int:
        t = self.act(shape, name) if ttype is None else self.tensor(shape, name, ttype)
        self.inputs.append(t)
        return t

    def output(self, t: int) -> int:
        self.outputs.append(t)
        return t

    def shape(self, t: int) -> list[int]:
        return list(self.tensors[t].shape)

    def scale(self, t: int) -> float:
        return float(self.tensors[t].quantization.scale[0])

    # ---- operators ----------------------------------------------------------------------
    def op(self, code: int, inputs: Sequence[int], outputs: Sequence[int],
           options_type: int = 0, options=None, custom: str = "") -> None:  # noqa: ANN001
        key = (code, custom)
        if key not in self.code_index:
            oc = schema.OperatorCodeT()
            oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), 1
            if custom:
                oc.customCode = custom
            self.code_index[key] = len(self.codes)
            self.codes.append(oc)
        o = schema.OperatorT()
        o.opcodeIndex = self.code_index[key]
        o.inputs, o.outputs = list(inputs), list(outputs)
        o.builtinOptionsType, o.builtinOptions = options_type, options
        self.ops.append(o)

    def _weights(self, shape: Sequence[int], fan_in: int, axis: int, name: str) -> int:
        w = self.rng.uniform(-1, 1, shape) * math.sqrt(3.0 / fan_in)
        if not self.int8:
            return self.const(w.astype(np.float32), name)
        moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
        scales = np.abs(moved).max(axis=1) / 127
        q = np.round(w / scales.reshape([-1 if i == axis else 1 for i in range(w.ndim)]))
        return self.const(q.astype(np.int8), name, _quant(scales, [0] * len(scales), axis))

    def _bias(self, n: int, x: int, w: int, name: str) -> int:
        b = self.rng.uniform(-0.1, 0.1, n)
        if not self.int8:
            return self.const(b.astype(np.float32), name)
        scales = self.scale(x) * np.asarray(self.tensors[w].quantization.scale)
        if len(scales) == 1:
            scales = np.repeat(scales, n)
        return self.const(np.round(b / scales).astype(np.int32), name,
                          _quant(scales, [0] * n, 0))

    @staticmethod
    def _out_hw(h: int, w: int, k: int, stride: int, padding: int) -> tuple[int, int]:
        if padding == PAD.SAME:
            return -(-h // stride), -(-w // stride)
        return (h - k) // stride + 1, (w - k) // stride + 1

    def conv(self, x: int, cout: int, k: int, name: str, stride: int = 1,
             padding: int = PAD.SAME, act: int = ACT.RELU) -> int:
        n, h, w, cin = self.shape(x)
        oh, ow = self._out_hw(h, w, k, stride, padding)
        wt = self._weights([cout, k, k, cin], k * k * cin, 0, f"{name}/weights")
        b = self._bias(cout, x, wt, f"{name}/bias")
        y = self.act([n, oh, ow, cout], name, relu=act != ACT.NONE)
        opts = schema.Conv2DOptionsT()
        opts.padding, opts.strideW, opts.strideH, opts.fusedActivationFunction = padding, stride, stride, act
        opts.dilationWFactor = opts.dilationHFactor = 1
        self.op(OP.CONV_2D, [x, wt, b], [y], schema.BuiltinOptions.Conv2DOptions, opts)
        return y

    def dwconv(self, x: int, k: int, name: str, stride: int = 1, act: int = ACT.RELU6) -> int:
        n, h, w, c = self.shape(x)
        oh, ow = self._out_hw(h, w, k, stride, PAD.SAME)
        wt = self._weights([1, k, k, c], k * k, 3, f"{name}/weights")
        b = self._bias(c, x, wt, f"{name}/bias")
        y = self.act([n, oh, ow, c], name, relu=act != ACT.NONE)
        opts = schema.DepthwiseConv2DOptionsT()
        opts.padding, opts.strideW, opts.strideH = PAD.SAME, stride, stride
        opts.depthMultiplier, opts.fusedActivationFunction = 1, act
        opts.dilationWFactor = opts.dilationHFactor = 1
        self.op(OP.DEPTHWISE_CONV_2D, [x, wt, b], [y],
                schema.BuiltinOptions.DepthwiseConv2DOptions, opts)
        return y

    def fc(self, x: int, units: int, name: str, act: int = ACT.NONE) -> int:
        shape = self.shape(x)
        fan_in = shape[-1]
        wt = self._weights([units, fan_in], fan_in, 0, f"{name}/weights")
        if self.int8:  # FULLY_CONNECTED takes per-tensor weight scales
            q = self.tensors[wt].quantization
            q.scale, q.zeroPoint = [max(q.scale)], [0]
        b = self._bias(units, x, wt, f"{name}/bias")
        y = self.act([*shape[:-1], units], name, relu=act != ACT.NONE)
        opts = schema.FullyConnectedOptionsT()
        opts.fusedActivationFunction, opts.keepNumDims = act, True
        self.op(OP.FULLY_CONNECTED, [x, wt, b], [y],
                schema.BuiltinOptions.FullyConnectedOptions, opts)
        return y

    def add(self, a: int, b: int, name: str, act: int = ACT.NONE) -> int:
        y = self.act(self.shape(a), name, relu=act != ACT.NONE)
        opts = schema.AddOptionsT()
        opts.fusedActivationFunction = act
        self.op(OP.ADD, [a, b], [y], schema.BuiltinOptions.AddOptions, opts)
        return y

    def mul(self, a: int, b: int, name: str) -> int:
        y = self.act(self.shape(a), name)
        self.op(OP.MUL, [a, b], [y], schema.BuiltinOptions.MulOptions, schema.MulOptionsT())
        return y

    def concat(self, xs: Sequence[int], name: str, axis: int = 3) -> int:
        shape = self.shape(xs[0])
        shape[axis] = sum(self.shape(x)[axis] for x in xs)
        y = self.act(shape, name)
        opts = schema.ConcatenationOptionsT()
        opts.axis = axis
        self.op(OP.CONCATENATION, list(xs), [y], schema.BuiltinOptions.ConcatenationOptions, opts)
        return y

    def _same_quant(self, x: int, shape: Sequence[int], name: str) -> int:
        """An output that keeps the input's quantization (pooling, reshape, resize)."""
        q = self.tensors[x].quantization
        return self.tensor(shape, name, self.tensors[x].type, quant=q)

    def pool(self, x: int, k: int, stride: int, name: str, kind: int = OP.MAX_POOL_2D) -> int:
        n, h, w, c = self.shape(x)
        oh, ow = self._out_hw(h, w, k, stride, PAD.SAME)
        y = self._same_quant(x, [n, oh, ow, c], name)
        opts = schema.Pool2DOptionsT()
        opts.padding, opts.strideW, opts.strideH = PAD.SAME, stride, stride
        opts.filterWidth = opts.filterHeight = k
        self.op(kind, [x], [y], schema.BuiltinOptions.Pool2DOptions, opts)
        return y

    def mean(self, x: int, name: str) -> int:
        n, _, _, c = self.shape(x)
        axes = self.const(np.array([1, 2], np.int32), f"{name}/axes")
        y = self._same_quant(x, [n, 1, 1, c], name)
        opts = schema.ReducerOptionsT()
        opts.keepDims = True
        self.op(OP.MEAN, [x, axes], [y], schema.BuiltinOptions.ReducerOptions, opts)
        return y

    def reshape(self, x: int, shape: Sequence[int], name: str) -> int:
        s = self.const(np.array(shape, np.int32), f"{name}/shape")
        y = self._same_quant(x, shape, name)
        opts = schema.ReshapeOptionsT()
        opts.newShape = list(shape)
        self.op(OP.RESHAPE, [x, s], [y], schema.BuiltinOptions.ReshapeOptions, opts)
        return y

    def pad(self, x: int, name: str, before: int = 0, after: int = 1) -> int:
        n, h, w, c = self.shape(x)
        pads = self.const(np.array([[0, 0], [before, after], [before, after], [0, 0]], np.int32),
                          f"{name}/paddings")
        y = self._same_quant(x, [n, h + before + after, w + before + after, c], name)
        self.op(OP.PAD, [x, pads], [y], schema.BuiltinOptions.PadOptions, schema.PadOptionsT())
        return y

    def upsample(self, x: int, name: str, factor: int = 2) -> int:
        n, h, w, c = self.shape(x)
        size = self.const(np.array([h * factor, w * factor], np.int32), f"{name}/size")
        y = self._same_quant(x, [n, h * factor, w * factor, c], name)
        self.op(OP.RESIZE_NEAREST_NEIGHBOR, [x, size], [y],
                schema.BuiltinOptions.ResizeNearestNeighborOptions,
                schema.ResizeNearestNeighborOptionsT())
        return y

    def unary(self, code: int, x: int, name: str) -> int:
        """RELU, LOGISTIC, TANH, ... on a float tensor."""
        y = self.tensor(self.shape(x), name)
        self.op(code, [x], [y])
        return y

    def softmax(self, x: int, name: str) -> int:
        if self.int8:
            y = self.tensor(self.shape(x), name, TT.INT8, quant=_quant([1 / 256], [-128]))
        else:
            y = self.tensor(self.shape(x), name)
        opts = schema.SoftmaxOptionsT()
        opts.beta = 1.0
        self.op(OP.SOFTMAX, [x], [y], schema.BuiltinOptions.SoftmaxOptions, opts)
        return y

    def quantize(self, x: int, name: str) -> int:
        y = self.act(self.shape(x), name)
        self.op(OP.QUANTIZE, [x], [y])
        return y

    def dequantize(self, x: int, name: str) -> int:
        y = self.tensor(self.shape(x), name)
        self.op(OP.DEQUANTIZE, [x], [y])
        return y

    def fp16_conv(self, x: int, cout: int, k: int, name: str) -> int:
        """A float conv whose weights are stored fp16 and widened by DEQUANTIZE (as
        LiteRT's fp16 post-training quantization writes them)."""
        n, h, w, cin = self.shape(x)
        w16 = self.const((self.rng.uniform(-1, 1, [cout, k, k, cin])
                          * math.sqrt(3.0 / (k * k * cin))).astype(np.float16), f"{name}/w16")
        wt = self.tensor([cout, k, k, cin], f"{name}/weights")
        self.op(OP.DEQUANTIZE, [w16], [wt])
        b = self.const(self.rng.uniform(-0.1, 0.1, cout).astype(np.float32), f"{name}/bias")
        y = self.tensor([n, h, w, cout], name)
        opts = schema.Conv2DOptionsT()
        opts.padding, opts.strideW, opts.strideH = PAD.SAME, 1, 1
        opts.fusedActivationFunction = ACT.RELU
        opts.dilationWFactor = opts.dilationHFactor = 1
        self.op(OP.CONV_2D, [x, wt, b], [y], schema.BuiltinOptions.Conv2DOptions, opts)
        return y

    # ---- output -------------------------------------------------------------------------
    def build(self, description: str = "coupprof test model") -> bytes:
        sg = schema.SubGraphT()
        sg.tensors, sg.operators = self.tensors, self.ops
        sg.inputs, sg.outputs, sg.name = self.inputs, self.outputs, "main"
        m = schema.ModelT()
        m.version, m.description = 3, description
        m.operatorCodes, m.subgraphs, m.buffers = self.codes, [sg], self.buffers
        b = flatbuffers.Builder(1024)
        b.Finish(m.Pack(b), file_identifier=b"TFL3")
        return bytes(b.Output())
