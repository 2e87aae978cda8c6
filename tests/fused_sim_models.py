"""A small residual model for the fused method's tests on the simulated board: two
ResNet-style bottleneck blocks (the first with a 1x1 projection shortcut), so its
prefixes cut inside a block hand out two tensors (the skip and the branch) and those at
a block's end one, as ResNet50's do, and a cut between a block's last conv and its ADD
separates an operator pair a GPU runtime links into one kernel."""

from __future__ import annotations

from profiler.zoo.emit import draw_constants, to_bytes, to_model
from profiler.zoo.graph import GraphBuilder


def mini_resnet(size: int = 32, width: int = 32, blocks: int = 2) -> bytes:
    """Stem conv 7x7/2 (as ResNet50's), ``blocks`` bottleneck blocks of ``width`` (x4 out), global average
    pool, a 10-way classifier and softmax."""
    g = GraphBuilder(f"mini_resnet size={size}")
    x = g.input("input", (1, size, size, 3))
    x = g.conv(x, width, 7, stride=2, act="RELU", name="stem")
    for b in range(blocks):
        shortcut = g.conv(x, width * 4, 1, act="NONE", name=f"b{b}_proj") if b == 0 else x
        y = g.conv(x, width, 1, act="RELU", name=f"b{b}_1")
        y = g.conv(y, width, 3, act="RELU", name=f"b{b}_2")
        y = g.conv(y, width * 4, 1, act="NONE", gain=0.5, name=f"b{b}_3")
        x = g.add(shortcut, y, act="RELU", name=f"b{b}_out")
    x = g.global_avgpool(x, name="pool")
    x = g.reshape(x, (1, width * 4), name="flat")
    x = g.fc(x, 10, act="NONE", name="logits")
    g.output(g.softmax(x, name="probs"))
    return to_bytes(to_model(g, draw_constants(g, 0)))
