"""Attribution on samples from the real logger firmware under simavr (`pytest -m rig`).

The rig runs the firmware ELF (INA226 over TWI, or the A0 amplifier) against a
waveform whose current rises with the marker state, while a script drives the
marker pins layer by layer. The firmware's UART stream is decoded, the logger's
clock is fitted to the script's times from its edges, and each layer's energy is
attributed. Ground truth is the rig's exact integral of power between the
applied pin changes (`GroundTruth.windows`), not anything the firmware said.

The A0 front end measures current only and reports power at the logger's nominal
bus voltage (5.0 V), so its waveform holds the bus there: its truth is then the
exact energy too. (On the INA226's waveform, whose bus dips to 4.9 V, an A0
logger is off by that dip, ~2 %, which no firmware can see.)
"""

from __future__ import annotations

import numpy as np
import pytest

from profiler.power import protocol as P
from profiler.power import rig as rigmod
from profiler.power.attribution import attribute
from profiler.power.clockmap import fit_clock_map
from profiler.power.host_trace import HostTrace
from profiler.power.rig import A0_ELF, INA226_ELF, Waveform, run_fast
from profiler.power.trace import DeviceTrace

pytestmark = pytest.mark.rig

# Base load ramps 0.2 -> 0.35 A over 25 ms; layer k (state 1 | (k % 4) << 1) adds more.
# At most 0.7 A: 70 mV on the 0.1 ohm shunt, inside the INA226's 81.92 mV range
# (above it the sensor clips and no attribution can recover the energy).
STATES = {1: 0.15, 3: 0.35, 5: 0.05, 7: 0.25}
WAVE = Waveform(points=((0, 0.20, 5.0), (25_000, 0.35, 4.9), (50_000, 0.20, 5.0)),
                period_us=50_000, state_current_a=STATES)
WAVE_NOMINAL_BUS = Waveform(points=((0, 0.20, 5.0), (25_000, 0.35, 5.0), (50_000, 0.20, 5.0)),
                            period_us=50_000, state_current_a=STATES)

# (ELF, waveform, SET_RATE request or None for the default, the window each sample
# averages over as ArduinoSource.sample_window_ns gives it: an INA226 shunt conversion
# (140 us); for A0 the whole sample period (each sample is the mean of the k
# conversions that fill it), from the rate IDENT reports). The A0 rates are its
# default (12,821 S/s: 3 conversions a sample) and the two whose sample time comes
# from the handler that completes the previous sample (9615 S/s: k = 1; 4808: k = 2).
VARIANTS = {"ina226": (INA226_ELF, WAVE, None, lambda rate_hz: 140_000),
            "a0": (A0_ELF, WAVE_NOMINAL_BUS, None, lambda rate_hz: int(1e9 / rate_hz)),
            "a0-k1": (A0_ELF, WAVE_NOMINAL_BUS, 9615, lambda rate_hz: int(1e9 / rate_hz)),
            "a0-k2": (A0_ELF, WAVE_NOMINAL_BUS, 4808, lambda rate_hz: int(1e9 / rate_hz))}
DURATIONS_US = [1_000, 4_300, 1_700, 2_900, 1_250, 7_100, 1_050, 3_300]
FRAMES = 5
GAP_US = 173  # hand-over between layers


def layer_script(rate_hz: int | None = None) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Pin commands at awkward simulated times; returns them and the layer windows."""
    cmd = {c: P.encode_command(c).hex() for c in (P.Command.IDENTIFY, P.Command.START,
                                                   P.Command.STOP)}
    lines = [f"20000 send {cmd[P.Command.IDENTIFY]}", f"30000 send {cmd[P.Command.START]}"]
    if rate_hz is not None:
        lines.insert(0, f"10000 send {P.encode_set_rate(rate_hz).hex()}")
    start = np.zeros((FRAMES, len(DURATIONS_US)), np.int64)
    end = np.zeros_like(start)
    t = 45_013
    for f in range(FRAMES):
        for j, d in enumerate(DURATIONS_US):
            d += 37 * f  # not a multiple of any sample period
            lines += [f"{t} pins {1 | ((j % 4) << 1)}", f"{t + d} pins 0"]
            start[f, j], end[f, j] = t, t + d
            t += d + GAP_US
        t += 2_011
    lines.append(f"{t + 20_000} send {cmd[P.Command.STOP]}")
    return lines, start, end


@pytest.fixture(params=sorted(VARIANTS))
def streamed(request: pytest.FixtureRequest, tmp_path):
    elf, wave, rate_hz, window_of = VARIANTS[request.param]
    why = rigmod.missing(elf)
    if why:
        pytest.skip(why)
    lines, start_us, end_us = layer_script(rate_hz)
    seconds = (int(lines[-1].split()[0]) + 15_000) / 1e6
    run = run_fast(elf, seconds, lines, wave, workdir=tmp_path)
    dec = P.StreamDecoder()
    out = dec.feed(run.uart)
    info = [m.info for m in out.messages if isinstance(m, P.Ident)][-1]
    if rate_hz is not None:
        assert info.rate_hz == rate_hz
    if request.param.startswith("a0"):
        assert not info.bus_measured and info.bus_nominal_mv == 5000
    trace = DeviceTrace(info=info, samples=out.samples, edges=out.edges, gaps=out.gaps)
    return request.param, window_of(info.rate_hz), trace, run.truth, start_us, end_us


def test_layer_energies_on_the_real_firmware(streamed) -> None:
    name, window_ns, trace, truth, start_us, end_us = streamed
    assert trace.gaps.size == 0
    # The "host" here is the script: its pin times (simulated µs) as host ns.
    host_start, host_end = start_us * 1000, end_us * 1000
    changes = np.stack([host_start, host_end], axis=-1).ravel()
    levels = np.stack([np.full(start_us.shape, 1), np.zeros(start_us.shape, int)], -1).ravel()
    fit = fit_clock_map(trace.edges["t_us"], changes, device_levels=trace.edges["markers"] & 1,
                        host_levels=levels)
    pt = HostTrace(**trace.host_fields(fit.clock), sample_window_ns=window_ns)
    res = attribute(host_start, host_end, pt, levels=(1, 0))
    assert res.edges_missed == 0 and res.edges_spurious == 0

    windows = truth.windows(0)
    assert len(windows) == start_us.size
    true_mj = np.array([w.energy_j * 1e3 for w in windows]).reshape(start_us.shape)
    np.testing.assert_allclose([w.start_us for w in windows], start_us.ravel(), atol=1)
    err = np.abs(res.window_energy_mj - true_mj) / true_mj
    ok = ~res.window_flagged
    print(f"{name}: {trace.rate_hz:.0f} S/s, {int(res.window_flagged.sum())} of "
          f"{err.size} windows flagged, max error of the others "
          f"{100 * err[ok].max() if ok.any() else float('nan'):.3f} %")
    # The logger must deliver: few windows lose samples, and every other window
    # (all are >= 1 ms) is within 1 % of the exact energy.
    assert res.window_flagged.mean() <= 0.1
    assert err[ok].max() < 0.01
    per_layer = np.array([layer.energy_mj for layer in res.layers])
    clean_truth = np.array([true_mj[ok[:, j], j].mean() for j in range(start_us.shape[1])])
    assert np.abs(per_layer - clean_truth).max() / clean_truth.min() < 0.01
