"""Full-integer int8 post-training quantization of a zoo `GraphBuilder`.

The scheme is the one LiteRT's int8 kernels expect (and the TFLite converter writes):
activations int8 asymmetric per tensor; conv / depthwise / fully-connected weights
int8 symmetric per output channel; biases int32 with scale = input scale x weight
scale; SOFTMAX output scale 1/256, zero point -128; MAX/AVERAGE_POOL_2D, RESHAPE and
CONCATENATION keep their inputs' scale (LiteRT's int8 concat refuses to rescale), so
those tensors share one range. Activation ranges come from running the FP32 model in
LiteRT on random inputs with every activation exposed as an output.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profiler.runtime import make_interpreter
from profiler.zoo.emit import QuantParams, to_bytes, to_model
from profiler.zoo.graph import GraphBuilder

# Calibration inputs are drawn from a stream separate from the weights' stream.
CALIBRATION_SEED_OFFSET = 10_007
INPUT_RANGE = (-1.0, 1.0)  # MobileNet-style preprocessed pixels
# Ops whose int8 kernels need the output quantized exactly like the input(s).
SAME_SCALE_OPS = ("MAX_POOL_2D", "AVERAGE_POOL_2D", "RESHAPE", "CONCATENATION")
WEIGHT_OPS = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0}  # channel axis
QUANTIZABLE = set(SAME_SCALE_OPS) | set(WEIGHT_OPS) | {"ADD", "SOFTMAX"}


def calibration_inputs(graph: GraphBuilder, samples: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed + CALIBRATION_SEED_OFFSET)
    return [
        [rng.uniform(*INPUT_RANGE, size=graph.shape(i)).astype(np.float32) for i in graph.inputs]
        for _ in range(samples)
    ]


def calibrate(graph: GraphBuilder, constants: dict[int, np.ndarray],
              inputs: list[list[np.ndarray]]) -> dict[int, tuple[float, float]]:
    """Observed (min, max) of every activation tensor over `inputs`, run in LiteRT."""
    produced = [o for op in graph.ops for o in op.outputs]
    probe = to_bytes(to_model(graph, constants, outputs=produced))
    interp = make_interpreter(probe, name=f"{graph.name} (calibration probe)")
    lo: dict[int, float] = {}
    hi: dict[int, float] = {}

    def update(t: int, a: np.ndarray) -> None:
        lo[t] = min(lo.get(t, np.inf), float(a.min()))
        hi[t] = max(hi.get(t, -np.inf), float(a.max()))

    for sample in inputs:
        for t, x in zip(graph.inputs, sample, strict=True):
            interp.set_tensor(t, x)
            update(t, x)
        interp.invoke()
        for t in produced:  # LiteRT keeps the model's tensor indices
            update(t, interp.get_tensor(t))
    return {t: (lo[t], hi[t]) for t in lo}


def snap_outward(v: float) -> float:
    """Round |v| up to 10 significant bits: float results differ in their last bits
    between CPUs (FMA, SIMD width), and snapping keeps the model's bytes the same."""
    if v == 0.0 or not np.isfinite(v):
        return v
    m, e = np.frexp(abs(v))
    return float(np.copysign(np.ldexp(np.ceil(m * 1024.0) / 1024.0, e), v))


def activation_params(lo: float, hi: float) -> QuantParams:
    """Asymmetric int8 parameters for the range [lo, hi] (widened to contain 0)."""
    lo, hi = snap_outward(min(lo, 0.0)), snap_outward(max(hi, 0.0))
    scale = max(hi - lo, 1e-8) / 255.0
    zp = int(np.clip(np.round(-128.0 - lo / scale), -128, 127))
    return QuantParams((scale,), (zp,))


class _Groups:
    """Union-find over tensors that must share quantization parameters."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, t: int) -> int:
        self.parent.setdefault(t, t)
        while self.parent[t] != t:
            self.parent[t] = self.parent[self.parent[t]]
            t = self.parent[t]
        return t

    def union(self, a: int, b: int) -> None:
        self.parent[self.find(a)] = self.find(b)


def quantize(graph: GraphBuilder, constants: dict[int, np.ndarray],
             ranges: dict[int, tuple[float, float]]
             ) -> tuple[dict[int, np.ndarray], dict[int, QuantParams]]:
    """int8/int32 constants and quantization parameters for every tensor of `graph`."""
    unsupported = sorted({op.kind for op in graph.ops} - QUANTIZABLE)
    if unsupported:
        raise ValueError(f"{graph.name}: no int8 scheme for {', '.join(unsupported)}")
    groups = _Groups()
    for op in graph.ops:
        if op.kind in SAME_SCALE_OPS:
            for t in op.inputs:
                if not graph.tensors[t].is_const:
                    groups.union(t, op.outputs[0])
    merged: dict[int, tuple[float, float]] = {}
    for t, (lo, hi) in ranges.items():
        r = groups.find(t)
        mlo, mhi = merged.get(r, (lo, hi))
        merged[r] = (min(mlo, lo), max(mhi, hi))
    quant = {t: activation_params(*merged[groups.find(t)]) for t in ranges}
    for op in graph.ops:
        if op.kind == "SOFTMAX":  # LiteRT's int8 softmax requires exactly this output
            quant[op.outputs[0]] = QuantParams((1.0 / 256.0,), (-128,))

    qconst: dict[int, np.ndarray] = {}
    for op in graph.ops:
        if op.kind in WEIGHT_OPS:
            x, w, b = op.inputs
            axis = WEIGHT_OPS[op.kind]
            qw, w_scale = _per_channel(constants[w], axis)
            qconst[w] = qw
            quant[w] = QuantParams(tuple(w_scale.tolist()), (0,) * len(w_scale), axis)
            b_scale = quant[x].scale[0] * w_scale.astype(np.float64)
            qconst[b] = np.round(constants[b].astype(np.float64) / b_scale).astype(np.int32)
            quant[b] = QuantParams(tuple(b_scale.tolist()), (0,) * len(b_scale), 0)
    for tensor in graph.tensors:  # shape operands stay int32, unquantized (as the converter does)
        if tensor.is_const and tensor.index not in qconst:
            qconst[tensor.index] = constants[tensor.index]
    return qconst, quant


def _per_channel(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 weights in [-127, 127] with one scale per channel along `axis`."""
    other = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.abs(w).max(axis=other).astype(np.float64)
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def quantize_model(graph: GraphBuilder, constants: dict[int, np.ndarray], *, samples: int,
                   seed: int, metadata: dict[str, Any] | None = None) -> bytes:
    """Calibrate `graph` in LiteRT and return the full-integer int8 .tflite bytes."""
    ranges = calibrate(graph, constants, calibration_inputs(graph, samples, seed))
    qconst, quant = quantize(graph, constants, ranges)
    return to_bytes(to_model(graph, qconst, activation_dtype=np.int8, quant=quant,
                             metadata=metadata))
