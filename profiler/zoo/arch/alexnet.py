"""AlexNet (Krizhevsky et al. 2012) as one tower: conv 11x11/4 (96), LRN, max pool
3x3/2, conv 5x5 (256), LRN, max pool, conv 3x3 (384, 384, 256), max pool, then three
fully connected layers and softmax; 227x227 input gives the paper's 55/27/13/6 maps.

The paper's fully connected layers are 4096 wide (62 M parameters, a 250 MB file);
the zoo's default `fc_width` is 1024 (15 M parameters, 61 MB) so the on-demand model
stays practical on small boards. Pass fc_width=4096 for the original.
"""

from __future__ import annotations

import math

from profiler.zoo.graph import GraphBuilder


def alexnet(size: int = 227, classes: int = 1000, fc_width: int = 1024,
            lrn: int = 1) -> GraphBuilder:
    g = GraphBuilder(f"alexnet size={size} fc_width={fc_width}")
    x = g.input("input", (1, size, size, 3))
    x = g.conv(x, 96, 11, stride=4, padding="VALID", name="conv1")
    if lrn:
        x = g.lrn(x, name="norm1")
    x = g.maxpool(x, 3, 2, padding="VALID", name="pool1")
    x = g.conv(x, 256, 5, name="conv2")
    if lrn:
        x = g.lrn(x, name="norm2")
    x = g.maxpool(x, 3, 2, padding="VALID", name="pool2")
    x = g.conv(x, 384, 3, name="conv3")
    x = g.conv(x, 384, 3, name="conv4")
    x = g.conv(x, 256, 3, name="conv5")
    x = g.maxpool(x, 3, 2, padding="VALID", name="pool5")
    x = g.reshape(x, (1, math.prod(g.shape(x))), name="flatten")
    x = g.fc(x, fc_width, name="fc6")
    x = g.fc(x, fc_width, name="fc7")
    x = g.fc(x, classes, act="NONE", name="fc8")
    g.output(g.softmax(x, name="prob"))
    return g
