"""MobileNetV1 (Howard et al. 2017), laid out as TF-slim's `mobilenet_v1` converts:
CONV_2D 3x3/2, 13 depthwise-separable blocks (DEPTHWISE_CONV_2D 3x3 then CONV_2D 1x1,
both with fused RELU6, batch norm folded into the biases), a global AVERAGE_POOL_2D,
a 1x1 CONV_2D classifier, RESHAPE and SOFTMAX: 31 operators.
"""

from __future__ import annotations

from profiler.zoo.graph import GraphBuilder

# (stride of the depthwise conv, pointwise output channels at alpha = 1), Table 1 of the paper.
BLOCKS: tuple[tuple[int, int], ...] = (
    (1, 64),
    (2, 128), (1, 128),
    (2, 256), (1, 256),
    (2, 512), (1, 512), (1, 512), (1, 512), (1, 512), (1, 512),
    (2, 1024), (1, 1024),
)
MIN_DEPTH = 8  # TF-slim's min_depth: no layer narrower than 8 channels
# Pooled features of a seeded (untrained) net are small (RMS ~0.15), so LeCun-scaled
# logits would be nearly equal and the softmax flat (and all-zero once int8). This gain
# brings the logits' spread near a trained classifier's (std ~2 on uniform [-1, 1] inputs).
CLASSIFIER_GAIN = 16.0


def depth(channels: int, alpha: float) -> int:
    return max(int(channels * alpha), MIN_DEPTH)


def mobilenet_v1(alpha: float = 1.0, size: int = 224, classes: int = 1000) -> GraphBuilder:
    g = GraphBuilder(f"mobilenet_v1 alpha={alpha} size={size}")
    x = g.input("input", (1, size, size, 3))
    x = g.conv(x, depth(32, alpha), 3, stride=2, act="RELU6", name="MobilenetV1/Conv2d_0")
    for i, (stride, channels) in enumerate(BLOCKS, start=1):
        x = g.dwconv(x, 3, stride=stride, act="RELU6", name=f"MobilenetV1/Conv2d_{i}_depthwise")
        x = g.conv(x, depth(channels, alpha), 1, act="RELU6",
                   name=f"MobilenetV1/Conv2d_{i}_pointwise")
    x = g.global_avgpool(x, name="MobilenetV1/Logits/AvgPool_1a")
    x = g.conv(x, classes, 1, act="NONE", gain=CLASSIFIER_GAIN,
               name="MobilenetV1/Logits/Conv2d_1c_1x1")
    x = g.reshape(x, (1, classes), name="MobilenetV1/Logits/SpatialSqueeze")
    g.output(g.softmax(x, name="MobilenetV1/Predictions"))
    return g
