"""The hwmon source on a fake /sys/class/hwmon tree laid out as the drivers do.

hwmon0  coretemp  (not a power monitor)
hwmon1  ina226 on I2C 1-0040: power1_input (uW), curr1_input (mA), in1_input (mV)
hwmon2  ina3221 on I2C 1-0041: curr1..3_input, in1..3_input (bus), in4..6 (shunt),
        in1..3_label (Jetson style: VDD_IN, VDD_CPU_GPU_CV, VDD_SOC)
hwmon3  ina238 on I2C 2-0045: power1_input and an energy1_input counter (uJ)
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from profiler.errors import BadInputError, HardwareError
from profiler.power.sources import HwmonSource, SourceHardware, open_power_source


def device(root: Path, n: int, name: str, i2c: str | None, files: dict[str, str]) -> Path:
    d = root / "class" / "hwmon" / f"hwmon{n}"
    d.mkdir(parents=True)
    (d / "name").write_text(name + "\n")
    if i2c:
        target = root / "devices" / "platform" / "i2c" / i2c
        target.mkdir(parents=True)
        (d / "device").symlink_to(target)
    for fname, text in files.items():
        (d / fname).write_text(text + "\n")
    return d


@pytest.fixture
def sysroot(tmp_path: Path) -> Path:
    device(tmp_path, 0, "coretemp", None, {"temp1_input": "45000"})
    device(tmp_path, 1, "ina226", "1-0040",
           {"power1_input": "2500000", "curr1_input": "500", "in1_input": "5000",
            "in0_input": "1", "update_interval": "3"})
    device(tmp_path, 2, "ina3221", "1-0041",
           {"curr1_input": "1200", "in1_input": "5080", "in1_label": "VDD_IN",
            "curr2_input": "300", "in2_input": "5000", "in2_label": "VDD_CPU_GPU_CV",
            "curr3_input": "250", "in3_input": "4992", "in3_label": "VDD_SOC",
            "in4_input": "12", "in5_input": "3", "in6_input": "2"})
    device(tmp_path, 3, "ina238", "2-0045",
           {"power1_input": "3000000", "energy1_input": "987654321"})
    return tmp_path / "class" / "hwmon"


def hw(root: Path, clock=None) -> SourceHardware:
    return SourceHardware(hwmon_root=root) if clock is None else \
        SourceHardware(hwmon_root=root, clock=clock)


@pytest.mark.parametrize("spec, directory, watts", [
    ("hwmon", "hwmon1", 2.5),  # first known monitor; coretemp skipped
    ("hwmon:ina226", "hwmon1", 2.5),
    ("hwmon:1-0040", "hwmon1", 2.5),
    ("hwmon:hwmon2", "hwmon2", 1.2 * 5.080),  # no power file: curr1 x in1
    ("hwmon:ina3221:2", "hwmon2", 0.300 * 5.000),
    ("hwmon:ina3221:VDD_SOC", "hwmon2", 0.250 * 4.992),
    ("hwmon:2-0045", "hwmon3", 3.0),
])
def test_selection_and_power(sysroot: Path, spec: str, directory: str, watts: float) -> None:
    with open_power_source(spec, hw(sysroot)) as src:
        assert src.device.directory.name == directory
        assert src.read_power_w() == pytest.approx(watts, rel=1e-12)


def test_reads_follow_the_driver(sysroot: Path) -> None:
    with open_power_source("hwmon:ina3221:VDD_IN", hw(sysroot)) as src:
        assert src.info().detail.startswith("channel 1: curr1_input x in1_input")
        (sysroot / "hwmon2" / "curr1_input").write_text("2000\n")
        assert src.read_power_w() == pytest.approx(2.0 * 5.080)


def test_hardware_energy_counter(sysroot: Path) -> None:
    with open_power_source("hwmon:ina238", hw(sysroot)) as src:
        info = src.info()
        assert info.hardware_energy_counter and "2-0045" in info.device
        assert src.read_energy_mj() == 0.0  # counted from open
        (sysroot / "hwmon3" / "energy1_input").write_text(f"{987654321 + 42_000}\n")
        assert src.read_energy_mj() == pytest.approx(42.0)


class ManualClock:
    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns


def wait_for_poll(src: HwmonSource) -> None:
    integ = src._integrator
    seen = integ.samples
    deadline = time.monotonic() + 10
    while integ.samples <= seen:
        assert time.monotonic() < deadline, "integrator thread never polled"
        time.sleep(0.001)


def test_software_energy_counter_integrates_polled_power(sysroot: Path) -> None:
    """Power only (ina226): a thread polls power every update_interval and integrates.
    The test owns the clock, so the integral is exact whatever the thread's timing."""
    clock = ManualClock()
    power = sysroot / "hwmon1" / "power1_input"
    with open_power_source("hwmon:ina226", hw(sysroot, clock)) as src:
        info = src.info()
        assert not info.hardware_energy_counter and info.update_interval_ns == 3_000_000
        assert "integrated" in info.detail
        clock.now_ns = 10_000_000  # 10 ms at 2.5 W
        assert src.read_energy_mj() == pytest.approx(25.0)
        wait_for_poll(src)
        power.write_text("4000000\n")  # steps to 4 W
        wait_for_poll(src)
        clock.now_ns = 30_000_000  # 20 ms at 4 W
        assert src.read_energy_mj() == pytest.approx(25.0 + 80.0)
        wait_for_poll(src)
        assert src.read_energy_mj() == pytest.approx(105.0)
    assert not any(t.name.startswith("hwmon-") for t in threading.enumerate())


def test_sensor_failure_mid_run_is_reported(sysroot: Path) -> None:
    from profiler.errors import PowerSourceError

    clock = ManualClock()
    with open_power_source("hwmon:ina226", hw(sysroot, clock)) as src:
        (sysroot / "hwmon1" / "power1_input").write_text("garbage\n")
        deadline = time.monotonic() + 10
        while src._integrator.error is None:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        with pytest.raises(PowerSourceError, match="power1_input|power of") as info:
            src.read_energy_mj()
        assert info.value.exit_code == 4


@pytest.mark.parametrize("spec, err, msg", [
    ("hwmon:ina219", HardwareError, "no hwmon device ina219.*hwmon1 \\(ina226\\)"),
    ("hwmon:ina3221:VDD_GPU", BadInputError, "no channel labelled 'VDD_GPU'.*VDD_SOC"),
    ("hwmon:ina226:4", HardwareError, "neither power4_input"),
    ("hwmon:coretemp", HardwareError, "neither power1_input"),
])
def test_errors_name_the_fix(sysroot: Path, spec: str, err: type, msg: str) -> None:
    with pytest.raises(err, match=msg):
        open_power_source(spec, hw(sysroot)).open()


def test_no_hwmon_at_all(tmp_path: Path) -> None:
    with pytest.raises(HardwareError, match="found: none"):
        open_power_source("hwmon", hw(tmp_path / "nothing")).open()
