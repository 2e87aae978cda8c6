"""Small models with the topologies the slicer must handle, built with the schema object API.

Each function returns .tflite bytes; tensor names say what each tensor is so
tests can check boundaries by name.
"""

from __future__ import annotations

import numpy as np

from tests.models.builder import ACT, OP, PAD, TT, ModelBuilder


def multi_io(seed: int = 0) -> bytes:
    """Two inputs, three outputs, three concat branches, an output that is also read later."""
    b = ModelBuilder(seed)
    image = b.input([1, 16, 16, 3], "image")
    aux = b.input([1, 8], "aux")
    stem = b.conv(image, 8, 3, "stem")
    b1 = b.conv(stem, 8, 1, "b1")
    b2 = b.conv(b.pool(stem, 3, 1, "b2/pool"), 8, 1, "b2")
    b3 = b.conv(b.dwconv(stem, 3, "b3/dw"), 8, 1, "b3/pw")
    cat = b.concat([b1, b2, b3], "cat")
    feat = b.output(b.conv(cat, 16, 3, "feat", stride=2))  # model output AND read below
    logits = b.fc(b.reshape(b.mean(feat, "gap"), [1, 16], "flat"), 10, "fc")
    side = b.output(b.fc(aux, 10, "aux_fc", act=ACT.RELU))  # produced mid-model, never read again
    b.output(b.softmax(b.add(logits, side, "mix"), "prob"))
    return b.build("multi-input multi-output concat branches")


def long_skip(seed: int = 1) -> bytes:
    """U-Net-like: a residual over four convs, a skip from the first conv to the last
    concat, the model input added back at the very end, PAD before a VALID stride-2 conv."""
    b = ModelBuilder(seed)
    x = b.input([1, 16, 16, 4], "x")
    enc0 = b.conv(x, 8, 3, "enc0")
    enc1 = b.conv(b.pad(enc0, "enc1/pad"), 16, 3, "enc1", stride=2, padding=PAD.VALID)
    c = enc1
    for i in range(4):
        c = b.conv(c, 16, 3, f"mid{i}")
    res = b.add(c, enc1, "mid/res")
    dec0 = b.conv(b.upsample(res, "up"), 8, 1, "dec0")
    out = b.conv(b.concat([dec0, enc0], "dec/cat"), 4, 3, "dec1", act=ACT.NONE)
    y = b.output(b.add(out, x, "y"))
    b.output(b.unary(OP.LOGISTIC, y, "y/sigmoid"))
    return b.build("long skips")


def _inverted_residual(b: ModelBuilder, x: int, cout: int, stride: int, name: str) -> int:
    cin = b.shape(x)[3]
    e = b.conv(x, cin * 4, 1, f"{name}/expand", act=ACT.RELU6)
    d = b.dwconv(e, 3, f"{name}/dw", stride=stride)
    p = b.conv(d, cout, 1, f"{name}/project", act=ACT.NONE)
    return b.add(p, x, f"{name}/add") if stride == 1 and cin == cout else p


def inverted_residuals(seed: int = 2) -> bytes:
    """MobileNetV2-style blocks: 1x1 expand, 3x3 depthwise, 1x1 project, residual ADD."""
    b = ModelBuilder(seed)
    x = b.input([1, 16, 16, 8], "x")
    y = b.conv(x, 8, 3, "stem", act=ACT.RELU6)
    for i, (cout, stride) in enumerate([(8, 1), (8, 1), (16, 2), (16, 1)]):
        y = _inverted_residual(b, y, cout, stride, f"block{i}")
    y = b.conv(y, 32, 1, "head", act=ACT.RELU6)
    y = b.fc(b.reshape(b.mean(y, "gap"), [1, 32], "flat"), 5, "fc")
    b.output(b.softmax(y, "prob"))
    return b.build("inverted residuals")


def int8_model(seed: int = 3) -> bytes:
    """Fully int8: QUANTIZE in, an inverted residual, concat branches, int8 and
    dequantized float outputs."""
    b = ModelBuilder(seed, int8=True)
    inp = b.input([1, 16, 16, 3], "image", ttype=TT.FLOAT32)
    q = b.quantize(inp, "image/q")
    s = b.conv(q, 8, 3, "stem", stride=2)
    r = _inverted_residual(b, s, 8, 1, "block")
    b1 = b.conv(r, 8, 1, "b1", act=ACT.NONE)  # XNNPACK concatenates equal scales only
    b2 = b.pool(r, 3, 1, "b2/pool")
    cat = b.concat([b1, b2], "cat")
    logits = b.fc(b.reshape(b.mean(cat, "gap"), [1, 16], "flat"), 10, "fc")
    b.output(b.dequantize(logits, "logits/float"))
    b.output(b.softmax(logits, "prob"))
    return b.build("int8")


def fp16_shared_weights(seed: int = 4) -> bytes:
    """fp16 weights widened by DEQUANTIZE, one of them shared by two convs in
    different layers (as MediaPipe's palm detector does)."""
    b = ModelBuilder(seed)
    x = b.input([1, 8, 8, 8], "x")
    c1 = b.fp16_conv(x, 8, 3, "c1")
    shared = b.names["c1/weights"]
    c2 = b.fp16_conv(c1, 8, 3, "c2")
    bias = b.const(np.zeros(8, np.float32), "c3/bias")
    c3 = b.tensor(b.shape(c2), "c3")
    op = b.ops[[o.outputs[0] for o in b.ops].index(c1)]  # reuse c1's conv options
    b.op(OP.CONV_2D, [c2, shared, bias], [c3], op.builtinOptionsType, op.builtinOptions)
    b.output(b.add(c3, x, "y"))
    return b.build("fp16 weights shared across layers")


ALL = {
    "multi_io": multi_io,
    "long_skip": long_skip,
    "inverted_residuals": inverted_residuals,
    "int8": int8_model,
    "fp16_shared_weights": fp16_shared_weights,
}


def long_layers(seed: int = 5) -> bytes:
    """Five 3x3 convs of 42 to 340 MMAC at 48x48: on the simulated B at its top level
    the model gives them 3.6 to 20 ms (longer where the host cannot keep up), long enough
    for a logger that reads every 1-3 ms (ARM-CO-UP's INA260), most of them 10 ms or more."""
    b = ModelBuilder(seed)
    x = b.input([1, 48, 48, 32], "x")
    for i, cout in enumerate((64, 96, 128, 128, 64)):
        x = b.conv(x, cout, 3, f"conv{i}")
    b.output(x)
    return b.build("five 3x3 convs of growing cost")
