"""Model zoo: every model runs in LiteRT, has the published architecture, the int8
model tracks the FP32 one, builds are deterministic, and `coupprof zoo` behaves.

Structure is checked on the emitted flatbuffer (parsed back with LiteRT's schema),
against figures from the papers and reference implementations, never against the
zoo's own graph description.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from profiler import zoo
from profiler.errors import BadInputError
from profiler.runtime import make_interpreter, runtime
from profiler.tflite import schema_py_generated as schema
from profiler.tflite.model_io import op_name, parse_model
from tests.tflite_layout import buffer_starts

COUPPROF = Path(sys.executable).with_name("coupprof")

# Small but complete variants, so the whole file stays fast.
SMALL: dict[str, dict[str, Any]] = {
    "mobilenet_v1": {"alpha": 0.25, "size": 64},
    "mobilenet_v1_int8": {"alpha": 0.25, "size": 64},
    "resnet50": {"size": 64},
    "resnet50_slim": {"size": 64},
    "googlenet": {"size": 64},
    "squeezenet": {"size": 64},
    "squeezenet1_0": {"size": 64},
    "alexnet": {"size": 67, "fc_width": 64},
    "alexnet_bvlc": {"size": 67, "fc_width": 64},
    "vgg19": {"size": 32, "alpha": 0.125, "fc_width": 64},
    "resnet101": {"size": 32},
    "densenet121": {"size": 64},
}


@cache
def small(name: str) -> bytes:
    return zoo.build(name, **SMALL[name])


def ops_of(data: bytes) -> tuple[schema.ModelT, list[str]]:
    model = parse_model(data)
    return model, [op_name(model, op) for op in model.subgraphs[0].operators]


def uniform_input(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def run_all_tensors(data: bytes, x: np.ndarray) -> dict[str, np.ndarray]:
    """Run once and return every tensor by name, int8 ones dequantized."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LiteRT warns that preserving tensors is for debugging
        interp = runtime().module.Interpreter(model_content=data,
                                              experimental_preserve_all_tensors=True)
    interp.allocate_tensors()
    inp = interp.get_input_details()[0]
    if inp["dtype"] == np.int8:
        scale, zp = inp["quantization"]
        x = np.clip(np.round(x / scale + zp), -128, 127).astype(np.int8)
    interp.set_tensor(inp["index"], x)
    interp.invoke()
    out: dict[str, np.ndarray] = {}
    for d in interp.get_tensor_details():
        a = interp.get_tensor(d["index"])
        if d["dtype"] == np.int8:
            scale, zp = d["quantization"]
            a = (a.astype(np.float32) - zp) * scale
        out[d["name"]] = a
    return out


# -- every model runs --------------------------------------------------------------------
@pytest.mark.parametrize("name", list(SMALL))
def test_model_runs_in_litert_with_sane_activations(name: str) -> None:
    data = small(name)
    interp = make_interpreter(data, name=name)
    (inp,), (out,) = interp.get_input_details(), interp.get_output_details()
    size = SMALL[name]["size"]
    assert tuple(inp["shape"]) == (1, size, size, 3)
    assert tuple(out["shape"]) == (1, 1000)
    assert interp.get_signature_list() == {
        "serving_default": {"inputs": ["input"], "outputs": ["output"]}}

    tensors = run_all_tensors(data, uniform_input((1, size, size, 3), seed=5))
    probs = tensors[next(n for n in tensors if n.endswith("Softmax"))]
    assert probs.shape == (1, 1000)
    assert np.all(np.isfinite(probs)) and float(probs.max()) > 0.0
    if not name.endswith("int8"):  # int8 rounds the many tiny probabilities to 0
        assert abs(float(probs.sum()) - 1.0) < 1e-4
    model = parse_model(data)
    activations = [t.name.decode() for t in model.subgraphs[0].tensors if
                   model.buffers[t.buffer].data is None]
    for tname in activations:  # He init keeps every activation finite and bounded
        a = tensors[tname]
        assert np.all(np.isfinite(a)), tname
        assert float(np.abs(a).max()) < 100.0, tname
    # The features entering the classifier still depend on the input (no dead network).
    other = run_all_tensors(data, uniform_input((1, size, size, 3), seed=6))
    softmax_in = model.subgraphs[0].tensors[model.subgraphs[0].operators[-1].inputs[0]]
    logits_a, logits_b = tensors[softmax_in.name.decode()], other[softmax_in.name.decode()]
    assert float(np.abs(logits_a - logits_b).max()) > 1e-3


def test_classes_parameter_sets_the_output_width() -> None:
    interp = make_interpreter(zoo.build("squeezenet", size=64, classes=10))
    assert tuple(interp.get_output_details()[0]["shape"]) == (1, 10)


def test_constant_buffers_are_16_byte_aligned() -> None:
    starts = buffer_starts(small("mobilenet_v1"))
    for i, start in starts.items():
        assert start % 16 == 0, f"buffer {i} at {start}"
    assert len(starts) == 15 * 2 + 13 * 2 + 2  # 15 convs, 13 depthwise, shape, metadata


# -- architecture ------------------------------------------------------------------------
def test_mobilenet_v1_layout() -> None:
    model, ops = ops_of(small("mobilenet_v1"))
    assert ops == (["CONV_2D"] + ["DEPTHWISE_CONV_2D", "CONV_2D"] * 13
                   + ["AVERAGE_POOL_2D", "CONV_2D", "RESHAPE", "SOFTMAX"])
    sg = model.subgraphs[0]
    dw = [op for op in sg.operators if op_name(model, op) == "DEPTHWISE_CONV_2D"]
    # Table 1 of the MobileNet paper: strides of the 13 depthwise layers.
    assert [op.builtinOptions.strideH for op in dw] == [1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1]
    assert all(op.builtinOptions.fusedActivationFunction == schema.ActivationFunctionType.RELU6
               for op in sg.operators[:27])
    # alpha 0.25: pointwise widths 64..1024 scaled by 0.25; 64 px input -> 2x2 final map.
    pw = [sg.tensors[op.outputs[0]].shape.tolist() for op in sg.operators[2:27:2]]
    assert [s[3] for s in pw] == [16, 32, 32, 64, 64] + [128] * 6 + [256, 256]
    assert pw[-1][1:3] == [2, 2]


def test_param_counts_match_reference_implementations() -> None:
    # BN folded into biases: the reference figure minus BN's 4 numbers per channel, plus a
    # bias per conv channel where the reference conv had none.
    # Keras MobileNet(alpha=1): 4,253,864 params, 10,944 BN channels, bias-free convs.
    assert zoo.summary("mobilenet_v1")[2] == 4_253_864 - 4 * 10_944 + 10_944
    # Keras ResNet50: 25,636,712 params, 26,560 BN channels; its convs have biases.
    assert zoo.summary("resnet50")[2] == 25_636_712 - 4 * 26_560
    # torchvision squeezenet1_1 (no BN): 1,235,496.
    assert zoo.summary("squeezenet")[2] == 1_235_496
    # Single-tower AlexNet with the paper's widths (Caffe, no groups): 62,378,344.
    assert zoo.summary("alexnet", fc_width=4096)[2] == 62_378_344


def test_emitted_constants_match_the_counted_parameters() -> None:
    model = parse_model(small("squeezenet"))
    sg = model.subgraphs[0]
    floats = sum(int(np.prod(t.shape)) for t in sg.tensors
                 if model.buffers[t.buffer].data is not None and
                 t.type == schema.TensorType.FLOAT32)
    assert floats == zoo.summary("squeezenet", size=64)[2] == 1_235_496


def _producers(model: schema.ModelT) -> dict[int, str]:
    return {o: op_name(model, op) for op in model.subgraphs[0].operators for o in op.outputs}


def test_resnet50_has_16_bottlenecks_with_projection_and_identity_skips() -> None:
    model, ops = ops_of(small("resnet50"))
    counts = Counter(ops)
    assert counts["ADD"] == 16
    assert counts["CONV_2D"] == 1 + 16 * 3 + 4  # stem, 3 per bottleneck, 4 projections
    assert counts["FULLY_CONNECTED"] == 1 and counts["MAX_POOL_2D"] == 1
    sg, made_by = model.subgraphs[0], _producers(model)
    adds = [op for op in sg.operators if op_name(model, op) == "ADD"]
    kinds = [tuple(sorted(made_by[i] for i in op.inputs)) for op in adds]
    # Stages of 3, 4, 6, 3 blocks: each stage opens with a projection (conv + conv), the
    # other blocks add the previous block's output (identity).
    first = {0, 3, 7, 13}
    for i, k in enumerate(kinds):
        assert k == (("CONV_2D", "CONV_2D") if i in first else ("ADD", "CONV_2D")), i
    assert all(op.builtinOptions.fusedActivationFunction == schema.ActivationFunctionType.RELU
               for op in adds)
    # Output channels of the four stages (256, 512, 1024, 2048), each stride 2 after conv2.
    shapes = [sg.tensors[adds[i].outputs[0]].shape.tolist() for i in (2, 6, 12, 15)]
    assert shapes == [[1, 16, 16, 256], [1, 8, 8, 512], [1, 4, 4, 1024], [1, 2, 2, 2048]]


def test_googlenet_inception_blocks_follow_table_1() -> None:
    model, ops = ops_of(small("googlenet"))
    counts = Counter(ops)
    assert counts["CONCATENATION"] == 9
    assert counts["CONV_2D"] == 3 + 9 * 6 and counts["LOCAL_RESPONSE_NORMALIZATION"] == 2
    assert counts["MAX_POOL_2D"] == 4 + 9
    sg, made_by = model.subgraphs[0], _producers(model)
    concats = [op for op in sg.operators if op_name(model, op) == "CONCATENATION"]
    assert all(len(op.inputs) == 4 and op.builtinOptions.axis == 3 for op in concats)
    assert all(made_by[i] == "CONV_2D" for op in concats for i in op.inputs)
    widths = [int(sg.tensors[op.outputs[0]].shape[3]) for op in concats]
    assert widths == [256, 480, 512, 512, 512, 528, 832, 832, 1024]  # Table 1 of the paper
    # 3x3 and 5x5 branches really are 3x3 and 5x5 kernels (weights [out, kh, kw, in]).
    kernels = Counter(int(sg.tensors[op.inputs[1]].shape[1]) for op in sg.operators
                      if op_name(model, op) == "CONV_2D")
    assert kernels == Counter({1: 1 + 9 * 4, 3: 1 + 9, 5: 9, 7: 1})


def test_squeezenet_fire_modules() -> None:
    model, ops = ops_of(zoo.build("squeezenet", size=224, classes=10))
    counts = Counter(ops)
    assert counts["CONCATENATION"] == 8 and counts["CONV_2D"] == 2 + 8 * 3
    sg = model.subgraphs[0]
    concats = [op for op in sg.operators if op_name(model, op) == "CONCATENATION"]
    shapes = [sg.tensors[op.outputs[0]].shape.tolist()[1:] for op in concats]
    # SqueezeNet 1.1 reference maps at 224 px: 55, 27, 13.
    assert shapes == [[55, 55, 128], [55, 55, 128], [27, 27, 256], [27, 27, 256],
                      [13, 13, 384], [13, 13, 384], [13, 13, 512], [13, 13, 512]]


def test_alexnet_layout() -> None:
    model, ops = ops_of(zoo.build("alexnet", fc_width=16))
    assert ops == ["CONV_2D", "LOCAL_RESPONSE_NORMALIZATION", "MAX_POOL_2D",
                   "CONV_2D", "LOCAL_RESPONSE_NORMALIZATION", "MAX_POOL_2D",
                   "CONV_2D", "CONV_2D", "CONV_2D", "MAX_POOL_2D", "RESHAPE",
                   "FULLY_CONNECTED", "FULLY_CONNECTED", "FULLY_CONNECTED", "SOFTMAX"]
    sg = model.subgraphs[0]
    conv1 = sg.operators[0]
    assert sg.tensors[conv1.inputs[1]].shape.tolist() == [96, 11, 11, 3]
    assert conv1.builtinOptions.strideH == 4
    assert sg.tensors[conv1.outputs[0]].shape.tolist() == [1, 55, 55, 96]  # the paper's 55
    assert sg.tensors[sg.operators[10].outputs[0]].shape.tolist() == [1, 6 * 6 * 256]
    _, no_lrn = ops_of(zoo.build("alexnet", fc_width=16, lrn=0))
    assert "LOCAL_RESPONSE_NORMALIZATION" not in no_lrn and len(no_lrn) == 13


# -- int8 --------------------------------------------------------------------------------
def test_int8_model_quantizes_every_tensor() -> None:
    model, ops = ops_of(small("mobilenet_v1_int8"))
    assert ops == ops_of(small("mobilenet_v1"))[1]
    sg, T = model.subgraphs[0], schema.TensorType
    assert sg.tensors[sg.inputs[0]].type == T.INT8 and sg.tensors[sg.outputs[0]].type == T.INT8
    for t in sg.tensors:
        if t.type == T.INT32 and t.name.decode().endswith("/shape"):
            continue  # RESHAPE's shape operand is an index, not a quantity
        assert t.quantization is not None and len(t.quantization.scale) >= 1, t.name
    def q(i: int) -> tuple[list[float], list[int]]:
        p = sg.tensors[i].quantization
        return list(p.scale), list(p.zeroPoint)
    for op in sg.operators:
        kind = op_name(model, op)
        if kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            x, w, b = (sg.tensors[i] for i in op.inputs)
            axis = 0 if kind == "CONV_2D" else 3
            channels = int(w.shape[axis])
            assert w.type == T.INT8 and b.type == T.INT32
            assert w.quantization.quantizedDimension == axis
            assert len(w.quantization.scale) == channels and not any(w.quantization.zeroPoint)
            expected = np.float32(x.quantization.scale[0]) * np.asarray(w.quantization.scale)
            np.testing.assert_allclose(b.quantization.scale, expected, rtol=1e-6)
        elif kind in ("AVERAGE_POOL_2D", "RESHAPE"):
            assert q(op.inputs[0]) == q(op.outputs[0])
        elif kind == "SOFTMAX":
            assert q(op.outputs[0]) == ([1 / 256], [-128])


def test_int8_model_tracks_the_fp32_model() -> None:
    fp32, int8 = small("mobilenet_v1"), small("mobilenet_v1_int8")
    logits = "MobilenetV1/Logits/Conv2d_1c_1x1/BiasAdd"
    features = "MobilenetV1/Conv2d_13_pointwise/Relu6"
    runs = []
    for seed in (11, 12, 13):
        x = uniform_input((1, 64, 64, 3), seed)
        runs.append((run_all_tensors(fp32, x), run_all_tensors(int8, x)))
    for f, q in runs:
        assert np.corrcoef(f[features].ravel(), q[features].ravel())[0, 1] > 0.98
        top_f = set(np.argsort(-f[logits].ravel())[:5])
        top_q = set(np.argsort(-q[logits].ravel())[:5])
        assert len(top_f & top_q) >= 4
        probs_f, probs_q = f["MobilenetV1/Predictions/Softmax"], q["MobilenetV1/Predictions/Softmax"]
        assert int(np.argmax(probs_f)) == int(np.argmax(probs_q))
        assert float(np.abs(probs_f - probs_q).max()) <= 3 / 256  # a few int8 quanta
    # Random images share much of their logits (biases, mean features), so also require
    # the int8 model to follow how the logits *change* from one input to another.
    (f1, q1), (f2, q2) = runs[0], runs[1]
    delta_f, delta_q = (f1[logits] - f2[logits]).ravel(), (q1[logits] - q2[logits]).ravel()
    assert np.corrcoef(delta_f, delta_q)[0, 1] > 0.9


# -- determinism, cache, default model ----------------------------------------------------
def test_builds_are_deterministic_and_seeded() -> None:
    assert zoo.build("mobilenet_v1", alpha=0.25, size=64) == small("mobilenet_v1")
    assert zoo.build("mobilenet_v1_int8", alpha=0.25, size=64) == small("mobilenet_v1_int8")
    other = zoo.build("mobilenet_v1", alpha=0.25, size=64, seed=1)
    assert other != small("mobilenet_v1") and len(other) == len(small("mobilenet_v1"))


def test_metadata_records_how_the_model_was_made() -> None:
    model = parse_model(small("googlenet"))
    (md,) = model.metadata
    assert md.name.decode() == "coupprof_zoo"
    meta = json.loads(bytes(model.buffers[md.buffer].data))
    assert meta["name"] == "googlenet"
    assert meta["params"] == {"size": 64, "classes": 1000, "lrn": 1, "seed": 0}


def test_committed_default_model_equals_a_fresh_build() -> None:
    path = zoo.default_model_path()
    # In a checkout the package data is the top-level data/ folder (pyproject package-dir).
    assert path == Path(__file__).resolve().parents[1] / "data" / "models" / "mobilenet_v1_0.25_128.tflite"
    assert path.read_bytes() == zoo.build("mobilenet_v1", alpha=0.25, size=128)
    _, ops = ops_of(path.read_bytes())
    assert ops.count("DEPTHWISE_CONV_2D") == 13


def test_model_path_builds_once_into_the_cache(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COUPPROF_CACHE", str(tmp_path))
    path = zoo.model_path("squeezenet", size=64)
    assert path.parent == tmp_path / "models" and path.name.startswith("squeezenet-")
    assert path.read_bytes() == small("squeezenet")
    stamp = path.stat().st_mtime_ns
    os.utime(path, ns=(stamp - 10**9, stamp - 10**9))
    # Same model named with explicit defaults and a string value: the same file, not rebuilt.
    again = zoo.model_path("squeezenet", size="64", classes=1000, seed=0)
    assert again == path and again.stat().st_mtime_ns == stamp - 10**9
    assert [p.name for p in (tmp_path / "models").iterdir()] == [path.name]  # no temp left
    assert zoo.model_path("squeezenet", size=65) != path


def test_list_models_describes_every_model() -> None:
    entries = {e.name: e for e in zoo.list_models()}
    assert set(entries) == set(SMALL)
    assert entries["mobilenet_v1"].default_params == {
        "alpha": 1.0, "size": 224, "classes": 1000, "seed": 0}
    assert set(entries["resnet50"].params) == {"size", "classes", "seed"}
    assert all(e.description for e in entries.values())


@pytest.mark.parametrize(("name", "params", "words"), [
    ("vgg16", {}, "unknown zoo model 'vgg16'"),
    ("resnet50", {"alpha": 0.5}, "has no parameter 'alpha'"),
    ("mobilenet_v1", {"alpha": "wide"}, "is not a number"),
    ("mobilenet_v1", {"size": 8}, "out of range"),
    ("googlenet", {"lrn": 2}, "out of range (0..1)"),
    ("alexnet", {"size": 2.5}, "is not an integer"),
])
def test_bad_names_and_params_raise_bad_input(name: str, params: dict[str, Any],
                                              words: str) -> None:
    with pytest.raises(BadInputError) as err:
        zoo.build(name, **params)
    assert words in str(err.value)
    assert err.value.exit_code == 2


# -- CLI ---------------------------------------------------------------------------------
def coupprof(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(COUPPROF), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_cli_list() -> None:
    res = coupprof("zoo", "--list")
    assert res.returncode == 0, res.stderr
    for name in SMALL:
        assert name in res.stdout
    assert "569 M" in res.stdout  # MobileNetV1 at 224: 569 M MACs, as in the paper
    # ARM-CO-UP's five CNNs: the zoo models that build them, and their layer cuts.
    rows = [line for line in res.stdout.splitlines() if "ResV1_50" in line or "Alex " in line]
    assert any("alexnet_bvlc" in r and " 8 " in r and "3,6,7,8,10,12,13" in r for r in rows)
    assert any("resnet50_slim" in r and " 18 " in r
               and "2,7,11,16,21,25,29,34,39,43,47,51,55,60,65,69,74" in r for r in rows)
    assert "mobilenet_v1 --param classes=1001" in res.stdout


def test_cli_writes_the_built_model(tmp_path: Path) -> None:
    out = tmp_path / "m.tflite"
    res = coupprof("zoo", "mobilenet_v1", "--alpha", "0.25", "--size", "64", "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == small("mobilenet_v1")
    assert str(out) in res.stdout and "31 ops" in res.stdout
    out2 = tmp_path / "s.tflite"
    res = coupprof("zoo", "squeezenet", "--param", "size=64", "-o", str(out2))
    assert res.returncode == 0 and out2.read_bytes() == small("squeezenet")


def test_cli_without_output_builds_into_the_cache(tmp_path: Path) -> None:
    res = coupprof("zoo", "squeezenet", "--size", "64", env={"COUPPROF_CACHE": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    (built,) = (tmp_path / "models").iterdir()
    assert str(built) in res.stdout and built.read_bytes() == small("squeezenet")


@pytest.mark.parametrize("args", [
    ("zoo", "vgg16", "-o", "x.tflite"),
    ("zoo", "resnet50", "--alpha", "0.5"),
    ("zoo", "resnet50", "--param", "depth=101"),
    ("zoo", "resnet50", "--param", "size"),
    ("zoo", "mobilenet_v1", "--size", "big"),
    ("zoo",),
    ("zoo", "squeezenet", "-o", "/nonexistent-dir/x.tflite"),
])
def test_cli_bad_input_exits_2_with_one_line(args: tuple[str, ...], tmp_path: Path) -> None:
    res = subprocess.run([str(COUPPROF), *args], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert res.stdout == ""
    assert not any(tmp_path.iterdir())
