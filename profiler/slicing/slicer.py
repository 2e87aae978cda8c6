"""`slice_model`: cut a .tflite model into chained per-layer sub-models (cached)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from profiler.errors import BadInputError
from profiler.slicing import cache
from profiler.slicing.costs import constant_bytes, op_macs
from profiler.slicing.extract import boundaries, build_submodel
from profiler.slicing.graph import ModelView
from profiler.slicing.grouping import GRANULARITIES, group_ops
from profiler.slicing.specs import Layer, SlicedModel, TensorSpec
from profiler.tflite.model_io import (
    check_tflite_bytes,
    parse_model,
    read_model_bytes,
    serialize_model,
    sha256_bytes,
)

Progress = Callable[[int, int], None]  # (layers done, layers in all)


def normalize_cuts(cuts: Sequence[int] | str | None) -> list[int] | None:
    """Sorted, de-duplicated cut points without 0 (layer 0 always starts at op 0).

    Accepts "3,7,12" as the CLI gives it.
    """
    if cuts is None:
        return None
    if isinstance(cuts, str):
        try:
            cuts = [int(c) for c in cuts.replace(" ", "").split(",") if c != ""]
        except ValueError:
            raise BadInputError(f"--cuts {cuts!r} is not a comma-separated list of op indices",
                                "write e.g. --cuts 3,7,12") from None
    out = sorted({int(c) for c in cuts})
    if out and out[0] < 0:
        raise BadInputError(f"cut {out[0]} is negative", "cuts are op indices, 1 or more")
    return [c for c in out if c != 0]


def slice_model(
    model: str | Path | bytes,
    granularity: str = "layer",
    cuts: Sequence[int] | str | None = None,
    cache_dir: str | Path | None | bool = None,
    *,
    progress: Progress | None = None,
    name: str | None = None,
) -> SlicedModel:
    """Cut `model` into one sub-model per layer.

    granularity: "layer" (the default grouping, see `profiler.slicing`) or "op"
    (one layer per operator); `cuts` (op indices where layers start) overrides it.
    cache_dir: root of the sub-model cache (default `$COUPPROF_CACHE/slices` or
    `~/.cache/coupprof/slices`); False disables caching. A cache hit returns
    the stored sub-models without slicing again. `name` labels `model` in errors
    when it is given as bytes.
    """
    if granularity not in GRANULARITIES:
        raise BadInputError(f"unknown granularity {granularity!r}",
                            f"use one of: {', '.join(GRANULARITIES)}")
    cut_list = normalize_cuts(cuts)
    if cut_list is not None and granularity != "layer":
        raise BadInputError("--cuts and --granularity op exclude each other",
                            "give one of them")
    if isinstance(model, (bytes, bytearray, memoryview)):
        data, name = bytes(model), name or "model"
        check_tflite_bytes(data, name)
    else:
        data, name = read_model_bytes(model), str(model)
    sha = sha256_bytes(data)
    mode = "cuts" if cut_list is not None else granularity

    entry: Path | None = None
    if cache_dir is not False:
        root = (cache.default_root() if cache_dir is None or cache_dir is True
                else Path(cache_dir))
        entry = root / sha / cache.cache_key(granularity, cut_list)
        hit = cache.load(entry, sha)
        if hit is not None:
            if progress:
                progress(len(hit.layers), len(hit.layers))
            return hit

    sliced = _slice(data, name, sha, mode, granularity, cut_list, progress)
    if entry is not None:
        try:
            cache.store(entry, sliced)
        except OSError:  # read-only or full cache: the sub-models are still in memory
            sliced.cache_dir = None
            for layer in sliced.layers:
                layer.path = None
    return sliced


def _slice(data: bytes, name: str, sha: str, mode: str, granularity: str,
           cuts: list[int] | None, progress: Progress | None) -> SlicedModel:
    g = ModelView.of(parse_model(data, name))
    groups = group_ops(g, granularity, cuts)
    bounds = boundaries(g, groups)

    def spec(t: int) -> TensorSpec:
        return TensorSpec.from_tensor(t, g.tensor(t))

    layers: list[Layer] = []
    for k, (ops, (ins, outs)) in enumerate(zip(groups, bounds, strict=True)):
        sub = build_submodel(g, ops, ins, outs,
                             description=f"coupprof layer {k} of {sha[:12]} (ops {ops[0]}..{ops[-1]})")
        used = {t for i in ops for t in g.op_inputs(i)}
        layers.append(Layer(
            index=k, op_indices=list(ops), op_types=[g.op_names[i] for i in ops],
            macs=sum(op_macs(g, i) for i in ops), param_bytes=constant_bytes(g, used),
            inputs=[spec(t) for t in ins], outputs=[spec(t) for t in outs],
            model_bytes=serialize_model(sub),
        ))
        if progress:
            progress(k + 1, len(groups))
    return SlicedModel(
        source_sha256=sha, granularity=mode,
        cuts=_starts(groups)[1:],
        layers=layers,
        model_inputs=[spec(t) for t in g.inputs],
        model_outputs=[spec(t) for t in g.outputs],
    )


def _starts(groups: list[list[int]]) -> list[int]:
    """First op of each group that no earlier group holds (copied constant ops aside)."""
    seen: set[int] = set()
    starts = []
    for grp in groups:
        fresh = [i for i in grp if i not in seen]
        starts.append(min(fresh) if fresh else min(grp))
        seen.update(grp)
    return starts
