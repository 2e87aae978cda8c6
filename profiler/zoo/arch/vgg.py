"""VGG-19 (Simonyan & Zisserman 2015, configuration E), as the ONNX model zoo's vgg19
(converted from MXNet Gluon's vgg19) lays it out: five blocks of 3x3 convs with fused
RELU (2, 2, 4, 4, 4 convs of 64, 128, 256, 512, 512 channels, SAME padding), each
closed by a 2x2/2 max pool; then flatten, two fully connected layers of 4096 with RELU
(dropout is not part of inference), a 1000-way classifier and softmax. No batch norm.
143.7 M parameters and 19.6 G MACs at 224 px.

`alpha` scales the conv widths (as MobileNet's width multiplier does, never below 8
channels) and `fc_width` the two hidden FC layers, so a small VGG-19 of the same
layout can run in tests and on small boards; the defaults are the paper's.
"""

from __future__ import annotations

import math

from profiler.zoo.graph import GraphBuilder

#: (channels, convs) of blocks 1..5: configuration E of the paper's Table 1.
BLOCKS: tuple[tuple[int, int], ...] = ((64, 2), (128, 2), (256, 4), (512, 4), (512, 4))
MIN_DEPTH = 8


def vgg19(size: int = 224, classes: int = 1000, alpha: float = 1.0,
          fc_width: int = 4096) -> GraphBuilder:
    g = GraphBuilder(f"vgg19 size={size} alpha={alpha} fc_width={fc_width}")
    x = g.input("input", (1, size, size, 3))
    k = 0  # Gluon numbers the convs 0..15 and the pools 0..4 through the network
    for b, (channels, convs) in enumerate(BLOCKS):
        width = max(int(channels * alpha), MIN_DEPTH)
        for _ in range(convs):
            x = g.conv(x, width, 3, act="RELU", name=f"vgg0_conv{k}")
            k += 1
        x = g.maxpool(x, 2, 2, padding="VALID", name=f"vgg0_pool{b}")
    x = g.reshape(x, (1, math.prod(g.shape(x))), name="flatten")
    x = g.fc(x, fc_width, name="vgg0_dense0")
    x = g.fc(x, fc_width, name="vgg0_dense1")
    x = g.fc(x, classes, act="NONE", name="vgg0_dense2")
    g.output(g.softmax(x, name="prob"))
    return g
