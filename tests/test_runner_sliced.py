"""The runner on models cut by the real slicer: chaining the sub-models through the
runner's hand-over reproduces the whole model's outputs (branches, skips, int8)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import pytest

from profiler import zoo
from profiler.boards.model import ProcessorSpec
from profiler.executors.cpu import CpuExecutor
from profiler.measure.runner import LayerRunner
from profiler.runtime import make_interpreter
from profiler.slicing.slicer import slice_model

CORES = tuple(sorted(os.sched_getaffinity(0)))
PROC = ProcessorSpec("B", "cpu", "test cores", CORES)

MODELS = {
    "googlenet": dict(size=32, classes=10),  # inception branches joined by concat
    "resnet50": dict(size=32, classes=10),  # skip connections
    "mobilenet_v1_int8": dict(alpha=0.25, size=32, classes=10),  # int8 hand-over
}


@functools.cache
def model_bytes(name: str) -> bytes:
    return zoo.build(name, **MODELS[name])


def whole_model_outputs(data: bytes, inputs: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    interp = make_interpreter(data, num_threads=1)
    for det in interp.get_input_details():
        interp.set_tensor(det["index"], inputs[det["index"]])
    interp.invoke()
    return {det["index"]: interp.get_tensor(det["index"]) for det in interp.get_output_details()}


@pytest.mark.parametrize("granularity", ["layer", "op"])
@pytest.mark.parametrize("name", list(MODELS))
def test_chained_run_matches_whole_model(name: str, granularity: str, tmp_path: Path) -> None:
    data = model_bytes(name)
    sliced = slice_model(data, granularity, cache_dir=tmp_path)
    with CpuExecutor(PROC, threads=1) as ex:
        runner = LayerRunner(sliced, ex, seed=1)
        timings = runner.run(frames=2, warmup=1)
        chained = runner.outputs()
    assert timings.ts_ns.shape == (2, len(sliced.layers), 4)
    # Subgraph input/output tensor indices of the whole model are the slicer's spec indices.
    expect = whole_model_outputs(data, runner.inputs)
    assert set(chained) == set(expect)
    for idx, want in expect.items():
        got = chained[idx]
        assert got.dtype == want.dtype and got.shape == want.shape
        if want.dtype == np.int8:
            assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
        else:
            scale = float(np.abs(want).max())
            assert np.abs(got - want).max() <= 1e-4 * scale
