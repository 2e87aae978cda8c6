"""ResNet-50 (He et al. 2016) as `keras.applications.ResNet50` converts: conv 7x7/2,
max pool 3x3/2, 16 bottleneck blocks in stages of 3, 4, 6, 3 (1x1 reduce, 3x3, 1x1
expand; the first block of a stage has a 1x1 projection shortcut, the others an
identity shortcut; each block ends in ADD with fused RELU), global average pool,
fully connected classifier, softmax. As in Keras (v1), a stage's stride sits on its
first 1x1 conv; batch norm is folded into the conv biases; SAME padding replaces
Keras' explicit zero padding of conv1/pool1 (same output sizes).
"""

from __future__ import annotations

from profiler.zoo.graph import GraphBuilder

# (bottleneck width, blocks, stride of the first block) for stages conv2..conv5.
STAGES: tuple[tuple[int, int, int], ...] = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))
EXPANSION = 4
# The last conv of each residual branch starts small (as zero-init of the last BN's
# gamma does in practice), so 16 ADDs do not blow up the activations.
RESIDUAL_GAIN = 0.5


def resnet50(size: int = 224, classes: int = 1000) -> GraphBuilder:
    g = GraphBuilder(f"resnet50 size={size}")
    x = g.input("input", (1, size, size, 3))
    x = g.conv(x, 64, 7, stride=2, act="RELU", name="conv1_conv")
    x = g.maxpool(x, 3, 2, padding="SAME", name="pool1_pool")
    for stage, (width, blocks, stride) in enumerate(STAGES, start=2):
        for b in range(1, blocks + 1):
            scope = f"conv{stage}_block{b}"
            s = stride if b == 1 else 1
            if b == 1:
                shortcut = g.conv(x, width * EXPANSION, 1, stride=s, act="NONE",
                                  name=f"{scope}_0_conv")
            else:
                shortcut = x
            y = g.conv(x, width, 1, stride=s, act="RELU", name=f"{scope}_1_conv")
            y = g.conv(y, width, 3, act="RELU", name=f"{scope}_2_conv")
            y = g.conv(y, width * EXPANSION, 1, act="NONE", gain=RESIDUAL_GAIN,
                       name=f"{scope}_3_conv")
            x = g.add(shortcut, y, act="RELU", name=f"{scope}_out")
    x = g.global_avgpool(x, name="avg_pool")
    x = g.reshape(x, (1, STAGES[-1][0] * EXPANSION), name="flatten")
    x = g.fc(x, classes, act="NONE", name="predictions")
    g.output(g.softmax(x, name="probs"))
    return g
