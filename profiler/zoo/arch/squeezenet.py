"""SqueezeNet 1.1 (Iandola et al. 2016; the 1.1 variant of the reference repository):
conv 3x3/2 (64), max pools 3x3/2 after conv1, fire3 and fire5, eight fire modules
(squeeze 1x1 -> expand 1x1 and expand 3x3, joined by CONCATENATION), conv10 1x1 to
the classes with RELU, global average pool, softmax. Padding is VALID except the 3x3
expand (SAME), which gives the reference 111 / 55 / 27 / 13 maps at 224x224.
"""

from __future__ import annotations

from profiler.zoo.graph import GraphBuilder

# (fire number, squeeze 1x1, expand 1x1, expand 3x3); None marks a 3x3/2 max pool.
LAYERS: tuple[tuple[int, int, int, int] | None, ...] = (
    (2, 16, 64, 64), (3, 16, 64, 64), None,
    (4, 32, 128, 128), (5, 32, 128, 128), None,
    (6, 48, 192, 192), (7, 48, 192, 192), (8, 64, 256, 256), (9, 64, 256, 256),
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
    x = g.conv(x, classes, 1, padding="VALID", name="conv10")
    x = g.global_avgpool(x, name="pool10")
    x = g.reshape(x, (1, classes), name="flatten")
    g.output(g.softmax(x, name="prob"))
    return g
