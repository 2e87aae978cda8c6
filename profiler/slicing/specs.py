"""Result types of slicing: tensor specs, layers and the sliced model."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from profiler.tflite import schema_py_generated as schema

# TensorType code -> numpy dtype string; types numpy lacks map to their LiteRT name.
_NUMPY_DTYPES: dict[int, str] = {
    schema.TensorType.FLOAT32: "float32",
    schema.TensorType.FLOAT16: "float16",
    schema.TensorType.FLOAT64: "float64",
    schema.TensorType.INT8: "int8",
    schema.TensorType.UINT8: "uint8",
    schema.TensorType.INT16: "int16",
    schema.TensorType.UINT16: "uint16",
    schema.TensorType.INT32: "int32",
    schema.TensorType.UINT32: "uint32",
    schema.TensorType.INT64: "int64",
    schema.TensorType.UINT64: "uint64",
    schema.TensorType.BOOL: "bool",
    schema.TensorType.COMPLEX64: "complex64",
    schema.TensorType.COMPLEX128: "complex128",
    schema.TensorType.STRING: "object",
}


def numpy_dtype(tensor_type: int) -> str:
    if tensor_type in _NUMPY_DTYPES:
        return _NUMPY_DTYPES[tensor_type]
    names = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    return names.get(tensor_type, f"type{tensor_type}").lower()


def _itemsize(dtype: str) -> int:
    try:
        return 0 if dtype == "object" else np.dtype(dtype).itemsize
    except TypeError:  # int4, bfloat16, ...: count one byte per element
        return 1


@dataclass(frozen=True)
class TensorSpec:
    """A runtime tensor that crosses a layer boundary (or a model input/output).

    `index` is the tensor's index in subgraph 0 of the ORIGINAL model, so specs
    from different sub-models that carry the same tensor compare equal.
    """

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy dtype string, e.g. "float32", "int8"
    nbytes: int
    scale: float | None = None  # per-tensor quantization; None if not quantized
    zero_point: int | None = None

    @classmethod
    def from_tensor(cls, index: int, tensor: schema.TensorT) -> TensorSpec:
        shape = tuple(int(d) for d in (tensor.shape if tensor.shape is not None else ()))
        dtype = numpy_dtype(tensor.type)
        nbytes = int(np.prod(shape, dtype=np.int64)) * _itemsize(dtype) if shape else _itemsize(dtype)
        scale = zero_point = None
        q = tensor.quantization
        if q is not None and q.scale is not None and len(q.scale) > 0:
            scale = float(q.scale[0])
            zp = q.zeroPoint
            zero_point = int(zp[0]) if zp is not None and len(zp) > 0 else 0
        name = tensor.name.decode() if isinstance(tensor.name, bytes) else (tensor.name or "")
        return cls(index, name, shape, dtype, max(nbytes, 0), scale, zero_point)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TensorSpec:
        return cls(**{**d, "shape": tuple(d["shape"])})


@dataclass
class Layer:
    """One sub-model: a group of operators of the original subgraph 0.

    The sub-model's subgraph inputs/outputs are exactly `inputs`/`outputs`, in
    that order.
    """

    index: int
    op_indices: list[int]
    op_types: list[str]
    macs: int
    param_bytes: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    model_bytes: bytes = field(repr=False)
    path: Path | None = None

    @property
    def input_bytes(self) -> int:
        return sum(t.nbytes for t in self.inputs)

    @property
    def output_bytes(self) -> int:
        return sum(t.nbytes for t in self.outputs)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("model_bytes", "path"):
            d.pop(key)
        return d


@dataclass
class SlicedModel:
    """A model cut into chained sub-models, in execution order.

    `cuts` are the first op index of every layer after the first (what
    `--cuts` would take to reproduce contiguous groupings).
    """

    source_sha256: str
    granularity: str  # "layer", "op" or "cuts"
    cuts: list[int]
    layers: list[Layer]
    model_inputs: list[TensorSpec]
    model_outputs: list[TensorSpec]
    cache_dir: Path | None = None  # where the sub-models live, if cached
    from_cache: bool = False  # True when loaded from the cache without re-slicing

    @property
    def num_ops(self) -> int:
        return sum(len(layer.op_indices) for layer in self.layers)
