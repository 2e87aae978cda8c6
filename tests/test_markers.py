"""Marker spec parsing, the none/sim back ends, and gpiod against the real libgpiod bindings."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from profiler.errors import BadInputError, MarkerError
from profiler.markers import (
    GpiodMarker,
    NoneMarker,
    SimMarker,
    SysfsMarker,
    open_marker,
)
from profiler.markers.gpiod_backend import chip_path


class PinBank:
    """Stands in for the logger's marker inputs: keeps the level history of each pin."""

    def __init__(self) -> None:
        self.history: list[int] = []

    def set_markers(self, bits: int) -> None:
        self.history.append(bits)


@pytest.mark.parametrize("spec, cls, attrs", [
    ("none", NoneMarker, {"width": 1}),
    ("sim", SimMarker, {"width": 1}),
    ("sim:3", SimMarker, {"width": 3}),
    ("sysfs:17", SysfsMarker, {"numbers": [17]}),
    ("sysfs:497,498", SysfsMarker, {"numbers": [497, 498], "width": 2}),
    ("gpiod:17", GpiodMarker, {"chip": "/dev/gpiochip0", "lines": [17]}),
    ("gpiod:/dev/gpiochip4:17,27", GpiodMarker, {"chip": "/dev/gpiochip4", "lines": [17, 27]}),
    ("gpiod:gpiochip1:GPIO17", GpiodMarker, {"chip": "/dev/gpiochip1", "lines": ["GPIO17"]}),
    ("GPIOD:2:5", GpiodMarker, {"chip": "/dev/gpiochip2", "lines": [5]}),
])
def test_specs(spec: str, cls: type, attrs: dict) -> None:
    marker = open_marker(spec, sim_sink=PinBank())
    assert type(marker) is cls
    for name, expect in attrs.items():
        assert getattr(marker, name) == expect
    assert not marker.is_open  # building never touches hardware


@pytest.mark.parametrize("spec, msg", [
    ("gpio:17", "unknown marker"),
    ("sysfs", "expected sysfs:NUMBERS"),
    ("sysfs:GPIO17", "GPIO numbers"),
    ("sysfs:1,2,3,4,5", "at most 4"),
    ("gpiod:", "expected gpiod:CHIP:LINES"),
    ("gpiod:0:17,", "names no line"),
    ("gpiod:0:1:2", "expected gpiod:CHIP:LINES"),
    ("sim:5", "1..4"),
    ("none:1", "takes no arguments"),
    ("sysfs:17,17", "twice"),
])
def test_bad_specs(spec: str, msg: str) -> None:
    with pytest.raises((BadInputError, MarkerError), match=msg):
        open_marker(spec, sim_sink=PinBank())


def test_bad_spec_is_exit_2() -> None:
    with pytest.raises(BadInputError) as info:
        open_marker("serial:17")
    assert info.value.exit_code == 2 and "gpiod:CHIP:LINES" in str(info.value)


def test_chip_path() -> None:
    assert chip_path("0") == "/dev/gpiochip0"
    assert chip_path("gpiochip3") == "/dev/gpiochip3"
    assert chip_path("/dev/gpiochip7") == "/dev/gpiochip7"


def test_sim_marker_drives_the_sink_and_ends_low() -> None:
    pins = PinBank()
    with open_marker("sim:2", sim_sink=pins) as marker:
        for level in (1, 2, 3, 0, 7):
            marker.set(level)
    # open drives 0, 7 is masked to the 2 lines, close drives 0.
    assert pins.history == [0, 1, 2, 3, 0, 3, 0]
    with pytest.raises(MarkerError, match="not open"):
        marker.set(1)


def test_sim_marker_accepts_a_callable() -> None:
    seen: list[int] = []
    with SimMarker(seen.append) as marker:
        marker.set(1)
    assert seen == [0, 1, 0]


def test_sim_marker_without_a_logger() -> None:
    with pytest.raises(MarkerError, match="--power sim"):
        open_marker("sim")


def test_release_failure_does_not_hide_the_real_error() -> None:
    class DyingLogger:
        alive = True

        def set_markers(self, bits: int) -> None:
            if not self.alive:
                raise OSError("pty closed")

    logger = DyingLogger()
    with pytest.warns(RuntimeWarning, match="pty closed"), \
            pytest.raises(ValueError, match="layer 3"), \
            open_marker("sim", sim_sink=logger):
        logger.alive = False
        raise ValueError("layer 3 failed")
    # Without an error in flight the release failure is raised.
    logger.alive = True
    marker = open_marker("sim", sim_sink=logger).open()
    logger.alive = False
    with pytest.raises(MarkerError, match="pty closed"):
        marker.close()


def test_none_marker() -> None:
    with open_marker("none") as marker:
        assert marker.set(1) is None
    assert repr(marker) == "NoneMarker('none', closed)"


# --- gpiod: the real libgpiod v2 bindings on things that are not GPIO chips ---

@pytest.fixture
def gpiod_lib():
    return pytest.importorskip("gpiod")


def test_gpiod_missing_chip(tmp_path: Path, gpiod_lib) -> None:
    marker = open_marker(f"gpiod:{tmp_path}/gpiochip9:17")
    with pytest.raises(MarkerError, match="does not exist.*gpiodetect"):
        marker.open()
    assert not marker.is_open


@pytest.mark.parametrize("target", ["/dev/null", "dir", "file"])
def test_gpiod_not_a_chip(tmp_path: Path, target: str, gpiod_lib) -> None:
    if target == "dir":
        path = str(tmp_path)
    elif target == "file":
        path = str(tmp_path / "f")
        Path(path).write_text("x")
    else:
        path = target
    with pytest.raises(MarkerError, match="not a GPIO character device"):
        open_marker(f"gpiod:{path}:17").open()


def test_gpiod_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gpiod", None)  # makes `import gpiod` fail
    with pytest.raises(MarkerError, match=r"coupprof\[gpio\]"):
        open_marker("gpiod:0:17").open()


# --- gpiod on the kernel's gpio-sim (configfs), where the kernel offers it ---

GPIO_SIM = Path("/sys/kernel/config/gpio-sim")


@pytest.fixture
def sim_chip():
    """A gpio-sim chip with 8 lines; yields (/dev path, sysfs dir of its lines)."""
    if not GPIO_SIM.is_dir() or os.geteuid() != 0:
        pytest.skip("needs root and the gpio-sim module (modprobe gpio-sim; configfs)")
    dev = GPIO_SIM / f"coupprof-{os.getpid()}"
    bank = dev / "gpio-bank0"
    bank.mkdir(parents=True)
    (bank / "num_lines").write_text("8")
    (dev / "live").write_text("1")
    try:
        chip = (bank / "chip_name").read_text().strip()
        lines = Path("/sys/devices/platform") / (dev / "dev_name").read_text().strip() / chip
        yield f"/dev/{chip}", lines
    finally:
        (dev / "live").write_text("0")
        bank.rmdir()
        dev.rmdir()


def test_gpiod_on_gpio_sim(sim_chip: tuple[str, Path], gpiod_lib) -> None:
    chip, lines = sim_chip

    def level(offset: int) -> str:
        return (lines / f"sim_gpio{offset}" / "value").read_text().strip()

    with open_marker(f"gpiod:{chip}:3,5") as marker:
        for bits in range(4):
            marker.set(bits)
            assert (level(3), level(5)) == (str(bits & 1), str(bits >> 1))
        with pytest.raises(MarkerError, match="busy"):
            open_marker(f"gpiod:{chip}:5").open()
        marker.set(3)
    # Released: a second request for the same lines now succeeds.
    with open_marker(f"gpiod:{chip}:3,5"):
        pass


@pytest.mark.hardware
def test_gpiod_loopback_on_a_real_board(gpiod_lib) -> None:
    """Wiring: on the board, connect the marker output line to a spare input line of
    the same chip with a jumper, then run with
    COUPPROF_GPIO_LOOPBACK=/dev/gpiochip0:17:27 pytest -m hardware tests/test_markers.py
    (17 = marker output, 27 = input that reads it back)."""
    spec = os.environ.get("COUPPROF_GPIO_LOOPBACK")
    if not spec:
        pytest.skip("set COUPPROF_GPIO_LOOPBACK=CHIP:OUT:IN (see the docstring)")
    chip, out_line, in_line = spec.rsplit(":", 2)
    from gpiod.line import Direction, Value

    reader = gpiod_lib.request_lines(chip, consumer="coupprof-test",
                                     config={int(in_line): gpiod_lib.LineSettings(
                                     direction=Direction.INPUT)})
    try:
        with open_marker(f"gpiod:{chip}:{out_line}") as marker:
            for bit in (1, 0, 1, 0):
                marker.set(bit)
                assert reader.get_value(int(in_line)) == (Value.ACTIVE if bit else
                                                          Value.INACTIVE)
    finally:
        reader.release()
