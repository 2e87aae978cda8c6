"""`coupprof slice` end to end, as a user runs it: table, -o DIR, --verify exit codes, bad input."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.slicing.cache import MANIFEST
from profiler.tflite.model_io import parse_model, serialize_model
from tests.models import topologies

COUPPROF = str(Path(sys.executable).with_name("coupprof"))


def run(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COUPPROF_CACHE": str(cache), "COLUMNS": "100"}
    return subprocess.run([COUPPROF, "slice", *args], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "multi_io.tflite"
    path.write_bytes(topologies.multi_io())
    return path


def test_slice_writes_submodels_and_table(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "layers"
    r = run(str(model), "--verify", "-o", str(out), cache=tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    files = sorted(p.name for p in out.iterdir())
    manifest = json.loads((out / MANIFEST).read_text())
    n = len(manifest["layers"])
    assert files == sorted([MANIFEST] + [f"layer_{i:03d}.tflite" for i in range(n)])
    for layer in manifest["layers"]:
        data = (out / layer["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == layer["sha256"]
        assert len(parse_model(data).subgraphs[0].operators) == len(layer["op_indices"])
    rows = [int(m.group(1)) for m in re.finditer(r"^│\s+(\d+) │", r.stdout, re.MULTILINE)]
    assert rows == list(range(n))  # one table row per layer
    assert "match the whole model" in r.stdout
    stem_macs = f"{16 * 16 * 8 * 27:,}"
    assert stem_macs in r.stdout
    # Writing a coarser slicing into the same DIR leaves no stale layer files behind.
    again = run(str(model), "--cuts", "5", "-o", str(out), cache=tmp_path / "cache")
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in out.glob("layer_*")) == ["layer_000.tflite", "layer_001.tflite"]


def test_op_granularity_and_cuts(model: Path, tmp_path: Path) -> None:
    by_op = run(str(model), "--granularity", "op", "--verify", cache=tmp_path)
    assert by_op.returncode == 0, by_op.stderr
    assert "14 layers (op)" in by_op.stdout
    cuts = run(str(model), "--cuts", "4,7", "--verify", cache=tmp_path)
    assert cuts.returncode == 0, cuts.stderr
    assert "3 layers (cuts 4,7)" in cuts.stdout


def test_broken_submodel_exits_1_naming_the_layer(model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert run(str(model), cache=cache).returncode == 0
    entry = next(cache.glob("slices/*/v1-layer"))
    manifest = json.loads((entry / MANIFEST).read_text())
    # Tamper layer 4's conv weights, and record the new hash so the cache accepts it.
    victim = entry / manifest["layers"][4]["file"]
    m = parse_model(victim.read_bytes())
    sg = m.subgraphs[0]
    weights = m.buffers[sg.tensors[sg.operators[0].inputs[1]].buffer]
    weights.data = weights.data.copy()
    weights.data[3::4] ^= 0x40  # flip an exponent bit of every float
    data = serialize_model(m)
    victim.write_bytes(data)
    manifest["layers"][4]["sha256"] = hashlib.sha256(data).hexdigest()
    (entry / MANIFEST).write_text(json.dumps(manifest))

    r = run(str(model), "--verify", cache=cache)
    assert r.returncode == 1
    err = r.stderr.strip().splitlines()
    assert len([e for e in err if e.startswith("coupprof")]) == 1
    assert "layer 4" in r.stderr and "Traceback" not in r.stderr
    assert "(from cache)" in r.stdout


@pytest.mark.parametrize("case", ["missing", "not_tflite", "truncated", "cut_range", "cut_text",
                                  "cuts_and_op", "out_is_file", "directory"])
def test_bad_input_exits_2_with_one_line(case: str, model: Path, tmp_path: Path) -> None:
    args = [str(model)]
    if case == "missing":
        args = [str(tmp_path / "nope.tflite")]
    elif case == "not_tflite":
        (tmp_path / "x.tflite").write_bytes(b"PK\x03\x04 definitely not a flatbuffer" * 10)
        args = [str(tmp_path / "x.tflite")]
    elif case == "truncated":
        (tmp_path / "t.tflite").write_bytes(model.read_bytes()[:600])
        args = [str(tmp_path / "t.tflite")]
    elif case == "cut_range":
        args += ["--cuts", "3,99"]
    elif case == "cut_text":
        args += ["--cuts", "3,x"]
    elif case == "cuts_and_op":
        args += ["--cuts", "3", "--granularity", "op"]
    elif case == "out_is_file":
        args += ["-o", str(model)]
    elif case == "directory":
        args = [str(tmp_path)]
    r = run(*args, cache=tmp_path / "cache")
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if not line.startswith("INFO:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert lines[0].startswith("coupprof slice: error:")
