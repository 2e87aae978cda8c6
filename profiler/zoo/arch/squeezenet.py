"""SqueezeNet (Iandola et al. 2016): fire modules (squeeze 1x1 -> expand 1x1 and expand
3x3, joined by CONCATENATION) between max pools 3x3/2, then conv10 1x1 to the classes
with RELU, global average pool, softmax. Two versions of the reference repository:

- 1.1 (`squeezenet`): conv1 3x3/2 (64), pools after conv1, fire3 and fire5; 111 / 55 /
  27 / 13 maps at 224 px. Padding is VALID except the 3x3 expand (SAME).
- 1.0 (`squeezenet1_0`): conv1 7x7/2 (96), pools after conv1, fire4 and fire8, wider
  fire modules; 2.4x the MACs of 1.1. This is ARM Compute Library's graph_squeezenet.cpp
  at its 224 px input (109 / 54 / 27 / 13 maps), the SqueezeNet ARM-CO-UP measured. Its
  pools round up (Caffe's ceil mode); LiteRT has no such mode, so each pool takes the
  padding, VALID or SAME, that gives the same output size (`caffe_pool_padding`): a max
  pool ignores SAME's padding, so the values are Caffe's too.
"""

from __future__ import annotations

from profiler.zoo.graph import GraphBuilder, caffe_pool_padding

# (fire number, squeeze 1x1, expand 1x1, expand 3x3); None marks a 3x3/2 max pool.
FireLayout = tuple[tuple[int, int, int, int] | None, ...]
LAYERS: FireLayout = (
    (2, 16, 64, 64), (3, 16, 64, 64), None,
    (4, 32, 128, 128), (5, 32, 128, 128), None,
    (6, 48, 192, 192), (7, 48, 192, 192), (8, 64, 256, 256), (9, 64, 256, 256),
)
LAYERS_1_0: FireLayout = (
    (2, 16, 64, 64), (3, 16, 64, 64), (4, 32, 128, 128), None,
    (5, 32, 128, 128), (6, 48, 192, 192), (7, 48, 192, 192), (8, 64, 256, 256), None,
    (9, 64, 256, 256),
)


def fire(g: GraphBuilder, x: int, n: int, squeeze: int, e1: int, e3: int) -> int:
    scope = f"fire{n}"
    s = g.conv(x, squeeze, 1, padding="VALID", name=f"{scope}/squeeze1x1")
    a = g.conv(s, e1, 1, padding="VALID", name=f"{scope}/expand1x1")
    b = g.conv(s, e3, 3, padding="SAME", name=f"{scope}/expand3x3")
    return g.concat([a, b], name=f"{scope}/concat")


def squeezenet(size: int = 224, classes: int = 1000) -> GraphBuilder:
    g = GraphBuilder(f"squeezenet1.1 size={size}")
    x = g.input("input", (1, size, size, 3))
    x = g.conv(x, 64, 3, stride=2, padding="VALID", name="conv1")
    x = g.maxpool(x, 3, 2, padding="VALID", name="pool1")
    pools = iter(("pool3", "pool5"))
    for layer in LAYERS:
        if layer is None:
            x = g.maxpool(x, 3, 2, padding="VALID", name=next(pools))
        else:
            x = fire(g, x, *layer)
    return _classifier(g, x, classes)


def squeezenet1_0(size: int = 224, classes: int = 1000) -> GraphBuilder:
    g = GraphBuilder(f"squeezenet1.0 size={size}")
    x = g.input("input", (1, size, size, 3))
    x = g.conv(x, 96, 7, stride=2, padding="VALID", name="conv1")
    x = _ceil_maxpool(g, x, "pool1")
    pools = iter(("pool4", "pool8"))
    for layer in LAYERS_1_0:
        x = _ceil_maxpool(g, x, next(pools)) if layer is None else fire(g, x, *layer)
    return _classifier(g, x, classes)


def _ceil_maxpool(g: GraphBuilder, x: int, name: str) -> int:
    """Caffe's MAX pool 3x3/2 (output size rounded up)."""
    return g.maxpool(x, 3, 2, padding=caffe_pool_padding(g.shape(x)[1], 3, 2), name=name)


def _classifier(g: GraphBuilder, x: int, classes: int) -> GraphBuilder:
    x = g.conv(x, classes, 1, padding="VALID", name="conv10")
    x = g.global_avgpool(x, name="pool10")
    x = g.reshape(x, (1, classes), name="flatten")
    g.output(g.softmax(x, name="prob"))
    return g
