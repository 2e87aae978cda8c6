"""The nvml source against the real NVML bindings (nvidia-ml-py).

Without an NVIDIA driver (CI), opening must say so in one line with exit code 3.
On a machine with an NVIDIA GPU the `hardware` test reads the real counter.
"""

from __future__ import annotations

import time

import pytest

from profiler.errors import BadInputError, RuntimeUnavailableError
from profiler.power.sources import NvmlSource, detect_power_source, open_power_source

pynvml = pytest.importorskip("pynvml")


def driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(driver_present(), reason="this machine has an NVIDIA driver")
def test_no_driver_is_a_clear_runtime_error() -> None:
    src = open_power_source("nvml")
    with pytest.raises(RuntimeUnavailableError, match="no NVIDIA driver") as info:
        src.open()
    assert info.value.exit_code == 3 and "\n" not in str(info.value)
    assert not src.is_open
    # Detection skips it quietly instead of failing.
    assert not detect_power_source().startswith("nvml")


@pytest.mark.hardware
def test_real_gpu_energy_counter() -> None:
    """Needs an NVIDIA GPU (Volta or newer) and its driver; no wiring.
    Run: pytest -m hardware tests/test_power_sources_nvml.py"""
    if not driver_present():
        pytest.skip("no NVIDIA driver")
    with pytest.raises(BadInputError, match="does not exist"):
        NvmlSource(999).open()
    with NvmlSource(0) as src:
        info = src.info()
        assert info.hardware_energy_counter and info.device.startswith("GPU 0:")
        p = src.read_power_w()
        assert 1.0 < p < 2000.0
        # The counter refreshes at least as often as the interval the windows assume.
        t0, e0 = src.wait_for_tick()
        changes, last = [], e0
        while len(changes) < 20:
            e = src.read_energy_mj()
            if e != last:
                changes.append(time.perf_counter_ns())
                last = e
        mean_ns = (changes[-1] - changes[0]) / (len(changes) - 1)
        print(f"NVML energy counter: one update per {mean_ns / 1e6:.2f} ms, power {p:.1f} W")
        assert mean_ns <= src.update_interval_ns * 1.5
        assert last > e0
