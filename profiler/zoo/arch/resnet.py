"""ResNet-50 (He et al. 2016) in two layouts of its 16 bottleneck units (1x1 reduce,
3x3, 1x1 expand, each unit ending in ADD with fused RELU), between conv 7x7/2 + max pool
3x3/2 and a global average pool + classifier + softmax; batch norm is folded into the
conv biases. ResNet-101 in the first layout.

- `resnet50`: as `keras.applications.ResNet50` converts. Stages conv2..conv5 of 3, 4,
  6, 3 blocks; a stage's stride sits on the first 1x1 conv (and the 1x1 projection
  shortcut) of its first block, the other blocks have identity shortcuts; fully
  connected classifier. SAME padding replaces Keras' explicit zero padding of
  conv1/pool1 (same output sizes).
- `resnet50_slim`: as TF-slim's `resnet_v1_50`, which ARM Compute Library's
  graph_resnet50.cpp builds and ARM-CO-UP measured. Blocks 1..4 of 3, 4, 6, 3 units;
  the first unit of a block has a stride-1 1x1 projection shortcut, and blocks 1-3
  downsample in their LAST unit, on the 3x3 conv, with a 1x1/2 max pool as that unit's
  shortcut; block 4 keeps stride 1. So the first units of blocks 1-3 run at twice the
  resolution of Keras' layout (56, 28, 14 px maps before each block's last unit). The
  classifier is a 1x1 conv (`logits`), then RESHAPE and SOFTMAX. Op names follow ACL's
  (`block1/unit1/bottleneck_v1/conv1`, ...). TF-slim pads a strided 3x3 conv 1 pixel on
  each side, LiteRT's SAME pads 1 at the bottom/right only: same shapes and MACs.
- `resnet101`: ResNet-101 v1 as the ONNX model zoo's resnet101-v1 (MXNet Gluon's
  `resnet101_v1`, whose BottleneckV1 strides its first 1x1 conv) and Keras' ResNet101
  lay it out: `resnet50`'s layout with stages of 3, 4, 23, 3 blocks (33 bottlenecks,
  104 convs, a fully connected classifier). 44.5 M parameters; 7.6 G MACs at 224 px, the
  paper's figure (torchvision's 7.8 G is v1.5, strided on the 3x3 conv).
"""

from __future__ import annotations

from profiler.zoo.graph import GraphBuilder

# (bottleneck width, blocks, stride of the first block) for stages conv2..conv5.
STAGES: tuple[tuple[int, int, int], ...] = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))
# ResNet-101: the same widths and strides, stage conv4 of 23 blocks.
STAGES_101: tuple[tuple[int, int, int], ...] = (
    (64, 3, 1), (128, 4, 2), (256, 23, 2), (512, 3, 2))
# TF-slim's resnet_v1_50: (bottleneck width, units, stride of the last unit) of block1..4.
SLIM_BLOCKS: tuple[tuple[int, int, int], ...] = (
    (64, 3, 2), (128, 4, 2), (256, 6, 2), (512, 3, 1))
EXPANSION = 4
# The last conv of each residual branch starts small (as zero-init of the last BN's
# gamma does in practice), so 16 ADDs (33 in ResNet-101) do not blow up the activations.
RESIDUAL_GAIN = 0.5


def resnet50(size: int = 224, classes: int = 1000) -> GraphBuilder:
    return _keras_layout(GraphBuilder(f"resnet50 size={size}"), size, classes, STAGES)


def resnet101(size: int = 224, classes: int = 1000) -> GraphBuilder:
    return _keras_layout(GraphBuilder(f"resnet101 size={size}"), size, classes, STAGES_101)


def _keras_layout(g: GraphBuilder, size: int, classes: int,
                  stages: tuple[tuple[int, int, int], ...]) -> GraphBuilder:
    x = g.input("input", (1, size, size, 3))
    x = g.conv(x, 64, 7, stride=2, act="RELU", name="conv1_conv")
    x = g.maxpool(x, 3, 2, padding="SAME", name="pool1_pool")
    for stage, (width, blocks, stride) in enumerate(stages, start=2):
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
    x = g.reshape(x, (1, stages[-1][0] * EXPANSION), name="flatten")
    x = g.fc(x, classes, act="NONE", name="predictions")
    g.output(g.softmax(x, name="probs"))
    return g


def resnet50_slim(size: int = 224, classes: int = 1000) -> GraphBuilder:
    g = GraphBuilder(f"resnet_v1_50 (TF-slim) size={size}")
    x = g.input("input", (1, size, size, 3))
    x = g.conv(x, 64, 7, stride=2, act="RELU", name="conv1")
    x = g.maxpool(x, 3, 2, padding="SAME", name="pool1")
    for block, (width, units, stride) in enumerate(SLIM_BLOCKS, start=1):
        for u in range(1, units + 1):
            scope = f"block{block}/unit{u}/bottleneck_v1"
            s = stride if u == units else 1
            # The residual branch first, then the shortcut, in ACL's order.
            y = g.conv(x, width, 1, act="RELU", name=f"{scope}/conv1")
            y = g.conv(y, width, 3, stride=s, act="RELU", name=f"{scope}/conv2")
            y = g.conv(y, width * EXPANSION, 1, act="NONE", gain=RESIDUAL_GAIN,
                       name=f"{scope}/conv3")
            if u == 1:
                shortcut = g.conv(x, width * EXPANSION, 1, act="NONE", name=f"{scope}/shortcut")
            elif s > 1:
                shortcut = g.maxpool(x, 1, s, padding="VALID", name=f"{scope}/shortcut")
            else:
                shortcut = x
            x = g.add(shortcut, y, act="RELU", name=f"{scope}/add")
    x = g.global_avgpool(x, name="pool5")
    x = g.conv(x, classes, 1, act="NONE", name="logits")
    x = g.reshape(x, (1, classes), name="predictions")
    g.output(g.softmax(x, name="predictions"))
    return g
