"""The one measuring path (`profiler.measure.layers`) on the simulated board: the level
asked is the level measured and recorded, governors come back and the power stream is
aborted when a frame fails, and a processor's interpreters serve every level."""

from __future__ import annotations

import numpy as np
import pytest

from governors import make_governor
from profiler.markers.hooks import LayerHooks
from profiler.measure.fused import FusedSettings
from profiler.measure.hardware import open_power
from profiler.measure.layers import (
    LayerSettings,
    Levels,
    ModelUnderTest,
    ProcessorLayers,
    measure_layers,
)
from profiler.platform import choose_board
from profiler.slicing.slicer import slice_model
from profiler.zoo import default_model_path

SIM = choose_board("sim")
PATH = default_model_path()
SLICED = slice_model(PATH)
MODEL = ModelUnderTest.of(PATH, PATH.read_bytes(), SLICED)
N = len(SLICED.layers)


def khz_now(letter: str) -> int | None:
    return make_governor(SIM, SIM.dvfs_domain(letter)).read_khz()


def other_level(letter: str) -> tuple[int, int]:
    """A level of ``letter`` other than the one in force (so restoring is seen)."""
    table = SIM.dvfs_domain(letter).freqs_khz
    now = khz_now(letter)
    k = next(i for i, khz in enumerate(table) if khz != now)
    return k + 1, table[k]


class FailIn(LayerHooks):
    """Raises before measured frame ``frame``; notes the frequency in force before each."""

    def __init__(self, letter: str, frame: int) -> None:
        self.letter, self.frame = letter, frame
        self.seen: list[int | None] = []

    def before_frame(self, frame: int, warmup: bool) -> None:
        if warmup:
            return
        self.seen.append(khz_now(self.letter))
        if frame == self.frame:
            raise RuntimeError("a frame failed")


def test_the_level_asked_is_set_measured_recorded_and_restored() -> None:
    before = khz_now("G")
    level = other_level("G")
    session, _ = open_power(SIM, baseline_s=0.05)
    watch = FailIn("G", frame=-1)  # never fails
    m = measure_layers(SIM, "G", MODEL, LayerSettings(frames=3, warmup=1), level=level,
                       power=session, hooks=watch)
    assert watch.seen == [level[1]] * 3  # every measured frame ran at the level asked
    info = m.run.info
    assert (info.freq_level, info.freq_khz) == level and info.method == "sliced"
    assert info.extra["governor"]["requested_khz"] == level[1]
    assert m.level is not None and m.level.effective_khz == level[1]
    assert info.power_source == "sim" and m.power_error is None
    table = m.tables().layers
    assert len(table) == N and table["energy_mj"].gt(0).all()
    assert m.freq_trace is not None and m.freq_trace.median_khz == level[1]
    assert khz_now("G") == before  # restored once measured


def test_a_failing_frame_restores_the_governors_and_aborts_the_power_stream(
        monkeypatch: pytest.MonkeyPatch) -> None:
    before = {letter: khz_now(letter) for letter in "GB"}
    level, host = other_level("G"), other_level("B")
    session, _ = open_power(SIM, baseline_s=0.05)
    aborted: list[bool] = []
    real_abort = session.abort
    monkeypatch.setattr(session, "abort", lambda: (aborted.append(True), real_abort()))
    finished: list[bool] = []
    monkeypatch.setattr(session, "finish", lambda *a, **k: finished.append(True))
    watch = FailIn("G", frame=1)
    with pytest.raises(RuntimeError, match="a frame failed"):
        measure_layers(SIM, "G", MODEL, LayerSettings(frames=3, warmup=0), level=level,
                       host_level=host, power=session, hooks=watch)
    assert watch.seen == [level[1]] * 2  # it did run at the level before failing
    assert aborted == [True] and finished == []
    assert {letter: khz_now(letter) for letter in "GB"} == before


def test_one_processor_builds_once_and_measures_each_level_with_its_fused_rounds() -> None:
    b = SIM.processor("B")
    levels = [(1, b.freqs_khz[0]), (len(b.freqs_khz), b.freqs_khz[-1])]
    gov = make_governor(SIM, b)
    fused = FusedSettings(min_rounds=3, max_rounds=3, warmup_rounds=0, alone_calls=0)
    settings = LayerSettings(frames=3, warmup=1, fused=fused)
    session, _ = open_power(SIM, baseline_s=0.05)
    with Levels([gov]) as held, session, \
            ProcessorLayers(SIM, "B", MODEL, settings, governor=gov, levels=held) as layers:
        got = [layers.measure(level, power=session) for level in levels]
        runner, prefixes = layers.runner, layers.prefixes
        assert layers.runner is runner and layers.prefixes is prefixes  # built once
    slow, fast = got
    for m, level in zip(got, levels, strict=True):
        assert (m.run.info.freq_level, m.run.info.freq_khz) == level
        assert m.run.info.method == "fused" and m.fused is not None
        assert m.fused_energy is not None and len(m.fused_energy.layer_energy_mj) == N
        assert "sim_late_runs" in m.run.layer_extras  # this measurement's, not the runner's
        assert np.sum(m.run.layer_extras["sim_late_runs"]) <= N * (3 + 1)
    # the modelled B runs slower at its lowest level, in both methods
    assert slow.run.timings.time_ns.mean() > 1.5 * fast.run.timings.time_ns.mean()
    assert slow.fused.layer_sum_ms > 1.5 * fast.fused.layer_sum_ms
