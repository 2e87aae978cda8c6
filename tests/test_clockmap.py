"""Logger clock -> host clock: fits against a known offset and drift, with a
missed and a spurious edge, marker levels, and the virtual logger's real clock."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import serial

from profiler.errors import MarkerError
from profiler.power import protocol as P
from profiler.power.clockmap import ClockMap, fit_clock_map
from profiler.sim.virtual_logger import VirtualLogger


def make_events(seed: int, n: int, drift_ppm: float, start_us: int, jitter_us: float):
    """Host marker times (layer boundaries 1..60 ms apart) and the device times the
    logger would stamp: device runs (1 + drift) times as fast, starting at start_us."""
    rng = np.random.default_rng(seed)
    host_ns = 5_000_000_000_000 + np.cumsum(rng.uniform(1e6, 60e6, n)).astype(np.int64)
    true_b = 1000.0 / (1.0 + drift_ppm * 1e-6)  # host ns per device µs
    dev_exact = start_us + (host_ns - host_ns[0]) / true_b
    dev_us = np.floor(dev_exact + rng.normal(0, jitter_us, n)).astype(np.int64)
    truth = ClockMap(device_ref_us=start_us, host_ref_ns=int(host_ns[0]), ns_per_us=true_b)
    return host_ns, dev_us, truth


@pytest.mark.parametrize(
    ("drift_ppm", "start_us"),
    [(0.0, 0), (4_000.0, 123_456_789), (-5_000.0, (1 << 32) - 1_000_000), (250.0, 10**11)],
)
def test_fit_recovers_offset_and_drift_with_a_missed_and_a_spurious_edge(
    drift_ppm: float, start_us: int
) -> None:
    host_ns, dev_us, truth = make_events(1, 400, drift_ppm, start_us, jitter_us=2.0)
    missed = 137
    spurious_t = dev_us[250] + 7_000  # a glitch 7 ms after a real edge
    dev = np.sort(np.append(np.delete(dev_us, missed), spurious_t))
    fit = fit_clock_map(dev, host_ns)

    assert fit.missed_host.tolist() == [missed]
    assert dev[fit.spurious_device].tolist() == [spurious_t]
    # every other host event is paired with its own device edge
    assert np.array_equal(dev[fit.device_index], np.delete(dev_us, missed))
    assert np.array_equal(fit.host_index, np.delete(np.arange(400), missed))
    # the map agrees with the truth to the jitter over the whole run
    span = np.array([dev_us[0], dev_us[-1]])
    err_ns = fit.clock.to_host_ns(span) - truth.to_host_ns(span)
    assert np.all(np.abs(err_ns) < 2_000)
    assert fit.clock.drift_ppm == pytest.approx(drift_ppm, abs=0.5)
    assert fit.clock.matched == 399
    assert fit.clock.residual_rms_ns < 5_000


def test_missed_and_spurious_edges_at_the_very_start_and_end() -> None:
    host_ns, dev_us, truth = make_events(2, 200, 2_000.0, 1_000, jitter_us=1.0)
    dev = np.delete(dev_us, [0, 199])  # first and last edge missed
    dev = np.sort(np.concatenate(([dev_us[0] - 30_000], dev, [dev_us[-1] + 40_000])))  # glitches
    fit = fit_clock_map(dev, host_ns)
    assert fit.missed_host.tolist() == [0, 199]
    assert fit.spurious_device.tolist() == [0, dev.size - 1]
    assert abs(fit.clock.to_host_ns(dev_us[100]) - truth.to_host_ns(dev_us[100])) < 2_000


def test_levels_keep_an_edge_off_the_wrong_event() -> None:
    """With marker levels, a spurious edge right next to a host event cannot steal it."""
    host_ns, dev_us, truth = make_events(3, 100, 1_000.0, 0, jitter_us=1.0)
    levels = np.arange(100) % 2
    glitch_t = dev_us[40] - 50  # 50 µs before edge 40, with the wrong level
    dev = np.insert(dev_us, 40, glitch_t)
    dev_lv = np.insert(levels, 40, 1 - levels[40])
    with_lv = fit_clock_map(dev, host_ns, device_levels=dev_lv, host_levels=levels)
    assert with_lv.spurious_device.tolist() == [40]
    assert with_lv.missed_host.size == 0
    assert with_lv.device_index[40] == 41  # host event 40 matched its real edge


def test_outlier_latency_is_rejected_from_the_fit() -> None:
    host_ns, dev_us, truth = make_events(4, 300, -3_000.0, 50, jitter_us=1.0)
    dev = dev_us.copy()
    dev[[20, 150, 280]] -= 300  # three edges seen 300 µs early (a slow GPIO write)
    fit = fit_clock_map(dev, host_ns, floor_ns=50_000)
    assert fit.clock.rejected == 3
    assert fit.clock.matched == 300
    assert abs(fit.clock.to_host_ns(dev_us[150]) - truth.to_host_ns(dev_us[150])) < 2_000


def test_single_edge_gives_an_offset_at_nominal_rate() -> None:
    fit = fit_clock_map(np.array([1_000]), np.array([9_000_000]))
    assert fit.clock.to_host_ns(2_000) == 10_000_000
    assert fit.clock.ns_per_us == 1000.0


def test_no_edges_is_a_marker_error() -> None:
    with pytest.raises(MarkerError, match="0 logger edges"):
        fit_clock_map(np.zeros(0, np.int64), np.array([1, 2, 3]))
    with pytest.raises(MarkerError, match="only 1 of 2 logger edges"):
        # edges exist but 10 s away from any host event, tolerance 0.5 ms
        fit_clock_map(np.array([0, 10_000_000]), np.array([0, 1_000_000_000]), max_drift_ppm=10)


def warming_events(seed: int, seconds: float, ppm: float, ppm_change: float):
    """Host marker times over a long capture and the logger's stamps when its rate moves
    from ``ppm`` to ``ppm + ppm_change`` evenly over the capture (a resonator warming
    up), with 2 µs of stamp jitter. Also the exact device time of every event."""
    rng = np.random.default_rng(seed)
    gaps = rng.uniform(1e6, 60e6, int(seconds / 0.0305) + 1)
    host_ns = 7_000_000_000_000 + np.cumsum(gaps).astype(np.int64)
    host_ns = host_ns[host_ns - host_ns[0] <= seconds * 1e9]
    t = (host_ns - host_ns[0]) / 1e9
    # device µs = integral of (1 + (ppm + ppm_change * t / T) * 1e-6) dt
    exact_us = 1e6 * (t + 1e-6 * (ppm * t + ppm_change * t**2 / (2 * t[-1]))) + 42_000_000
    dev_us = np.floor(exact_us + rng.normal(0, 2.0, t.size)).astype(np.int64)
    return host_ns, dev_us, exact_us


def map_error_ns(clock: ClockMap, host_ns: np.ndarray, exact_us: np.ndarray) -> np.ndarray:
    """How far the map puts each event from its true host time."""
    whole = np.floor(exact_us).astype(np.int64)
    return clock.to_host_ns(whole) + (exact_us - whole) * 1000.0 - host_ns


def test_a_rate_that_moves_over_minutes_is_followed_piecewise() -> None:
    """A 5-minute capture whose logger rate moves by 8 ppm bends its clock up to 0.2 ms
    off the best straight line; the piecewise map follows it to within the 2 µs stamp
    jitter (measured: 1.7 µs at most)."""
    host_ns, dev_us, exact_us = warming_events(5, 300.0, 2_500.0, 8.0)
    straight = fit_clock_map(dev_us, host_ns, segment_s=0)
    assert straight.clock.knots_us == ()
    assert np.abs(map_error_ns(straight.clock, host_ns, exact_us)).max() > 100_000

    fit = fit_clock_map(dev_us, host_ns)
    assert len(fit.clock.knots_us) >= 3
    assert fit.clock.matched == host_ns.size and fit.spurious_device.size == 0
    err = map_error_ns(fit.clock, host_ns, exact_us)
    assert np.abs(err).max() < 5_000 and np.sqrt(np.mean(err**2)) < 2_000
    assert fit.clock.residual_rms_ns < 5_000
    # the mean rate is the mean of the moving one
    assert fit.clock.drift_ppm == pytest.approx(2_504.0, abs=1.0)


def test_a_steady_clock_over_minutes_keeps_one_line() -> None:
    host_ns, dev_us, exact_us = warming_events(6, 300.0, -1_200.0, 0.0)
    fit = fit_clock_map(dev_us, host_ns)
    assert fit.clock.knots_us == ()
    assert np.abs(map_error_ns(fit.clock, host_ns, exact_us)).max() < 10_000


def test_piecewise_map_roundtrips_and_inverts_beyond_its_knots() -> None:
    host_ns, dev_us, _ = warming_events(7, 200.0, 300.0, -10.0)
    cm = fit_clock_map(dev_us, host_ns).clock
    assert len(cm.knots_us) >= 3
    again = ClockMap.from_dict(json.loads(json.dumps(cm.to_dict())))
    assert again == cm
    # before the first edge, between knots, after the last edge
    probe = np.array([dev_us[0] - 5_000_000, dev_us[dev_us.size // 3], dev_us[-1] + 5_000_000])
    assert np.array_equal(again.to_host_ns(probe), cm.to_host_ns(probe))
    assert np.allclose(cm.to_device_us(cm.to_host_ns(probe)), probe, atol=1e-3)
    # and it is continuous at a knot
    k = cm.device_ref_us + int(cm.knots_us[1])
    step = np.diff(cm.to_host_ns(np.array([k - 1, k, k + 1])))
    assert np.all(np.abs(step - cm.ns_per_us) < 2)


def test_clock_map_roundtrip_dict() -> None:
    cm = ClockMap(device_ref_us=5, host_ref_ns=10**15, ns_per_us=999.5, matched=3)
    assert ClockMap.from_dict(cm.to_dict()) == cm
    assert cm.to_device_us(cm.to_host_ns(10_005))[()] == pytest.approx(10_005, abs=1e-3)


def test_fit_on_the_virtual_loggers_clock() -> None:
    """Edges from the virtual logger (offset + 3000 ppm drift) map back onto the
    host times the markers were set, within the call's own duration."""
    with VirtualLogger(1.0, rate_hz=1000, start_us=(1 << 32) - 200_000, drift_ppm=3000.0) as vl:
        ser = serial.serial_for_url(vl.port, baudrate=P.BAUDRATE, timeout=0.01)
        dec = P.StreamDecoder()
        edges = []
        before, after = [], []
        ser.write(P.encode_command(P.Command.START))
        deadline = time.monotonic() + 5
        while not any(isinstance(m, P.Ack) for m in dec.feed(ser.read(4096)).messages):
            assert time.monotonic() < deadline
        i = 0
        while i < 30 or vl.device_us() < (1 << 32) + 50_000:  # until past the u32 wrap
            assert time.monotonic() < deadline
            time.sleep(0.005 + 0.002 * (i % 3))
            before.append(time.perf_counter_ns())
            vl.set_markers(i % 2 ^ 1)
            after.append(time.perf_counter_ns())
            i += 1
        ser.write(P.encode_command(P.Command.STOP))
        while True:
            out = dec.feed(ser.read(4096))
            edges.append(out.edges)
            if any(isinstance(m, P.Ack) and m.cmd == P.Command.STOP for m in out.messages):
                break
            assert time.monotonic() < deadline
        ser.close()
        truth = vl.true_clock()
    e = np.concatenate(edges)
    assert e.size == len(before) >= 30
    assert e["t_us"][0] < 1 << 32 < e["t_us"][-1]  # the u32 clock wrapped and was unwrapped
    host_mid = (np.array(before) + np.array(after)) // 2
    # Levels as the Arduino source passes them; a thread switch inside a set_markers call
    # (ms on a busy machine) moves its midpoint, and same-level changes are >= 10 ms apart.
    levels = np.arange(len(before)) % 2 ^ 1
    fit = fit_clock_map(e["t_us"], host_mid, device_levels=e["markers"], host_levels=levels,
                        tol_ns=4_500_000)
    assert fit.clock.matched == e.size
    # the truth puts each edge inside its set_markers call (µs flooring: 1 µs slack)
    t_true = truth.to_host_ns(e["t_us"])
    assert np.all(t_true >= np.array(before) - 1_500)
    assert np.all(t_true <= np.array(after) + 1_500)
    assert fit.clock.drift_ppm == pytest.approx(3000.0, abs=200.0)


def test_piecewise_fit_equals_dense_least_squares_in_bounded_memory() -> None:
    """The knots solve the tridiagonal normal equations of the hat basis: the same values
    as lstsq on the dense design matrix, without building it (an hour of edges every
    50 ms with 180 knots made it 100 MB, lstsq's copies 200 MB more)."""
    import subprocess
    import sys

    from profiler.power.clockmap import _hat_fit, _segment

    rng = np.random.default_rng(3)
    x = np.sort(rng.uniform(0, 600e6, 12_000))
    kx = np.quantile(x, np.linspace(0, 1, 31))
    y = 1e3 * x * (1 + 8e-6 * np.sin(x / 6e7)) + rng.normal(0, 3000, x.size)
    y -= y.mean()
    j, w = _segment(x, kx)
    dense = np.zeros((x.size, kx.size))
    dense[np.arange(x.size), j] = 1 - w
    dense[np.arange(x.size), j + 1] = w
    want, *_ = np.linalg.lstsq(dense, y, rcond=None)
    assert np.allclose(_hat_fit(x, y, kx), want, rtol=0, atol=1e-3)  # ns, of values to 3e11

    # an hour of 20 Hz marker toggles: the fit's peak memory, in a fresh process
    code = """
import resource
import numpy as np
from profiler.power.clockmap import fit_clock_map
n = 72_000
rng = np.random.default_rng(0)
d = np.cumsum(np.full(n, 50_000)) + rng.integers(-3, 4, n)
lv = np.arange(n) % 2
h = (d * 1000.0 * (1 + 3e-6 * np.sin(d / 6e8))).astype(np.int64) + 10**12
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
fit = fit_clock_map(d, h, device_levels=lv, host_levels=lv, tol_ns=20e6)
print(len(fit.clock.knots_us), (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    knots, grew_mb = r.stdout.split()
    assert int(knots) == 180  # 179 whole 20 s segments in 3,599.95 s
    assert float(grew_mb) < 30  # measured 9 MB; the dense lstsq took 206 MB


def test_a_held_up_change_inside_its_bracket_still_matches_and_leaves_the_line_alone() -> None:
    # One marked span (two edges), as `PowerSession.span` makes. The host's clock reads
    # around the fall were 4 ms apart (its thread was held up inside the change), and
    # the logger stamped the fall 1.6 ms after their middle.
    d = np.array([5_000_000, 5_060_000 + 1_600], dtype=np.int64)  # logger µs
    h = np.array([9_000_000_000, 9_060_000_000], dtype=np.int64)  # host ns (middles)
    lv = np.array([1, 0])
    with pytest.raises(MarkerError):  # without the brackets, the fall cannot be placed
        fit_clock_map(d, h, device_levels=lv, host_levels=lv)
    fit = fit_clock_map(d, h, device_levels=lv, host_levels=lv,
                        host_halfwidth_ns=np.array([1_000, 2_000_000]))
    assert fit.host_index.tolist() == [0, 1] and fit.device_index.tolist() == [0, 1]
    # The tightly timed rise sets the offset; the rate stays nominal (not 1600/60000 off).
    assert fit.clock.ns_per_us == pytest.approx(1000.0)
    assert int(fit.clock.to_host_ns(d[0])) == h[0]
    assert fit.residual_ns[1] == pytest.approx(-1_600_000, abs=1)


def test_a_wide_bracket_does_not_pull_a_long_fit() -> None:
    host_ns, dev_us, truth = make_events(5, 300, 1_500.0, 10_000, jitter_us=1.0)
    hw = np.full(host_ns.size, 2_000, dtype=np.int64)
    late = [40, 41, 150, 299]  # held-up changes: their middles 2.5 ms early
    host = host_ns.copy()
    host[late] -= 2_500_000
    hw[late] = 3_000_000
    with pytest.raises(AssertionError):  # without the brackets they are missed
        fit = fit_clock_map(dev_us, host)
        assert fit.missed_host.size == 0
    fit = fit_clock_map(dev_us, host, host_halfwidth_ns=hw)
    assert fit.missed_host.size == 0 and fit.spurious_device.size == 0
    span = np.array([dev_us[0], dev_us[-1]])
    assert np.all(np.abs(fit.clock.to_host_ns(span) - truth.to_host_ns(span)) < 2_000)
    assert fit.clock.residual_rms_ns < 5_000  # from the tightly timed changes only


def test_a_run_whose_first_and_last_changes_were_held_up_still_lines_up() -> None:
    """On a busy host the run's first 12 and last 10 marker changes were held up inside
    their clock-read brackets (3 ms wide, middles 0.4 ms early): the anchors are then the
    13th and 290th changes, and their edges are the 13th and 290th of the logger's, not
    its first and last few (which paired them with edges 1 to 10 ms away, and no line
    from those matched half the edges: 'only 28 of 300 logger edges lie within 0.5 ms')."""
    host_ns, dev_us, truth = make_events(7, 300, 1_500.0, 10_000, jitter_us=1.0)
    hw = np.full(host_ns.size, 2_000, dtype=np.int64)
    late = [*range(12), *range(290, 300)]
    host = host_ns.copy()
    host[late] -= 400_000
    hw[late] = 3_000_000
    fit = fit_clock_map(dev_us, host, host_halfwidth_ns=hw)
    assert fit.missed_host.size == 0 and fit.spurious_device.size == 0
    assert np.array_equal(fit.host_index, fit.device_index)
    span = np.array([dev_us[0], dev_us[-1]])
    assert np.all(np.abs(fit.clock.to_host_ns(span) - truth.to_host_ns(span)) < 2_000)
