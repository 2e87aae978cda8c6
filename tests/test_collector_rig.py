"""The collector against the real firmware under simavr (`pytest -m rig`): the
IDENTIFY handshake, START/STOP, streaming over the rig's pty at 2 Mbaud pace,
marker edges, and the counters, checked against the rig's own log (the
simulated time each pin change was applied) and the firmware's STATUS."""

from __future__ import annotations

import time

import numpy as np
import pytest

from profiler.power import protocol as P
from profiler.power import rig as rigmod
from profiler.power.collector import Collector
from profiler.power.rig import INA226_ELF, Rig, Waveform

pytestmark = pytest.mark.rig

WAVE = Waveform.constant(0.30, 5.0, state_current_a={1: 0.2, 2: 0.1, 3: 0.3})


@pytest.fixture
def rig():
    why = rigmod.missing(INA226_ELF)
    if why:
        pytest.skip(why)
    with Rig(INA226_ELF, WAVE) as r:
        yield r


def test_collector_on_the_real_firmware(rig: Rig) -> None:
    levels = [1, 3, 2, 0, 1, 0]

    def progress(elapsed_s: float, counters) -> None:
        while levels and elapsed_s >= 0.05 * (7 - len(levels)):
            rig.set_markers(levels.pop(0))

    with Collector(rig.port, timeout_s=10) as col:
        info = col.open()
        assert (info.protocol, info.front_end, info.marker_count) == (1, P.FrontEnd.INA226, 4)
        trace = col.record(0.5, progress=progress, tick_s=0.02)
    assert not levels
    c = trace.counters
    assert (c.lost_frames, c.corrupt_frames) == (0, 0)
    # what arrived is exactly what the firmware says it sent
    assert c.samples == c.device_samples_total - c.device_samples_dropped
    assert trace.rate_hz == pytest.approx(info.rate_hz, rel=0.01)

    # every applied pin change is one EDGE, stamped within the firmware's latency
    changes = rig.ground_truth().changes()
    e = trace.edges
    assert e["markers"].tolist() == [p.state for p in changes] == [1, 3, 2, 0, 1, 0]
    t_pin = np.array([p.t_us for p in changes])
    lag = e["t_us"] - t_pin
    # a constant clock offset plus the pin-change ISR's latency (a few µs; more
    # when another interrupt is running: up to 14 µs seen on this rig)
    assert np.all(np.abs(lag - np.median(lag)) <= 50)

    # between edges, power is the waveform's for that state (INA226 averages: skip
    # samples within 2 ms of an edge)
    t = np.asarray(trace.t_us)
    near = np.zeros(t.size, dtype=bool)
    for te in e["t_us"]:
        near |= np.abs(t - te) < 2_000
    state = np.asarray(trace.markers)[~near]
    want = WAVE.power_w(0, state)
    assert np.allclose(np.asarray(trace.power_w)[~near], want, rtol=0.01, atol=0.01)


def test_rig_logger_answers_after_a_burst_of_garbage(rig: Rig) -> None:
    """Noise on the line before IDENTIFY: the firmware resyncs on A5 5A, so the
    collector's handshake still succeeds."""
    with Collector(rig.port, timeout_s=10) as col:
        col.connect()
        col.serial.write(b"\xa5\x5a\xff\x10" + bytes(range(40)))
        time.sleep(0.05)
        info = col.identify()
        assert info.front_end == P.FrontEnd.INA226
