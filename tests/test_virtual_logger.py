"""The virtual logger over a real pty, driven by plain pyserial and the decoder:
commands, sample schedule, marker bits and edges, the waveform, tx-buffer drops,
and each injected fault as the host sees it."""

from __future__ import annotations

import struct
import time

import numpy as np
import pytest
import serial

from profiler.power import protocol as P
from profiler.sim.virtual_logger import VirtualLogger

DEADLINE_S = 10.0  # generous: only guards against a hang, never asserted on


class RawHost:
    """The host side with nothing but pyserial and the stream decoder."""

    def __init__(self, port: str) -> None:
        self.ser = serial.serial_for_url(port, baudrate=P.BAUDRATE, timeout=0.01)
        self.dec = P.StreamDecoder()
        self.samples: list[np.ndarray] = []
        self.edges: list[np.ndarray] = []
        self.gaps: list[np.ndarray] = []
        self.messages: list[P.Message] = []

    def pump(self) -> list[P.Message]:
        out = self.dec.feed(self.ser.read(65536))
        self.samples.append(out.samples)
        self.edges.append(out.edges)
        self.gaps.append(out.gaps)
        self.messages += out.messages
        return out.messages

    def command(self, data: bytes, cmd: int) -> P.Ack:
        self.ser.write(data)
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            for m in self.pump():
                if isinstance(m, P.Ack) and m.cmd == cmd:
                    return m
        raise AssertionError(f"no ACK for {cmd:#x}")

    def run_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.pump()

    def all(self, name: str) -> np.ndarray:
        return np.concatenate(getattr(self, name))

    def close(self) -> None:
        self.ser.close()


@pytest.fixture
def host_and_logger(request):
    kwargs = getattr(request, "param", {})
    vl = VirtualLogger(**{"power_w": lambda t, m: 1.0 + 0.5 * (m & 1), "rate_hz": 8000, **kwargs}).start()
    host = RawHost(vl.port)
    yield host, vl
    host.close()
    vl.close()
    assert vl.error is None


def test_identify_returns_ident_then_ack(host_and_logger) -> None:
    host, vl = host_and_logger
    ack = host.command(P.encode_command(P.Command.IDENTIFY), P.Command.IDENTIFY)
    assert ack.status == P.AckStatus.OK
    idents = [m for m in host.messages if isinstance(m, P.Ident)]
    assert idents[-1].info == P.LoggerInfo(
        protocol=1, front_end=3, marker_count=4, flags=0b10, rate_hz=8000, shunt_uohm=10_000,
        current_lsb_na=100_000, bus_lsb_uv=1250, bus_nominal_mv=5000, fw_version="virt-1.0",
    )
    assert host.messages.index(idents[-1]) < host.messages.index(ack)


def test_commands_refused_with_the_documented_status(host_and_logger) -> None:
    host, vl = host_and_logger
    assert host.command(P.encode_set_rate(0), P.Command.SET_RATE).status == P.AckStatus.BAD_ARGUMENT
    assert host.command(P.encode_command(0x99), 0x99).status == P.AckStatus.UNKNOWN_COMMAND
    bad = bytearray(P.encode_command(P.Command.START))
    bad[-1] ^= 0x55
    assert host.command(bytes(bad), 0).status == P.AckStatus.BAD_CRC
    host.command(P.encode_command(P.Command.START), P.Command.START)
    assert host.command(P.encode_set_rate(1000), P.Command.SET_RATE).status == P.AckStatus.BUSY
    assert host.command(P.encode_set_cal(1, 1), P.Command.SET_CAL).status == P.AckStatus.BUSY
    host.command(P.encode_command(P.Command.STOP), P.Command.STOP)
    assert host.command(P.encode_set_rate(2000), P.Command.SET_RATE).status == P.AckStatus.OK
    assert vl.rate_hz == 2000


def test_stream_schedule_markers_power_and_counters(host_and_logger) -> None:
    """Samples sit on an exact 125 µs grid; each sample's marker bits equal the
    level of the last edge before it; power follows power_w(t, markers); and
    STATUS after STOP counts exactly what arrived."""
    host, vl = host_and_logger
    host.command(P.encode_command(P.Command.START), P.Command.START)
    for i in range(12):
        host.run_for(0.01)
        vl.set_markers((i + 1) % 4)  # both lines move
    host.run_for(0.01)
    host.command(P.encode_command(P.Command.STOP), P.Command.STOP)
    s, e = host.all("samples"), host.all("edges")
    status = [m for m in host.messages if isinstance(m, P.Status)][-1]

    assert np.all(np.diff(s["t_us"]) == 125)
    assert status.samples_total == s.size and status.samples_dropped == 0
    assert status.edges_total == e.size == 12
    assert host.dec.counters.lost_frames == host.dec.counters.corrupt_frames == 0
    assert e["markers"].tolist() == [(i + 1) % 4 for i in range(12)]
    assert e["changed"].tolist() == [((i + 1) % 4) ^ (i % 4) for i in range(12)]
    # marker bits of every sample = level after the last edge at or before it
    k = np.searchsorted(e["t_us"], s["t_us"], side="right") - 1
    want = np.where(k >= 0, e["markers"][np.maximum(k, 0)], 0)
    assert np.array_equal(s["markers"], want)
    # power: raw current * 100 µA * 5 V, quantised to 0.5 mW
    info = vl.info()
    p = info.power_w(s["current"], s["bus"])
    assert np.allclose(p, 1.0 + 0.5 * (s["markers"] & 1), atol=0.5e-3)
    assert np.all(s["bus"] == 4000)


def test_stop_flushes_a_partial_frame(host_and_logger) -> None:
    host, vl = host_and_logger
    host.command(P.encode_command(P.Command.START), P.Command.START)
    host.run_for(0.02)
    host.command(P.encode_command(P.Command.STOP), P.Command.STOP)
    status = [m for m in host.messages if isinstance(m, P.Status)][-1]
    assert host.all("samples").size == status.samples_total  # none held back in a partial frame


@pytest.mark.parametrize("host_and_logger", [{"start_us": (1 << 32) - 400_000, "rate_hz": 4000}],
                         indirect=True)
def test_device_clock_wraps_and_host_unwraps(host_and_logger) -> None:
    host, vl = host_and_logger
    host.command(P.encode_command(P.Command.START), P.Command.START)
    deadline = time.monotonic() + DEADLINE_S
    while vl.device_us() < (1 << 32) + 20_000:  # until well past the u32 wrap
        assert time.monotonic() < deadline
        host.run_for(0.02)
    host.command(P.encode_command(P.Command.STOP), P.Command.STOP)
    t = host.all("samples")["t_us"]
    assert t[0] < (1 << 32) < t[-1]
    assert np.all(np.diff(t) == 250)


def test_set_cal_changes_counts_not_watts(host_and_logger) -> None:
    host, vl = host_and_logger
    assert host.command(P.encode_set_cal(20_000, 50_000), P.Command.SET_CAL).status == 0
    host.command(P.encode_command(P.Command.IDENTIFY), P.Command.IDENTIFY)
    info = [m for m in host.messages if isinstance(m, P.Ident)][-1].info
    assert (info.shunt_uohm, info.current_lsb_na) == (20_000, 50_000)
    host.command(P.encode_command(P.Command.START), P.Command.START)
    host.run_for(0.02)
    host.command(P.encode_command(P.Command.STOP), P.Command.STOP)
    s = host.all("samples")
    assert np.all(s["current"] == 4000)  # 1.0 W / 5 V / 50 µA
    assert np.allclose(info.power_w(s["current"], s["bus"]), 1.0)


@pytest.mark.parametrize("host_and_logger", [{"tx_buffer_bytes": 2048, "rate_hz": 40_000}],
                         indirect=True)
def test_full_transmit_buffer_drops_samples_and_says_so(host_and_logger) -> None:
    """A host that stops reading: the logger drops whole frames (no seq used, so
    no 'lost' frames) and STATUS reports samples_total = sent + dropped."""
    host, vl = host_and_logger
    host.command(P.encode_command(P.Command.START), P.Command.START)
    time.sleep(0.3)  # not reading: the pty and the 2 KiB tx buffer fill up
    host.command(P.encode_command(P.Command.STOP), P.Command.STOP)
    status = [m for m in host.messages if isinstance(m, P.Status)][-1]
    got = host.all("samples").size
    assert status.samples_dropped > 0
    assert got + status.samples_dropped == status.samples_total
    assert host.dec.counters.lost_frames == 0


@pytest.mark.parametrize("host_and_logger", [{"tx_buffer_bytes": 1024}], indirect=True)
def test_a_stall_of_the_whole_process_drops_nothing_the_serial_buffer_holds(host_and_logger) -> None:
    """The host process holds the GIL for tens of ms (a full garbage collection does):
    the host reads nothing and the logger's thread does not run. The firmware, on its own
    chip, would have sent on into the host's serial buffer (here the pty's, ~8-14 KiB)
    meanwhile; the burst the thread makes up on waking fills that buffer first, so only
    a stall longer than both buffers hold drops samples (at 8 kHz 1 KiB lasts 12 ms)."""
    host, vl = host_and_logger
    host.command(P.encode_command(P.Command.START), P.Command.START)
    host.run_for(0.05)  # streaming, the pty drained
    t0 = time.perf_counter()
    sum(range(2_000_000))  # one C call: the GIL is not handed over until it returns
    held_s = time.perf_counter() - t0
    host.run_for(0.05)
    host.command(P.encode_command(P.Command.STOP), P.Command.STOP)
    status = [m for m in host.messages if isinstance(m, P.Status)][-1]
    assert held_s > 0.015  # longer than the tx buffer alone holds
    assert status.samples_dropped == 0
    assert host.all("samples").size == status.samples_total


# ----------------------------------------------------------------------------- faults


def test_fault_corrupt_frame_is_rejected_and_counted(host_and_logger) -> None:
    host, vl = host_and_logger
    host.command(P.encode_command(P.Command.START), P.Command.START)
    host.run_for(0.02)
    vl.corrupt_frames(1)
    host.run_for(0.02)
    host.command(P.encode_command(P.Command.STOP), P.Command.STOP)
    c = host.dec.counters
    status = [m for m in host.messages if isinstance(m, P.Status)][-1]
    assert (c.corrupt_frames, c.lost_frames) == (1, 1)
    assert host.all("samples").size == status.samples_total - 4  # one frame of 4 samples
    gap = host.all("gaps")
    assert gap["missing"].tolist() == [1]
    assert gap["t_after_us"][0] - gap["t_before_us"][0] == 2 * 4 * 125  # frame before -> after


def test_fault_dropped_frames_show_as_a_seq_gap(host_and_logger) -> None:
    host, vl = host_and_logger
    host.command(P.encode_command(P.Command.START), P.Command.START)
    host.run_for(0.02)
    vl.drop_frames(3)
    host.run_for(0.02)
    host.command(P.encode_command(P.Command.STOP), P.Command.STOP)
    c = host.dec.counters
    assert (c.corrupt_frames, c.lost_frames) == (0, 3)
    s = host.all("samples")
    assert np.count_nonzero(np.diff(s["t_us"]) != 125) == 1
    assert np.max(np.diff(s["t_us"])) == 13 * 125  # 12 samples missing


def test_fault_spurious_edge_reports_a_level_the_host_never_set(host_and_logger) -> None:
    host, vl = host_and_logger
    host.command(P.encode_command(P.Command.START), P.Command.START)
    vl.set_markers(1)
    host.run_for(0.01)
    vl.spurious_edge(0b10)
    host.run_for(0.01)
    vl.set_markers(0)
    host.command(P.encode_command(P.Command.STOP), P.Command.STOP)
    e = host.all("edges")
    assert e[["markers", "changed"]].tolist() == [(1, 1), (0b11, 0b10), (0, 1)]
    assert np.all(host.all("samples")["markers"] & 0b10 == 0)  # the lines never moved


def test_fault_closed_port_raises_on_the_host(host_and_logger) -> None:
    host, vl = host_and_logger
    host.command(P.encode_command(P.Command.START), P.Command.START)
    host.run_for(0.02)
    vl.close_port()
    with pytest.raises(serial.SerialException):
        host.run_for(1.0)
    assert host.all("samples").size > 0


@pytest.mark.parametrize("host_and_logger", [{"answer_commands": False}], indirect=True)
def test_fault_logger_that_never_answers(host_and_logger) -> None:
    host, vl = host_and_logger
    host.ser.write(P.encode_command(P.Command.IDENTIFY) + P.encode_command(P.Command.START))
    host.run_for(0.2)
    assert vl.counters.commands == 2
    # at most the IDENT it sends once at boot; no ACK, no stream
    assert all(isinstance(m, P.Ident) for m in host.messages)
    assert host.all("samples").size == 0


def test_set_rate_payload_is_little_endian_u32() -> None:
    assert P.encode_set_rate(3000)[4:8] == struct.pack("<I", 3000)
