"""The nvml source against the real NVML bindings (nvidia-ml-py).

Without an NVIDIA driver (CI), opening must say so in one line with exit code 3.
On a machine with an NVIDIA GPU the `hardware` test reads the real counter.
"""

from __future__ import annotations

import time

import pytest

from profiler.errors import BadInputError, RuntimeUnavailableError
from profiler.power.repeat import measure_repeated
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
        # The counter refreshes about as often as the default interval assumes.
        default = src.update_interval_ns
        e0 = src.read_energy_mj()
        measured = src.measure_update_interval(ticks=10)
        print(f"NVML energy counter: one update per {measured / 1e6:.2f} ms, power {p:.1f} W")
        assert measured <= default * 1.5
        assert src.read_energy_mj() > e0


@pytest.mark.hardware
def test_real_gpu_repeat_to_resolve() -> None:
    """Needs an NVIDIA GPU, its driver and PyTorch with CUDA; no wiring.
    A matmul is far shorter than one counter update; repeated until the window spans
    20 updates, its energy must be repeatable, and twice the work must cost about
    twice the dynamic energy."""
    torch = pytest.importorskip("torch")
    if not driver_present() or not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    a = torch.randn(4096, 4096, device="cuda")

    def one() -> None:
        a @ a
        torch.cuda.synchronize()

    def two() -> None:
        a @ a
        a @ a
        torch.cuda.synchronize()

    with NvmlSource(0) as src:
        src.measure_update_interval(ticks=5)
        for _ in range(50):
            one()  # clocks up
        t0, e0 = src.wait_for_tick()
        time.sleep(2.0)
        t1, e1 = src.wait_for_tick()
        idle_w = (e1 - e0) * 1e6 / (t1 - t0)
        r1 = measure_repeated(one, src, min_updates=20, baseline_power_w=idle_w)
        r2 = measure_repeated(two, src, min_updates=20, baseline_power_w=idle_w)
        r1b = measure_repeated(one, src, min_updates=20, baseline_power_w=idle_w)
    print(f"idle {idle_w:.1f} W; 1 matmul: {r1.energy_mj:.3f} mJ ({r1.dynamic_energy_mj:.3f} "
          f"dyn) in {r1.time_ns / 1e3:.1f} us x{r1.repeats}, {r1.power_w:.0f} W; again "
          f"{r1b.energy_mj:.3f} mJ; 2 matmuls: {r2.energy_mj:.3f} mJ "
          f"({r2.dynamic_energy_mj:.3f} dyn), update {src.update_interval_ns / 1e6:.1f} ms")
    assert r1b.energy_mj == pytest.approx(r1.energy_mj, rel=0.05)
    assert r2.dynamic_energy_mj == pytest.approx(2 * r1.dynamic_energy_mj, rel=0.15)
