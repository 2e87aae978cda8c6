"""On-disk cache of sub-models: <root>/<model sha256>/<key>/layer_NNN.tflite + manifest.json.

The root is `cache_dir` when given, else `$COUPPROF_CACHE/slices`, else
`~/.cache/coupprof/slices`. The key names the grouping ("v1-layer", "v1-op",
"v1-cuts-<hash>"). Entries are written to a temporary directory and renamed
into place, so a reader never sees a half-written entry; an entry whose
manifest or files do not match their recorded sha256 is rebuilt.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from profiler.slicing.specs import Layer, SlicedModel, TensorSpec
from profiler.tflite.model_io import FILE_IDENTIFIER, sha256_bytes

# Bump when slicing changes what a sub-model contains, so old entries are not reused.
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def default_root() -> Path:
    env = os.environ.get("COUPPROF_CACHE")
    base = Path(env).expanduser() if env else Path.home() / ".cache" / "coupprof"
    return base / "slices"


def cache_key(granularity: str, cuts: Sequence[int] | None) -> str:
    if cuts is not None:
        digest = sha256_bytes(",".join(str(c) for c in cuts).encode())[:16]
        return f"v{FORMAT_VERSION}-cuts-{digest}"
    return f"v{FORMAT_VERSION}-{granularity}"


def layer_file(index: int) -> str:
    return f"layer_{index:03d}.tflite"


def load(entry: Path, source_sha256: str) -> SlicedModel | None:
    """The cached slicing in `entry`, or None if it is missing or damaged."""
    try:
        manifest: dict[str, Any] = json.loads((entry / MANIFEST).read_text())
        if manifest.get("format") != FORMAT_VERSION or manifest["source_sha256"] != source_sha256:
            return None
        layers = []
        for d in manifest["layers"]:
            path = entry / d["file"]
            data = path.read_bytes()
            if data[4:8] != FILE_IDENTIFIER or sha256_bytes(data) != d["sha256"]:
                return None
            layers.append(Layer(
                index=d["index"], op_indices=list(d["op_indices"]), op_types=list(d["op_types"]),
                macs=int(d["macs"]), param_bytes=int(d["param_bytes"]),
                inputs=[TensorSpec.from_dict(t) for t in d["inputs"]],
                outputs=[TensorSpec.from_dict(t) for t in d["outputs"]],
                model_bytes=data, path=path,
            ))
        return SlicedModel(
            source_sha256=source_sha256, granularity=manifest["granularity"],
            cuts=list(manifest["cuts"]), layers=layers,
            model_inputs=[TensorSpec.from_dict(t) for t in manifest["model_inputs"]],
            model_outputs=[TensorSpec.from_dict(t) for t in manifest["model_outputs"]],
            cache_dir=entry, from_cache=True,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(entry: Path, sliced: SlicedModel) -> None:
    """Write `sliced` to `entry` atomically and point its layers' `path` there."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    try:
        layers = []
        for layer in sliced.layers:
            name = layer_file(layer.index)
            (tmp / name).write_bytes(layer.model_bytes)
            layers.append({**layer.to_dict(), "file": name, "sha256": sha256_bytes(layer.model_bytes)})
        manifest = {
            "format": FORMAT_VERSION, "source_sha256": sliced.source_sha256,
            "granularity": sliced.granularity, "cuts": sliced.cuts,
            "model_inputs": [_spec(t) for t in sliced.model_inputs],
            "model_outputs": [_spec(t) for t in sliced.model_outputs],
            "layers": layers,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        if entry.exists():  # a damaged entry being rebuilt
            shutil.rmtree(entry, ignore_errors=True)
        try:
            os.rename(tmp, entry)
        except OSError:  # another process stored the same entry first; theirs is identical
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for layer in sliced.layers:
        layer.path = entry / layer_file(layer.index)
    sliced.cache_dir = entry


def _spec(t: TensorSpec) -> dict[str, Any]:
    return {**t.__dict__, "shape": list(t.shape)}
