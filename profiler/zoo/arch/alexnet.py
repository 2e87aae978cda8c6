"""AlexNet (Krizhevsky et al. 2012): conv 11x11/4 (96), LRN, max pool 3x3/2, conv 5x5
(256), LRN, max pool, conv 3x3 (384, 384, 256), max pool, then three fully connected
layers and softmax; 227x227 input gives the paper's 55/27/13/6 maps.

Two layouts share this builder:

- `alexnet` (the zoo's `alexnet`): one tower, every conv dense, and `fc_width` 1024 by
  default (15 M parameters, 61 MB) so the on-demand model stays practical on small
  boards. Pass fc_width=4096 for the paper's widths.
- `alexnet_bvlc` (the zoo's `alexnet_bvlc`): Caffe's bvlc_alexnet, the paper's
  two-GPU layout kept as 2 groups in conv2, conv4 and conv5, with 4096-wide fc6/fc7
  (61 M parameters, 244 MB). This is ARM Compute Library's graph_alexnet.cpp, the
  AlexNet ARM-CO-UP measured. Op names follow its layer names (conv1 ... fc8, prob).
"""

from __future__ import annotations

import math

from profiler.zoo.graph import GraphBuilder


def alexnet(size: int = 227, classes: int = 1000, fc_width: int = 1024,
            lrn: int = 1, groups: int = 1) -> GraphBuilder:
    """`groups` splits conv2, conv4 and conv5 (the convs the paper ran on two GPUs)."""
    label = f"alexnet size={size} fc_width={fc_width}" + (f" groups={groups}" if groups > 1 else "")
    g = GraphBuilder(label)
    x = g.input("input", (1, size, size, 3))
    x = g.conv(x, 96, 11, stride=4, padding="VALID", name="conv1")
    if lrn:
        x = g.lrn(x, name="norm1")
    x = g.maxpool(x, 3, 2, padding="VALID", name="pool1")
    x = g.conv(x, 256, 5, name="conv2", groups=groups)
    if lrn:
        x = g.lrn(x, name="norm2")
    x = g.maxpool(x, 3, 2, padding="VALID", name="pool2")
    x = g.conv(x, 384, 3, name="conv3")
    x = g.conv(x, 384, 3, name="conv4", groups=groups)
    x = g.conv(x, 256, 3, name="conv5", groups=groups)
    x = g.maxpool(x, 3, 2, padding="VALID", name="pool5")
    x = g.reshape(x, (1, math.prod(g.shape(x))), name="flatten")
    x = g.fc(x, fc_width, name="fc6")
    x = g.fc(x, fc_width, name="fc7")
    x = g.fc(x, classes, act="NONE", name="fc8")
    g.output(g.softmax(x, name="prob"))
    return g


def alexnet_bvlc(size: int = 227, classes: int = 1000, fc_width: int = 4096,
                 lrn: int = 1) -> GraphBuilder:
    """Caffe's bvlc_alexnet / ACL's graph_alexnet: conv2, conv4, conv5 in 2 groups."""
    return alexnet(size=size, classes=classes, fc_width=fc_width, lrn=lrn, groups=2)
