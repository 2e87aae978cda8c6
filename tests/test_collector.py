"""The collector over real pyserial ports: a pty served by the virtual logger,
and loop:// (where the test writes the device's bytes itself). Ground truth is
what the test generated or what the logger's STATUS counted, never the
collector's own view. Faults: corrupt bytes, dropped frames, a spurious edge,
the port vanishing mid-run, a logger that goes silent, one that never answers.

A real logger (or the simavr rig's pty) can be tested by setting
COUPPROF_TEST_PORT (see test_real_port_captures_without_loss)."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from profiler.errors import LoggerTimeoutError, PortLostError
from profiler.power import protocol as P
from profiler.power.clockmap import fit_clock_map
from profiler.power.collector import Collector
from profiler.power.trace import DeviceTrace
from profiler.sim.virtual_logger import VirtualLogger


def power_fn(t_s: np.ndarray, markers: np.ndarray) -> np.ndarray:
    return 1.5 + 0.75 * (markers & 1) + 0.25 * ((markers >> 1) & 1) + 0.05 * np.sin(40.0 * t_s)


@pytest.fixture
def vlogger(request):
    kwargs = getattr(request, "param", {})
    vl = VirtualLogger(**{"power_w": power_fn, "rate_hz": 8000, **kwargs}).start()
    yield vl
    vl.close()
    assert vl.error is None


class Toggler:
    """Moves marker lines from a thread while a capture runs; keeps host times."""

    def __init__(self, vl: VirtualLogger, period_s: float = 0.02, count: int = 10) -> None:
        self.vl, self.period_s, self.count = vl, period_s, count
        self.host_ns: list[int] = []
        self.levels: list[int] = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        for i in range(self.count):
            time.sleep(self.period_s)
            lv = (i + 1) % 4
            t0 = time.perf_counter_ns()
            self.vl.set_markers(lv)
            t1 = time.perf_counter_ns()
            self.host_ns.append((t0 + t1) // 2)
            self.levels.append(lv)


# ----------------------------------------------------------------------------- pty + virtual logger


def test_record_streams_to_disk_and_loads_back(vlogger: VirtualLogger, tmp_path: Path) -> None:
    out = tmp_path / "trace"
    sizes: list[int] = []

    def progress(elapsed_s: float, counters) -> None:
        f = out / "samples.bin"
        sizes.append(f.stat().st_size if f.exists() else 0)
        if elapsed_s >= 0.3:
            tog.thread.join()  # all edges made before STOP

    tog = Toggler(vlogger)
    with Collector(vlogger.port, out_dir=out) as col:
        info = col.open()
        assert info == vlogger.info()
        tog.thread.start()
        trace = col.record(0.4, progress=progress)
    tog.thread.join()

    c = trace.counters
    # samples went to disk while recording, not only at the end
    assert max(sizes[:-1]) > 0
    assert isinstance(trace.samples, np.memmap)
    assert trace.samples.size == c.device_samples_total == c.samples
    assert (c.lost_frames, c.corrupt_frames, c.device_samples_dropped) == (0, 0, 0)
    assert np.all(np.diff(trace.t_us) == 125)
    assert trace.rate_hz == pytest.approx(8000)
    assert np.allclose(trace.power_w, power_fn(trace.t_us * 1e-6, trace.markers), atol=0.5e-3)
    assert trace.edges["markers"].tolist() == tog.levels == [(i + 1) % 4 for i in range(10)]
    assert c.device_edges_total == 10
    # a second load from disk is the same trace
    again = DeviceTrace.load(out)
    assert np.array_equal(again.samples, trace.samples)
    assert np.array_equal(again.edges, trace.edges)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["complete"] is True and meta["error"] is None
    assert meta["counters"]["samples"] == trace.samples.size
    # the edges map the logger clock onto the host's
    # (10 ms tolerance: a thread switch inside set_markers moves a host stamp by ms on a
    # busy machine; same-level changes are 80 ms apart)
    fit = fit_clock_map(trace.edges["t_us"], tog.host_ns, device_levels=trace.edges["markers"],
                        host_levels=tog.levels, tol_ns=10_000_000)
    truth = vlogger.true_clock()
    assert fit.clock.matched == 10
    # 10 edges over 0.2 s with thread-switch jitter on the host stamps: within 1 ms
    mid = trace.t_us[trace.t_us.size // 2]
    assert abs(fit.clock.to_host_ns(mid) - truth.to_host_ns(mid)) < 1_000_000


@pytest.mark.parametrize("vlogger", [{"status_interval_s": 0.01}], indirect=True)
def test_status_frames_do_not_pile_up_during_a_long_capture(vlogger: VirtualLogger) -> None:
    # STATUS arrives once a second for as long as a capture runs; nothing reads the
    # command-reply queue until the next command, so only ACKs may go there.
    queued: list[int] = []

    def progress(elapsed_s: float, counters) -> None:
        if elapsed_s >= 0.4 and not queued:
            queued.append(col._messages.qsize())

    with Collector(vlogger.port) as col:
        col.open()
        trace = col.record(0.5, progress=progress, tick_s=0.05)
    assert trace.counters.status_frames >= 20  # they were decoded and counted
    assert queued == [0]


def test_set_rate_and_calibration_through_the_collector(vlogger: VirtualLogger) -> None:
    with Collector(vlogger.port) as col:
        col.open()
        assert col.set_rate(2000).rate_hz == 2000
        info = col.set_calibration(5_000, 25_000)
        assert (info.shunt_uohm, info.current_lsb_na) == (5_000, 25_000)
        trace = col.record(0.1)
    assert np.all(np.diff(trace.t_us) == 500)
    # raw counts follow the new LSB, watts do not change
    assert np.allclose(trace.power_w, power_fn(trace.t_us * 1e-6, trace.markers), atol=0.15e-3)
    assert trace.samples["current"][0] == round(power_fn(trace.t_us[:1] * 1e-6, trace.markers[:1])[0] / 5 / 25e-6)


def test_faults_corrupt_and_dropped_frames_are_counted_with_their_windows(
    vlogger: VirtualLogger, tmp_path: Path
) -> None:
    done: set[str] = set()

    def progress(elapsed_s: float, counters) -> None:
        if elapsed_s >= 0.1 and "corrupt" not in done:
            done.add("corrupt")
            vlogger.corrupt_frames(1)
        if elapsed_s >= 0.2 and "drop" not in done:
            done.add("drop")
            vlogger.drop_frames(2)

    with Collector(vlogger.port, out_dir=tmp_path / "t") as col:
        col.open()
        trace = col.record(0.4, progress=progress, tick_s=0.05)
    c = trace.counters
    assert vlogger.counters.frames_corrupted == 1 and vlogger.counters.frames_dropped == 2
    assert c.corrupt_frames == 1
    assert c.lost_frames == 3
    assert trace.samples.size == c.device_samples_total - 3 * 4
    assert trace.gaps["missing"].tolist() == [1, 2]
    # every missing sample time lies inside a reported gap window, none outside
    t = np.asarray(trace.t_us)
    grid = np.arange(t[0], t[-1] + 1, 125)
    missing = np.setdiff1d(grid, t)
    assert missing.size == 12
    inside = np.zeros(missing.size, dtype=bool)
    for g in trace.gaps:
        inside |= (missing > g["t_before_us"]) & (missing < g["t_after_us"])
        assert trace.lost_in(int(g["t_before_us"]), int(g["t_after_us"])) == g["missing"]
    assert inside.all()
    assert trace.lost_in(int(t[0]), int(t[0]) + 1000) == 0


def test_fault_spurious_edge_is_kept_and_left_unmatched(vlogger: VirtualLogger) -> None:
    tog = Toggler(vlogger, count=8)

    done: list[int] = []

    def progress(elapsed_s: float, counters) -> None:
        if elapsed_s >= 0.1 and not done:
            done.append(1)
            vlogger.spurious_edge(0b100)
        if elapsed_s >= 0.25:
            tog.thread.join()

    with Collector(vlogger.port) as col:
        col.open()
        tog.thread.start()
        trace = col.record(0.3, progress=progress, tick_s=0.03)
    tog.thread.join()
    e = trace.edges
    assert e.size == 9 and trace.counters.device_edges_total == 9
    glitch = np.flatnonzero(e["changed"] == 0b100)
    assert glitch.size == 1
    # Matched on marker levels, as the Arduino source does: the glitch's level (bit 2)
    # is one the host never set. The host stamps are the midpoints of set_markers calls,
    # which a busy machine can stretch by a thread switch (ms), so the tolerance is 10 ms:
    # same-level host changes are 80 ms apart here.
    fit = fit_clock_map(e["t_us"], tog.host_ns, device_levels=e["markers"],
                        host_levels=tog.levels, tol_ns=10_000_000)
    assert fit.spurious_device.tolist() == glitch.tolist()
    assert fit.missed_host.size == 0
    assert fit.clock.matched == 8


@pytest.mark.parametrize("with_dir", [True, False])
def test_fault_port_vanishing_keeps_what_was_measured(
    vlogger: VirtualLogger, tmp_path: Path, with_dir: bool
) -> None:
    out = tmp_path / "t" if with_dir else None
    pulled = []

    def progress(elapsed_s: float, counters) -> None:
        if elapsed_s >= 0.2 and not pulled:
            pulled.append(counters.samples)
            vlogger.close_port()

    with Collector(vlogger.port, out_dir=out) as col:
        col.open()
        with pytest.raises(PortLostError) as ei:
            col.record(5.0, progress=progress, tick_s=0.05)
    err = ei.value
    assert err.exit_code == 4
    assert vlogger.port in str(err) and "vanished" in str(err)
    trace = err.trace
    assert trace.error == str(err)
    assert trace.samples.size >= pulled[0] > 0
    assert np.all(np.diff(trace.t_us) == 125)  # everything up to the cut, nothing lost
    assert trace.counters.lost_frames == 0
    if with_dir:
        meta = json.loads((out / "meta.json").read_text())
        assert "vanished" in meta["error"] and meta["complete"] is True
        assert np.array_equal(DeviceTrace.load(out).samples, trace.samples)


def test_fault_logger_going_silent_mid_run(vlogger: VirtualLogger) -> None:
    frozen = []

    def progress(elapsed_s: float, counters) -> None:
        if elapsed_s >= 0.15 and not frozen:
            frozen.append(1)
            vlogger.freeze()

    with Collector(vlogger.port, silence_s=0.3, timeout_s=0.5) as col:
        col.open()
        with pytest.raises(LoggerTimeoutError, match="went silent") as ei:
            col.record(10.0, progress=progress, tick_s=0.05)
    assert ei.value.trace.samples.size > 0
    assert ei.value.exit_code == 4


@pytest.mark.parametrize("vlogger", [{"answer_commands": False}], indirect=True)
def test_fault_logger_that_never_answers_pty(vlogger: VirtualLogger) -> None:
    with Collector(vlogger.port, timeout_s=0.4) as col, pytest.raises(LoggerTimeoutError) as ei:
        col.open()
    msg = str(ei.value)
    assert f"logger on {vlogger.port} did not answer IDENTIFY within 0.4 s" in msg
    assert "--port" in msg and ei.value.exit_code == 4
    assert vlogger.counters.commands >= 2  # IDENTIFY was re-sent while waiting


def test_open_stops_a_logger_left_streaming(vlogger: VirtualLogger) -> None:
    col = Collector(vlogger.port)
    col.open()
    col.start()
    col._stop.set()  # a crashed session: the logger keeps streaming
    col._thread.join()
    col.serial.close()
    with Collector(vlogger.port) as again:
        info = again.open()
        assert not info.streaming and not vlogger.streaming
        trace = again.record(0.05)
    assert trace.counters.lost_frames == 0 and trace.samples.size > 0


# ----------------------------------------------------------------------------- loop://


def _device_stream(n_frames: int, corrupt_at: int, drop_at: int, seq0: int = 65530):
    """A recorded logger session: IDENT, ACK(START), SAMPLES (one corrupted, one dropped),
    an EDGE and STATUS; returns the bytes and the samples a host must decode."""
    rng = np.random.default_rng(7)
    info = P.LoggerInfo(1, 1, 2, 0b11, 4000, 2000, 25_000, 1250, 5000, "1.0.0")
    n = n_frames * 4
    t = (1 << 32) - 10_000 + np.arange(n, dtype=np.int64) * 250
    cur = rng.integers(-2000, 30000, n)
    bus = rng.integers(3800, 4200, n)
    mk = rng.integers(0, 4, n)
    blob, offs = P.encode_sample_frames(seq0 + 2, t, cur, bus, mk)
    flen = 41
    frames = [blob[o : o + flen] for o in offs.tolist()]
    keep = np.ones(n, dtype=bool)
    bad = bytearray(frames[corrupt_at])
    bad[20] ^= 0x40
    frames[corrupt_at] = bytes(bad)
    keep[corrupt_at * 4 : corrupt_at * 4 + 4] = False
    frames[drop_at] = b""
    keep[drop_at * 4 : drop_at * 4 + 4] = False
    seq_end = seq0 + 2 + n_frames
    stream = (
        P.encode_ident(seq0, int(t[0]) - 300, info)
        + P.encode_ack(seq0 + 1, int(t[0]) - 200, P.Command.START, 0)
        + b"".join(frames)
        + P.encode_edge(seq_end, int(t[-1]) + 10, 1, 1)
        + P.encode_status(seq_end + 1, int(t[-1]) + 20, n, 0, 1)
    )
    truth = np.zeros(int(keep.sum()), P.SAMPLE_DTYPE)
    truth["t_us"], truth["current"], truth["bus"], truth["markers"] = (
        t[keep], cur[keep], bus[keep], mk[keep]
    )
    return stream, truth, info


def test_loop_passive_capture_decodes_a_written_stream(tmp_path: Path) -> None:
    stream, truth, info = _device_stream(500, corrupt_at=100, drop_at=300)
    with Collector("loop://", out_dir=tmp_path / "t") as col:
        col.connect()
        col.start(send=False)
        for i in range(0, len(stream), 997):  # frames split across writes
            col.serial.write(stream[i : i + 997])
        trace = col.stop(send=False)
    assert trace.info == dataclasses.replace(info, flags=0b10)  # no longer streaming
    assert np.array_equal(np.asarray(trace.samples), truth)
    c = trace.counters
    assert (c.corrupt_frames, c.lost_frames, c.edges) == (1, 2, 1)
    assert c.device_samples_total == 2000 and c.status_frames == 1
    assert trace.t_us[-1] > 1 << 32  # unwrapped across the u32 wrap
    assert np.allclose(trace.power_w, truth["current"] * 25e-6 * truth["bus"] * 1.25e-3)


def test_loop_logger_that_never_answers() -> None:
    """loop:// echoes our IDENTIFY back: bytes arrive, but never an answer."""
    with Collector("loop://", timeout_s=0.3) as col, pytest.raises(LoggerTimeoutError) as ei:
        col.open()
    assert "logger on loop:// did not answer IDENTIFY within 0.3 s" in str(ei.value)
    assert "0 valid frames" in str(ei.value)


def test_loop_port_closed_under_the_reader_keeps_the_trace() -> None:
    stream, truth, _ = _device_stream(50, corrupt_at=10, drop_at=20)
    col = Collector("loop://")
    col.connect()
    col.start(send=False)
    col.serial.write(stream)
    deadline = time.monotonic() + 10
    while col.counters.bytes_in < len(stream):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    col.serial.close()  # the port goes away under the reader thread
    with pytest.raises(PortLostError, match="loop:// vanished"):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            col.poll()
            time.sleep(0.01)
    with pytest.raises(PortLostError) as ei:
        col.stop()
    assert np.array_equal(np.asarray(ei.value.trace.samples), truth)
    assert ei.value.trace.counters.lost_frames == 2
    col.close()


# ----------------------------------------------------------------------------- a real port


@pytest.mark.skipif("COUPPROF_TEST_PORT" not in os.environ, reason="set COUPPROF_TEST_PORT")
def test_real_port_captures_without_loss() -> None:
    """A real logger: an Arduino Uno/Nano running firmware/coupprof_logger on USB
    (COUPPROF_TEST_PORT=/dev/ttyACM0), or the simavr rig's pty. No wiring needed
    beyond USB; marker inputs may float low."""
    port = os.environ["COUPPROF_TEST_PORT"]
    with Collector(port) as col:
        info = col.open()
        trace = col.record(2.0)
    c = trace.counters
    assert c.lost_frames == 0 and c.corrupt_frames == 0
    assert c.samples == c.device_samples_total - c.device_samples_dropped
    assert trace.rate_hz == pytest.approx(info.rate_hz, rel=0.02)
