"""Every zoo model (small input sizes) slices into the layer count its paper gives and
its chained sub-models reproduce it, with the default grouping and one layer per op."""

from __future__ import annotations

from functools import cache

import pytest

from profiler import zoo
from profiler.slicing import slice_model, verify
from profiler.tflite.model_io import parse_model

# Conv + fully-connected layers as the architectures' papers count them.
PAPER_LAYERS = {
    "mobilenet_v1": 15,  # conv1, 13 depthwise-separable blocks, fc
    "mobilenet_v1_int8": 15,
    "resnet50": 54,  # conv1, 16 bottlenecks x 3 convs, 4 projection shortcuts, fc
    "resnet50_slim": 54,  # the same convs; the classifier is a 1x1 conv
    "googlenet": 58,  # 3 stem convs, 9 inception blocks x 6 convs, fc
    "squeezenet": 26,  # conv1, 8 fire modules x 3 convs, conv10
    "squeezenet1_0": 26,
    "alexnet": 8,  # 5 conv, 3 fc
    "alexnet_bvlc": 8,  # grouped convs stay one CONV_2D each
    "vgg19": 19,  # 16 convs, 3 fc
    "resnet101": 105,  # conv1, 33 bottlenecks x 3 convs, 4 projection shortcuts, fc
    "densenet121": 121,  # conv1, 58 dense layers x 2 convs, 3 transitions, fc6
}
NAMES = [e.name for e in zoo.list_models()]


@cache
def small(name: str) -> bytes:
    entry = next(e for e in zoo.list_models() if e.name == name)
    params: dict[str, object] = {}
    if "size" in entry.params:
        params["size"] = 67 if name.startswith("alexnet") else 64
    if "alpha" in entry.params:
        params["alpha"] = 0.25
    if "classes" in entry.params:
        params["classes"] = 10
    if "fc_width" in entry.params:
        params["fc_width"] = 64
    return zoo.build(name, **params)


@pytest.mark.parametrize("granularity", ["layer", "op"])
@pytest.mark.parametrize("name", NAMES)
def test_zoo_model_verifies(name: str, granularity: str) -> None:
    data = small(name)
    sliced = slice_model(data, granularity, cache_dir=False)
    result = verify(sliced, data)
    assert result.ok, result.summary()
    if granularity == "op":
        assert len(sliced.layers) == len(parse_model(data).subgraphs[0].operators)
    elif name in PAPER_LAYERS:
        assert len(sliced.layers) == PAPER_LAYERS[name]


def test_default_model_verifies() -> None:
    path = zoo.default_model_path()
    sliced = slice_model(path, cache_dir=False)
    assert len(sliced.layers) == 15
    assert [la.op_types[:2] for la in sliced.layers[1:14]] == [
        ["DEPTHWISE_CONV_2D", "CONV_2D"]] * 13
    assert verify(sliced, path.read_bytes()).ok
