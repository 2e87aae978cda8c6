"""DenseNet-121 (Huang et al. 2017) as the ONNX model zoo's densenet-121 (Caffe2, from
the Caffe DenseNet the authors' Torch model was converted to) lays it out: conv 7x7/2
(64) and max pool 3x3/2; four dense blocks of 6, 12, 24, 16 layers, growth rate 32,
each layer a 1x1 bottleneck conv (bn_size 4: 128 channels) then a 3x3 conv (32) whose
output is CONCATENATED onto the block's features; between blocks a transition, a 1x1
conv halving the channels (compression 0.5) and a 2x2/2 average pool; global average
pool, a 1x1 conv classifier (`fc6`, 1000 channels), RESHAPE and SOFTMAX. 121 convs;
7.9 M parameters and 2.83 G MACs at 224 px (56, 28, 14, 7 px maps in the blocks).

DenseNet is pre-activation (BN-ReLU-conv); its BN cannot fold into a conv's bias as
ResNet's does (each layer normalises the shared concatenated features its own way).
Here each BN-ReLU is folded onto the conv before it instead: every conv ends in a
fused RELU, so the graph has the original's convs, concatenations, pools, shapes and
MACs, and the seeded weights stand in for trained ones as in every zoo model.
Parameters are conv weights plus one bias per conv output channel.
"""

from __future__ import annotations

from profiler.zoo.graph import GraphBuilder

#: Layers of dense blocks 1..4 of DenseNet-121.
BLOCKS: tuple[int, ...] = (6, 12, 24, 16)
GROWTH = 32
BN_SIZE = 4  # the bottleneck 1x1 conv has bn_size * growth channels
COMPRESSION = 0.5  # a transition keeps this share of the channels


def densenet121(size: int = 224, classes: int = 1000) -> GraphBuilder:
    g = GraphBuilder(f"densenet121 size={size}")
    x = g.input("input", (1, size, size, 3))
    x = g.conv(x, 2 * GROWTH, 7, stride=2, act="RELU", name="conv1")
    x = g.maxpool(x, 3, 2, padding="SAME", name="pool1")
    for b, layers in enumerate(BLOCKS, start=2):
        for n in range(1, layers + 1):
            scope = f"conv{b}_{n}"
            y = g.conv(x, BN_SIZE * GROWTH, 1, act="RELU", name=f"{scope}/x1")
            y = g.conv(y, GROWTH, 3, act="RELU", name=f"{scope}/x2")
            x = g.concat([x, y], name=f"concat_{b}_{n}")
        if b < len(BLOCKS) + 1:
            channels = int(g.shape(x)[3] * COMPRESSION)
            x = g.conv(x, channels, 1, act="RELU", name=f"conv{b}_blk")
            x = g.avgpool(x, 2, 2, padding="VALID", name=f"pool{b}")
    x = g.global_avgpool(x, name="pool5")
    x = g.conv(x, classes, 1, act="NONE", name="fc6")
    x = g.reshape(x, (1, classes), name="flatten")
    g.output(g.softmax(x, name="prob"))
    return g
