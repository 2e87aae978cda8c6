"""Load and save .tflite models as LiteRT schema object trees (`ModelT`).

All flatbuffer parsing goes through here, so that malformed files become one
`ModelError` with the file name and a fix, never a flatbuffers traceback.
`serialize_model` is the one .tflite writer (zoo models, sliced sub-models): it
packs every buffer's data 16-byte aligned.
"""

from __future__ import annotations

import copy
import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

import flatbuffers
import numpy as np

from profiler.errors import ModelError
from profiler.tflite import schema_py_generated as schema

FILE_IDENTIFIER = b"TFL3"
# The schema's `force_align: 16` on Buffer.data, which LiteRT's own writer honours so
# kernels can read weights in place; the generated Python code aligns to 1.
BUFFER_ALIGNMENT = 16

# BuiltinOperator code -> name, e.g. 3 -> "CONV_2D".
OP_NAMES: dict[int, str] = {
    v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")
}
# TensorType code -> name, e.g. 0 -> "FLOAT32".
TENSOR_TYPE_NAMES: dict[int, str] = {
    v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")
}


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_model_bytes(path: str | Path) -> bytes:
    """Read a model file, checking it exists and looks like a tflite flatbuffer."""
    p = Path(path)
    if not p.exists():
        raise ModelError(f"model file not found: {p}", "check the path given to --model")
    if p.is_dir():
        raise ModelError(f"{p} is a directory, not a .tflite file", "pass the model file itself")
    data = p.read_bytes()
    check_tflite_bytes(data, str(p))
    return data


def check_tflite_bytes(data: bytes, name: str = "model") -> None:
    if len(data) < 8 or data[4:8] != FILE_IDENTIFIER:
        raise ModelError(
            f"{name} is not a .tflite model (no TFL3 flatbuffer identifier)",
            "pass a LiteRT/TensorFlow Lite flatbuffer, e.g. one from `coupprof zoo NAME -o FILE`",
        )
    (root,) = struct.unpack_from("<I", data, 0)
    if root >= len(data):
        raise ModelError(f"{name} is truncated (root offset {root} beyond {len(data)} bytes)",
                         "re-download or re-export the model")


def parse_model(data: bytes, name: str = "model", *, copy: bool = True) -> schema.ModelT:
    """Unpack flatbuffer bytes into a mutable `ModelT`. ``copy`` False: its buffers'
    arrays are read-only views of ``data`` rather than of a copy (a model's worth of
    memory less, for a reader that only builds new models from it)."""
    check_tflite_bytes(data, name)
    try:
        model = schema.ModelT.InitFromPackedBuf(bytearray(data) if copy else data, 0)
    except Exception as err:  # flatbuffers raises IndexError/struct.error on bad offsets
        raise ModelError(f"{name} is truncated or corrupt ({type(err).__name__}: {err})",
                         "re-download or re-export the model") from None
    if not model.subgraphs:
        raise ModelError(f"{name} has no subgraphs", "export the model again")
    return model


def load_model(path: str | Path) -> tuple[schema.ModelT, bytes]:
    data = read_model_bytes(path)
    return parse_model(data, str(path)), data


def serialize_model(model: schema.ModelT) -> bytes:
    """Pack a `ModelT` into .tflite bytes (with the TFL3 identifier), every buffer's
    data 16-byte aligned. `model` itself is left as it was."""
    packed = copy.copy(model)
    if model.buffers is not None:
        packed.buffers = [_AlignedBuffer(buf) for buf in model.buffers]
    # sized for the buffers' data up front, and copied out once: a model of 100 MB would
    # otherwise pass through a doubling 128 MB buffer and two copies of its output
    data = sum(len(buf.data) for buf in model.buffers or [] if buf.data is not None)
    builder = flatbuffers.Builder(min(data + data // 64 + (1 << 16),
                                      flatbuffers.Builder.MAX_BUFFER_SIZE))
    builder.Finish(packed.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(memoryview(builder.Bytes)[builder.Head():])


@dataclass(frozen=True)
class _AlignedBuffer:
    """Stands in for a `BufferT` while `ModelT.Pack` runs, packing its data aligned.

    Only Builder methods that flatc's generated code calls are used, no attributes:
    `Prep(16, n)` pads so that the n bytes written next start on a 16-byte boundary of
    the finished file, and `CreateNumpyVector` writes them with no further padding, as
    its own alignment (4 for the length, 1 for uint8) is then met. The bytes equal
    `StartVector(1, n, 16)` followed by the data. Empty data is left out (no vector).
    """

    buf: schema.BufferT

    def Pack(self, builder: flatbuffers.Builder) -> int:  # noqa: N802 - object-API name
        data = None
        if self.buf.data is not None and len(self.buf.data) > 0:
            payload = np.ascontiguousarray(self.buf.data, dtype=np.uint8).reshape(-1)
            builder.Prep(BUFFER_ALIGNMENT, payload.size)
            data = builder.CreateNumpyVector(payload)
        schema.BufferStart(builder)
        if data is not None:
            schema.BufferAddData(builder, data)
        schema.BufferAddOffset(builder, self.buf.offset)
        schema.BufferAddSize(builder, self.buf.size)
        return schema.BufferEnd(builder)


def op_name(model: schema.ModelT, op: schema.OperatorT) -> str:
    code = model.operatorCodes[op.opcodeIndex]
    # Newer schemas keep codes > 127 in builtinCode; deprecatedBuiltinCode caps at 127.
    value = max(code.builtinCode, code.deprecatedBuiltinCode)
    if value == schema.BuiltinOperator.CUSTOM:
        cc = code.customCode
        return f"CUSTOM:{cc.decode() if isinstance(cc, bytes) else cc}"
    return OP_NAMES.get(value, f"OP{value}")
