"""Power-source factory, RAPL on a fake powercap tree, and repeat-to-resolve.

The RAPL "hardware" here is a fake powercap tree whose ``energy_uj`` files are
rewritten by a simulated machine: a clock that the code under test reads, and
a counter that the machine refreshes every millisecond of its simulated time,
wrapping at ``max_energy_range_uj`` like the real one. Workload calls advance
the machine's time at a known power, so the energy of a call is known exactly.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from profiler.errors import BadInputError, HardwareError, RuntimeUnavailableError
from profiler.power.repeat import measure_repeated
from profiler.power.sources import (
    HwmonSource,
    NoneSource,
    NvmlSource,
    RaplSource,
    SourceHardware,
    detect_order,
    detect_power_source,
    open_power_source,
)


def make_zone(root: Path, dirname: str, name: str, energy_uj: int = 0,
              max_uj: int = 262_143_328_850) -> Path:
    d = root / dirname
    d.mkdir(parents=True)
    (d / "name").write_text(name + "\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    (d / "enabled").write_text("1\n")
    return d


class SimulatedMachine:
    """Time, power and a RAPL counter that refreshes every ``tick_ns``."""

    def __init__(self, zone: Path, idle_w: float, tick_ns: int = 1_000_000,
                 read_cost_ns: int = 1_000) -> None:
        self.zone = zone
        self.idle_w = idle_w
        self.tick_ns = tick_ns
        self.read_cost_ns = read_cost_ns
        self.now_ns = 0
        self.next_tick = tick_ns
        self.max_uj = int((zone / "max_energy_range_uj").read_text())
        self.counter_uj = float((zone / "energy_uj").read_text())
        self.written = int(self.counter_uj)
        self.energy_uj = 0.0  # true energy since start

    def advance(self, dt_ns: int, extra_w: float = 0.0) -> None:
        end = self.now_ns + dt_ns
        while self.now_ns < end:
            step = min(end, self.next_tick) - self.now_ns
            e = (self.idle_w + extra_w) * step * 1e-3  # W * ns -> uJ
            self.energy_uj += e
            self.counter_uj = (self.counter_uj + e) % self.max_uj
            self.now_ns += step
            if self.now_ns == self.next_tick:
                if int(self.counter_uj) != self.written:
                    self.written = int(self.counter_uj)
                    (self.zone / "energy_uj").write_text(f"{self.written}\n")
                self.next_tick += self.tick_ns

    def clock(self) -> int:
        self.advance(self.read_cost_ns)
        return self.now_ns


def test_rapl_sums_packages_and_unfolds_wraps(tmp_path: Path) -> None:
    root = tmp_path / "powercap"
    p0 = make_zone(root, "intel-rapl:0", "package-0", energy_uj=900, max_uj=1000)
    make_zone(root, "intel-rapl:0:0", "core", energy_uj=5)
    p1 = make_zone(root, "intel-rapl:1", "package-1", energy_uj=100)
    make_zone(root, "intel-rapl:1:0", "dram", energy_uj=7)
    with open_power_source("rapl", SourceHardware(powercap_root=root)) as src:
        assert isinstance(src, RaplSource)
        assert src.read_energy_mj() == 0.0
        (p0 / "energy_uj").write_text("50\n")  # wrapped: 900 -> 1000 -> 50 = +150 uJ
        (p1 / "energy_uj").write_text("1100\n")  # +1000 uJ
        assert src.read_energy_mj() == pytest.approx(1.150)
        (p0 / "energy_uj").write_text("950\n")  # +900
        assert src.read_energy_mj() == pytest.approx(2.050)
        info = src.info()
        assert info.hardware_energy_counter and info.mode == "counter"
        assert "package-0+package-1" in info.detail


@pytest.mark.parametrize("zone, expect", [
    ("dram", {"intel-rapl:0:2", "intel-rapl:1:0"}),
    ("intel-rapl:0:2", {"intel-rapl:0:2"}),
    ("psys", {"intel-rapl:2"}),
])
def test_rapl_zone_selection(tmp_path: Path, zone: str, expect: set[str]) -> None:
    root = tmp_path / "powercap"
    make_zone(root, "intel-rapl:0", "package-0")
    make_zone(root, "intel-rapl:0:2", "dram", energy_uj=10)
    make_zone(root, "intel-rapl:1", "package-1")
    make_zone(root, "intel-rapl:1:0", "dram", energy_uj=20)
    make_zone(root, "intel-rapl:2", "psys")
    with RaplSource(zone, root=root) as src:
        assert {z.directory.name for z in src._zones} == expect


def test_rapl_errors(tmp_path: Path) -> None:
    with pytest.raises(HardwareError, match="no RAPL zones.*intel_rapl"):
        RaplSource(root=tmp_path).open()
    make_zone(tmp_path, "intel-rapl:0", "package-0")
    with pytest.raises(HardwareError, match="no RAPL zone 'gpu'.*package-0"):
        RaplSource("gpu", root=tmp_path).open()
    src = RaplSource(root=tmp_path)
    with pytest.raises(Exception, match="not open"):
        src.read_energy_mj()


def test_counter_power_from_energy(tmp_path: Path) -> None:
    zone = make_zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=123)
    machine = SimulatedMachine(zone, idle_w=7.5)
    with RaplSource(root=tmp_path, clock=machine.clock) as src:
        src.read_power_w()  # first call: aligns on a tick
        machine.advance(50_000_000)
        assert src.read_power_w() == pytest.approx(7.5, rel=0.01)
        machine.advance(50_000_000, extra_w=2.5)
        assert src.read_power_w() == pytest.approx(10.0, rel=0.01)


def test_measure_repeated_resolves_a_short_call(tmp_path: Path) -> None:
    # The counter wraps during the window (4.5 J of a 5 J range at the start).
    zone = make_zone(tmp_path, "intel-rapl:0", "package-0", energy_uj=4_500_000,
                     max_uj=5_000_000)
    machine = SimulatedMachine(zone, idle_w=10.0)
    call_ns, dyn_w = 300_000, 5.0  # a 0.3 ms layer: 0.3 counter ticks

    def layer() -> None:
        machine.advance(call_ns, extra_w=dyn_w)

    with RaplSource(root=tmp_path, clock=machine.clock) as src:
        res = measure_repeated(layer, src, min_updates=200, baseline_power_w=10.0)
    truth_mj = (10.0 + dyn_w) * call_ns * 1e-6
    assert res.counter_updates >= 200
    assert res.repeats == pytest.approx(200 * 1_000_000 / call_ns, rel=0.01)
    # The window starts on a tick, so only its end is quantised: < 1 tick of energy.
    bound = 15.0 / res.repeats  # mJ: 1 ms at 15 W, per call
    assert abs(res.energy_mj - truth_mj) <= bound
    assert res.energy_mj == pytest.approx(truth_mj, rel=0.005)
    assert res.dynamic_energy_mj == pytest.approx(dyn_w * call_ns * 1e-6, abs=bound + 1e-6)
    assert res.power_w == pytest.approx(15.0, rel=0.005)
    assert res.fps_per_w == pytest.approx(1000 / res.energy_mj)
    assert res.time_ns == pytest.approx(call_ns, rel=0.01)


def test_measure_repeated_counter_that_never_ticks(tmp_path: Path) -> None:
    zone = make_zone(tmp_path, "intel-rapl:0", "package-0")
    # No power: the counter never changes. Reads cost 10 ms so the 2 s timeout comes soon.
    machine = SimulatedMachine(zone, idle_w=0.0, read_cost_ns=10_000_000)
    from profiler.power.sources import TickTimeoutError

    with RaplSource(root=tmp_path, clock=machine.clock) as src, \
            pytest.raises(TickTimeoutError, match="did not change"):
        measure_repeated(lambda: machine.advance(1000), src)


# --- factory -----------------------------------------------------------------

def test_specs_build_the_right_back_end(tmp_path: Path) -> None:
    hw = SourceHardware(hwmon_root=tmp_path, powercap_root=tmp_path)
    assert type(open_power_source("none", hw)) is NoneSource
    assert type(open_power_source("hwmon:ina3221:VDD_IN", hw)) is HwmonSource
    src = open_power_source("nvml:1", hw)
    assert type(src) is NvmlSource and src.index == 1
    r = open_power_source("rapl:intel-rapl:0:2", hw)
    assert type(r) is RaplSource and r.zone == "intel-rapl:0:2"
    assert not r.is_open  # building opens nothing


@pytest.mark.parametrize("spec, msg", [
    ("ina226", "unknown power source"),
    ("nvml:gpu0", "nvml:INDEX"),
    ("hwmon:a:b:c", "hwmon\\[:DEVICE"),
    ("hwmon::1", "hwmon\\[:DEVICE"),
    ("none:x", "no arguments"),
    ("auto:1", "no arguments"),
])
def test_bad_specs(spec: str, msg: str) -> None:
    with pytest.raises(BadInputError, match=msg) as info:
        open_power_source(spec)
    assert info.value.exit_code == 2


def test_detection_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML here, whatever the host
    order = detect_order()
    assert order.index("hwmon") < order.index("nvml") < order.index("rapl")
    hwroot, pcroot = tmp_path / "hwmon", tmp_path / "powercap"
    hwroot.mkdir()
    hw = SourceHardware(hwmon_root=hwroot, powercap_root=pcroot)
    assert detect_power_source(hw) == "none"
    make_zone(pcroot, "intel-rapl:0", "package-0")
    assert detect_power_source(hw) == "rapl"
    d = hwroot / "hwmon0"
    d.mkdir()
    (d / "name").write_text("coretemp\n")  # not a power monitor
    assert detect_power_source(hw) == "rapl"
    d = hwroot / "hwmon1"
    d.mkdir()
    (d / "name").write_text("ina226\n")
    (d / "power1_input").write_text("1000000\n")
    assert detect_power_source(hw) == "hwmon:hwmon1"
    src = open_power_source("auto", hw)
    assert type(src) is HwmonSource
    with src:
        assert src.read_power_w() == 1.0


def test_nvml_without_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(RuntimeUnavailableError, match=r"coupprof\[nvml\]") as info:
        NvmlSource().open()
    assert info.value.exit_code == 3


def test_measure_update_interval(tmp_path: Path) -> None:
    zone = make_zone(tmp_path, "intel-rapl:0", "package-0")
    machine = SimulatedMachine(zone, idle_w=3.0, tick_ns=7_000_000, read_cost_ns=100_000)
    with RaplSource(root=tmp_path, clock=machine.clock) as src:
        assert src.measure_update_interval(ticks=4) == pytest.approx(7_000_000, abs=100_000)
        assert src.update_interval_ns == pytest.approx(7_000_000, abs=100_000)
