"""Faults on the power path of a layer run, through `PowerSession` (`coupprof layers`'
measuring core): the real `LayerRunner` on the simulated board, the `sim` marker
driving a `VirtualLogger` (the firmware's protocol over a real pty) read by
`ArduinoSource` exactly as ``--power arduino:PORT`` reads a logger.

The logger draws ``IDLE + ripple(t) + STEP`` watts while its marker input 0 is high
(t: its own clock, which drifts and starts elsewhere). Ground truth per layer and
frame is the closed-form integral of that between the logger-clock times at which the
marker sink changed the line (read around each change), never what the stream said.
Faults are injected from the marker sink at chosen (frame, layer) boundaries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from energy_truth import layer_truth_mj

from governors import RestoreGuard, make_governor
from profiler.boards.model import resolve_level
from profiler.boards.profiles import select_board
from profiler.errors import LoggerTimeoutError, PortLostError
from profiler.executors.factory import make_executor
from profiler.markers import SimMarker
from profiler.measure.runner import LayerHooks, LayerRunner
from profiler.power.session import MarkerHooks, PowerResult, PowerSession
from profiler.power.sources.arduino import ArduinoSource
from profiler.power.trace import DeviceTrace
from profiler.sim.virtual_logger import VirtualLogger
from profiler.slicing.slicer import slice_model
from profiler.zoo import default_model_path

IDLE_W, RIPPLE_W, RIPPLE_HZ, STEP_W = 1.0, 0.2, 170.0, 1.5
CUTS = "0,7,15,23"  # the default model in 4 layers of 1.5-5 ms on L at level 1
FRAMES = 8


def power_w(t_s: np.ndarray, markers: np.ndarray) -> np.ndarray:
    return IDLE_W + RIPPLE_W * np.sin(2 * np.pi * RIPPLE_HZ * t_s) + STEP_W * (markers & 1)


def truth_mj(a_us: np.ndarray, b_us: np.ndarray) -> np.ndarray:
    """Closed-form energy of a marker-high window [a, b] (logger µs)."""
    a, b = a_us * 1e-6, b_us * 1e-6
    w = 2 * np.pi * RIPPLE_HZ
    return 1e3 * ((IDLE_W + STEP_W) * (b - a) + RIPPLE_W / w * (np.cos(w * a) - np.cos(w * b)))


Fault = Callable[[VirtualLogger], None]


class Sink:
    """The sim marker's sink: sets the logger's marker input and notes, per change, the
    host clock and the logger's clock around it; runs a fault after chosen changes."""

    def __init__(self, logger: VirtualLogger) -> None:
        self.logger = logger
        self.calls: list[tuple[int, int, int, int, int]] = []  # host0, host1, dev0, dev1, bits
        self.after_next: list[Fault] = []

    def __call__(self, bits: int) -> None:
        h0, d0 = time.perf_counter_ns(), self.logger.device_us()
        self.logger.set_markers(bits)
        d1, h1 = self.logger.device_us(), time.perf_counter_ns()
        self.calls.append((h0, h1, d0, d1, bits))
        while self.after_next:
            self.after_next.pop(0)(self.logger)

    def device_us(self, bracket: np.ndarray, bits: int, edges: np.ndarray) -> float:
        """Logger time of the one change to ``bits`` inside a host bracket: the time the
        logger stamped on it (``edges``, its EDGE records), read between the logger-clock
        reads around the change; their middle if that edge's frame never arrived."""
        hits = [c for c in self.calls
                if c[4] == bits and c[0] >= bracket[0] and c[1] <= bracket[1]]
        assert len(hits) == 1
        _, _, d0, d1, _ = hits[0]
        stamped = edges["t_us"][(edges["t_us"] >= d0) & (edges["t_us"] <= d1)
                                & (edges["markers"] == bits)]
        return float(stamped[0]) if stamped.size == 1 else (d0 + d1) / 2


class FaultHooks(LayerHooks):
    """The session's marker hooks, plus faults armed before chosen layers' marker rise."""

    def __init__(self, inner: MarkerHooks, sink: Sink,
                 faults: dict[tuple[int, int], Fault]) -> None:
        self.inner, self.sink, self.faults = inner, sink, faults
        self.frame: int | None = None

    def before_frame(self, frame: int, warmup: bool) -> None:
        self.frame = None if warmup else frame
        self.inner.before_frame(frame, warmup)

    def before_layer(self, layer: int) -> None:
        fault = self.faults.get((self.frame, layer)) if self.frame is not None else None
        if fault is not None:
            self.sink.after_next.append(fault)  # right after this layer's marker rise
        self.inner.before_layer(layer)

    def after_layer(self, layer: int) -> None:
        self.inner.after_layer(layer)


@dataclass
class Run:
    result: PowerResult
    truth_mj: np.ndarray  # (frames, layers)
    window_us: np.ndarray  # (frames, layers, 2) on the logger's clock
    trace: DeviceTrace  # the capture, on the logger's clock
    logger: VirtualLogger


@pytest.fixture(scope="module")
def layers_setup():
    board = select_board("sim", None, announce=lambda _msg: None)
    sliced = slice_model(default_model_path(), "layer", CUTS)
    gov = make_governor(board, board.dvfs_domain("L"))
    level, khz = resolve_level(board.processor("L"), "1", board.name) or (1, 0)
    with RestoreGuard([gov]):
        gov.set_khz(khz, level=level)
        with make_executor(board, "L") as executor:
            yield sliced, LayerRunner(sliced, executor)


def run_with(layers_setup, faults: dict[tuple[int, int], Fault] | None = None,
             timeout_s: float = 3.0) -> Run:
    sliced, runner = layers_setup
    logger = VirtualLogger(power_w, rate_hz=20_000, drift_ppm=250.0, start_us=7_000_000,
                           tick_s=0.001).start()
    try:
        sink = Sink(logger)
        source = ArduinoSource(f"arduino:{logger.port}", logger.port, timeout_s=timeout_s)
        with PowerSession(source, SimMarker(sink), baseline_s=0.2) as session:
            hooks = session.hooks(FRAMES, len(sliced.layers))
            assert isinstance(hooks, MarkerHooks)
            runner.hooks = FaultHooks(hooks, sink, faults or {})
            session.begin()
            timings = runner.run(frames=FRAMES, warmup=1)
            result = session.finish(timings)
        assert source.trace is not None
        layers = len(sliced.layers)
        win = np.zeros((FRAMES, layers, 2))
        for f in range(FRAMES):
            for j in range(layers):
                win[f, j] = (sink.device_us(hooks.rise[f, j], 1, source.trace.edges),
                             sink.device_us(hooks.fall[f, j], 0, source.trace.edges))
        return Run(result, truth_mj(win[..., 0], win[..., 1]), win, source.trace, logger)
    finally:
        logger.close()


#: How far a window's edge may sit from the logger's own record of it (see below).
MARGIN_US = 100.0


def lost_spans_overlap(run: Run, margin_us: float = 0.0) -> np.ndarray:
    """Windows overlapping a lost-frame span of the stream, on the logger's clock; with
    ``margin_us`` > 0 the windows widened by it, < 0 narrowed."""
    g = run.trace.gaps
    out = np.zeros(run.truth_mj.shape, bool)
    a, b = run.window_us[..., 0] - margin_us, run.window_us[..., 1] + margin_us
    for before, after in zip(g["t_before_us"], g["t_after_us"], strict=True):
        out |= (a < after) & (b > before)
    return out


def assert_clean_windows_exact(run: Run, tol: float = 0.01) -> None:
    att = run.result.attribution
    assert att is not None
    ok = ~att.window_flagged
    err = np.abs(att.window_energy_mj - run.truth_mj[: ok.shape[0]]) / run.truth_mj[: ok.shape[0]]
    assert err[ok].max() < tol, np.round(100 * err, 2)
    # Per layer, as attribution defines it: the power over the clean windows times the
    # mean length of every window.
    dur = np.diff(run.window_us[: ok.shape[0]], axis=-1)[..., 0]
    for j, layer in enumerate(att.layers):
        want = layer_truth_mj(run.truth_mj[: ok.shape[0], j], dur[:, j], ok[:, j])
        assert layer.energy_mj == pytest.approx(want, rel=tol)


def test_clean_run_matches_the_waveform(layers_setup) -> None:
    run = run_with(layers_setup)
    res = run.result
    assert res.error is None and res.attribution is not None
    att = res.attribution
    # (it failed once in a quiet full suite with a first window flagged and has not
    # been reproduced since: the message names which of the three reasons it was)
    assert not att.window_flagged.any(), {
        "flagged (frame, layer)": np.argwhere(att.window_flagged).tolist(),
        "lost frames": att.window_lost_frames[att.window_flagged].tolist(),
        "holes": att.window_holes[att.window_flagged].tolist(),
        "logger": vars(run.logger.counters), "info": res.info}
    assert_clean_windows_exact(run)
    assert res.info["lost_frames"] == 0 and res.info["corrupt_frames"] == 0
    assert res.info["edges_missed"] == 0 and res.info["edges_spurious"] == 0
    # The idle baseline (marker low) is the waveform without the step.
    assert res.info["baseline_power_w"] == pytest.approx(IDLE_W, rel=0.01)
    assert res.columns["lost_frames"].sum() == 0
    # The logger's 250 ppm drift is found by the clock fit.
    # (to 80 ppm: host marker times jitter by tens of us over this 0.3 s run)
    assert res.info["clock_map"]["ns_per_us"] == pytest.approx(1000 / 1.00025, abs=0.08)


@pytest.mark.parametrize("kind", ["drop", "corrupt"])
def test_lost_frames_flag_the_layer_that_lost_them(layers_setup, kind: str) -> None:
    """Two frames dropped on the line (or garbled, so their CRC fails) at frame 3's
    layer 2: the windows they overlap are flagged and the layer reports them; every
    other window, and every later layer, is attributed exactly."""
    def fault(logger: VirtualLogger) -> None:
        if kind == "drop":
            logger.drop_frames(2)
        else:
            logger.corrupt_frames(2)

    run = run_with(layers_setup, {(3, 2): fault})
    res, att = run.result, run.result.attribution
    assert res.error is None and att is not None
    assert res.info["lost_frames"] == 2
    # Corrupt frames count runs of rejected bytes: the two garbled frames are adjacent.
    assert res.info["corrupt_frames"] == (1 if kind == "corrupt" else 0)
    # The fault strikes as layer 2 starts, so the lost span may end within a few us of
    # a window's edge; the attribution places windows by the logger's edges, or by host
    # times through the clock fit where an edge was not matched (tens of us off on a
    # busy host). Windows overlapping the span by more than that must be flagged;
    # windows further than that from it must not.
    must = lost_spans_overlap(run, margin_us=-MARGIN_US)
    may = lost_spans_overlap(run, margin_us=MARGIN_US)
    # The frames lost are the next ones sent: samples of frame 3 (or of frame 2's end,
    # when the logger's thread was late); never anything after frame 3. (Whether some
    # window overlaps the span by more than the margin depends on where it falls: a
    # short layer's, or the gap between two windows, holds it now and then.)
    g = run.trace.gaps
    assert g.size == 1
    assert run.window_us[2, 0, 0] < g["t_before_us"][0] < g["t_after_us"][0] < run.window_us[3, -1, 1]
    assert not may[4:].any()
    got = att.window_lost_frames > 0
    assert (got >= must).all() and (got <= may).all(), (got, must, may)
    # Flagged: those, and maybe a neighbour that only the hole in the samples reaches
    # (the lost span runs between frame times, and the frame before the gap may be an
    # edge frame sent after the last sample it carried).
    extra = att.window_flagged & ~got
    assert (att.window_flagged >= got).all()
    if extra.any():
        t = np.asarray(run.trace.samples["t_us"], dtype=np.int64)
        k = np.flatnonzero(np.diff(t) > 1.5 * np.median(np.diff(t)))
        a, b = run.window_us[..., 0] - MARGIN_US, run.window_us[..., 1] + MARGIN_US
        near = np.zeros(extra.shape, bool)
        for lo, hi in zip(t[k], t[k + 1], strict=True):
            near |= (a < hi) & (b > lo)
        assert (extra <= near).all() and (att.window_holes[extra] > 0).all()
    for j, layer in enumerate(att.layers):
        assert layer.lost == bool(got[:, j].any())
        assert layer.lost_frames == 2 * int(got[:, j].sum())  # each window counts its span
        assert layer.flagged_windows == int(att.window_flagged[:, j].sum())
    np.testing.assert_array_equal(res.columns["lost_frames"] > 0, got.any(axis=0))
    assert_clean_windows_exact(run)


def glitch_pair(logger: VirtualLogger) -> None:
    """Two edges on marker 0 that the host never made (ringing on the line)."""
    logger.spurious_edge(1)
    time.sleep(50e-6)
    logger.spurious_edge(1)


def test_spurious_edges_do_not_shift_later_layers(layers_setup) -> None:
    """Glitch pairs right after two layers' rising edges: counting edges would put every
    later layer one window off; matching by time attributes all of them exactly."""
    run = run_with(layers_setup, {(1, 1): glitch_pair, (5, 3): glitch_pair})
    res, att = run.result, run.result.attribution
    assert res.error is None and att is not None
    assert run.trace.edges.size == 2 * run.truth_mj.size + 4
    assert res.info["edges_spurious"] == 4 and res.info["edges_missed"] == 0
    assert not att.window_flagged.any()
    assert_clean_windows_exact(run)


def test_port_vanishing_mid_run_keeps_what_was_measured(layers_setup) -> None:
    """The pty closes (cable pulled) as frame 5 starts: the run finishes, the error
    names the port (exit 4), and the frames before it are attributed exactly."""
    run = run_with(layers_setup, {(5, 0): lambda logger: logger.close_port()})
    res = run.result
    assert isinstance(res.error, PortLostError) and res.error.exit_code == 4
    assert run.logger.port in str(res.error)
    assert res.info["samples"] > 0 and res.info["frames_ok"] > 0  # the capture, for the sidecar
    done = res.info["frames_attributed"]
    # The frames the capture covers: those that ended before its last sample (logger clock).
    last_us = float(run.trace.samples["t_us"][-1])
    covered = int((run.window_us[:, -1, 1] <= last_us).sum())
    assert 1 <= done <= 5 and abs(done - covered) <= 1  # the cable goes as frame 5 starts
    assert res.attribution is not None and res.attribution.window_energy_mj.shape[0] == done
    assert res.columns and res.columns["energy_mj"].shape == (run.truth_mj.shape[1],)
    assert_clean_windows_exact(run)


def test_logger_hanging_mid_run_keeps_what_was_measured(layers_setup) -> None:
    """The sketch hangs at frame 5 (port still open, nothing sent, STOP unanswered):
    the error names the port (exit 4) and the frames before it are attributed."""
    run = run_with(layers_setup, {(5, 0): lambda logger: logger.freeze()}, timeout_s=0.5)
    res = run.result
    assert isinstance(res.error, LoggerTimeoutError) and res.error.exit_code == 4
    assert run.logger.port in str(res.error) and "STOP" in str(res.error)
    done = res.info["frames_attributed"]
    last_us = float(run.trace.samples["t_us"][-1])
    covered = int((run.window_us[:, -1, 1] <= last_us).sum())
    assert 1 <= done <= 5 and abs(done - covered) <= 1
    assert_clean_windows_exact(run)


def test_logger_that_never_answers(tmp_path) -> None:
    """No IDENT: the session does not start, and the error names the port (exit 4)."""
    with VirtualLogger(answer_commands=False) as logger:
        source = ArduinoSource(f"arduino:{logger.port}", logger.port, timeout_s=0.5)
        with pytest.raises(LoggerTimeoutError) as info, \
                PowerSession(source, SimMarker(logger.set_markers)):
            pass
    assert info.value.exit_code == 4
    assert logger.port in str(info.value) and "IDENTIFY" in str(info.value)
    assert not source.is_open


def test_a_span_whose_end_is_held_up_inside_the_change() -> None:
    """One marked span (two edges: what the fused method's prefix windows and the
    transfer costs use). The host thread is held up for 3 ms inside the marker's fall (a
    GIL switch on a loaded machine does this), so the middle of its clock reads misses
    the logger's stamp by 1.5 ms. The bracket around the change says how far off it
    may be; the span's energy is still the waveform's between the logger's stamps."""
    logger = VirtualLogger(power_w, rate_hz=20_000, drift_ppm=250.0, start_us=7_000_000,
                           tick_s=0.001).start()
    try:
        sink = Sink(logger)

        def held_up(bits: int) -> None:
            if bits == 0 and sink.calls and sink.calls[-1][4] == 1:
                time.sleep(0.003)
            sink(bits)

        source = ArduinoSource(f"arduino:{logger.port}", logger.port, timeout_s=3.0)
        with PowerSession(source, SimMarker(held_up), baseline_s=0.0) as session:
            _, energy_mj, t0, t1 = session.span(lambda: time.sleep(0.06))
        assert source.trace is not None and source.fit is not None
        edges = source.trace.edges
        rise = edges["t_us"][edges["markers"] == 1]
        fall = edges["t_us"][edges["markers"] == 0]
        assert rise.size == 1 and fall.size == 1
        assert energy_mj == pytest.approx(float(truth_mj(rise[0], fall[0])), rel=0.01)
        # The late fall was matched, not missed; the rate stays near the logger's.
        assert source.fit.missed_host.size == 0
        assert source.fit.clock.ns_per_us == pytest.approx(1000.0, abs=1.0)
    finally:
        logger.close()


def test_call_powers_on_a_stream_share_one_capture_and_match_the_waveform() -> None:
    """The fused method's prefix powers on a logger: each call repeated in its own marked
    window of one capture; each power is the waveform's mean between the logger's own
    stamps of that window's edges."""
    logger = VirtualLogger(power_w, rate_hz=20_000, drift_ppm=-400.0, start_us=123_456,
                           tick_s=0.001).start()
    try:
        source = ArduinoSource(f"arduino:{logger.port}", logger.port, timeout_s=3.0)
        calls = [lambda s=s: time.sleep(s) for s in (0.002, 0.005, 0.011, 0.023)]
        with PowerSession(source, SimMarker(Sink(logger)), baseline_s=0.05) as session:
            powers = session.call_powers(calls, min_window_ms=40.0)
        assert source.trace is not None
        edges = source.trace.edges
        rise = edges["t_us"][edges["markers"] == 1]
        fall = edges["t_us"][edges["markers"] == 0]
        assert rise.size == fall.size == len(calls)  # one capture, a window per call
        assert np.all(fall - rise >= 40_000)  # each at least min_window_ms
        want = truth_mj(rise, fall) / ((fall - rise) / 1e3)
        assert powers == pytest.approx(want.tolist(), rel=0.005)
    finally:
        logger.close()
