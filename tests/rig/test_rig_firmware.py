"""The logger firmware (firmware/coupprof_logger) on the simavr rig.

The real ELFs answer IDENTIFY over the pty, stream SAMPLES whose currents follow
the injected waveform, and report marker changes as EDGE frames whose times
match the rig's log. Expected values come from the waveform (numpy integrals)
and from the rig's ground-truth log, never from the firmware's own output.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pytest
import serial
from conftest import need, window_mean

from profiler.power import protocol as P
from profiler.power.rig import A0_ELF, INA226_ELF, GroundTruth, Rig, Waveform, run_fast

pytestmark = pytest.mark.rig

# Front ends as the firmware's fw_config.h defaults describe them, and how the
# rig is set up to match (0.1 ohm shunt, gain 50, 5 V reference).
VARIANTS = {
    "ina226": dict(elf=INA226_ELF, front_end=P.FrontEnd.INA226, lsb_na=25_000,
                   # mean over the 140 us shunt conversion centred on the sample time
                   window_us=140.0, tol_a=0.0005),
    "a0": dict(elf=A0_ELF, front_end=P.FrontEnd.SHUNT_AMP, lsb_na=976_563,
               # mean of 3 conversions 26 us apart; each code rounds: within 1 LSB
               window_us=52.0, tol_a=0.0016),
}

WAVE = Waveform(points=((0, 0.10, 5.0), (100_000, 0.55, 4.8), (200_000, 0.10, 5.0)),
                period_us=200_000, state_current_a={1: 0.10, 2: 0.05, 3: 0.15})


@pytest.fixture(params=sorted(VARIANTS))
def variant(request: pytest.FixtureRequest) -> dict:
    v = VARIANTS[request.param]
    need(v["elf"])
    return v


def cmd_hex(cmd: P.Command) -> str:
    return P.encode_command(cmd).hex()


def test_identify_over_the_pty(variant):
    """IDENTIFY written to the pty gets IDENT (then ACK) describing the build."""
    with Rig(variant["elf"], WAVE) as rig:
        port = serial.Serial(rig.port, timeout=0.1)
        while rig.time_us() < 50_000:  # past boot (and its own IDENT)
            time.sleep(0.005)
        port.reset_input_buffer()
        port.write(P.encode_command(P.Command.IDENTIFY))
        dec = P.StreamDecoder()
        msgs: list = []
        deadline = time.monotonic() + 5
        while not any(isinstance(m, P.Ack) for m in msgs) and time.monotonic() < deadline:
            msgs += dec.feed(port.read(max(1, port.in_waiting))).messages
        port.close()
    idents = [m for m in msgs if isinstance(m, P.Ident)]
    acks = [m for m in msgs if isinstance(m, P.Ack)]
    assert len(idents) == 1 and len(acks) == 1
    info = idents[0].info
    assert info.protocol == P.PROTOCOL_VERSION
    assert info.front_end == variant["front_end"]
    assert info.marker_count == 4
    assert info.shunt_uohm == 100_000
    assert info.current_lsb_na == variant["lsb_na"]
    assert info.rate_hz > 0 and info.fw_version
    assert (acks[0].cmd, acks[0].status) == (P.Command.IDENTIFY, P.AckStatus.OK)
    assert acks[0].seq == idents[0].seq + 1
    assert dec.counters.corrupt_frames == 0


@dataclass
class Streamed:
    samples: np.ndarray
    edges: np.ndarray
    messages: list
    counters: P.DecoderCounters
    truth: GroundTruth
    info: P.LoggerInfo


# Marker changes at awkward times (not multiples of any sample period); each
# layer-like window holds state 1, 2 or 3 for 7 to 20 ms.
PIN_SCRIPT = [(40_000 + 23_017 * k + dt, s) for k in range(12)
              for dt, s in ((0, 1 + k % 3), (7_000 + 1_113 * k, 0))]


def stream(variant: dict, tmp_path, seconds: float = 0.36) -> Streamed:
    script = [f"20000 send {cmd_hex(P.Command.IDENTIFY)}",
              f"30000 send {cmd_hex(P.Command.START)}"]
    script += [f"{t} pins {s}" for t, s in PIN_SCRIPT]
    script.append(f"{int(seconds * 1e6) - 15_000} send {cmd_hex(P.Command.STOP)}")
    run = run_fast(variant["elf"], seconds, script, WAVE, workdir=tmp_path)
    dec = P.StreamDecoder()
    out = dec.feed(run.uart)
    infos = [m.info for m in out.messages if isinstance(m, P.Ident)]
    assert infos, "no IDENT from the firmware"
    return Streamed(out.samples, out.edges, out.messages, dec.counters, run.truth, infos[-1])


def state_at(truth: GroundTruth, t_us: np.ndarray) -> np.ndarray:
    times = np.array([p.t_us for p in truth.pins])
    states = np.array([p.state for p in truth.pins])
    return states[np.searchsorted(times, t_us, side="right") - 1]


def device_offset_us(s: Streamed) -> float:
    """Device clock minus simulated time, from the edges (one per pin change)."""
    changes = s.truth.changes()
    assert len(s.edges) == len(changes)
    return float(np.median(s.edges["t_us"] - np.array([c.t_us for c in changes])))


def test_samples_follow_the_waveform(variant, tmp_path):
    s = stream(variant, tmp_path)
    assert s.counters.corrupt_frames == 0 and s.counters.lost_frames == 0
    samples = s.samples
    assert len(samples) > 200
    t_sim = samples["t_us"] - device_offset_us(s)
    state = state_at(s.truth, t_sim)
    # leave out samples whose window reaches a marker change (the current steps there)
    changes = np.array([c.t_us for c in s.truth.changes()])
    near = np.min(np.abs(t_sim[:, None] - changes[None, :]), axis=1) < 300
    half = variant["window_us"] / 2
    expected = np.array([window_mean(WAVE, t - half, t + half, int(st))[0]
                         for t, st in zip(t_sim, state, strict=True)])
    measured = s.info.current_a(samples["current"])
    err = (measured - expected)[~near]
    assert np.max(np.abs(err)) <= variant["tol_a"]
    # the marker byte of each sample is the state the rig had applied then
    np.testing.assert_array_equal(samples["markers"][~near], state[~near])
    # and the layer-dependent current is visible: state 3 draws 150 mA more than idle
    assert measured[(state == 3) & ~near].mean() > measured[(state == 0) & ~near].mean() + 0.05
    if s.info.bus_measured:
        bus = s.info.bus_v(samples["bus"])
        expected_v = np.array([window_mean(WAVE, t - half, t + half)[1] for t in t_sim])
        assert np.max(np.abs(bus - expected_v)) <= 0.005


def test_edges_match_the_rig_log(variant, tmp_path):
    s = stream(variant, tmp_path)
    changes = s.truth.changes()
    assert len(s.edges) == len(changes) == len(PIN_SCRIPT)
    states = np.array([c.state for c in changes])
    np.testing.assert_array_equal(s.edges["markers"], states)
    np.testing.assert_array_equal(s.edges["changed"], states ^ np.r_[0, states[:-1]])
    offset = s.edges["t_us"] - np.array([c.t_us for c in changes])
    dev = offset - np.median(offset)
    # a timer read in the pin-change ISR: within the 4 us the logger promises,
    # unless another ISR held it off; an edge off by a sample period would put a
    # layer boundary in the wrong sample
    assert np.percentile(np.abs(dev), 75) <= 4.0
    assert np.max(np.abs(dev)) <= 40.0
    # STATUS counts edges per input: a change of two inputs at once is two edges
    edges_total = [m.edges_total for m in s.messages if isinstance(m, P.Status)]
    flips = sum(bin(int(c)).count("1") for c in s.edges["changed"])
    assert edges_total and edges_total[-1] == flips
