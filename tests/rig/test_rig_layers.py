"""Per-layer energy end to end on the real logger firmware under simavr (`pytest -m rig`).

Everything between the model and the energy table is the product's own code:
the default model is sliced (`--cuts` into 4 layers) and run by the real
`LayerRunner` on the simulated board's `L` cluster at DVFS level 1 (LiteRT on
this machine, stretched to the modelled 408 MHz, so every layer lasts 1.5 to
5 ms); a `PowerSession` drives the `sim` marker into the rig's marker pin, reads
the firmware's binary stream with `ArduinoSource` over the rig's pty, fits the
logger clock to the host clock over the edges and attributes energy per layer.

The rig runs paced to the wall clock with a waveform whose current rises by
0.25 A while the marker is high (and ramps underneath), so each layer's energy
depends on when it ran and for how long. Ground truth is the rig's exact
integral of power between the pin changes it applied (`GroundTruth.windows`).
Windows are paired with (frame, layer) by time: the marker sink records the
simulated time the rig applied each change, and the change whose host call lies
inside a layer's marker bracket is that layer's edge.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from host_cores import cores

from governors import RestoreGuard, make_governor
from profiler.boards.model import resolve_level
from profiler.boards.profiles import select_board
from profiler.executors.factory import make_executor
from profiler.markers import SimMarker
from profiler.measure.runner import LayerRunner
from profiler.power import protocol as P
from profiler.power import rig as rigmod
from profiler.power.attribution import Attribution
from profiler.power.rig import A0_ELF, INA226_ELF, GroundTruth, Rig, Waveform
from profiler.power.session import MarkerHooks, PowerResult, PowerSession
from profiler.power.sources.arduino import ArduinoSource
from profiler.slicing.slicer import slice_model
from profiler.zoo import default_model_path

pytestmark = pytest.mark.rig

CUTS = "0,7,15,23"  # 4 layers of the default MobileNetV1 0.25
FRAMES, WARMUP = 15, 2
ELFS = {"ina226": INA226_ELF, "a0": A0_ELF}
#: 0.20 -> 0.35 A ramp, +0.25 A while the marker is high: at most 0.6 A, inside the
#: INA226's 0.82 A range on the rig's 0.1 ohm shunt. The INA226 measures the bus
#: voltage too (it sags with the ramp); the A0 front end measures current only and
#: reports power at the logger's nominal bus voltage, so its bus stays at 5 V.
WAVES = {
    "ina226": Waveform(points=((0, 0.20, 5.0), (7_300, 0.35, 4.9)), period_us=14_600,
                       state_current_a={1: 0.25}),
    "a0": Waveform(points=((0, 0.20, 5.0), (7_300, 0.35, 5.0)), period_us=14_600,
                   state_current_a={1: 0.25}),
}


@dataclass
class RigRun:
    front_end: str
    result: PowerResult
    att: Attribution  # None only in a run that failed (see result.error)
    truth_mj: np.ndarray  # (frames, layers): exact energy of each layer's marker window
    truth_us: np.ndarray  # (frames, layers, 2): the window on the rig's clock
    source: ArduinoSource
    truth: GroundTruth
    device_offset_us: float  # logger clock - rig clock
    baseline_truth_w: float  # the waveform's exact mean power over the baseline window
    pacing_us: np.ndarray  # per marker change: how far the rig's clock was off the wall's
    calls: np.ndarray  # per marker change: host ns before and after the call, rig us, bits
    oversleep_us: int  # COUPPROF_RIG_OVERSLEEP_US the rig ran with


class RecordingSink:
    """The `sim` marker's sink: drives the rig's pins and notes, per call, the host
    times around it and the simulated time the rig applied the change."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.calls: list[tuple[int, int, float, int]] = []

    def __call__(self, bits: int) -> None:
        t0 = time.perf_counter_ns()
        sim_us = self.rig.set_markers(bits)
        self.calls.append((t0, time.perf_counter_ns(), sim_us, bits))

    def pacing_us(self) -> np.ndarray:
        """Per change, how far outside the host's bracket around the call the rig applied
        it, on a line fitted through all changes: 0 while the rig keeps pace with the
        wall clock, ms when a busy host starved it and it caught up later."""
        c = np.array(self.calls, dtype=np.float64)
        t0, t1 = (c[:, 0] - c[0, 0]) / 1e3, (c[:, 1] - c[0, 0]) / 1e3
        slope, icpt = np.polyfit(c[:, 2], (t0 + t1) / 2, 1)
        at = slope * c[:, 2] + icpt
        at += np.median((t0 + t1) / 2 - at)
        return np.maximum(0.0, np.maximum(t0 - at, at - t1))

    def applied_in(self, bracket: np.ndarray, bits: int) -> float:
        """Simulated time of the one change to ``bits`` made inside a host bracket."""
        hits = [c[2] for c in self.calls
                if c[3] == bits and c[0] >= bracket[0] and c[1] <= bracket[1]]
        assert len(hits) == 1, f"{len(hits)} marker changes inside bracket {bracket}"
        return hits[0]


def run_layers_on_rig(front_end: str, frames: int = FRAMES, workdir: Path | None = None,
                      oversleep_us: int = 0) -> RigRun:
    """One layer run on the rig; ``oversleep_us`` makes every timed wait of the rig
    oversleep by that much (COUPPROF_RIG_OVERSLEEP_US), as a VM's late timers do."""
    board = select_board("sim", None, announce=lambda _msg: None)
    sliced = slice_model(default_model_path(), "layer", CUTS)
    with oversleep(oversleep_us), Rig(ELFS[front_end], WAVES[front_end], workdir=workdir) as rig:
        sink = RecordingSink(rig)
        gov = make_governor(board, board.dvfs_domain("L"))
        with RestoreGuard([gov]):
            level, khz = resolve_level(board.processor("L"), "1", board.name) or (1, 0)
            gov.set_khz(khz, level=level)
            with make_executor(board, "L") as executor:
                runner = LayerRunner(sliced, executor)
                source = ArduinoSource(f"arduino:{rig.port}", rig.port)
                with PowerSession(source, SimMarker(sink), baseline_s=0.3) as session:
                    hooks = session.hooks(frames, len(sliced.layers))
                    runner.hooks = hooks
                    session.begin()
                    timings = runner.run(frames=frames, warmup=WARMUP)
                    result = session.finish(timings)
                    baseline_ns = session.baseline_window_ns
    truth = rig.ground_truth()  # once the rig has stopped and written its whole log
    pacing = sink.pacing_us()
    calls = np.array(sink.calls, dtype=np.float64)
    if result.error is not None or result.attribution is None:
        return RigRun(front_end, result, None, np.zeros(0), np.zeros(0), source, truth, 0.0,
                      float("nan"), pacing, calls, oversleep_us)
    assert isinstance(hooks, MarkerHooks)
    by_start = {w.start_us: w for w in truth.windows(0)}
    layers = len(sliced.layers)
    truth_mj = np.zeros((frames, layers))
    truth_us = np.zeros((frames, layers, 2))
    for f in range(frames):
        for j in range(layers):
            rise = sink.applied_in(hooks.rise[f, j], 1)
            fall = sink.applied_in(hooks.fall[f, j], 0)
            w = by_start[rise]
            assert w.end_us == fall
            truth_mj[f, j] = w.energy_j * 1e3
            truth_us[f, j] = (w.start_us, w.end_us)
    assert source.trace is not None and source.fit is not None and baseline_ns is not None
    offset = device_offset(np.asarray(source.trace.edges["t_us"], dtype=np.int64), truth)
    b0, b1 = source.fit.clock.to_device_us(np.array(baseline_ns)) - offset
    t = np.linspace(b0, b1, 200_001)
    baseline_w = float(np.mean(WAVES[front_end].power_w(t, 0)))
    return RigRun(front_end, result, result.attribution, truth_mj, truth_us, source, truth,
                  offset, baseline_w, pacing, calls, oversleep_us)


@contextmanager
def oversleep(us: int) -> Iterator[None]:
    """Sets the rig's oversleep knob for the rigs started inside (they read it at start)."""
    old = os.environ.get("COUPPROF_RIG_OVERSLEEP_US")
    os.environ["COUPPROF_RIG_OVERSLEEP_US"] = str(us)
    try:
        yield
    finally:
        if old is None:
            del os.environ["COUPPROF_RIG_OVERSLEEP_US"]
        else:
            os.environ["COUPPROF_RIG_OVERSLEEP_US"] = old


def need(front_end: str) -> None:
    why = rigmod.missing(ELFS[front_end])
    if why:
        pytest.skip(why)


#: A marker change the rig applied further than this outside the host's bracket around
#: the call means the paced rig fell behind the wall clock (a starved process), and the
#: run is not the real-time experiment the logger's edges assume.
PACING_LIMIT_US = 150.0
ATTEMPTS = 5


#: Each front end as the host's timers give it, and with every timed wait of the rig
#: 50 us late (a VM whose timers oversleep by tens of us: the fresh-VM failure of
#: issue 9, where a sleeping rig applied a fall and the next rise at one cycle).
RUNS = [(fe, us) for us in (0, 50) for fe in sorted(ELFS)]


@pytest.fixture(scope="module", params=RUNS, ids=[f"{fe}-oversleep{us}" for fe, us in RUNS])
def rig_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> RigRun:
    front_end, oversleep_us = request.param
    need(front_end)
    worst = []
    for attempt in range(ATTEMPTS):
        # real time: the other test worker waits (beside it, all 14 were skipped as too busy)
        with cores(tmp_path_factory, alone=True):
            run = run_layers_on_rig(front_end, oversleep_us=oversleep_us,
                                    workdir=tmp_path_factory.mktemp(f"{front_end}{attempt}"))
        worst.append(float(run.pacing_us.max()))
        if worst[-1] <= PACING_LIMIT_US:
            assert run.result.error is None, run.result.error
            return run
    pytest.skip(f"the host is too busy for the paced rig: in {ATTEMPTS} runs it applied a "
                f"marker change up to {', '.join(f'{w / 1e3:.2f}' for w in worst)} ms off the "
                "wall clock (real-time runs stay under "
                f"{PACING_LIMIT_US:g} us); run `pytest -m rig` on a quieter machine")


def device_gaps(run: RigRun) -> tuple[np.ndarray, np.ndarray, float]:
    """Spans between consecutive samples more than 1.5 periods apart, on the rig's
    clock (from the decoded samples, independently of the attribution's host times)."""
    t = np.asarray(run.source.trace.samples["t_us"], dtype=np.int64)  # type: ignore[union-attr]
    period = float(np.median(np.diff(t)))
    k = np.flatnonzero(np.diff(t) > 1.5 * period)
    return t[k] - run.device_offset_us, t[k + 1] - run.device_offset_us, period


def device_offset(edges_us: np.ndarray, truth: GroundTruth) -> float:
    """The logger's clock minus the rig's (the firmware's boot offset), from the edges:
    the offset that lines most edges up with the rig's pin changes."""
    changes = np.array([p.t_us for prev, p in zip(truth.pins, truth.pins[1:], strict=False)
                        if p.state != prev.state])
    best, best_hits = 0.0, -1
    for c in changes[:6]:  # the first edge is one of the first few changes
        cand = float(edges_us[0] - c)
        i = np.clip(np.searchsorted(changes, edges_us - cand), 1, changes.size - 1)
        near = np.minimum(np.abs(edges_us - cand - changes[i - 1]),
                          np.abs(edges_us - cand - changes[i]))
        hits = int((near < 20).sum())
        if hits > best_hits:
            best, best_hits = float(np.median((edges_us - cand - np.where(
                np.abs(edges_us - cand - changes[i - 1]) < np.abs(edges_us - cand - changes[i]),
                changes[i - 1], changes[i]))[near < 20])) + cand, hits
    return best


def a0_diagnosis(run: RigRun, what: str) -> str:
    """Why the A0 build misses: which time its samples' readings belong to.

    Each A0 sample should be the mean current over one sample period centred on its
    t_us. Near the rig's marker steps that pins the time down: find the shift of
    t_us that best explains the samples there."""
    trace, wave = run.source.trace, WAVES["a0"]
    assert trace is not None and run.source.logger is not None
    t = np.asarray(trace.samples["t_us"], dtype=np.int64) - run.device_offset_us
    amps = trace.samples["current"].astype(float) * run.source.logger.current_lsb_na * 1e-9
    period = float(np.median(np.diff(t)))
    pins = [(p.t_us, p.state & 1) for p in run.truth.pins]
    pt, ps = np.array([p[0] for p in pins]), np.array([p[1] for p in pins])
    near = np.min(np.abs(t[:, None] - pt[None, 1:]), axis=1) < 2 * period
    t, amps = t[near], amps[near]

    def high_fraction(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        grid = np.linspace(a, b, 65)  # fine enough for a step inside [a, b]
        return ps[np.searchsorted(pt, grid, side="right") - 1].mean(axis=0)

    shifts = np.arange(-2 * period, 2 * period + 1, 2.0)
    cost = [np.abs(amps - wave.base(t + d)[0] - wave.state_current_a[1]
                   * high_fraction(t + d - period / 2, t + d + period / 2)).mean()
            for d in shifts]
    best = float(shifts[int(np.argmin(cost))])
    gaps = int((np.diff(np.asarray(trace.samples["t_us"], dtype=np.int64)) > 1.5 * period).sum())
    return (f"A0 firmware ({what}): near marker steps its samples read the current of "
            f"{abs(best):.0f} us {'later' if best > 0 else 'earlier'} than their t_us "
            f"(best fit over {t.size} samples), and {gaps} sample holes in "
            f"{FRAMES} frames that STATUS does not count")


def test_layer_energy_within_1_percent_of_the_waveform(rig_run: RigRun) -> None:
    """The Done-when figure: every layer's energy per frame within 1 % of the exact one."""
    att, truth = rig_run.att, rig_run.truth_mj
    used = ~att.window_flagged
    if not used.any(axis=0).all():  # a layer with only flagged windows uses them all
        used |= ~used.any(axis=0)
    per_layer = np.array([layer.energy_mj for layer in att.layers])
    # As attribution defines it: power over the windows used x mean length of all.
    dur = np.diff(rig_run.truth_us, axis=-1)[..., 0]
    expected = np.array([truth[used[:, j], j].sum() / dur[used[:, j], j].sum()
                         * dur[:, j].mean() for j in range(truth.shape[1])])
    err = np.abs(per_layer - expected) / expected
    print(f"{rig_run.front_end}: per-layer error % {np.round(100 * err, 3).tolist()}, "
          f"{int(att.window_flagged.sum())} of {att.window_flagged.size} windows flagged, "
          f"windows {np.diff(rig_run.truth_us, axis=-1).min() / 1e3:.2f} to "
          f"{np.diff(rig_run.truth_us, axis=-1).max() / 1e3:.2f} ms")
    # The stretched layers last ~2-5 ms; a late wake-up on a busy host shortens the next.
    assert np.median(np.diff(rig_run.truth_us, axis=-1)) >= 1500
    if rig_run.front_end == "a0" and err.max() >= 0.01:
        pytest.xfail(a0_diagnosis(rig_run, f"per-layer error up to {100 * err.max():.2f} %"))
    assert err.max() < 0.01
    # Not a constant: the layers differ (ramp + duration), and the table says so.
    assert np.ptp(per_layer) > 0.1 * per_layer.mean()
    # Boundaries found their logger edges (time matching, not counting); on a busy host
    # the paced rig may jitter a change past the matching tolerance now and then.
    assert att.edges_missed <= 0.02 * 2 * truth.size
    # The windows used are the rig's marker windows, on the host clock.
    clock = rig_run.source.fit.clock  # type: ignore[union-attr]
    start_us = clock.to_device_us(att.window_start_ns) - rig_run.device_offset_us
    matched = att.start_matched
    assert np.abs(start_us - rig_run.truth_us[..., 0])[matched].max() < 20


def test_flagged_windows_are_the_ones_that_lost_samples(rig_run: RigRun) -> None:
    """A window is flagged exactly when the logger's stream has a hole in it (a gap in
    the samples' times, or frames the host lost: a sequence gap, which may be an edge
    frame alone and leave no gap in the samples), or when it holds no sample."""
    g0, g1, period = device_gaps(rig_run)
    att = rig_run.att
    a, b = rig_run.truth_us[..., 0], rig_run.truth_us[..., 1]
    overlaps = np.zeros(a.shape, bool)
    big = np.zeros(a.shape, bool)
    margin = 20  # us: edge and sample times are only that exact
    for s, e in zip(g0, g1, strict=True):
        overlaps |= (a - margin < e) & (b + margin > s)
        big |= (a + margin < e) & (b - margin > s) & (e - s > 3 * period)  # a "hole"
    seq = rig_run.source.trace.gaps  # type: ignore[union-attr]
    for s, e in zip(seq["t_before_us"] - rig_run.device_offset_us,
                    seq["t_after_us"] - rig_run.device_offset_us, strict=True):
        overlaps |= (a - margin < e) & (b + margin > s)
    # A window that holds no sample at all is set aside too (shorter than a sample
    # period: after a late wake-up on a busy host the next layer makes up the time).
    empty = att.window_samples == 0
    dur = b - a
    assert (dur[empty & ~overlaps] < 2 * period).all(), "a long window held no sample"
    bad = att.window_flagged & ~overlaps & ~empty
    assert not bad.any(), (
        f"flagged a window with no hole: (frame, layer) {np.argwhere(bad).tolist()}, lost "
        f"frames {att.window_lost_frames[bad].tolist()}, holes {att.window_holes[bad].tolist()}"
        f", samples {att.window_samples[bad].tolist()}; seq gaps {seq.tolist()}")
    assert att.window_flagged[big].all(), "a window over a hole was not flagged"
    counts = np.array([layer.flagged_windows for layer in att.layers])
    np.testing.assert_array_equal(counts, att.window_flagged.sum(axis=0))


def test_clean_windows_within_1_percent(rig_run: RigRun) -> None:
    """Stricter than the Done-when figure: each unflagged window alone within 1 %."""
    att = rig_run.att
    long = np.diff(rig_run.truth_us, axis=-1)[..., 0] >= 1000
    ok = ~att.window_flagged & att.start_matched & att.end_matched & long
    err = np.abs(att.window_energy_mj - rig_run.truth_mj) / rig_run.truth_mj
    print(f"{rig_run.front_end}: window error % median {100 * np.median(err[ok]):.3f}, "
          f"max {100 * err[ok].max():.3f} over {int(ok.sum())} windows")
    if rig_run.front_end == "a0" and err[ok].max() >= 0.01:
        pytest.xfail(a0_diagnosis(rig_run, f"window error up to {100 * err[ok].max():.2f} %"))
    assert err[ok].max() < 0.01


def holes_report(run: RigRun) -> str:
    """The stream's sample holes: how many, how long, and how close to a marker edge."""
    g0, g1, period = device_gaps(run)
    changes = np.array([p.t_us for prev, p in zip(run.truth.pins, run.truth.pins[1:],
                                                   strict=False) if p.state != prev.state])
    near_edge = np.array([((changes > a - 2 * period) & (changes < b + 2 * period)).any()
                          for a, b in zip(g0, g1, strict=True)], dtype=bool)
    lengths = np.round((g1 - g0) / period).astype(int) - 1
    dropped = run.result.info.get("device_samples_dropped", 0)
    return (f"{run.front_end} firmware: {g0.size} sample holes in {FRAMES} frames "
            f"({int(lengths.sum())} samples missing, holes of "
            f"{sorted(set(lengths.tolist()))} samples), {int(near_edge.sum())} of them within "
            f"2 sample periods of a marker edge; STATUS reports {dropped} dropped")


def test_firmware_keeps_every_sample_around_edges(rig_run: RigRun) -> None:
    """The logger should lose no sample however the marker edges fall."""
    g0, _, _ = device_gaps(rig_run)
    if g0.size or rig_run.result.info.get("device_samples_dropped", 0):
        pytest.xfail(holes_report(rig_run))
    assert rig_run.result.info["lost_frames"] == 0


def test_every_marker_change_is_one_logger_edge(rig_run: RigRun) -> None:
    """The logger reports each pin change the rig applied once, within a few us. A
    change may lack its edge only where the host lost frames of the stream (a busy
    host reading the port late: the edge's frame is gone, not unsent)."""
    trace = rig_run.source.trace
    assert trace is not None
    off = rig_run.device_offset_us
    edges = np.asarray(trace.edges["t_us"], dtype=np.int64) - off
    changes = np.array([p.t_us for prev, p in zip(rig_run.truth.pins, rig_run.truth.pins[1:],
                                                   strict=False) if p.state != prev.state])
    j = np.clip(np.searchsorted(changes, edges), 1, changes.size - 1)
    j = np.where(np.abs(edges - changes[j - 1]) <= np.abs(edges - changes[j]), j - 1, j)
    err = np.abs(edges - changes[j])
    print(f"{rig_run.front_end}: edge time error us p50 {np.median(err):.1f} max {err.max():.1f}")
    assert err.max() < 20
    assert np.unique(j).size == edges.size  # no change reported twice
    lost = np.zeros(changes.size, bool)
    for lo, hi in zip(trace.gaps["t_before_us"] - off, trace.gaps["t_after_us"] - off,
                      strict=True):
        lost |= (changes > lo - 20) & (changes < hi + 20)
    missing = np.setdiff1d(np.arange(changes.size), j)
    assert lost[missing].all(), f"changes {missing.tolist()} have no edge; lost-frame gaps {trace.gaps.tolist()}"
    assert rig_run.att.edges_spurious == 0


def test_logger_identity_in_the_sidecar_info(rig_run: RigRun) -> None:
    info = rig_run.result.info
    fe = {"ina226": P.FrontEnd.INA226, "a0": P.FrontEnd.SHUNT_AMP}[rig_run.front_end]
    assert rig_run.source.logger is not None and rig_run.source.logger.front_end == fe
    assert info["power_source"]["kind"] == "arduino"
    assert info["power_source"]["device"] == rig_run.source.port
    # The rig is paced to the wall clock: the fitted logger clock runs at the host's rate.
    assert abs(info["clock_map"]["ns_per_us"] - 1000.0) < 1.0
    # The idle baseline (marker low, before the run) is the waveform's mean over it.
    assert info["baseline_power_w"] == pytest.approx(rig_run.baseline_truth_w, rel=0.005)


#: How much closer together two of the rig's changes may be than the host made them:
#: the rig applies a change a constant lead after reading it, on the first instruction
#: boundary (up to 4 cycles = 0.25 us) of a 1/16 us clock; the rest is rounding.
SPACING_TOLERANCE_US = 0.5


def test_rig_keeps_the_hosts_spacing(rig_run: RigRun) -> None:
    """No two pin changes share a cycle, and each is at least as far from the one before
    as the host made them. The host's gap is counted from the end of the earlier call
    (its reply says the rig has read and applied it) to the start of the later one
    (nothing is sent before): the rig reads the later change no earlier, and applies
    each a fixed lead after reading it."""
    t = np.array([p.t_us for p in rig_run.truth.pins])
    assert (np.diff(t) > 0).all(), f"pin changes share a time: {t[:-1][np.diff(t) <= 0]}"
    c = rig_run.calls
    sim_gap_us = np.diff(c[:, 2])
    host_gap_us = (c[1:, 0] - c[:-1, 1]) / 1e3  # end of the earlier call to the later one
    call_to_call_us = np.diff(c[:, 0]) / 1e3
    short = sim_gap_us < host_gap_us - SPACING_TOLERANCE_US
    print(f"{rig_run.front_end}, oversleep {rig_run.oversleep_us} us: smallest rig gap "
          f"{sim_gap_us.min():.2f} us, rig gap - host call-to-call gap: median "
          f"{np.median(sim_gap_us - call_to_call_us):.2f} us, "
          f"p1 {np.percentile(sim_gap_us - call_to_call_us, 1):.2f} us")
    assert not short.any(), (
        f"{int(short.sum())} of {short.size} changes came closer on the rig than the host "
        f"made them, e.g. rig gaps {sim_gap_us[short][:5].round(2).tolist()} us against host "
        f"gaps {host_gap_us[short][:5].round(2).tolist()} us")
    # The rig logs each applied change; the host's calls are those changes, in order.
    np.testing.assert_array_equal(c[:, 2], t[1:1 + len(c)])
