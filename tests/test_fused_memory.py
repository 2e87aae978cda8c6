"""The fused method's memory bound (issue 26, item 5): a deep model's prefixes hold about
n/2 copies of its weights, so beyond ``loaded_mb`` they are built, loaded and measured
in blocks of consecutive prefixes (`profiler.measure.fused.FusedProfiler`).

Real LiteRT loads on a CPU core, with an executor that counts the model bytes it holds
loaded and a scripted clock: each prefix's call lasts a set time, plus an offset that
changes every time a block is loaded again (as a clock or the caches may between
blocks), so the figures are known exactly.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from profiler import zoo
from profiler.boards.model import ProcessorSpec
from profiler.executors.base import SubModel
from profiler.executors.cpu import CpuExecutor
from profiler.measure.clock_fit import VisitClocks, fit_clock
from profiler.measure.freq_trace import FreqReader
from profiler.measure.fused import FusedProfiler, FusedSettings
from profiler.slicing.prefix import LazyPrefixes, prefix_models
from profiler.slicing.slicer import slice_model

COUPPROF = str(Path(sys.executable).with_name("coupprof"))


@pytest.fixture(scope="module")
def model() -> tuple[bytes, object]:
    """SqueezeNet 1.1 at 64x64 with 10 classes: 26 layers whose weights (2.8 MB) spread
    over the depth, so its prefixes (21.7 MB) are 4 times its largest pair."""
    data = zoo.build("squeezenet", size=64, classes=10)
    return data, slice_model(data, cache_dir=False)


class Scripted(SubModel):
    """A loaded prefix whose run lasts ``ns()`` on the scripted clock (it runs for real)."""

    def __init__(self, inner: SubModel, ns: object) -> None:
        self.inner, self.ns = inner, ns
        self.name, self.inputs, self.outputs = inner.name, inner.inputs, inner.outputs

    def set_input(self, i: int, value: np.ndarray) -> None:
        self.inner.set_input(i, value)

    def run(self) -> None:
        self.inner.run()
        Counting.now += self.ns()  # type: ignore[operator]

    def output(self, i: int) -> np.ndarray:
        return self.inner.output(i)

    def close(self) -> None:
        self.inner.close()


class Counting(CpuExecutor):
    """One core, one thread: keeps count of the model bytes it holds loaded (their peak)
    and of the blocks loaded so far; prefix ``last``'s run takes ``cost(last, loads)``."""

    now = 0

    def __init__(self, cost: object) -> None:
        super().__init__(ProcessorSpec("B", "cpu", "one core", (0,)), threads=1)
        self.cost = cost
        self.held: dict[int, int] = {}
        self.peak = 0
        self.unloads = 0

    def _load(self, model_bytes: bytes, name: str) -> SubModel:
        last = int(re.search(r"prefix \d+\.\.(-?\d+)", name).group(1))  # type: ignore[union-attr]
        sub = Scripted(super()._load(model_bytes, name),
                       lambda: self.cost(last, self.unloads))  # type: ignore[operator]
        self.held[id(sub)] = len(model_bytes)
        self.peak = max(self.peak, sum(self.held.values()))
        return sub

    def unload(self, sub: SubModel) -> None:
        self.held.pop(id(sub), None)
        self.unloads += 1
        super().unload(sub)


def test_a_deep_model_is_measured_in_blocks_that_fit_and_its_layers_stay_exact(model) -> None:
    """6 MB loaded at most: the model bytes held loaded never pass the larger of the
    budget and the two largest adjacent prefixes (a layer's two prefixes are loaded
    together), a third of all the prefixes (which the code before held at once); each later block repeats its predecessor's last prefix, every layer is the
    difference of two columns of one block, so a block's offset cancels and each layer
    is exact with a zero interval."""
    data, sliced = model
    n = len(sliced.layers)
    layer_ns = 10_000 + 1_000 * np.arange(n)  # layer k: 10 + k us
    fixed_ns = 50_000

    def cost(last: int, unloads: int) -> int:
        return fixed_ns + int(layer_ns[:last + 1].sum()) + 3_000 * unloads

    built = prefix_models(data, sliced, reduce_above_bytes=None)
    sizes = [len(p.model_bytes) for p in built]
    budget = 6 * 2**20
    bound = max(budget, max(a + b for a, b in zip(sizes, sizes[1:], strict=False)))
    s = FusedSettings(min_rounds=4, warmup_rounds=1, alone_calls=3, loaded_mb=6)
    with Counting(cost) as ex:
        prof = FusedProfiler(LazyPrefixes(data, sliced, reduce_above_bytes=None), ex,
                             read_outputs=False, clock=lambda: Counting.now,
                             loaded_bytes=s.loaded_bytes)
        res = prof.measure(s)
        peak = ex.peak
    # every interval is zero: within target after the first pass
    assert len(res.blocks) >= 3 and res.rounds == 4 and res.converged
    assert peak <= bound * 1.01 + 16 * 1024, (peak, bound)
    assert peak == res.loaded_bytes_max and peak < sum(sizes) / 3
    # columns: every prefix, each later block starting with its predecessor's last again
    firsts = [a for a, _ in res.blocks]
    assert res.round_ns.shape == (4, n + 1 + len(res.blocks) - 1)
    assert res.layer_positions == [c for c in range(res.round_ns.shape[1]) if c not in firsts]
    np.testing.assert_allclose(res.times_ms(), layer_ns / 1e6, rtol=0, atol=1e-9)
    assert all(layer.ci95_ms == pytest.approx(0.0, abs=1e-9) for layer in res.layers)
    # the fixed row: the empty prefix's call, plus the offset of a load of block 0
    assert (res.fixed.time_ms * 1e6 - fixed_ns) % 3_000 == pytest.approx(0.0, abs=1e-3)
    assert res.info()["blocks"] == res.blocks and "blocks" in res.info()["scheme"]


class Steps(FreqReader):
    """The clock a scripted processor runs at: it moves when told (``step``)."""

    source = "script"

    def __init__(self) -> None:
        self.khz, self.steps = 600_000, 0

    def step(self) -> None:
        self.steps += 1
        self.khz = (200_000, 300_000, 400_000, 600_000, 450_000)[self.steps % 5]

    def read_khz(self) -> int | None:
        return self.khz


def test_the_clock_of_each_block_round_fits_the_rows_it_measured(model) -> None:
    """With blocks, the rounds of different blocks are made at different times: the
    visits' clocks (`VisitClocks`) come in one row per block's round, and
    `FusedResult.visit_matrix` puts each where its times are, so each layer's fit
    against the clock (t = a + b f_ref / f) comes out exact although the clock moved
    from one block's round to the next. The moving clock keeps the intervals wide: a
    first pass of 4 rounds, then one of the 6 that max_rounds leaves, blocks backward."""
    data, sliced = model
    n = len(sliced.layers)
    a_ns = 5_000 + 500 * np.arange(n)
    b_ns = 20_000 + 2_000 * np.arange(n)
    reader = Steps()
    ref = 400_000

    def cost(last: int, _: int) -> int:
        scale = ref / reader.khz
        return 50_000 + int(a_ns[:last + 1].sum() + b_ns[:last + 1].sum() * scale)

    visits = VisitClocks(reader)

    def hooks(position: int, start: bool) -> None:
        if position < 0:  # a block's round starts: the clock moves
            reader.step()
        visits(position, start)

    s = FusedSettings(min_rounds=4, max_rounds=10, check_every=3, warmup_rounds=1,
                      alone_calls=0, loaded_mb=6)
    with Counting(cost) as ex:
        prof = FusedProfiler(LazyPrefixes(data, sliced, reduce_above_bytes=None), ex,
                             read_outputs=False, clock=lambda: Counting.now,
                             loaded_bytes=s.loaded_bytes)
        res = prof.measure(s, hooks=hooks)
    nb = len(res.blocks)
    assert nb >= 3 and res.rounds == 10 and not res.converged
    assert res.visit_rows == [r for b in range(nb) for r in range(4)] + \
        [r for b in range(nb) for r in range(4, 10)]
    fit = fit_clock(res, visits)
    assert fit is not None and fit.identified
    np.testing.assert_allclose(fit.layer_a_ms, a_ns / 1e6, atol=2e-5)
    np.testing.assert_allclose(fit.layer_b_ms, b_ns / 1e6 * fit.freq_ref_khz / ref, atol=2e-5)


def test_layers_through_the_cli_keep_within_loaded_mb(tmp_path: Path) -> None:
    """`coupprof layers --method fused --loaded-mb` on the simulated B (the default model,
    4.7 MB of prefixes): the sidecar says the prefixes were measured in blocks, and what
    was loaded at once: no more than the budget or the largest adjacent pair."""
    csv = tmp_path / "b.csv"
    proc = subprocess.run(
        [COUPPROF, "layers", "--board", "sim", "-p", "B", "--method", "fused", "--frames", "2",
         "--warmup", "0", "--power", "none", "--min-rounds", "3", "--max-rounds", "3",
         "--loaded-mb", "1.5", "--csv", str(csv), "-q"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"COLUMNS": "160", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    fused = json.loads(csv.with_suffix(".json").read_text())["fused"]
    assert len(fused["blocks"]) >= 3 and fused["settings"]["loaded_mb"] == 1.5
    data = zoo.default_model_path().read_bytes()
    sizes = [len(p.model_bytes) for p in prefix_models(data, slice_model(data, cache_dir=False),
                                                       reduce_above_bytes=None)]
    pair = max(x + y for x, y in zip(sizes, sizes[1:], strict=False))
    assert 0 < fused["loaded_bytes_max"] <= max(1.5 * 2**20, pair) < sum(sizes) / 1.5
    bad = subprocess.run([COUPPROF, "layers", "--loaded-mb", "-1"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin"})
    assert bad.returncode == 2 and "--loaded-mb" in bad.stderr
