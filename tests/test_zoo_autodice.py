"""AutoDiCE's three CNNs in the zoo (VGG-19, ResNet-101, DenseNet-121): parameters and
MACs against the architectures' formulas written out here and the reference
implementations' published figures, operator counts and layout read back from the built
flatbuffer, and slicing into the paper's layers.

Full-size (224 px) figures come from the graph description (`zoo.summary`, no weights
drawn: VGG-19 at 224 would be a 575 MB file); the same formulas, at a small size and
(for VGG-19) a reduced width, are checked against a built model's constants and the
slicer's MAC count, so the formulas cover what is emitted. That small models run in
LiteRT and their sliced layers chained reproduce the whole model: tests/test_zoo.py and
tests/test_slicing_zoo.py (the three are in their model lists).
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from typing import Any

import numpy as np
import pytest

from profiler import zoo
from profiler.slicing import slice_model
from profiler.tflite import schema_py_generated as schema
from profiler.tflite.model_io import op_name, parse_model


def _ceil_half(r: int, stride: int = 2) -> int:
    return -(-r // stride)  # SAME padding


def vgg19_truth(size: int, classes: int = 1000, alpha: float = 1.0,
                fc_width: int = 4096) -> tuple[int, int]:
    """(parameters, MACs): configuration E, 3x3 SAME convs with biases, 2x2/2 pools."""
    params = macs = 0
    cin, r = 3, size
    for channels, convs in ((64, 2), (128, 2), (256, 4), (512, 4), (512, 4)):
        c = max(int(channels * alpha), 8)
        for _ in range(convs):
            params += 3 * 3 * cin * c + c
            macs += r * r * 3 * 3 * cin * c
            cin = c
        r //= 2
    for fin, fout in ((r * r * cin, fc_width), (fc_width, fc_width), (fc_width, classes)):
        params += fin * fout + fout
        macs += fin * fout
    return params, macs


def resnet101_truth(size: int, classes: int = 1000) -> tuple[int, int]:
    """Bottleneck v1 (stride on the first 1x1 conv and the projection), BN as biases."""
    r = _ceil_half(size)
    params, macs = 7 * 7 * 3 * 64 + 64, r * r * 7 * 7 * 3 * 64
    r, cin = _ceil_half(r), 64
    for w, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 23, 2), (512, 3, 2)):
        for b in range(blocks):
            if b == 0:
                r = _ceil_half(r, stride)
                params += cin * 4 * w + 4 * w  # projection shortcut
                macs += r * r * cin * 4 * w
            params += (cin * w + w) + (9 * w * w + w) + (w * 4 * w + 4 * w)
            macs += r * r * (cin * w + 9 * w * w + w * 4 * w)
            cin = 4 * w
    return params + cin * classes + classes, macs + cin * classes


def densenet121_truth(size: int, classes: int = 1000) -> tuple[int, int]:
    """Growth 32, bn_size 4, blocks 6/12/24/16, transitions halving channels and maps."""
    r = _ceil_half(size)
    params, macs = 7 * 7 * 3 * 64 + 64, r * r * 7 * 7 * 3 * 64
    r, c = _ceil_half(r), 64
    for i, layers in enumerate((6, 12, 24, 16)):
        for _ in range(layers):
            params += (c * 128 + 128) + (3 * 3 * 128 * 32 + 32)
            macs += r * r * (c * 128 + 3 * 3 * 128 * 32)
            c += 32
        if i < 3:
            params += c * (c // 2) + c // 2
            macs += r * r * c * (c // 2)
            c, r = c // 2, r // 2
    return params + c * classes + classes, macs + c * classes


TRUTH = {"vgg19": vgg19_truth, "resnet101": resnet101_truth, "densenet121": densenet121_truth}
# Small builds: what the tests emit (VGG-19 at 1/8 width and 64-wide FC layers, 1.3 MB).
SMALL: dict[str, dict[str, Any]] = {
    "vgg19": {"size": 32, "alpha": 0.125, "fc_width": 64, "classes": 10},
    "resnet101": {"size": 32, "classes": 10},
    "densenet121": {"size": 64, "classes": 10},
}


@cache
def small(name: str) -> bytes:
    return zoo.build(name, **SMALL[name])


def ops_of(data: bytes) -> tuple[schema.ModelT, list[str]]:
    model = parse_model(data)
    return model, [op_name(model, op) for op in model.subgraphs[0].operators]


# -- full size, from the graph description ----------------------------------------------
def test_full_size_parameters_and_macs_follow_the_formulas() -> None:
    for name, truth in TRUTH.items():
        _, macs, params = zoo.summary(name)
        assert (params, macs) == truth(224), name


def test_full_size_figures_match_the_reference_implementations() -> None:
    # VGG-19 has no BN: torchvision's / Keras' / the ONNX zoo's vgg19, 143,667,240.
    params, macs = vgg19_truth(224)
    assert params == 143_667_240 and round(macs / 1e9, 2) == 19.63
    # ResNet-101: 52,672 BN channels (stem 64, 3 per bottleneck + a projection per stage).
    bn = 64 + sum(n * (w + w + 4 * w) + 4 * w
                  for w, n in ((64, 3), (128, 4), (256, 23), (512, 3)))
    assert bn == 52_672
    params, macs = resnet101_truth(224)
    # torchvision (bias-free convs, BN gamma + beta) and Keras (biased convs, BN's 4
    # numbers): BN folded leaves one bias per channel.
    assert params == 44_549_160 - 2 * bn + bn == 44_707_176 - 4 * bn
    assert abs(macs / 1e9 - 7.6) < 0.05  # He et al., Table 1: 7.6e9 multiply-adds
    # DenseNet-121, torchvision's 7,978,856: its BNs sit before the convs (41,824
    # channels, gamma + beta); here each conv has a bias (10,240 conv output channels).
    bn = 64 + sum(n * c0 + 32 * n * (n - 1) // 2 + 128 * n  # each layer's norm1, norm2
                  + (c0 + 32 * n)  # the norm after the block: a transition's, or norm5
                  for n, c0 in ((6, 64), (12, 128), (24, 256), (16, 512)))
    conv_channels = 64 + 58 * (128 + 32) + 128 + 256 + 512
    params, macs = densenet121_truth(224)
    assert bn == 41_824 and params == 7_978_856 - 2 * bn + conv_channels
    assert round(macs / 1e9, 2) == 2.83  # torchvision's 2.83 GFLOPS (multiply-adds)


def test_op_counts_at_full_size() -> None:
    assert zoo.summary("vgg19")[0] == Counter({
        "CONV_2D": 16, "MAX_POOL_2D": 5, "RESHAPE": 1, "FULLY_CONNECTED": 3, "SOFTMAX": 1})
    assert zoo.summary("resnet101")[0] == Counter({
        "CONV_2D": 1 + 33 * 3 + 4, "ADD": 33, "MAX_POOL_2D": 1, "AVERAGE_POOL_2D": 1,
        "RESHAPE": 1, "FULLY_CONNECTED": 1, "SOFTMAX": 1})
    assert zoo.summary("densenet121")[0] == Counter({
        "CONV_2D": 1 + 58 * 2 + 3 + 1, "CONCATENATION": 58, "MAX_POOL_2D": 1,
        "AVERAGE_POOL_2D": 3 + 1, "RESHAPE": 1, "SOFTMAX": 1})


# -- the built models ---------------------------------------------------------------------
@pytest.mark.parametrize("name", list(TRUTH))
def test_built_model_holds_the_formulas_parameters_and_macs(name: str) -> None:
    data = small(name)
    model = parse_model(data)
    sg = model.subgraphs[0]
    floats = sum(int(np.prod(t.shape)) for t in sg.tensors
                 if model.buffers[t.buffer].data is not None
                 and t.type == schema.TensorType.FLOAT32)
    params, macs = TRUTH[name](**SMALL[name])
    assert floats == params
    sliced = slice_model(data, cache_dir=False)  # counts MACs from the flatbuffer's shapes
    assert sum(layer.macs for layer in sliced.layers) == macs


def test_vgg19_layout() -> None:
    model, ops = ops_of(small("vgg19"))
    assert ops == (["CONV_2D"] * 2 + ["MAX_POOL_2D"]) * 2 + (["CONV_2D"] * 4 + ["MAX_POOL_2D"]) * 3 \
        + ["RESHAPE"] + ["FULLY_CONNECTED"] * 3 + ["SOFTMAX"]
    sg = model.subgraphs[0]
    convs = [op for op in sg.operators if op_name(model, op) == "CONV_2D"]
    assert {tuple(sg.tensors[op.inputs[1]].shape[1:3]) for op in convs} == {(3, 3)}
    assert all(op.builtinOptions.fusedActivationFunction == schema.ActivationFunctionType.RELU
               for op in convs)
    # alpha 0.125: 64..512 channels at 1/8, never below 8.
    assert [int(sg.tensors[op.outputs[0]].shape[3]) for op in convs] == \
        [8, 8, 16, 16] + [32] * 4 + [64] * 8
    fcs = [op for op in sg.operators if op_name(model, op) == "FULLY_CONNECTED"]
    assert [sg.tensors[op.inputs[1]].shape.tolist() for op in fcs] == \
        [[64, 64], [64, 64], [10, 64]]  # 32 px / 2^5 = 1x1x64 features


def test_resnet101_has_33_bottlenecks_in_stages_of_3_4_23_3() -> None:
    model, ops = ops_of(small("resnet101"))
    sg = model.subgraphs[0]
    made_by = {o: op_name(model, op) for op in sg.operators for o in op.outputs}
    adds = [op for op in sg.operators if op_name(model, op) == "ADD"]
    assert len(adds) == 33
    first = {0, 3, 7, 30}  # each stage opens with a projection shortcut
    kinds = [tuple(sorted(made_by[i] for i in op.inputs)) for op in adds]
    assert [i for i, k in enumerate(kinds) if k == ("CONV_2D", "CONV_2D")] == sorted(first)
    assert all(k == ("ADD", "CONV_2D") for i, k in enumerate(kinds) if i not in first)
    # 32 px: 8 px after the stem, then 8, 4, 2, 1 with 256..2048 channels.
    shapes = [sg.tensors[adds[i].outputs[0]].shape.tolist() for i in (2, 6, 29, 32)]
    assert shapes == [[1, 8, 8, 256], [1, 4, 4, 512], [1, 2, 2, 1024], [1, 1, 1, 2048]]
    # A stage's stride sits on its first block's 1x1 convs (Gluon's BottleneckV1).
    strided = [op for op in sg.operators if op_name(model, op) == "CONV_2D"
               and op.builtinOptions.strideH == 2]
    assert [(tuple(sg.tensors[op.inputs[1]].shape[1:3])) for op in strided] == \
        [(7, 7)] + [(1, 1)] * 6


def test_densenet121_dense_blocks_and_transitions() -> None:
    model, ops = ops_of(small("densenet121"))
    sg = model.subgraphs[0]
    concats = [op for op in sg.operators if op_name(model, op) == "CONCATENATION"]
    widths = [int(sg.tensors[op.outputs[0]].shape[3]) for op in concats]
    expected = []
    for layers, c0 in ((6, 64), (12, 128), (24, 256), (16, 512)):
        expected += [c0 + 32 * (i + 1) for i in range(layers)]
    assert widths == expected  # growth 32 from 64, 128, 256, 512 to 256, 512, 1024, 1024
    # Each layer joins its block's features and its own 3x3 conv's 32 new channels.
    made_by = {o: op for op in sg.operators for o in op.outputs}
    for op in concats:
        new = made_by[op.inputs[1]]
        assert op_name(model, new) == "CONV_2D"
        assert sg.tensors[new.inputs[1]].shape.tolist()[:3] == [32, 3, 3]
        bottleneck = made_by[new.inputs[0]]
        assert sg.tensors[bottleneck.inputs[1]].shape.tolist()[:3] == [128, 1, 1]
    # Transitions: 1x1 conv to half the channels, then 2x2/2 average pool.
    pools = [op for op in sg.operators if op_name(model, op) == "AVERAGE_POOL_2D"]
    assert [sg.tensors[op.outputs[0]].shape.tolist() for op in pools] == [
        [1, 8, 8, 128], [1, 4, 4, 256], [1, 2, 2, 512], [1, 1, 1, 1024]]
    assert ops[-3:] == ["CONV_2D", "RESHAPE", "SOFTMAX"]  # fc6 is a 1x1 conv


@pytest.mark.parametrize(("name", "layers"), [("vgg19", 19), ("resnet101", 105),
                                              ("densenet121", 121)])
def test_slices_into_the_papers_layers(name: str, layers: int) -> None:
    sliced = slice_model(small(name), cache_dir=False)
    assert len(sliced.layers) == layers
    # every layer opens at a conv or fc: the paper's count is the compute layers
    assert all(la.op_types[0] in ("CONV_2D", "FULLY_CONNECTED") for la in sliced.layers)
