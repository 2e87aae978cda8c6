"""`GraphBuilder`: a tiny NHWC graph description that zoo architectures are written in.

Architectures call layer methods (`conv`, `dwconv`, `maxpool`, ...) on a `GraphBuilder`;
each call records an `Op` and the tensors it creates, with their shapes worked out
the way LiteRT does (SAME / VALID padding). Constant tensors record only *how* to
initialise them (`Init`), so a graph can be described, counted (ops, MACs,
parameters) and listed without drawing a single weight; `emit.py` draws the
weights from a seeded RNG in tensor order and packs a `.tflite` flatbuffer.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from profiler.slicing.costs import macs_from_shapes

# Fused activations this builder emits, by LiteRT's name.
ACTIVATIONS = ("NONE", "RELU", "RELU6")


@dataclass(frozen=True)
class Init:
    """How a constant tensor is initialised.

    `normal`: zero-mean Gaussian with standard deviation `std` (He / LeCun scaled by
    the caller); `values`: exactly these numbers (e.g. a RESHAPE target shape).
    """

    kind: str  # "normal" | "values"
    std: float = 0.0
    values: tuple[int | float, ...] = ()


@dataclass
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"  # "float32" | "int32" (shape operands)
    init: Init | None = None  # None: an activation, computed at run time
    role: str = "activation"  # "activation" | "weights" | "bias" | "shape"

    @property
    def is_const(self) -> bool:
        return self.init is not None

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass
class Op:
    kind: str  # LiteRT builtin operator name, e.g. "CONV_2D"
    inputs: list[int]
    outputs: list[int]
    options: dict[str, Any] = field(default_factory=dict)


def conv_out(size: int, kernel: int, stride: int, padding: str) -> int:
    """Output extent of a convolution/pool along one axis, as LiteRT computes it."""
    if padding == "SAME":
        return -(-size // stride)
    if padding == "VALID":
        out = (size - kernel) // stride + 1
        if out < 1:
            raise ValueError(f"input extent {size} is smaller than the {kernel}-wide VALID window")
        return out
    raise ValueError(f"unknown padding {padding!r}")


def caffe_pool_padding(size: int, kernel: int, stride: int) -> str:
    """The LiteRT padding whose output size equals Caffe's unpadded pool (which rounds
    the window count up, ARM Compute Library's DimensionRoundingType::CEIL): VALID
    where the windows fit exactly, else SAME, whose one extra window at the end is
    Caffe's last, partial one."""
    if size < kernel:
        raise ValueError(f"input extent {size} is smaller than the {kernel}-wide pool window")
    ceil_out = -(-(size - kernel) // stride) + 1
    for padding in ("VALID", "SAME"):
        if conv_out(size, kernel, stride, padding) == ceil_out:
            return padding
    raise ValueError(f"no LiteRT padding gives Caffe's {ceil_out}-wide pool output of a "
                     f"{size}-wide input (window {kernel}, stride {stride})")


class GraphBuilder:
    """A single-subgraph NHWC model under construction (batch 1); `emit.to_model`
    turns it into a LiteRT `ModelT`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tensors: list[Tensor] = []
        self.ops: list[Op] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        # Names the SignatureDef gives inputs/outputs, parallel to inputs/outputs.
        self.input_names: list[str] = []
        self.output_names: list[str] = []

    # -- tensors -------------------------------------------------------------------
    def tensor(self, name: str, shape: tuple[int, ...], **kw: Any) -> int:
        t = Tensor(len(self.tensors), name, tuple(int(d) for d in shape), **kw)
        self.tensors.append(t)
        return t.index

    def shape(self, t: int) -> tuple[int, ...]:
        return self.tensors[t].shape

    def input(self, name: str, shape: tuple[int, ...], signature_name: str = "input") -> int:
        t = self.tensor(name, shape)
        self.inputs.append(t)
        self.input_names.append(signature_name)
        return t

    def output(self, t: int, signature_name: str = "output") -> int:
        self.outputs.append(t)
        self.output_names.append(signature_name)
        return t

    def _op(self, kind: str, inputs: list[int], outputs: list[int], **options: Any) -> None:
        self.ops.append(Op(kind, inputs, outputs, options))

    @staticmethod
    def _check_act(act: str) -> None:
        if act not in ACTIVATIONS:
            raise ValueError(f"unknown fused activation {act!r}")

    @staticmethod
    def _act_suffix(act: str) -> str:
        return {"NONE": "BiasAdd", "RELU": "Relu", "RELU6": "Relu6"}[act]

    @staticmethod
    def _weight_std(fan_in: int, act: str, gain: float) -> float:
        # He init ahead of ReLU-family activations keeps the activation variance
        # roughly constant through depth; LeCun (1/fan_in) for linear outputs.
        base = 2.0 if act != "NONE" else 1.0
        return gain * math.sqrt(base / fan_in)

    # -- layers --------------------------------------------------------------------
    def conv(
        self,
        x: int,
        filters: int,
        kernel: int | tuple[int, int],
        *,
        stride: int = 1,
        padding: str = "SAME",
        act: str = "RELU",
        name: str,
        gain: float = 1.0,
        bias_std: float = 0.01,
        groups: int = 1,
    ) -> int:
        """CONV_2D with weights [out, kh, kw, in / groups] and a bias (batch norm folded in).

        `groups` > 1 is a grouped convolution (AlexNet's two towers): LiteRT's CONV_2D
        infers the groups from the filter's input depth, output channel o reading input
        channels [g * in/groups, (g + 1) * in/groups) of group g = o // (out/groups).
        """
        self._check_act(act)
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        n, h, w, c = self.shape(x)
        if groups < 1 or c % groups or filters % groups:
            raise ValueError(f"{groups} groups do not divide {c} input and {filters} output channels")
        cin = c // groups
        oh, ow = conv_out(h, kh, stride, padding), conv_out(w, kw, stride, padding)
        wt = self.tensor(f"{name}/weights", (filters, kh, kw, cin), role="weights",
                         init=Init("normal", self._weight_std(kh * kw * cin, act, gain)))
        b = self.tensor(f"{name}/biases", (filters,), role="bias", init=Init("normal", bias_std))
        y = self.tensor(f"{name}/{self._act_suffix(act)}", (n, oh, ow, filters))
        self._op("CONV_2D", [x, wt, b], [y], padding=padding, stride=stride, act=act)
        return y

    def dwconv(
        self,
        x: int,
        kernel: int,
        *,
        stride: int = 1,
        padding: str = "SAME",
        act: str = "RELU6",
        multiplier: int = 1,
        name: str,
        bias_std: float = 0.01,
    ) -> int:
        """DEPTHWISE_CONV_2D with weights [1, kh, kw, in * multiplier]."""
        self._check_act(act)
        n, h, w, c = self.shape(x)
        oc = c * multiplier
        oh, ow = conv_out(h, kernel, stride, padding), conv_out(w, kernel, stride, padding)
        wt = self.tensor(f"{name}/depthwise_weights", (1, kernel, kernel, oc), role="weights",
                         init=Init("normal", self._weight_std(kernel * kernel, act, 1.0)))
        b = self.tensor(f"{name}/biases", (oc,), role="bias", init=Init("normal", bias_std))
        y = self.tensor(f"{name}/{self._act_suffix(act)}", (n, oh, ow, oc))
        self._op("DEPTHWISE_CONV_2D", [x, wt, b], [y], padding=padding, stride=stride, act=act,
                 multiplier=multiplier)
        return y

    def _pool(self, kind: str, x: int, kernel: int, stride: int, padding: str, name: str) -> int:
        n, h, w, c = self.shape(x)
        oh, ow = conv_out(h, kernel, stride, padding), conv_out(w, kernel, stride, padding)
        y = self.tensor(name, (n, oh, ow, c))
        self._op(kind, [x], [y], padding=padding, stride=stride, kernel=kernel, act="NONE")
        return y

    def maxpool(self, x: int, kernel: int, stride: int, *, padding: str = "SAME", name: str) -> int:
        return self._pool("MAX_POOL_2D", x, kernel, stride, padding, f"{name}/MaxPool")

    def avgpool(self, x: int, kernel: int, stride: int, *, padding: str = "VALID", name: str) -> int:
        return self._pool("AVERAGE_POOL_2D", x, kernel, stride, padding, f"{name}/AvgPool")

    def global_avgpool(self, x: int, *, name: str) -> int:
        """Average over the whole feature map (an AVERAGE_POOL_2D as wide as the map)."""
        _, h, w, _ = self.shape(x)
        if h != w:
            raise ValueError(f"global pool needs a square map, got {h}x{w}")
        return self.avgpool(x, h, 1, padding="VALID", name=name)

    def add(self, a: int, b: int, *, act: str = "RELU", name: str) -> int:
        self._check_act(act)
        if self.shape(a) != self.shape(b):
            raise ValueError(f"ADD of {self.shape(a)} and {self.shape(b)}")
        y = self.tensor(f"{name}/{'add' if act == 'NONE' else act.capitalize()}", self.shape(a))
        self._op("ADD", [a, b], [y], act=act)
        return y

    def concat(self, xs: list[int], *, axis: int = 3, name: str) -> int:
        shapes = [self.shape(x) for x in xs]
        base = list(shapes[0])
        for s in shapes[1:]:
            if len(s) != len(base) or any(s[i] != base[i] for i in range(len(s)) if i != axis):
                raise ValueError(f"CONCATENATION of mismatched shapes {shapes}")
        base[axis] = sum(s[axis] for s in shapes)
        y = self.tensor(f"{name}/concat", tuple(base))
        self._op("CONCATENATION", list(xs), [y], axis=axis, act="NONE")
        return y

    def reshape(self, x: int, shape: tuple[int, ...], *, name: str) -> int:
        if math.prod(shape) != self.tensors[x].size:
            raise ValueError(f"cannot reshape {self.shape(x)} to {shape}")
        s = self.tensor(f"{name}/shape", (len(shape),), dtype="int32", role="shape",
                        init=Init("values", values=tuple(shape)))
        y = self.tensor(f"{name}/Reshape", shape)
        self._op("RESHAPE", [x, s], [y], new_shape=tuple(shape))
        return y

    def fc(self, x: int, units: int, *, act: str = "RELU", name: str, gain: float = 1.0,
           bias_std: float = 0.01) -> int:
        """FULLY_CONNECTED on a [1, features] input, weights [units, features]."""
        self._check_act(act)
        n, feat = self.shape(x)
        wt = self.tensor(f"{name}/weights", (units, feat), role="weights",
                         init=Init("normal", self._weight_std(feat, act, gain)))
        b = self.tensor(f"{name}/biases", (units,), role="bias", init=Init("normal", bias_std))
        y = self.tensor(f"{name}/{self._act_suffix(act)}", (n, units))
        self._op("FULLY_CONNECTED", [x, wt, b], [y], act=act)
        return y

    def softmax(self, x: int, *, name: str) -> int:
        y = self.tensor(f"{name}/Softmax", self.shape(x))
        self._op("SOFTMAX", [x], [y], beta=1.0)
        return y

    def lrn(self, x: int, *, radius: int = 2, bias: float = 1.0, alpha: float = 2e-5,
            beta: float = 0.75, name: str) -> int:
        """LOCAL_RESPONSE_NORMALIZATION (AlexNet / GoogLeNet v1 stem). TF's `alpha` is
        per element: Caffe's alpha 1e-4 over a 5-wide window is 2e-5 here."""
        y = self.tensor(f"{name}/LRN", self.shape(x))
        self._op("LOCAL_RESPONSE_NORMALIZATION", [x], [y], radius=radius, bias=bias,
                 alpha=alpha, beta=beta)
        return y

    # -- summaries ----------------------------------------------------------------
    def op_counts(self) -> Counter[str]:
        return Counter(op.kind for op in self.ops)

    def macs(self) -> int:
        """Multiply-accumulates of the compute ops, counted as `profiler.slicing.costs`
        counts a built model's."""
        return sum(macs_from_shapes(op.kind, self.shape(op.outputs[0]),
                                    [self.shape(t) for t in op.inputs]) for op in self.ops)

    def param_count(self) -> int:
        return sum(t.size for t in self.tensors if t.role in ("weights", "bias"))
