"""The rig itself, exercised by its self-test AVR program (firmware/sim/testprog).

Each check compares what the simulated AVR saw (through its UART, TWI, ADC and
pin-change hardware) with values computed here independently: datasheet timing,
the INA226's register arithmetic, numpy integrals of the waveform.
"""

from __future__ import annotations

import re
import subprocess
import time

import numpy as np
import pytest
import serial
from conftest import LineReader, hexline, need, text_lines, window_mean

from profiler.errors import BadInputError, HardwareError
from profiler.power.rig import RIG_BINARY, TESTPROG_ELF, Rig, Waveform, run_fast

pytestmark = pytest.mark.rig

F_CPU = 16_000_000
SHUNT_OHM = 0.1  # the rig's default, as the firmware assumes


@pytest.fixture(autouse=True)
def _built() -> None:
    need(TESTPROG_ELF)


def test_uart_transmits_back_to_back_at_2mbaud(tmp_path):
    """2000 bytes written as fast as UDRE allows take 2000 x 10 bits at 2 Mbaud:
    the rig double-buffers UDR like the chip (simavr alone sends 11-bit frames
    with a gap after each)."""
    run = run_fast(TESTPROG_ELF, 0.05, [f"5000 send {hexline('B 2000')}"], workdir=tmp_path)
    found = re.search(rb"B 2000 (\d+)\n", run.uart)  # follows the binary blast
    assert found
    ticks = int(found.group(1))  # Timer1 at 2 MHz, first UDR write to TXC
    assert 20_000 <= ticks <= 20_010
    start = run.uart.index(b"\x00\x01\x02\x03")
    assert run.uart[start:start + 2000] == bytes(i & 0xFF for i in range(2000))


def test_pty_carries_every_byte_both_ways():
    """Over the pty (paced mode, pyserial): an echo, then 20,000 bytes with none lost."""
    with Rig(TESTPROG_ELF) as rig:
        port = serial.Serial(rig.port, timeout=0.2)
        rd = LineReader(port)
        while rig.time_us() < 2000:  # let it boot: bytes sent before RXEN0 are lost
            time.sleep(0.002)
        port.write(b"E over the pty\n")
        assert rd.until("E over") == "E over the pty"
        port.write(b"B 20000\n")
        data = b""
        deadline = time.monotonic() + 10
        while len(data) < 20_000 and time.monotonic() < deadline:
            data += port.read(max(1, port.in_waiting))
        rd.buf = data[20_000:]
        assert data[:20_000] == bytes(i & 0xFF for i in range(20_000))
        _, n, ticks = rd.until("B").split()
        assert n == "20000" and 200_000 <= int(ticks) <= 200_010  # 5 us a byte
        port.close()
    assert rig.returncode == 0


def test_ina226_registers_over_twi(tmp_path):
    """Identity, defaults, read-back and reset, read by the AVR over I2C at 400 kHz."""
    cmds = ["R fe", "R ff", "R 00", "W 05 1234", "R 05", "W 07 beef", "R 07",
            "W 00 8000", "R 00", "R 05", "R 40"]
    script = [f"{5000 + 2000 * k} send {hexline(c)}" for k, c in enumerate(cmds)]
    run = run_fast(TESTPROG_ELF, 0.03, script, workdir=tmp_path)
    reads = [ln[2] for ln in text_lines(run.uart, b"R ")]
    assert reads == ["5449", "2260", "4127", "1234", "beef", "4127", "0000", "0000"]
    assert [ln[1:] for ln in text_lines(run.uart, b"W ")] == [
        ["05", "1234"], ["07", "beef"], ["00", "8000"]]


def test_ina226_current_and_power_registers(tmp_path):
    """Current = shunt * CAL / 2048 and power = current * bus / 20000 (datasheet 7.5),
    after the next conversion; 0.5 A through 0.1 ohm at 5 V: shunt 20000, bus 4000."""
    cmds = ["W 05 0400", "C 1", "R 04", "R 03", "W 05 0200", "C 1", "R 04", "R 03"]
    script = [f"{5000 + 4000 * k} send {hexline(c)}" for k, c in enumerate(cmds)]
    run = run_fast(TESTPROG_ELF, 0.04, script, waveform=Waveform.constant(0.5, 5.0),
                   workdir=tmp_path)
    reads = [int(ln[2], 16) for ln in text_lines(run.uart, b"R ")]
    for cal, (current, power) in zip((0x400, 0x200), (reads[0:2], reads[2:4]), strict=True):
        assert current == 20_000 * cal // 2048
        assert power == current * 4000 // 20_000


def test_ina226_triggered_mode_converts_once(tmp_path):
    """Mode 3 (shunt and bus, triggered): one conversion set (140 + 140 us) per write
    of the configuration register, then idle."""
    config = 0x4000 | 3  # AVG 1, both CT 140 us, shunt+bus triggered
    cmds = [(5000, f"W 00 {config:04x}"), (15000, f"W 00 {config:04x}")]
    run = run_fast(TESTPROG_ELF, 0.03, [f"{t} send {hexline(c)}" for t, c in cmds],
                   waveform=Waveform.constant(0.2), workdir=tmp_path, log_sensor=True)
    t = run.truth.ina["t_us"]
    after = t[t > 5000]
    assert len(after) == 2
    # each lands 280 us after its write reached the part (the write takes ~100 us)
    assert 5000 + 280 < after[0] < 5000 + 280 + 300
    assert 15000 + 280 < after[1] < 15000 + 280 + 300
    assert list(run.truth.ina["shunt"][t > 5000]) == [8000, 8000]


def test_receiver_overrun_is_reported(tmp_path):
    """Bytes arriving while the AVR has interrupts off would overrun the chip's 2-byte
    receive buffer; the rig says so (simavr's own FIFO would hide it). Bytes read
    in time raise nothing."""
    ok = run_fast(TESTPROG_ELF, 0.02, [f"5000 send {hexline('E fine')}"], workdir=tmp_path / "a")
    assert not ok.truth.notes and b"E fine\n" in ok.uart
    script = [f"5000 send {hexline('X 2000')}", f"5500 send {hexline('E late')}"]
    late = run_fast(TESTPROG_ELF, 0.02, script, workdir=tmp_path / "b")
    assert any("data overrun" in n for n in late.truth.notes)
    assert "rx_would_overrun 5" in late.stderr  # of 7 bytes the chip keeps the first 2


def test_twi_takes_the_time_scl_gives(tmp_path):
    """A register read is S, SLA+W, ptr, Sr, SLA+R, 2 bytes = 47 SCL periods:
    117.5 us at 400 kHz plus the AVR's own code (simavr alone: 1 us per bit)."""
    run = run_fast(TESTPROG_ELF, 0.02, [f"5000 send {hexline('R fe')}"], workdir=tmp_path)
    (line,) = text_lines(run.uart, b"R fe")
    assert 117 <= int(line[3]) <= 150


def test_ina226_conversions_average_the_waveform(tmp_path):
    """Continuous shunt+bus mode, AVG 4, VSHCT 588 us, VBUSCT 332 us: registers update
    every 4 x 920 us with the mean current over the four shunt windows and the mean
    bus voltage over the four bus windows, quantised to 2.5 uV / 1.25 mV."""
    wave = Waveform(points=((0, 0.10, 5.0), (5000, 0.70, 4.80), (10000, 0.10, 5.0)),
                    period_us=10_000)
    config = 0x4000 | (1 << 9) | (2 << 6) | (3 << 3) | 7
    run = run_fast(TESTPROG_ELF, 0.08, [f"5000 send {hexline(f'W 00 {config:04x}')}"],
                   waveform=wave, workdir=tmp_path, log_sensor=True)
    ina = run.truth.ina
    t = ina["t_us"]
    after = t > 8000  # well after the config write restarted the sequence
    t, shunt, bus = t[after], ina["shunt"][after], ina["bus"][after]
    assert len(t) >= 15
    np.testing.assert_allclose(np.diff(t), 4 * (588 + 332), atol=1e-6)
    for t_end, sh, bv in zip(t, shunt, bus, strict=True):
        starts = [t_end - (4 - k) * 920 for k in range(4)]
        i_mean = np.mean([window_mean(wave, s, s + 588)[0] for s in starts])
        v_mean = np.mean([window_mean(wave, s + 588, s + 920)[1] for s in starts])
        assert abs(sh - i_mean * SHUNT_OHM / 2.5e-6) <= 1.0
        assert abs(bv - v_mean / 1.25e-3) <= 1.0


def test_conversion_ready_flag_paces_reads(tmp_path):
    """Default config (1.1 ms + 1.1 ms): CVRF rises every 2.2 ms; the AVR polling
    Mask/Enable over TWI sees it with one poll (~135 us) of jitter, and reads the
    shunt and bus registers of a constant 0.5 A at 5 V."""
    run = run_fast(TESTPROG_ELF, 0.04, [f"5000 send {hexline('C 8')}"],
                   waveform=Waveform.constant(0.5, 5.0), workdir=tmp_path)
    rows = text_lines(run.uart, b"C ")
    assert len(rows) == 8
    t = np.array([int(r[1]) for r in rows[1:]])  # the first may find CVRF already set
    assert np.all(np.abs(np.diff(t) - 2200) <= 150)
    assert all(int(r[2]) == 20_000 and int(r[3]) == 4000 for r in rows)


def test_a0_amplifier_drives_the_adc(tmp_path):
    """Free-running ADC at F_CPU/128: a conversion every 13 ADC clocks = 104 us; each
    code is round(I * R * gain / 5 V * 1024) at the sample-and-hold instant, and the
    AVR reads exactly the codes the rig logged."""
    wave = Waveform(points=((0, 0.05), (20_000, 0.95)))
    run = run_fast(TESTPROG_ELF, 0.03, [f"5000 send {hexline('A 20')}"], waveform=wave,
                   workdir=tmp_path, log_sensor=True)
    rows = text_lines(run.uart, b"A ")
    dev_t = np.array([int(r[1]) for r in rows])
    codes = np.array([int(r[2]) for r in rows])
    assert len(codes) == 20
    # ISR timestamps (us, truncated from 0.5 us ticks) carry a cycle or two of jitter
    assert np.all(np.abs(np.diff(dev_t) - 104) <= 1) and np.mean(np.diff(dev_t)) == \
        pytest.approx(104, abs=0.1)
    adc = run.truth.adc
    np.testing.assert_array_equal(adc["code"][:20], codes)
    i, _ = wave.base(adc["t_us"][:20])
    np.testing.assert_array_equal(codes, np.floor(i * SHUNT_OHM * 50 / 5.0 * 1024 + 0.5))
    np.testing.assert_allclose(np.diff(adc["t_us"][:20]), 104.0)
    assert codes[-1] > codes[0]  # the ramp is visible


def test_marker_edges_reach_pin_change_interrupts(tmp_path):
    """Pins set at scripted times reach PCINT2 on PD2..PD5; the AVR's Timer1 stamps
    differ from the rig's log by one constant offset (boot time) within 2 us."""
    states = [1, 3, 2, 0, 4, 12, 8, 15, 0]
    script = [f"{20_000 + k * 1370} pins {s}" for k, s in enumerate(states)]
    script.append(f"40000 send {hexline('P')}")
    run = run_fast(TESTPROG_ELF, 0.05, script, workdir=tmp_path)
    rows = [r for r in text_lines(run.uart, b"P ") if r[1] != "end"]
    assert [int(r[1]) for r in rows] == states
    changes = run.truth.changes()
    assert [c.state for c in changes] == states
    offset = np.array([int(r[2]) for r in rows]) - np.array([c.t_us for c in changes])
    assert np.ptp(offset) <= 2.0


def test_ground_truth_energy_is_exact(tmp_path):
    """Marker windows' energies from the rig's log equal numpy integrals of
    (waveform + state current) x bus voltage over the logged pin times."""
    wave = Waveform(points=((0, 0.2, 5.0), (700, 0.5, 4.9), (900, 0.3, 4.7), (2000, 0.25, 5.1)),
                    period_us=2000, state_current_a={1: 0.15, 2: 0.05})
    script = []
    t = 3000
    for k in range(6):
        script += [f"{t} pin {k % 2} 1", f"{t + 1234 + 97 * k} pin {k % 2} 0"]
        t += 4000
    run = run_fast(TESTPROG_ELF, 0.03, script, waveform=wave, workdir=tmp_path)
    for marker, state in ((0, 1), (1, 2)):
        wins = run.truth.windows(marker)
        assert len(wins) == 3
        for w in wins:
            tt = np.linspace(w.start_us, w.end_us, 200_001)
            p = wave.power_w(tt, state)
            expected_j = float(np.sum((p[1:] + p[:-1]) * np.diff(tt)) / 2) * 1e-6
            assert w.energy_j == pytest.approx(expected_j, rel=1e-6)
    assert run.truth.end_us == pytest.approx(30_000, abs=1)


def test_ground_truth_steps(tmp_path):
    """Two points at one time are a step; a window across it gets each side's share."""
    wave = Waveform(points=((0, 0.2), (700, 0.2), (700, 0.5)), bus_v=5.0,
                    state_current_a={1: 0.1})
    run = run_fast(TESTPROG_ELF, 0.002, ["500 pin 0 1", "900 pin 0 0"], waveform=wave,
                   workdir=tmp_path)
    (w,) = run.truth.windows(0)
    # applied at the first instruction boundary at or after the scripted time
    assert 500 <= w.start_us < 500.3 and 900 <= w.end_us < 900.3
    charge_uc = (0.2 + 0.1) * (700 - w.start_us) + (0.5 + 0.1) * (w.end_us - 700)
    assert w.charge_c == pytest.approx(charge_uc * 1e-6, rel=1e-12)
    assert w.energy_j == pytest.approx(charge_uc * 5.0 * 1e-6, rel=1e-12)


def test_control_channel_and_marker_fifo():
    """stdin commands answer with the simulated time they took effect; the FIFO
    applies lines without answers; bad commands are refused with a message."""
    wave = Waveform.constant(0.3, state_current_a={1: 0.2})
    with Rig(TESTPROG_ELF, wave) as rig:
        t1 = rig.set_pin(0, 1)
        time.sleep(0.02)
        t2 = rig.set_pin(0, 0)
        assert t2 - t1 >= 1_000  # paced: simulated time went on while we slept
        rig.set_markers_nowait(2)
        time.sleep(0.02)
        rig.set_markers_nowait(0)
        with pytest.raises(BadInputError, match="marker 7 does not exist"):
            rig.set_pin(7, 1)
        with pytest.raises(BadInputError, match="unknown command"):
            rig.command("jump 3")
        truth = rig.ground_truth()
    changes = truth.changes()
    assert [(c.state, c.source) for c in changes] == [
        (1, "stdin"), (0, "stdin"), (2, "fifo"), (0, "fifo")]
    assert changes[0].t_us == t1 and changes[1].t_us == t2
    (w,) = truth.windows(0)
    assert w.energy_j == pytest.approx((0.5 * 5.0) * (t2 - t1) * 1e-6, rel=1e-9)


def test_paced_rig_reports_falling_behind(tmp_path):
    """A 2 GHz AVR cannot be simulated in real time on any host: the rig says so
    (stderr and 'behind' log lines) and keeps running."""
    with Rig(TESTPROG_ELF, workdir=tmp_path, extra_args=["--freq", "2000000000"]) as rig:
        deadline = time.monotonic() + 10
        while not rig.ground_truth().notes and time.monotonic() < deadline:
            time.sleep(0.05)
        assert rig.running
        truth = rig.ground_truth()
    assert any(n.startswith("behind ") for n in truth.notes)
    assert "behind the wall clock" in rig.stderr_text()


def test_bad_waveform_is_refused_with_its_line(tmp_path):
    bad = tmp_path / "wave.txt"
    bad.write_text("period_us 100\n0 0.1\n150 0.2\n")
    proc = subprocess.run([str(RIG_BINARY), "--fast", "--seconds", "0.001", "--waveform",
                           str(bad), str(TESTPROG_ELF)], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 2
    assert "beyond period_us" in proc.stderr and str(bad) in proc.stderr
    bad.write_text("0 0.1 5 extra\n")
    proc = subprocess.run([str(RIG_BINARY), "--fast", "--seconds", "0.001", "--waveform",
                           str(bad), str(TESTPROG_ELF)], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 2 and f"{bad}:1:" in proc.stderr


def test_rig_refusing_its_waveform_is_bad_input(tmp_path):
    bad = tmp_path / "wave.txt"
    bad.write_text("0 0.1\nstate 16 0.2\n")
    with pytest.raises(BadInputError, match=f"{bad}:2: want 'state MASK CURRENT_A'"):
        Rig(TESTPROG_ELF, bad, workdir=tmp_path).start()


def test_missing_elf_is_a_clear_error(tmp_path):
    with pytest.raises(HardwareError, match="does not exist"):
        Rig(tmp_path / "nope.elf").start()
