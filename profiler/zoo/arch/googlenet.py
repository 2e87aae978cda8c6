"""GoogLeNet / Inception v1 (Szegedy et al. 2015, Table 1), Caffe layer names:
stem conv 7x7/2, max pool, LRN, conv 1x1, conv 3x3, LRN, max pool; nine inception
blocks (3a, 3b, pool, 4a-4e, pool, 5a, 5b), each four parallel branches (1x1;
1x1 -> 3x3; 1x1 -> 5x5; max pool 3x3/1 -> 1x1 projection) joined by
CONCATENATION on channels; global average pool, fully connected, softmax. The
auxiliary training classifiers and dropout are not part of inference and are left out.
"""

from __future__ import annotations

from profiler.zoo.graph import GraphBuilder

# name: (#1x1, #3x3 reduce, #3x3, #5x5 reduce, #5x5, pool proj); None marks a stride-2 max pool.
BLOCKS: tuple[tuple[str, tuple[int, int, int, int, int, int]] | None, ...] = (
    ("3a", (64, 96, 128, 16, 32, 32)),
    ("3b", (128, 128, 192, 32, 96, 64)),
    None,
    ("4a", (192, 96, 208, 16, 48, 64)),
    ("4b", (160, 112, 224, 24, 64, 64)),
    ("4c", (128, 128, 256, 24, 64, 64)),
    ("4d", (112, 144, 288, 32, 64, 64)),
    ("4e", (256, 160, 320, 32, 128, 128)),
    None,
    ("5a", (256, 160, 320, 32, 128, 128)),
    ("5b", (384, 192, 384, 48, 128, 128)),
)


def inception(g: GraphBuilder, x: int, name: str, spec: tuple[int, int, int, int, int, int]) -> int:
    n1, r3, n3, r5, n5, pp = spec
    scope = f"inception_{name}"
    b1 = g.conv(x, n1, 1, name=f"{scope}/1x1")
    b2 = g.conv(g.conv(x, r3, 1, name=f"{scope}/3x3_reduce"), n3, 3, name=f"{scope}/3x3")
    b3 = g.conv(g.conv(x, r5, 1, name=f"{scope}/5x5_reduce"), n5, 5, name=f"{scope}/5x5")
    b4 = g.conv(g.maxpool(x, 3, 1, name=f"{scope}/pool"), pp, 1, name=f"{scope}/pool_proj")
    return g.concat([b1, b2, b3, b4], name=f"{scope}/output")


def googlenet(size: int = 224, classes: int = 1000, lrn: int = 1) -> GraphBuilder:
    g = GraphBuilder(f"googlenet size={size}")
    x = g.input("input", (1, size, size, 3))
    x = g.conv(x, 64, 7, stride=2, name="conv1/7x7_s2")
    x = g.maxpool(x, 3, 2, name="pool1/3x3_s2")
    if lrn:
        x = g.lrn(x, name="pool1/norm1")
    x = g.conv(x, 64, 1, name="conv2/3x3_reduce")
    x = g.conv(x, 192, 3, name="conv2/3x3")
    if lrn:
        x = g.lrn(x, name="conv2/norm2")
    x = g.maxpool(x, 3, 2, name="pool2/3x3_s2")
    pools = iter(("pool3/3x3_s2", "pool4/3x3_s2"))
    for block in BLOCKS:
        x = g.maxpool(x, 3, 2, name=next(pools)) if block is None else inception(g, x, *block)
    x = g.global_avgpool(x, name="pool5/7x7_s1")
    x = g.reshape(x, (1, g.shape(x)[-1]), name="pool5/flatten")
    x = g.fc(x, classes, act="NONE", name="loss3/classifier")
    g.output(g.softmax(x, name="prob"))
    return g
