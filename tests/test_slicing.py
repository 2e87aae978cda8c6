"""The slicer on small odd-topology models built in tests/models: grouping rules,
boundary tensors, sub-model contents, chained verification (and that it catches
a broken chain), cut points, MACs and parameter bytes, and the cache."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from profiler.errors import BadInputError
from profiler.runtime import make_interpreter
from profiler.slicing import SlicedModel, slice_model, verify
from profiler.slicing.cache import MANIFEST
from profiler.tflite import schema_py_generated as schema
from profiler.tflite.model_io import op_name, parse_model, serialize_model, sha256_bytes
from tests.models import topologies

MODELS = {name: fn() for name, fn in topologies.ALL.items()}


def sliced_of(name: str, granularity: str = "layer", cuts=None) -> SlicedModel:  # noqa: ANN001
    return slice_model(MODELS[name], granularity, cuts=cuts, cache_dir=False)


def names(specs) -> list[str]:  # noqa: ANN001
    return [t.name for t in specs]


# ---- default grouping (docs/slicing.md) ---------------------------------------------------

def test_inverted_residual_depthwise_joins_pointwise_and_add_joins_producer() -> None:
    s = sliced_of("inverted_residuals")
    assert [la.op_types for la in s.layers] == [
        ["CONV_2D"],  # stem
        ["CONV_2D"], ["DEPTHWISE_CONV_2D", "CONV_2D", "ADD"],  # block0: expand | dw+project+add
        ["CONV_2D"], ["DEPTHWISE_CONV_2D", "CONV_2D", "ADD"],
        ["CONV_2D"], ["DEPTHWISE_CONV_2D", "CONV_2D"],  # stride 2: no residual
        ["CONV_2D"], ["DEPTHWISE_CONV_2D", "CONV_2D", "ADD"],
        ["CONV_2D", "MEAN", "RESHAPE"],
        ["FULLY_CONNECTED", "SOFTMAX"],
    ]
    # The residual ADD reads the block input, produced two layers earlier.
    assert names(s.layers[2].inputs) == ["block0/expand", "stem"]
    assert names(s.layers[0].outputs) == ["stem"]  # read by layers 1 and 2, passed once


def test_long_skips_cross_many_layers_and_pad_opens_its_conv_layer() -> None:
    s = sliced_of("long_skip")
    assert s.layers[1].op_types == ["PAD", "CONV_2D"]
    by_name = {t: la.index for la in s.layers for t in names(la.outputs)}
    last = s.layers[-1]
    assert "x" in names(last.inputs)  # the model input, read again by the final ADD
    cat_layer = next(la for la in s.layers if "CONCATENATION" in la.op_types)
    assert "enc0" in names(cat_layer.inputs) and by_name["enc0"] == 0
    assert cat_layer.index - by_name["enc0"] >= 5
    assert names(last.outputs) == ["y", "y/sigmoid"]  # both model outputs, same layer


def test_multi_io_boundaries() -> None:
    s = sliced_of("multi_io")
    assert names(s.model_inputs) == ["image", "aux"]
    assert names(s.model_outputs) == ["feat", "aux_fc", "prob"]
    produced = [t for la in s.layers for t in names(la.outputs)]
    # 'feat' is a model output read inside its own layer: still an output of that layer.
    assert {"feat", "aux_fc", "prob"} <= set(produced)
    dw = next(la for la in s.layers if la.op_types[0] == "DEPTHWISE_CONV_2D")
    assert dw.op_types == ["DEPTHWISE_CONV_2D", "CONV_2D", "CONCATENATION"]
    assert names(dw.inputs) == ["stem", "b1", "b2"]


def test_fp16_weights_are_copied_into_each_layer_not_passed() -> None:
    s = sliced_of("fp16_shared_weights")
    assert [la.op_types for la in s.layers] == [
        ["DEQUANTIZE", "CONV_2D"], ["DEQUANTIZE", "CONV_2D"], ["DEQUANTIZE", "CONV_2D", "ADD"]]
    assert s.layers[0].op_indices[0] == s.layers[2].op_indices[0]  # the shared DEQUANTIZE
    crossing = {t for la in s.layers for t in names(la.inputs) + names(la.outputs)}
    assert not any(t.endswith("/weights") for t in crossing)
    # --granularity op: the DEQUANTIZE ops are no layers of their own either.
    assert [la.op_types for la in sliced_of("fp16_shared_weights", "op").layers] == [
        ["DEQUANTIZE", "CONV_2D"], ["DEQUANTIZE", "CONV_2D"], ["DEQUANTIZE", "CONV_2D"], ["ADD"]]


# ---- structure of every slicing ------------------------------------------------------------

SLICINGS = [(m, g) for m in MODELS for g in ("layer", "op")] + [
    ("long_skip", "cuts"), ("multi_io", "cuts"), ("int8", "cuts")]


def _slicing(model: str, mode: str) -> SlicedModel:
    if mode == "cuts":
        return sliced_of(model, cuts=[2, 5, 9])
    return sliced_of(model, mode)


@pytest.mark.parametrize(("model", "mode"), SLICINGS)
def test_chain_is_complete_and_topological(model: str, mode: str) -> None:
    s = _slicing(model, mode)
    src = parse_model(MODELS[model])
    sg = src.subgraphs[0]
    constant_ops = {i for la in s.layers for i in la.op_indices
                    if sum(i in other.op_indices for other in s.layers) > 1}
    assert sorted(i for la in s.layers for i in la.op_indices
                  if i not in constant_ops) == sorted(set(range(len(sg.operators))) - constant_ops)
    available = {t.index for t in s.model_inputs}
    for la in s.layers:
        assert la.op_indices == sorted(la.op_indices)
        assert {t.index for t in la.inputs} <= available, f"layer {la.index} reads the future"
        available |= {t.index for t in la.outputs}
        later = {t.index for other in s.layers[la.index + 1:] for t in other.inputs}
        model_out = {t.index for t in s.model_outputs}
        assert all(t.index in later | model_out for t in la.outputs)
    assert {t.index for t in s.model_outputs} <= available


@pytest.mark.parametrize(("model", "mode"), SLICINGS)
def test_submodels_hold_only_what_they_use(model: str, mode: str) -> None:
    s = _slicing(model, mode)
    src = parse_model(MODELS[model]).subgraphs[0]
    for la in s.layers:
        sub = parse_model(la.model_bytes)
        sg = sub.subgraphs[0]
        assert sub.buffers[0].data is None or len(sub.buffers[0].data) == 0
        assert len(sg.operators) == len(la.op_indices)
        assert [op_name(sub, op) for op in sg.operators] == la.op_types
        used = {int(t) for op in sg.operators for t in [*op.inputs, *op.outputs] if t >= 0}
        assert used == set(range(len(sg.tensors)))
        assert sorted(t.buffer for t in sg.tensors if t.buffer) == list(range(1, len(sub.buffers)))
        assert not sub.metadata
        assert [t.name for t in [sg.tensors[i] for i in sg.inputs]] == [
            n.encode() for n in names(la.inputs)]
        assert [sg.tensors[i].name for i in sg.outputs] == [n.encode() for n in names(la.outputs)]
        # Every tensor keeps its original type, shape, data and quantization.
        for t in sg.tensors:
            orig = src.tensors[next(i for i, o in enumerate(src.tensors) if o.name == t.name)]
            assert t.type == orig.type and list(t.shape) == list(orig.shape)
            oq, q = orig.quantization, t.quantization
            if oq is not None and oq.scale is not None:
                assert list(q.scale) == list(oq.scale) and list(q.zeroPoint) == list(oq.zeroPoint)
                assert q.quantizedDimension == oq.quantizedDimension
        interp = make_interpreter(la.model_bytes, name=f"layer {la.index}")
        assert [d["name"] for d in interp.get_input_details()] == names(la.inputs)
        assert [d["name"] for d in interp.get_output_details()] == names(la.outputs)
        assert [tuple(d["shape"]) for d in interp.get_input_details()] == [t.shape for t in la.inputs]


def test_weights_are_16_byte_aligned() -> None:
    la = sliced_of("multi_io").layers[0]
    data = la.model_bytes
    sub = parse_model(data)
    for buf in sub.buffers[1:]:
        raw = bytes(buf.data)
        assert data.find(raw) % 16 == 0


# ---- verification ---------------------------------------------------------------------------

@pytest.mark.parametrize(("model", "mode"), SLICINGS)
def test_verify_passes(model: str, mode: str) -> None:
    s = _slicing(model, mode)
    result = verify(s, MODELS[model], seed=1)
    assert result.ok, result.summary()
    assert result.first_bad_layer is None
    assert sorted(result.max_abs_diff) == sorted(names(s.model_outputs))
    assert all(result.max_abs_diff[k] <= result.tolerance[k] for k in result.max_abs_diff)


def _tamper(layer_bytes: bytes, how: str) -> bytes:
    """Change the weights of the first conv/FC of a sub-model."""
    m = parse_model(layer_bytes)
    sg = m.subgraphs[0]
    op = next(o for o in sg.operators if op_name(m, o) in ("CONV_2D", "FULLY_CONNECTED"))
    w = sg.tensors[op.inputs[1]]
    buf = m.buffers[w.buffer]
    if how == "float":
        arr = np.frombuffer(bytes(buf.data), np.float32) * np.float32(1.5)
    else:  # int8: flip the sign of every weight
        arr = -np.frombuffer(bytes(buf.data), np.int8).astype(np.int16)
        arr = np.clip(arr, -127, 127).astype(np.int8)
    m.buffers[w.buffer] = schema.BufferT(data=np.frombuffer(arr.tobytes(), np.uint8))
    return serialize_model(m)


@pytest.mark.parametrize(("model", "bad", "how"), [
    ("multi_io", 3, "float"), ("long_skip", 2, "float"), ("int8", 2, "int8"),
    ("inverted_residuals", 9, "float")])
def test_tampered_weight_is_blamed_on_its_layer(model: str, bad: int, how: str) -> None:
    s = sliced_of(model)
    layers = list(s.layers)
    layers[bad] = dataclasses.replace(layers[bad], model_bytes=_tamper(layers[bad].model_bytes, how))
    result = verify(dataclasses.replace(s, layers=layers), MODELS[model])
    assert not result.ok
    assert result.first_bad_layer == bad
    assert f"layer {bad}" in result.summary()


def test_mislabelled_boundary_is_caught() -> None:
    """Two same-shaped outputs listed in the wrong order feed the wrong tensors onward."""
    s = sliced_of("multi_io")
    layer = s.layers[1]
    assert [t.shape for t in layer.outputs] == [(1, 16, 16, 8)] * 2
    layers = list(s.layers)
    layers[1] = dataclasses.replace(layer, outputs=layer.outputs[::-1])
    result = verify(dataclasses.replace(s, layers=layers), MODELS["multi_io"])
    assert not result.ok and result.first_bad_layer == 1


def test_verify_refuses_another_model() -> None:
    with pytest.raises(BadInputError, match="not the model that was sliced"):
        verify(sliced_of("multi_io"), MODELS["long_skip"])


# ---- cuts, op granularity, sizes ----------------------------------------------------------------

def test_cuts_give_exact_op_ranges() -> None:
    n_ops = len(parse_model(MODELS["long_skip"]).subgraphs[0].operators)
    s = sliced_of("long_skip", cuts="9, 2,5,2,0")
    assert s.granularity == "cuts" and s.cuts == [2, 5, 9]
    assert [la.op_indices for la in s.layers] == [
        [0, 1], [2, 3, 4], [5, 6, 7, 8], list(range(9, n_ops))]


@pytest.mark.parametrize("cuts", [[99], [-1], "3,x"])
def test_bad_cuts(cuts) -> None:  # noqa: ANN001
    with pytest.raises(BadInputError):
        sliced_of("long_skip", cuts=cuts)


def test_op_granularity_is_one_layer_per_op() -> None:
    s = sliced_of("multi_io", "op")
    n_ops = len(parse_model(MODELS["multi_io"]).subgraphs[0].operators)
    assert [la.op_indices for la in s.layers] == [[i] for i in range(n_ops)]
    assert s.cuts == list(range(1, n_ops))


def test_macs_params_and_bytes() -> None:
    s = sliced_of("multi_io")
    stem, dw = s.layers[0], s.layers[3]
    assert stem.macs == 16 * 16 * 8 * (3 * 3 * 3)
    assert stem.param_bytes == (8 * 3 * 3 * 3 + 8) * 4
    assert dw.macs == 16 * 16 * 8 * 9 + 16 * 16 * 8 * 8  # depthwise 3x3 + pointwise 8->8
    assert dw.input_bytes == 3 * 16 * 16 * 8 * 4 and dw.output_bytes == 16 * 16 * 24 * 4
    fc = next(la for la in s.layers if la.op_types == ["FULLY_CONNECTED"])
    assert fc.macs == 16 * 10 and fc.param_bytes == (16 * 10 + 10) * 4

    q = sliced_of("int8")
    stem = q.layers[0]  # QUANTIZE + conv 3x3 stride 2, int8 weights, int32 bias
    assert stem.macs == 8 * 8 * 8 * 27 and stem.param_bytes == 8 * 27 + 8 * 4
    spec = stem.outputs[0]
    assert (spec.dtype, spec.nbytes) == ("int8", 8 * 8 * 8)
    assert math.isclose(spec.scale, 6 / 255, rel_tol=1e-6) and spec.zero_point == -128
    assert stem.inputs[0].dtype == "float32" and stem.inputs[0].scale is None


# ---- cache ------------------------------------------------------------------------------------

def _files(s: SlicedModel) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in s.cache_dir.iterdir()}


def test_cache_hit_does_not_slice_again(tmp_path) -> None:  # noqa: ANN001
    data = MODELS["inverted_residuals"]
    first = slice_model(data, cache_dir=tmp_path)
    assert not first.from_cache
    assert first.cache_dir == tmp_path / sha256_bytes(data) / "v1-layer"
    assert all(la.path is not None and la.path.read_bytes() == la.model_bytes for la in first.layers)
    before = _files(first)
    again = slice_model(data, cache_dir=tmp_path)
    assert again.from_cache and _files(again) == before
    assert [la.to_dict() for la in again.layers] == [la.to_dict() for la in first.layers]
    assert [la.model_bytes for la in again.layers] == [la.model_bytes for la in first.layers]
    assert (again.model_inputs, again.model_outputs) == (first.model_inputs, first.model_outputs)
    # Other groupings get their own entries.
    by_op = slice_model(data, "op", cache_dir=tmp_path)
    by_cuts = slice_model(data, cuts=[4], cache_dir=tmp_path)
    assert len({first.cache_dir, by_op.cache_dir, by_cuts.cache_dir}) == 3
    assert not by_op.from_cache and len(by_cuts.layers) == 2


def test_corrupt_cache_entries_are_rebuilt(tmp_path) -> None:  # noqa: ANN001
    data = MODELS["multi_io"]
    first = slice_model(data, cache_dir=tmp_path)
    victim = first.layers[2].path
    victim.write_bytes(victim.read_bytes()[:100])  # truncated
    rebuilt = slice_model(data, cache_dir=tmp_path)
    assert not rebuilt.from_cache
    assert victim.read_bytes() == first.layers[2].model_bytes
    assert verify(rebuilt, data).ok
    (rebuilt.cache_dir / MANIFEST).write_text("{ not json")
    assert not slice_model(data, cache_dir=tmp_path).from_cache
    assert json.loads((rebuilt.cache_dir / MANIFEST).read_text())["format"] == 1
    assert slice_model(data, cache_dir=tmp_path).from_cache


def test_default_cache_root_follows_env(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("COUPPROF_CACHE", str(tmp_path))
    data = MODELS["long_skip"]
    s = slice_model(data)
    assert s.cache_dir == tmp_path / "slices" / sha256_bytes(data) / "v1-layer"
    assert slice_model(data).from_cache


def test_unwritable_cache_still_slices(tmp_path) -> None:  # noqa: ANN001
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    s = slice_model(MODELS["int8"], cache_dir=blocker)
    assert s.cache_dir is None and all(la.path is None for la in s.layers)
    assert verify(s, MODELS["int8"]).ok


def test_model_from_path_and_bytes_agree(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "m.tflite"
    path.write_bytes(MODELS["int8"])
    a = slice_model(path, cache_dir=False)
    b = slice_model(MODELS["int8"], cache_dir=False)
    assert a.source_sha256 == b.source_sha256
    assert [la.model_bytes for la in a.layers] == [la.model_bytes for la in b.layers]


def test_subgraph_types_are_kept() -> None:
    """int8 sub-models keep int8 tensors end to end (no silent float fallback)."""
    for la in sliced_of("int8").layers[1:]:
        sg = parse_model(la.model_bytes).subgraphs[0]
        assert all(sg.tensors[i].type == schema.TensorType.INT8 for i in sg.inputs)
