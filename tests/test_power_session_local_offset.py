"""`profiler.power.session.local_offset`: matching edges on a logger clock that wanders.

A logger's clock is not one straight line against the host's over a long run (a
ceramic resonator follows its temperature; the simavr rig falls behind a busy host
and catches up). The clock map stays one line, fitted over all edges, because
integration needs one; what the session adds is where, around each host boundary,
the logger's edge lies off that line. Here the logger's clock bows 0.45 ms away from
any line over the run: matching against the line alone misses edges (and falls back
to host times), matching around the local residual finds every one, and each
layer's energy is the exact integral over the logger's own window.
"""

from __future__ import annotations

import numpy as np

from profiler.power.attribution import attribute
from profiler.power.clockmap import fit_clock_map
from profiler.power.host_trace import HostTrace
from profiler.power.session import local_offset

LAYER_US = np.array([2_000, 3_100, 2_400, 2_700])
GAP_US, FRAMES = 300, 60
BOW_US, DRIFT = 450.0, 1 + 150e-6  # logger clock: 150 ppm fast, plus a 0.45 ms bow
IDLE_W, STEP_W, RATE_HZ = 1.0, 1.5, 20_000


def host_timeline() -> tuple[np.ndarray, np.ndarray]:
    """Layer starts/ends on the host clock (ns), frames back to back."""
    start = np.zeros((FRAMES, LAYER_US.size), np.int64)
    end = np.zeros_like(start)
    t = 5_000_000_000_000  # an arbitrary perf_counter_ns origin
    for f in range(FRAMES):
        for j, d in enumerate(LAYER_US):
            d = d + 13 * ((f * 7 + j) % 5)  # not all alike
            start[f, j], end[f, j] = t, t + d * 1000
            t += (d + GAP_US) * 1000
    return start, end


def to_device_us(host_ns: np.ndarray, h0: int, span_ns: float) -> np.ndarray:
    x = (host_ns - h0) / span_ns
    return 1_000_000 + (host_ns - h0) / 1000 * DRIFT + BOW_US * np.sin(np.pi * x)


def setup() -> tuple[np.ndarray, np.ndarray, HostTrace, object, np.ndarray, np.ndarray]:
    start, end = host_timeline()
    h0, span = int(start[0, 0]), float(end[-1, -1] - start[0, 0])
    host_t = np.stack([start, end], axis=-1).ravel()  # marker changes, in order
    host_lv = np.tile([1, 0], host_t.size // 2)
    dev_edges = np.rint(to_device_us(host_t, h0, span)).astype(np.int64)
    fit = fit_clock_map(dev_edges, host_t, device_levels=host_lv, host_levels=host_lv)
    # Samples on the logger's clock; power steps with the marker.
    t_dev = np.arange(dev_edges[0] - 20_000, dev_edges[-1] + 20_000, 1e6 / RATE_HZ)
    high = (np.searchsorted(dev_edges, t_dev, side="right") % 2) == 1
    trace = HostTrace(t_ns=fit.clock.to_host_ns(np.rint(t_dev).astype(np.int64)),
                       power_w=IDLE_W + STEP_W * high,
                       edge_t_ns=fit.clock.to_host_ns(dev_edges), edge_markers=host_lv)
    win = dev_edges.reshape(FRAMES, LAYER_US.size, 2)
    # Exact energy of each window, in the host time the linear map gives a logger µs.
    truth_mj = (IDLE_W + STEP_W) * np.diff(win, axis=-1)[..., 0] * fit.clock.ns_per_us * 1e-6
    return start, end, trace, fit, host_t, truth_mj


def test_the_bow_is_beyond_the_matching_tolerance_of_the_line() -> None:
    start, end, trace, fit, _, truth = setup()
    assert fit.clock.matched == start.size * 2  # the fit itself still pairs every edge
    assert np.abs(fit.residual_ns).max() > 250_000  # but they lie far off its line
    plain = attribute(start, end, trace, levels=(1, 0))
    assert plain.edges_missed > 0
    err = np.abs(plain.window_energy_mj - truth) / truth
    assert err.max() > 0.02


def test_local_offset_finds_every_edge() -> None:
    start, end, trace, fit, host_t, truth = setup()
    local = local_offset(fit, host_t)
    assert local is not None
    res = attribute(start - local(start), end - local(end), trace, levels=(1, 0))
    assert res.edges_missed == 0 and res.edges_spurious == 0
    np.testing.assert_allclose(res.window_energy_mj, truth, rtol=1e-3)
    per_layer = np.array([layer.energy_mj for layer in res.layers])
    np.testing.assert_allclose(per_layer, truth.mean(axis=0), rtol=1e-3)


def test_local_offset_ignores_one_late_marker_call() -> None:
    """A single marker change recorded 300 us late (the host thread was preempted in
    the call) does not move the boundaries around it: a running median, not a copy."""
    start, end, trace, fit, host_t, _ = setup()
    residual = np.asarray(fit.residual_ns).copy()
    k = residual.size // 2
    residual[k] += 300_000
    late = type(fit)(fit.clock, fit.host_index, fit.device_index, fit.missed_host,
                     fit.spurious_device, residual)
    a, b = local_offset(fit, host_t), local_offset(late, host_t)
    assert a is not None and b is not None
    at = host_t[fit.host_index[k - 3: k + 4]]
    assert np.abs(b(at) - a(at)).max() < 20_000


def test_local_offset_follows_only_tightly_timed_calls_through_a_burst_of_late_ones() -> None:
    """A busy host holds up five marker calls in a row (each bracket 0.6 ms wide, its
    midpoint 300 us late): the median over 7 neighbours would follow them, so they
    are left out where the brackets say they were loose; every edge is still found."""
    start, end, trace, fit, host_t, truth = setup()
    residual = np.asarray(fit.residual_ns).copy()
    order = np.argsort(fit.host_index, kind="stable")
    k = residual.size // 2
    burst = order[k - 2: k + 3]  # five consecutive host events, in time order
    residual[burst] += 300_000
    late = type(fit)(fit.clock, fit.host_index, fit.device_index, fit.missed_host,
                     fit.spurious_device, residual)
    halfwidth = np.full(host_t.size, 1_000, np.int64)  # a tight call: 2 us bracket
    halfwidth[fit.host_index[burst]] = 300_000
    a = local_offset(fit, host_t)
    dragged, kept = local_offset(late, host_t), local_offset(late, host_t,
                                                             halfwidth_ns=halfwidth)
    assert a is not None and dragged is not None and kept is not None
    at = host_t[fit.host_index[burst]]
    assert np.abs(dragged(at) - a(at)).max() > 250_000  # the burst moves the median
    assert np.abs(kept(at) - a(at)).max() < 20_000  # the tight neighbours do not
    res = attribute(start - kept(start), end - kept(end), trace, levels=(1, 0))
    assert res.edges_missed == 0 and res.edges_spurious == 0
    np.testing.assert_allclose(res.window_energy_mj, truth, rtol=1e-3)


def test_no_fit_no_correction() -> None:
    assert local_offset(None, np.zeros(3, np.int64)) is None
