"""ARM-CO-UP's five CNNs as zoo models, and their layer numbering as explicit cuts.

ARM-CO-UP's ``Layers.csv`` numbers Alex 8, Google 11, MobileV1 14, ResV1_50 18 and
SqueezeV1 10 layers, cut after hard-coded tensor names in ARM Compute Library's graph
examples. Here each of their graphs is the zoo model that builds the same graph
(`MODELS`), with the zoo tensor names where each of their layers ends; the cuts (the form
``coupprof layers --cuts`` takes) are found from those names in the built graph, never
typed in. `NEAR_RELATIVES` maps three of them onto the zoo's older stand-ins, to show how
much the right graph matters. ``python -m profiler.zoo.armcoup [--layers] [Layers.csv]``
prints the mapping and cuts.

Which graph, where each layer is cut, and how well MACs rank their times:
docs/armcoup-layers.md.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler.errors import BadInputError, ModelError
from profiler.measure.tables import OP_SHORT
from profiler.recordings.armcoup_tables import layers_table
from profiler.slicing.costs import GroupFeatures, group_features, macs_from_shapes
from profiler.slicing.graph import ModelView
from profiler.slicing.grouping import group_ops
from profiler.slicing.specs import TensorSpec
from profiler.tflite.model_io import parse_model
from profiler.zoo.emit import to_model
from profiler.zoo.graph import GraphBuilder
from profiler.zoo.registry import graph as zoo_graph
from profiler.zoo.registry import model_path


@dataclass(frozen=True)
class ArmCoUpModel:
    """One of ARM-CO-UP's graphs as a zoo model.

    layer_ends[k] / layer_starts[k]: zoo tensor names written by the last op of their
    layer k and by the op their layer k starts with; acl_ends[k]: ARM-CO-UP's own
    name of that end (ACL layer names; fused activations make e.g. their ``relu3`` the
    zoo's ``conv3/Relu``).
    """

    graph: str  # their name in Layers.csv
    zoo_name: str
    params: Mapping[str, int | float]
    layer_ends: tuple[str, ...]
    layer_starts: tuple[str, ...]
    acl_ends: tuple[str, ...]
    note: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not len(self.layer_ends) == len(self.layer_starts) == len(self.acl_ends):
            raise ValueError(f"{self.graph}: ends, starts and ACL names differ in number")

    @property
    def n_layers(self) -> int:
        return len(self.layer_ends)

    @property
    def zoo_text(self) -> str:
        """The zoo model as `coupprof zoo` takes it, e.g. 'mobilenet_v1 --param classes=1001'."""
        return " ".join([self.zoo_name, *(f"--param {k}={v}" for k, v in self.params.items())])


def _alex(zoo_name: str, params: Mapping[str, int | float], note: str) -> ArmCoUpModel:
    return ArmCoUpModel(
        "Alex", zoo_name, params,
        layer_ends=("pool1/MaxPool", "pool2/MaxPool", "conv3/Relu", "conv4/Relu",
                    "pool5/MaxPool", "fc6/Relu", "fc7/Relu", "prob/Softmax"),
        layer_starts=("conv1/Relu", "conv2/Relu", "conv3/Relu", "conv4/Relu", "conv5/Relu",
                      "fc6/Relu", "fc7/Relu", "fc8/BiasAdd"),
        acl_ends=("pool1", "pool2", "relu3", "relu4", "pool5", "relu6", "relu7", "prob"),
        note=note)


_INCEPTIONS = ("3a", "3b", "4a", "4b", "4c", "4d", "4e", "5a", "5b")
# Layers 3..10 of Google end at these inception blocks, or at the pool that follows them.
_GOOGLE_ENDS = ("inception_3a/output/concat", "pool3/3x3_s2/MaxPool",
                *(f"inception_4{b}/output/concat" for b in "abcd"), "pool4/3x3_s2/MaxPool",
                "inception_5a/output/concat")
_GOOGLE_ACL = ("inception_3a/concat", "pool3/3x3_s2",
               *(f"inception_4{b}/concat" for b in "abcd"), "pool4/3x3_s2",
               "inception_5a/concat")

_UNITS = [(b, u) for b, n in ((1, 3), (2, 4), (3, 6), (4, 3)) for u in range(1, n + 1)]
_SLIM_UNIT = "block{}/unit{}/bottleneck_v1"
_KERAS_BLOCK = "conv{}_block{}"  # Keras' stage = TF-slim's block + 1


def _squeeze(zoo_name: str, pools: tuple[int, ...], note: str) -> ArmCoUpModel:
    # Layer k (k = 1..8) is fire k+1, and the max pool right after it, if any.
    ends = tuple(f"pool{f}/MaxPool" if f in pools else f"fire{f}/concat/concat"
                 for f in range(2, 10))
    return ArmCoUpModel(
        "SqueezeV1", zoo_name, {},
        layer_ends=("pool1/MaxPool", *ends, "prob/Softmax"),
        layer_starts=("conv1/Relu", *(f"fire{f}/squeeze1x1/Relu" for f in range(2, 10)),
                      "conv10/Relu"),
        acl_ends=("pool1", "fire2/concat", "fire3/concat", "pool4", "fire5/concat",
                  "fire6/concat", "fire7/concat", "pool8", "fire9/concat", "prob"),
        note=note)


#: ARM-CO-UP's graphs, by their Layers.csv name.
MODELS: dict[str, ArmCoUpModel] = {m.graph: m for m in (
    _alex("alexnet_bvlc", {}, "ACL graph_alexnet: conv2/4/5 in 2 groups, fc6/fc7 4096 wide"),
    ArmCoUpModel(
        "Google", "googlenet", {},
        layer_ends=("pool1/norm1/LRN", "pool2/3x3_s2/MaxPool", *_GOOGLE_ENDS, "prob/Softmax"),
        layer_starts=("conv1/7x7_s2/Relu", "conv2/3x3_reduce/Relu",
                      *(f"inception_{b}/1x1/Relu" for b in _INCEPTIONS)),
        acl_ends=("pool1/norm1", "pool2/3x3_s2", *_GOOGLE_ACL, "prob"),
        note="ACL graph_googlenet (bvlc_googlenet): the zoo's googlenet is the same graph"),
    ArmCoUpModel(
        "MobileV1", "mobilenet_v1", {"classes": 1001},
        layer_ends=("MobilenetV1/Conv2d_0/Relu6",
                    *(f"MobilenetV1/Conv2d_{k}_pointwise/Relu6" for k in range(1, 13)),
                    "MobilenetV1/Predictions/Softmax"),
        layer_starts=("MobilenetV1/Conv2d_0/Relu6",
                      *(f"MobilenetV1/Conv2d_{k}_depthwise/Relu6" for k in range(1, 14))),
        acl_ends=("Conv2d_0/Relu6", *(f"Conv2d_{k}_pointwise/Relu6" for k in range(1, 13)),
                  "Softmax"),
        note="ACL graph_mobilenet 1.0_224: TF-slim's checkpoint, 1001 classes"),
    ArmCoUpModel(
        "ResV1_50", "resnet50_slim", {},
        layer_ends=("pool1/MaxPool", *(f"{_SLIM_UNIT.format(b, u)}/add/Relu"
                                       for b, u in _UNITS[:-1]),
                    "pool5/AvgPool", "predictions/Softmax"),
        layer_starts=("conv1/Relu", *(f"{_SLIM_UNIT.format(b, u)}/conv1/Relu" for b, u in _UNITS),
                      "logits/BiasAdd"),
        acl_ends=("pool1/MaxPool", *(f"{_SLIM_UNIT.format(b, u)}/add" for b, u in _UNITS[:-1]),
                  "pool5", "predictions/Softmax"),
        note="ACL graph_resnet50: TF-slim resnet_v1_50, stride on the last unit's 3x3 conv"),
    _squeeze("squeezenet1_0", (4, 8), "ACL graph_squeezenet: SqueezeNet 1.0 at 224 px"),
)}

#: The zoo's older stand-ins for three of them (other graphs): only for comparison.
NEAR_RELATIVES: dict[str, ArmCoUpModel] = {m.graph: m for m in (
    _alex("alexnet", {}, "one tower, fc6/fc7 1024 wide"),
    ArmCoUpModel(
        "ResV1_50", "resnet50", {},
        layer_ends=("pool1_pool/MaxPool", *(f"{_KERAS_BLOCK.format(b + 1, u)}_out/Relu"
                                            for b, u in _UNITS[:-1]),
                    "avg_pool/AvgPool", "probs/Softmax"),
        layer_starts=("conv1_conv/Relu", *(f"{_KERAS_BLOCK.format(b + 1, u)}_1_conv/Relu"
                                           for b, u in _UNITS), "predictions/BiasAdd"),
        acl_ends=MODELS["ResV1_50"].acl_ends,
        note="Keras layout: stride on the first 1x1 conv of a stage"),
    _squeeze("squeezenet", (3, 5), "SqueezeNet 1.1: its pools follow fire3 and fire5"),
)}


def model_for(graph: str, *, near_relative: bool = False) -> ArmCoUpModel:
    table = NEAR_RELATIVES if near_relative else MODELS
    try:
        return table[graph]
    except KeyError:
        raise BadInputError(f"no ARM-CO-UP graph {graph!r}"
                            + (" among the near relatives" if near_relative else ""),
                            f"use one of: {', '.join(table)}") from None


def cuts_from_names(op_outputs: Sequence[str], spec: ArmCoUpModel) -> list[int]:
    """The cuts of `spec`'s layers in a graph whose op i writes tensor `op_outputs[i]`.

    Raises ModelError where a name is missing, the layers are out of order, the last
    layer does not end at the last op, or a layer lacks the op it should start with.
    """
    where: dict[str, int] = {}
    for i, name in enumerate(op_outputs):
        where.setdefault(name, i)

    def find(name: str) -> int:
        if name not in where:
            raise ModelError(f"{spec.zoo_name} has no tensor {name!r} (ARM-CO-UP's "
                             f"{spec.graph})", "the zoo builder's names changed: update "
                             "profiler/zoo/armcoup.py")
        return where[name]

    ends = [find(n) for n in spec.layer_ends]
    if ends != sorted(set(ends)) or ends[-1] != len(op_outputs) - 1:
        raise ModelError(f"{spec.graph}'s layer ends are not in op order up to the last op "
                         f"of {spec.zoo_name} (ops {ends})", "update profiler/zoo/armcoup.py")
    cuts = [e + 1 for e in ends[:-1]]
    for k, (lo, hi) in enumerate(zip([0, *cuts], ends, strict=True)):
        start = find(spec.layer_starts[k])
        if not lo <= start <= hi:
            raise ModelError(f"{spec.graph} layer {k} (ops {lo}..{hi}) does not hold "
                             f"{spec.layer_starts[k]!r} (op {start})",
                             "update profiler/zoo/armcoup.py")
    return cuts


def builder_op_outputs(g: GraphBuilder) -> list[str]:
    return [g.tensors[op.outputs[0]].name for op in g.ops]


def view_op_outputs(g: ModelView) -> list[str]:
    return [TensorSpec.from_tensor(outs[0], g.tensor(outs[0])).name if outs else ""
            for outs in (g.op_outputs(i) for i in range(g.num_ops))]


def cuts(spec: ArmCoUpModel, g: ModelView | None = None) -> list[int]:
    """Op indices where `spec`'s layers 1.. start, in `g` (default: the zoo graph,
    described without drawing weights)."""
    if g is not None:
        return cuts_from_names(view_op_outputs(g), spec)
    return cuts_from_names(builder_op_outputs(zoo_graph(spec.zoo_name, **spec.params)), spec)


def load(spec: ArmCoUpModel, *, weights: bool = True) -> ModelView:
    """The zoo model of `spec` (built once into the zoo cache; AlexNet's is 250 MB).

    weights=False: the same graph with zero weights, built in memory (no random draws,
    nothing written), for what needs only shapes, operators and sizes."""
    if not weights:
        g = zoo_graph(spec.zoo_name, **spec.params)
        zeros = {t.index: (np.zeros(t.shape, np.float32) if t.init.kind == "normal" else
                           np.asarray(t.init.values, np.dtype(t.dtype)).reshape(t.shape))
                 for t in g.tensors if t.init is not None}
        return ModelView.of(to_model(g, zeros))
    path = model_path(spec.zoo_name, **spec.params)
    return ModelView.of(parse_model(path.read_bytes(), str(path)))


def layer_groups(spec: ArmCoUpModel, g: ModelView) -> list[list[int]]:
    """Op indices of each of `spec`'s layers in `g` (the slicer's grouping of the cuts)."""
    return group_ops(g, cuts=cuts(spec, g))


def layer_features(spec: ArmCoUpModel, g: ModelView | None = None) -> list[GroupFeatures]:
    """Per ARM-CO-UP layer, its operators' features (`profiler.slicing.costs`)."""
    view = g if g is not None else load(spec)
    return [group_features(view, ops) for ops in layer_groups(spec, view)]


def _builder_layers(spec: ArmCoUpModel) -> tuple[GraphBuilder, list[range]]:
    g = zoo_graph(spec.zoo_name, **spec.params)
    starts = [0, *cuts_from_names(builder_op_outputs(g), spec), len(g.ops)]
    return g, [range(a, b) for a, b in zip(starts, starts[1:], strict=False)]


def layer_macs(spec: ArmCoUpModel) -> list[int]:
    """MACs per layer, from the graph alone (no weights drawn): what `layer_features`
    gives as `.macs`, cheaply for AlexNet's 250 MB."""
    g, layers = _builder_layers(spec)
    return [sum(macs_from_shapes(g.ops[i].kind, g.shape(g.ops[i].outputs[0]),
                                 [g.shape(t) for t in g.ops[i].inputs]) for i in ops)
            for ops in layers]


def conv_layers(spec: ArmCoUpModel) -> list[bool]:
    """Per layer: True where it has no FULLY_CONNECTED op (its MACs are convolutions')."""
    g, layers = _builder_layers(spec)
    return [all(g.ops[i].kind != "FULLY_CONNECTED" for i in ops) for ops in layers]


def top_level_times(tables: Mapping[str, pd.DataFrame], graph: str,
                    processor: str) -> tuple[list[float], int, int | None]:
    """Per-layer task time (ms) of `graph` on `processor` at its top level (G: with its
    host at the host's top level), from `layers_table`; and those levels (1-based)."""
    if graph not in tables:
        raise BadInputError(f"Layers.csv has no graph {graph!r}", "pass ARM-CO-UP's Layers.csv")
    t = tables[graph]
    t = t[(t["processor"] == processor) & t["time_ms_mean"].notna()]
    if t.empty:
        raise BadInputError(f"Layers.csv has no {processor} rows for {graph}",
                            "pass ARM-CO-UP's Layers.csv")
    level = int(t["freq_level"].max())
    t = t[t["freq_level"] == level]
    host: int | None = None
    if t["host_level"].notna().any():
        host = int(t["host_level"].max())
        t = t[t["host_level"] == host]
    t = t.sort_values("layer")
    if list(t["layer"]) != list(range(len(t))):
        raise BadInputError(f"{graph} on {processor}: layers {list(t['layer'])} are not 0..n-1",
                            "pass ARM-CO-UP's Layers.csv")
    return [float(v) for v in t["time_ms_mean"]], level, host


PROCESSORS = ("B", "L", "G")


def read_layer_times(layers_csv: str | Path) -> dict[str, pd.DataFrame]:
    """Their Layers.csv as coupprof layer tables, per graph (`layers_table`)."""
    return layers_table(layers_csv, None, "rk3399pro")[0]


def rank_correlations(tables: Mapping[str, pd.DataFrame], *,
                      models: Mapping[str, ArmCoUpModel] | None = None) -> pd.DataFrame:
    """Spearman correlation of per-layer MACs with ARM-CO-UP's per-layer task time at
    the top level of B, L and G (G with its host at the top), one row per graph and
    processor: over all layers (`spearman`) and over the layers without a fully
    connected op (`spearman_conv`; FC layers are bound by their weights' bytes).
    `tables`: `read_layer_times`. `models` defaults to `MODELS`; pass `NEAR_RELATIVES`
    to compare."""
    rows: list[dict[str, Any]] = []
    for spec in (models if models is not None else MODELS).values():
        macs = pd.Series(layer_macs(spec), dtype=float)
        conv = pd.Series(conv_layers(spec))
        for proc in PROCESSORS:
            times, level, host = top_level_times(tables, spec.graph, proc)
            if len(times) != spec.n_layers:
                raise BadInputError(f"Layers.csv has {len(times)} {spec.graph} layers on {proc}, "
                                    f"the mapping {spec.n_layers}", "pass ARM-CO-UP's Layers.csv")
            t = pd.Series(times)
            rows.append({"graph": spec.graph, "zoo": spec.zoo_text, "processor": proc,
                         "level": level, "host_level": host, "layers": spec.n_layers,
                         "spearman": macs.corr(t, method="spearman"),
                         "conv_layers": int(conv.sum()),
                         "spearman_conv": macs[conv].corr(t[conv], method="spearman")})
    return pd.DataFrame(rows)


def layer_rows(spec: ArmCoUpModel, g: ModelView | None = None) -> list[dict[str, Any]]:
    """One row per layer for the docs: ops, where it ends (zoo and ACL names), operator
    counts, MACs, weight and boundary bytes."""
    feats = layer_features(spec, g)
    rows = []
    for k, f in enumerate(feats):
        kinds = ", ".join(f"{OP_SHORT.get(op, op.lower())}" + (f" x{n}" if n > 1 else "")
                          for op, n in f.op_counts.items())
        rows.append({"layer": k, "ops": f"{f.op_indices[0]}..{f.op_indices[-1]}",
                     "ends at (zoo)": spec.layer_ends[k], "ARM-CO-UP's end": spec.acl_ends[k],
                     "operators": kinds, "MMAC": f"{f.macs / 1e6:,.1f}",
                     "weights KiB": f"{f.weight_bytes / 1024:,.0f}",
                     "in KiB": f"{f.input_bytes / 1024:,.0f}",
                     "out KiB": f"{f.output_bytes / 1024:,.1f}"})
    return rows


def _markdown(rows: list[dict[str, Any]]) -> str:
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(r[c]) for c in head) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """`python -m profiler.zoo.armcoup [--layers] [Layers.csv]`: the mapping and cuts;
    --layers: per-layer tables (builds the five models into the zoo cache); a
    Layers.csv: the rank correlations against it."""
    args = list(argv)
    per_layer = "--layers" in args
    args = [a for a in args if a != "--layers"]
    for spec in MODELS.values():
        print(f"{spec.graph}: {spec.zoo_text}  ({spec.note})")
        print(f"  {spec.n_layers} layers, --cuts {','.join(str(c) for c in cuts(spec))}")
        if per_layer:
            print()
            print(_markdown(layer_rows(spec)))
            print()
    if args:
        tables = read_layer_times(args[0])
        table = pd.concat([rank_correlations(tables).assign(variant="ARM-CO-UP's graph"),
                           rank_correlations(tables, models=NEAR_RELATIVES)
                           .assign(variant="near relative")])
        for col, what in (("spearman", "all layers"),
                          ("spearman_conv", "layers without a fully connected op")):
            wide = table.pivot_table(index=["graph", "variant", "zoo"], columns="processor",
                                     values=col, sort=False)[list(PROCESSORS)]
            print(f"\nSpearman rank correlation of per-layer MACs with per-layer time at the "
                  f"top level, {what}")
            print(wide.round(2).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
