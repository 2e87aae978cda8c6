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
from profiler.measure.fused import FusedProfiler, FusedSettings, trimmed_estimate
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
    wrap: type[Scripted] = Scripted

    def __init__(self, cost: object) -> None:
        super().__init__(ProcessorSpec("B", "cpu", "one core", (0,)), threads=1)
        self.cost = cost
        self.held: dict[int, int] = {}
        self.peak = 0
        self.unloads = 0

    def _load(self, model_bytes: bytes, name: str) -> SubModel:
        last = int(re.search(r"prefix \d+\.\.(-?\d+)", name).group(1))  # type: ignore[union-attr]
        sub = self.wrap(super()._load(model_bytes, name),
                       lambda: self.cost(last, self.unloads))  # type: ignore[operator]
        self.held[id(sub)] = len(model_bytes)
        self.peak = max(self.peak, sum(self.held.values()))
        return sub

    def unload(self, sub: SubModel) -> None:
        self.held.pop(id(sub), None)
        self.unloads += 1
        super().unload(sub)


def scripted_profiler(data: bytes, sliced: object, ex: Counting,
                      s: FusedSettings) -> FusedProfiler:
    """The model's prefixes built as loaded, on ``ex``'s scripted clock, within ``s``'s
    memory bound."""
    return FusedProfiler(LazyPrefixes(data, sliced, reduce_above_bytes=None), ex,
                         read_outputs=False, clock=lambda: Counting.now,
                         loaded_bytes=s.loaded_bytes)


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
        prof = scripted_profiler(data, sliced, ex, s)
        res = prof.measure(s)
        peak = ex.peak
    # every interval is zero: within target after the first pass
    assert len(res.blocks) >= 3 and res.rounds == 4 and res.converged
    assert peak <= bound * 1.01 + 16 * 1024, (peak, bound)
    assert peak == res.loaded_bytes_max and peak < sum(sizes) / 3
    # columns: every prefix, each later block starting with the empty prefix and its
    # predecessor's last again (its anchors)
    anchors = {c for b, (a, _) in enumerate(res.blocks) for c in ((a, a + 1) if b else (a,))}
    assert res.round_ns.shape == (4, n + 1 + 2 * (len(res.blocks) - 1))
    assert res.layer_positions == [c for c in range(res.round_ns.shape[1]) if c not in anchors]
    assert res.chain is not None and all(res.chain.linked)
    np.testing.assert_allclose(res.chain.block_scales, 1.0, rtol=1e-9)
    np.testing.assert_allclose(res.times_ms(), layer_ns / 1e6, rtol=0, atol=1e-9)
    assert all(layer.ci95_ms == pytest.approx(0.0, abs=1e-9) for layer in res.layers)
    # the fixed row: the empty prefix's call, plus the offset of a load of the last block
    assert (res.fixed.time_ms * 1e6 - fixed_ns) % 3_000 == pytest.approx(0.0, abs=1e-3)
    assert res.info()["blocks"] == res.blocks and "blocks" in res.info()["scheme"]


def test_blocks_measured_at_different_clocks_are_tied_by_their_anchors(model) -> None:
    """A clock that moves between blocks (here: each load of a block runs the layers at
    another speed, the call's own cost unchanged, as on the H200 whose clock went from
    345 to 1980 MHz between ResNet50's blocks): each block is scaled onto the last one by
    the prefixes it shares with its successor, so every layer comes out as the last
    block's clock runs it, exactly, and the rows with the fixed row add up to the whole
    model's column. Without the tie (each block's differences as they were measured)
    the same rounds add up to another figure."""
    data, sliced = model
    n = len(sliced.layers)
    layer_ns = 10_000 + 1_000 * np.arange(n)
    fixed_ns = 50_000
    speeds = (1.0, 0.45, 1.7, 0.8, 2.3, 0.6, 1.3)
    now = {"speed": 1.0}

    def cost(last: int, unloads: int) -> int:
        now["speed"] = speeds[unloads % len(speeds)]
        return fixed_ns + int(layer_ns[:last + 1].sum() * now["speed"])

    s = FusedSettings(min_rounds=4, warmup_rounds=1, alone_calls=3, loaded_mb=6)
    with Counting(cost) as ex:
        prof = scripted_profiler(data, sliced, ex, s)
        res = prof.measure(s)
    assert len(res.blocks) >= 3 and res.converged and res.chain is not None
    assert len(set(res.chain.block_scales)) > 2  # the blocks did run at different speeds
    last = now["speed"]  # the last block's, which the whole model alone ran at too
    np.testing.assert_allclose(res.times_ms(), layer_ns * last / 1e6, rtol=1e-6, atol=2e-6)
    assert res.fixed.time_ms == pytest.approx(fixed_ns / 1e6, abs=1e-6)
    assert res.fixed.time_ms + res.layer_sum_ms == pytest.approx(res.whole.time_ms, rel=1e-6)
    assert res.whole_alone.time_ms == pytest.approx(res.whole.time_ms, rel=1e-6)
    # each block's differences as measured, untied: they miss the whole model's column
    t = res.round_ns.mean(axis=0) / 1e6
    pos = np.asarray(res.positions())
    untied = t[0] + (t[pos] - t[pos - 1]).sum()
    assert abs(untied / res.whole.time_ms - 1) > 0.05
    # energies: one power window per prefix (the anchors share their prefix's), so the
    # layers' energies and the fixed row's add up to the whole call's exactly
    asked: list[int] = []

    def powers(calls: list) -> list[float]:
        asked.append(len(calls))
        return [1.0 + 0.1 * i for i in range(len(calls))]

    with Counting(cost) as ex:
        prof = scripted_profiler(data, sliced, ex, s)
        res, energy = prof.measure_energy(s, prefix_powers=powers)
    assert asked == [n + 1] and energy is not None
    power_of = dict(zip(prof.columns, energy.prefix_power_w, strict=True))
    assert [power_of[p] for p in prof.columns] == energy.prefix_power_w
    assert energy.fixed_energy_mj + sum(energy.layer_energy_mj) == \
        pytest.approx(energy.whole_energy_mj, rel=1e-9)
    # each prefix's power times its time in the last block's terms
    t_ms = res.fixed.time_ms + np.concatenate([[0.0], np.cumsum(res.times_ms())])
    e_mj = (1.0 + 0.1 * np.arange(n + 1)) * t_ms
    np.testing.assert_allclose(energy.layer_energy_mj, np.diff(e_mj), rtol=1e-6)


#: The host's work between two calls (setting inputs): the processor idles meanwhile.
IDLE_NS = 100_000


class Idling(Scripted):
    def set_input(self, i: int, value: np.ndarray) -> None:
        super().set_input(i, value)
        Counting.now += IDLE_NS


class Driven(Counting):
    wrap = Idling


def test_a_hold_before_each_visit_runs_the_rounds_at_the_clock_of_back_to_back_calls(
        model) -> None:
    """A clock its driver moves with the load (a GPU's): here the layers run twice as
    fast while the processor was busy 70 % of the last 20 ms or more, as back-to-back
    calls of the whole model keep it (85 % busy), and small prefixes do not (33 %). With
    no hold the rounds mix both clocks and the rows come out wrong; held busy 20 ms with
    the heaviest prefix before each visit (`FusedSettings.hold_ms`), then 2 ms with the
    visited prefix itself, every timed call runs at the fast clock and every layer comes
    out as that clock runs it, exactly."""
    data, sliced = model
    n = len(sliced.layers)
    layer_ns = 10_000 + 1_000 * np.arange(n)
    fixed_ns = 50_000
    window_ns = 20_000_000
    busy: list[tuple[int, int]] = []

    def cost(last: int, _: int) -> int:
        start = Counting.now
        seen = sum(min(b, start) - max(a, start - window_ns) for a, b in busy[-200:]
                   if b > start - window_ns)
        speed = 2.0 if seen >= 0.7 * window_ns else 1.0
        ns = fixed_ns + int(layer_ns[:last + 1].sum() / speed)
        busy.append((start, start + ns))
        return ns

    def measure(hold_ms: float) -> object:
        s = FusedSettings(min_rounds=6, max_rounds=6, warmup_rounds=1, alone_calls=3,
                          loaded_mb=0, hold_ms=hold_ms)
        with Driven(cost) as ex:
            prof = scripted_profiler(data, sliced, ex, s)
            return prof.measure(s)

    fast = layer_ns / 2 / 1e6
    held = measure(20.0)
    np.testing.assert_allclose(held.times_ms(), fast, rtol=0, atol=2e-6)
    assert held.fixed.time_ms + held.layer_sum_ms == pytest.approx(held.whole_alone.time_ms)
    unheld = measure(0.0)
    off = np.abs(unheld.times_ms() / fast - 1)
    assert (off > 0.05).sum() >= 3, off  # the slow clock's visits: rows that are not true


def test_the_hold_is_the_drivers_clocks_alone() -> None:
    """Left to the tool, the rounds hold a processor busy where its clock is its driver's
    to move (NVML's reader) and not where coupprof sets it (a governor) or reads none; a
    hold given stands."""
    from profiler.measure.freq_trace import NvmlFreqReader
    from profiler.measure.fused import HOLD_MS_DRIVER_CLOCK, hold_for

    auto = FusedSettings()
    assert hold_for(auto, NvmlFreqReader(0)).hold_ms == HOLD_MS_DRIVER_CLOCK
    assert hold_for(auto, Steps()).hold_ms == 0.0
    assert hold_for(auto, None).hold_ms == 0.0
    assert hold_for(FusedSettings(hold_ms=5.0), NvmlFreqReader(0)).hold_ms == 5.0
    assert hold_for(FusedSettings(hold_ms=0.0), NvmlFreqReader(0)).hold_ms == 0.0
    bad = subprocess.run([COUPPROF, "layers", "--hold-ms", "-1"], capture_output=True,
                         text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--hold-ms" in bad.stderr


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
        prof = scripted_profiler(data, sliced, ex, s)
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
    # tied by their anchors, the blocks' rows add up to the whole model's column
    assert len(fused["block_chain"]["block_scales"]) == len(fused["blocks"])
    assert fused["fixed_ms"] + fused["layer_sum_ms"] == pytest.approx(fused["whole_ms"], rel=1e-6)
    # the raw rounds are kept: each column's trimmed mean is what the ties rested on, and
    # each block starts with the empty prefix (a later one then with its predecessor's last)
    rounds = np.asarray(fused["round_us"], dtype=np.int64) * 1000
    assert rounds.shape == (fused["rounds"], len(fused["column_prefixes"]))
    np.testing.assert_allclose(trimmed_estimate(rounds)[0], fused["block_chain"]["column_ms"],
                               atol=1e-3)
    cols = fused["column_prefixes"]
    for b, (first, _last) in enumerate(fused["blocks"]):
        assert cols[first] == 0 and (b == 0 or cols[first + 1] == cols[first - 1])
    data = zoo.default_model_path().read_bytes()
    sizes = [len(p.model_bytes) for p in prefix_models(data, slice_model(data, cache_dir=False),
                                                       reduce_above_bytes=None)]
    # the largest adjacent pair, and the empty prefix (a later block's anchor)
    pair = max(x + y for x, y in zip(sizes, sizes[1:], strict=False)) + sizes[0]
    assert 0 < fused["loaded_bytes_max"] <= max(1.5 * 2**20, pair) < sum(sizes) / 1.5
    bad = subprocess.run([COUPPROF, "layers", "--loaded-mb", "-1"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin"})
    assert bad.returncode == 2 and "--loaded-mb" in bad.stderr
