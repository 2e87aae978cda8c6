"""The one .tflite writer (`serialize_model`): every buffer's data starts 16-byte aligned,
the data and the other buffer fields are kept, the caller's model is left alone, and
nothing but the buffers' placement differs from the generated object-API writer.

A flatbuffers release whose `Builder.Prep` or `CreateNumpyVector` pads differently
fails the alignment tests here."""

from __future__ import annotations

import flatbuffers
import numpy as np
import pytest

from profiler import zoo
from profiler.slicing import slice_model
from profiler.tflite import schema_py_generated as schema
from profiler.tflite.model_io import (
    BUFFER_ALIGNMENT,
    FILE_IDENTIFIER,
    parse_model,
    serialize_model,
)
from tests.models import topologies
from tests.tflite_layout import buffer_starts

MODELS = {name: fn() for name, fn in topologies.ALL.items()}


def assert_aligned(data: bytes) -> int:
    """Checks every buffer that holds data; returns how many that is."""
    starts = buffer_starts(data)
    bad = {i: s for i, s in starts.items() if s % BUFFER_ALIGNMENT}
    assert not bad, f"buffers not {BUFFER_ALIGNMENT}-byte aligned (index: offset): {bad}"
    return len(starts)


def test_the_test_models_are_written_unaligned() -> None:
    """The generated writer aligns buffer data to 1, so the tests below have work to do."""
    assert any(s % BUFFER_ALIGNMENT for data in MODELS.values() for s in buffer_starts(data).values())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_rewritten_model_is_aligned_with_the_same_buffers(name: str) -> None:
    model = parse_model(MODELS[name])
    out = serialize_model(model)
    assert assert_aligned(out) > 0
    again = parse_model(out)
    assert len(again.buffers) == len(model.buffers)
    for a, b in zip(model.buffers, again.buffers, strict=True):
        if a.data is None:
            assert b.data is None
        else:
            np.testing.assert_array_equal(np.asarray(b.data), np.asarray(a.data))
        assert (b.offset, b.size) == (a.offset, a.size)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_sliced_layer_is_aligned(name: str) -> None:
    layers = slice_model(MODELS[name], "op", cache_dir=False).layers
    assert sum(assert_aligned(layer.model_bytes) for layer in layers) > 0


def test_zoo_models_are_aligned() -> None:
    assert assert_aligned(zoo.build("mobilenet_v1", alpha=0.25, size=32)) > 0
    assert assert_aligned(zoo.build("mobilenet_v1_int8", alpha=0.25, size=32)) > 0


def test_offset_and_size_are_kept_and_empty_data_is_left_out() -> None:
    model = parse_model(MODELS["multi_io"])
    model.buffers.append(schema.BufferT(offset=4096, size=64))  # data outside the flatbuffer
    model.buffers.append(schema.BufferT(data=np.zeros(0, np.uint8)))
    out = parse_model(serialize_model(model))
    assert (out.buffers[-2].data, out.buffers[-2].offset, out.buffers[-2].size) == (None, 4096, 64)
    assert out.buffers[-1].data is None


def test_the_callers_model_is_left_alone() -> None:
    model = parse_model(MODELS["long_skip"])
    before = list(model.buffers)
    serialize_model(model)
    assert model.buffers == before
    assert all(type(b) is schema.BufferT for b in model.buffers)


def test_without_buffer_data_the_bytes_are_the_generated_writers() -> None:
    """Only the placement of buffer data differs: same tables, same field order."""
    model = parse_model(MODELS["inverted_residuals"])
    model.buffers = [schema.BufferT() for _ in model.buffers]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    assert serialize_model(model) == bytes(builder.Output())
