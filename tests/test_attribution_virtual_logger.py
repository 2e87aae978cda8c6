"""End to end on the host: the sim marker drives the virtual logger's marker inputs over
its real pty protocol, the collector decodes the stream, the clock map is fitted
from the edges, and attribution recovers each layer's energy.

The virtual logger draws ``idle + ripple(t) + bit0 * (1 + 0.5 * (bits >> 1))`` watts
(bits = its marker inputs, t = its own clock, which drifts and starts elsewhere).
Ground truth per layer is the closed-form integral of that waveform between the
logger's own edge timestamps of the layer (device clock).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from profiler.markers import open_marker
from profiler.power.attribution import attribute
from profiler.power.clockmap import fit_clock_map
from profiler.power.collector import Collector
from profiler.power.host_trace import HostTrace
from profiler.sim.virtual_logger import VirtualLogger

IDLE_W, RIPPLE_W, RIPPLE_HZ = 1.0, 0.2, 170.0


def waveform(t_s: np.ndarray, m: np.ndarray) -> np.ndarray:
    m = np.asarray(m)
    return IDLE_W + RIPPLE_W * np.sin(2 * np.pi * RIPPLE_HZ * t_s) + (m & 1) * (1.0 + 0.5 * (m >> 1))


def truth_mj(a_us: float, b_us: float, bits: int) -> float:
    """Closed-form integral of the waveform over [a, b] (device µs) with marker bits fixed."""
    a, b = a_us * 1e-6, b_us * 1e-6
    w = 2 * np.pi * RIPPLE_HZ
    level = IDLE_W + (bits & 1) * (1.0 + 0.5 * (bits >> 1))
    return 1e3 * (level * (b - a) + RIPPLE_W / w * (np.cos(w * a) - np.cos(w * b)))


def busy_wait(ns: int) -> None:
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


def run_layers(logger: VirtualLogger, durations_ms: list[float], frames: int,
               faults: dict[tuple[int, int], str]):
    """Drive layers through the sim marker, reading the clock around each marker call as
    the runner does; returns the layer windows, the brackets around the marker calls,
    and the marker changes (host time before each call, level)."""
    layers = len(durations_ms)
    start = np.zeros((frames, layers), np.int64)
    end = np.zeros((frames, layers), np.int64)
    start_lo = np.zeros((frames, layers), np.int64)
    end_hi = np.zeros((frames, layers), np.int64)
    changes_t, changes_lv = [], []
    clock = time.perf_counter_ns
    with open_marker("sim:3", sim_sink=logger) as marker:
        for f in range(frames):
            for j, d_ms in enumerate(durations_ms):
                level = 1 | ((j % 4) << 1)
                start_lo[f, j] = clock()
                marker.set(level)
                start[f, j] = clock()
                changes_t.append(start_lo[f, j])
                changes_lv.append(level)
                fault = faults.get((f, j))
                busy_wait(int(d_ms * 5e5))
                if fault == "spurious":
                    logger.spurious_edge(1)  # a glitch pair on line 0 mid-layer
                    logger.spurious_edge(1)
                elif fault == "drop":
                    # (the frames dropped are the next ones sent: not the glitch pair's,
                    # even when the logger's thread ran late on a busy host)
                    assert logger.wait_emitted()
                    logger.drop_frames(3)
                busy_wait(int(d_ms * 5e5))
                end[f, j] = clock()
                marker.set(0)
                end_hi[f, j] = clock()
                changes_t.append(end[f, j])
                changes_lv.append(0)
                busy_wait(200_000)  # hand-over
    return start, end, start_lo, end_hi, np.array(changes_t), np.array(changes_lv)


def test_sim_marker_virtual_logger_collector_attribution() -> None:
    durations_ms = [1.0, 3.0, 1.5, 5.0, 2.0, 1.2]
    frames = 4
    faults = {(1, 2): "spurious", (2, 4): "drop"}
    with VirtualLogger(waveform, rate_hz=10_000, drift_ppm=300.0, start_us=123_456_789,
                       marker_count=4) as logger, Collector(logger.port) as col:
        col.open()
        col.start()
        busy_wait(20_000_000)
        start, end, start_lo, end_hi, ch_t, ch_lv = run_layers(logger, durations_ms, frames,
                                                                faults)
        busy_wait(20_000_000)
        trace = col.stop()
    assert trace.lost_frames == 3
    edges = trace.edges
    fit = fit_clock_map(edges["t_us"], ch_t, device_levels=edges["markers"] & 1,
                        host_levels=ch_lv & 1)
    pt = HostTrace(**trace.host_fields(fit.clock))
    res = attribute(start, end, pt, levels=(1, 0), start_lo_ns=start_lo, end_hi_ns=end_hi)

    # Ground truth from the logger's own edge timestamps (device clock). Host change
    # k happened after the host read ch_t[k] and before it read ch_t[k + 1]; the
    # logger's true clock turns those reads into device time. The dropped frames may
    # have carried some edges, which then have none.
    read_us = np.append(logger.true_clock().to_device_us(ch_t), np.inf)
    dev = np.full(ch_t.size, np.nan)
    for k, bits in enumerate(ch_lv):
        near = np.flatnonzero((edges["t_us"] >= read_us[k] - 1) & (edges["t_us"] < read_us[k + 1])
                              & (edges["markers"] == bits))
        if near.size:
            dev[k] = edges["t_us"][near[0]]
    missing = int(np.isnan(dev).sum())
    assert edges.size + missing == ch_t.size + 2  # plus the glitch pair
    assert res.edges_missed == missing
    assert res.edges_spurious == 2
    dev_edges = dev.reshape(frames, len(durations_ms), 2)
    truth = np.array([[truth_mj(a, b, 1 | ((j % 4) << 1)) for j, (a, b) in enumerate(row)]
                      for row in dev_edges])
    lost = res.window_lost_frames > 0
    # Flagged = the windows (by the logger's own edges) that overlap a seq gap.
    g = trace.gaps
    overlap = np.zeros(lost.shape, bool)
    for before, after in zip(g["t_before_us"], g["t_after_us"], strict=True):
        overlap |= (dev_edges[..., 0] < after) & (dev_edges[..., 1] > before)
    known_windows = ~np.isnan(dev_edges).any(axis=-1)
    np.testing.assert_array_equal(lost[known_windows], overlap[known_windows])
    assert all(res.layers[j].lost for j in np.flatnonzero(lost.any(axis=0)))
    assert not any(res.layers[j].lost for j in np.flatnonzero(~lost.any(axis=0)))
    flagged = res.window_flagged
    assert not (lost & ~flagged).any()
    # Every window whose logger edges arrived and that is not flagged is within 1 %.
    ok = ~np.isnan(truth) & ~flagged
    err = np.abs(res.window_energy_mj - truth) / truth
    assert err[ok].max() < 0.01, err
    # Per layer, as attribution defines it: the power over the windows used times the
    # mean length of every window (by the logger's edges; by the host's times where
    # the lost frames took the edges: its 300 ppm drift is far inside the margin).
    dev_us = dev_edges[..., 1] - dev_edges[..., 0]
    all_us = np.where(np.isnan(dev_us), (end - start) / 1e3, dev_us)
    for j, layer in enumerate(res.layers):
        assert layer.flagged_windows == flagged[:, j].sum()
        if ok[:, j].any() and (ok[:, j] == ~flagged[:, j]).all():
            want = truth[ok[:, j], j].sum() / dev_us[ok[:, j], j].sum() * all_us[:, j].mean()
            assert layer.energy_mj == pytest.approx(want, rel=0.01)
