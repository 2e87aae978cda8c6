"""Where a .tflite file keeps each buffer's bytes, read through LiteRT's generated reader."""

from __future__ import annotations

import numpy as np

from profiler.tflite import schema_py_generated as schema


def buffer_starts(data: bytes) -> dict[int, int]:
    """File offset of the data of every buffer that has some, by buffer index.

    `DataAsNumpy` is a view into `data`, so its address less the file's is the offset.
    """
    base = np.frombuffer(data, np.uint8).ctypes.data
    root = schema.Model.GetRootAs(data, 0)
    starts: dict[int, int] = {}
    for i in range(root.BuffersLength()):
        buf = root.Buffers(i)
        if buf.DataLength():
            starts[i] = buf.DataAsNumpy().ctypes.data - base
    return starts
