"""The zoo's catalogue: which models exist, their parameters, and building them.

`build(name, **params)` returns .tflite bytes that depend only on the name, the
parameters (defaults filled in) and `ZOO_VERSION`; `model_path` caches them on disk.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler.errors import BadInputError
from profiler.resources import default_model_file
from profiler.zoo.arch.alexnet import alexnet, alexnet_bvlc
from profiler.zoo.arch.densenet import densenet121
from profiler.zoo.arch.googlenet import googlenet
from profiler.zoo.arch.mobilenet import mobilenet_v1
from profiler.zoo.arch.resnet import resnet50, resnet50_slim, resnet101
from profiler.zoo.arch.squeezenet import squeezenet, squeezenet1_0
from profiler.zoo.arch.vgg import vgg19
from profiler.zoo.emit import draw_constants, to_bytes, to_model
from profiler.zoo.graph import GraphBuilder

#: Bumped whenever a builder change alters the bytes of any model; part of cache names.
ZOO_VERSION = 1

#: The bundled default model (MobileNetV1 alpha 0.25, 128x128, seed 0), committed to git.
DEFAULT_MODEL_NAME = "mobilenet_v1"
DEFAULT_MODEL_PARAMS: dict[str, Any] = {"alpha": 0.25, "size": 128}
DEFAULT_MODEL_FILE = default_model_file()


@dataclass(frozen=True)
class Param:
    default: int | float
    help: str
    minimum: int | float
    maximum: int | float = math.inf


@dataclass(frozen=True)
class ZooEntry:
    """One buildable architecture. `params` maps each parameter to its help text."""

    name: str
    description: str
    params: dict[str, str]
    default_params: dict[str, Any]
    graph_fn: Callable[..., GraphBuilder] = field(repr=False, compare=False)
    quantized: bool = False
    specs: dict[str, Param] = field(default_factory=dict, repr=False, compare=False)


SEED = Param(0, "seed of the weight RNG", 0)


def _entry(name: str, description: str, graph_fn: Callable[..., GraphBuilder],
           specs: dict[str, Param], *, quantized: bool = False) -> ZooEntry:
    specs = {**specs, "seed": SEED}
    if quantized:
        specs["calib_samples"] = Param(8, "random inputs used to calibrate activation ranges", 1)
    return ZooEntry(
        name=name,
        description=description,
        params={k: p.help for k, p in specs.items()},
        default_params={k: p.default for k, p in specs.items()},
        graph_fn=graph_fn,
        quantized=quantized,
        specs=specs,
    )


CLASSES = Param(1000, "classifier outputs", 1)
LRN = Param(1, "1: LOCAL_RESPONSE_NORMALIZATION as in the paper, 0: none", 0, 1)


def _size(default: int, minimum: int) -> Param:
    return Param(default, "input height and width in pixels", minimum)


_MOBILENET_SPECS = {"alpha": Param(1.0, "width multiplier", 0.01), "size": _size(224, 32),
                    "classes": CLASSES}

_REGISTRY: dict[str, ZooEntry] = {}


def register(entry: ZooEntry) -> None:
    _REGISTRY[entry.name] = entry


register(_entry(
    "mobilenet_v1",
    "MobileNetV1: conv 3x3/2, 13 depthwise-separable blocks, avg pool, 1x1 classifier",
    mobilenet_v1, _MOBILENET_SPECS))
register(_entry(
    "mobilenet_v1_int8",
    "MobileNetV1, full-integer int8 (per-channel weights, int8 input/output), calibrated in LiteRT",
    mobilenet_v1, _MOBILENET_SPECS, quantized=True))
register(_entry(
    "resnet50",
    "ResNet-50 as Keras lays it out: 16 bottleneck blocks with projection/identity skips "
    "joined by ADD, a stage's stride on its first 1x1 conv (resnet50_slim: TF-slim's layout)",
    resnet50, {"size": _size(224, 32), "classes": CLASSES}))
register(_entry(
    "resnet50_slim",
    "ResNet-50 v1 as TF-slim's resnet_v1_50 (ACL's graph_resnet50, ARM-CO-UP's ResV1_50): "
    "blocks 1-3 downsample on the 3x3 conv of their LAST unit, 1x1 conv classifier",
    resnet50_slim, {"size": _size(224, 32), "classes": CLASSES}))
register(_entry(
    "googlenet",
    "GoogLeNet (Inception v1): stem + 9 inception blocks of 4 branches joined by CONCATENATION "
    "(as ACL's graph_googlenet, ARM-CO-UP's Google)",
    googlenet, {"size": _size(224, 32), "classes": CLASSES, "lrn": LRN}))
register(_entry(
    "squeezenet",
    "SqueezeNet 1.1: 8 fire modules (squeeze 1x1 -> expand 1x1 + 3x3 -> concat), "
    "conv1 3x3/2 (squeezenet1_0: version 1.0)",
    squeezenet, {"size": _size(224, 31), "classes": CLASSES}))
register(_entry(
    "squeezenet1_0",
    "SqueezeNet 1.0 (ACL's graph_squeezenet, ARM-CO-UP's SqueezeV1): conv1 7x7/2 (96), "
    "pools after conv1, fire4 and fire8, v1.0's fire widths; 2.4x the MACs of 1.1",
    squeezenet1_0, {"size": _size(224, 29), "classes": CLASSES}))
register(_entry(
    "alexnet",
    "AlexNet as one tower: 11x11/4 and 5x5 convs, LRN, max pools, 3 FC layers "
    "(FC width reduced to 1024; alexnet_bvlc: the original)",
    alexnet, {"size": _size(227, 67), "classes": CLASSES, "lrn": LRN,
              "fc_width": Param(1024, "width of fc6/fc7 (the paper: 4096)", 1)}))
register(_entry(
    "alexnet_bvlc",
    "AlexNet as Caffe's bvlc_alexnet (ACL's graph_alexnet, ARM-CO-UP's Alex): conv2, conv4, "
    "conv5 in 2 groups, 4096-wide fc6/fc7 (a 250 MB file)",
    alexnet_bvlc, {"size": _size(227, 67), "classes": CLASSES, "lrn": LRN,
                   "fc_width": Param(4096, "width of fc6/fc7", 1)}))

# AutoDiCE's three (docs/devices.md), at the layouts of the ONNX model zoo's versions.
register(_entry(
    "vgg19",
    "VGG-19 as the ONNX zoo's vgg19: 16 3x3 convs in 5 blocks, each closed by a 2x2 max "
    "pool, 3 FC layers (143.7 M parameters, a 575 MB file; alpha/fc_width shrink it)",
    vgg19, {"size": _size(224, 32), "classes": CLASSES,
            "alpha": Param(1.0, "width multiplier of the convs (never below 8 channels)", 0.01),
            "fc_width": Param(4096, "width of the two hidden FC layers", 1)}))
register(_entry(
    "resnet101",
    "ResNet-101 v1 as the ONNX zoo's resnet101-v1 (MXNet Gluon; Keras' layout): stages "
    "of 3, 4, 23, 3 bottlenecks, stride on the first 1x1 conv, FC classifier",
    resnet101, {"size": _size(224, 32), "classes": CLASSES}))
register(_entry(
    "densenet121",
    "DenseNet-121 as the ONNX zoo's densenet-121: dense blocks of 6, 12, 24, 16 layers "
    "(1x1 + 3x3 conv, growth 32, CONCATENATION), transitions halving the channels, "
    "1x1 conv classifier",
    densenet121, {"size": _size(224, 29), "classes": CLASSES}))


def list_models() -> list[ZooEntry]:
    return list(_REGISTRY.values())


def get_entry(name: str) -> ZooEntry:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise BadInputError(
            f"unknown zoo model {name!r} (known: {', '.join(_REGISTRY)})",
            "run `coupprof zoo --list`",
        ) from None


def resolve_params(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """Defaults filled in, values coerced to the default's type and range-checked."""
    entry = get_entry(name)
    out = dict(entry.default_params)
    for key, raw in params.items():
        spec = entry.specs.get(key)
        if spec is None:
            raise BadInputError(
                f"zoo model {name!r} has no parameter {key!r} (it takes: {', '.join(entry.specs)})",
                f"run `coupprof zoo --list` to see {name}'s parameters",
            )
        kind = type(spec.default)
        try:
            value = kind(raw) if kind is float else _as_int(raw)
        except (TypeError, ValueError):
            raise BadInputError(
                f"parameter {key}={raw!r} of {name!r} is not {'a number' if kind is float else 'an integer'}",
                f"pass e.g. --param {key}={spec.default}",
            ) from None
        if not math.isfinite(value) or not spec.minimum <= value <= spec.maximum:
            allowed = f"{spec.minimum}..{spec.maximum}" if math.isfinite(spec.maximum) \
                else f">= {spec.minimum}"
            raise BadInputError(
                f"parameter {key}={raw!r} of {name!r} is out of range ({allowed})",
                f"pass {key} {allowed}",
            )
        out[key] = value
    return out


def _as_int(raw: object) -> int:
    if isinstance(raw, bool):
        raise ValueError(raw)
    if isinstance(raw, float):
        if not raw.is_integer():
            raise ValueError(raw)
        return int(raw)
    return int(str(raw), 10)


def graph(name: str, **params: Any) -> GraphBuilder:
    """The model's graph (shapes, op list, MACs) without drawing any weights."""
    return _make_graph(get_entry(name), resolve_params(name, params))


def _make_graph(entry: ZooEntry, full: dict[str, Any]) -> GraphBuilder:
    arch = {k: v for k, v in full.items() if k not in ("seed", "calib_samples")}
    try:
        return entry.graph_fn(**arch)
    except ValueError as err:  # e.g. an input too small for a VALID window
        raise BadInputError(f"cannot build {entry.name} with {_param_text(full)}: {err}",
                            "use a larger size parameter") from None


def build(name: str, **params: Any) -> bytes:
    """Build the .tflite bytes of zoo model `name`; the same parameters give the same bytes."""
    entry = get_entry(name)
    full = resolve_params(name, params)
    g = _make_graph(entry, full)
    constants = draw_constants(g, full["seed"])
    meta = {"name": name, "params": full, "zoo_version": ZOO_VERSION}
    if entry.quantized:
        from profiler.zoo.quantize import quantize_model

        return quantize_model(g, constants, samples=full["calib_samples"],
                              seed=full["seed"], metadata=meta)
    return to_bytes(to_model(g, constants, metadata=meta))


def _param_text(full: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(full.items()))


def cache_dir() -> Path:
    root = os.environ.get("COUPPROF_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "coupprof"


def cache_name(name: str, full: dict[str, Any]) -> str:
    parts = "_".join(f"{k}{v}" for k, v in sorted(full.items()))
    return f"{name}-{parts}-z{ZOO_VERSION}.tflite"


def model_path(name: str, **params: Any) -> Path:
    """Path of the cached .tflite for `name` with `params`, building it on first use."""
    full = resolve_params(name, params)
    path = cache_dir() / "models" / cache_name(name, full)
    if not path.exists():
        write_atomic(path, build(name, **full))
    return path


def write_atomic(path: Path, data: bytes, *, make_parents: bool = True) -> None:
    """Write via a temporary file in the same directory and rename, so a reader never
    sees a half-written model (two processes building the same model both succeed)."""
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_default_model() -> bytes:
    return build(DEFAULT_MODEL_NAME, **DEFAULT_MODEL_PARAMS)


def write_default_model(path: Path | None = None) -> Path:
    """Regenerate the committed default model (`python -m profiler.zoo.default`)."""
    target = path or DEFAULT_MODEL_FILE
    write_atomic(target, build_default_model())
    return target


def default_model_path() -> Path:
    """The bundled default model (package data); built into the cache if the file is
    missing (a package whose data was left out)."""
    if DEFAULT_MODEL_FILE.exists():
        return DEFAULT_MODEL_FILE
    return model_path(DEFAULT_MODEL_NAME, **DEFAULT_MODEL_PARAMS)


def summary(name: str, **params: Any) -> tuple[Counter[str], int, int]:
    """(operator counts, MACs, parameter count) of a zoo model, without building it."""
    g = graph(name, **params)
    return g.op_counts(), g.macs(), g.param_count()
