"""The `nvml` power source: NVIDIA GPUs through NVML (``nvidia-ml-py``, imported as pynvml).

``nvml`` or ``nvml:INDEX`` (default GPU 0). Energy comes from
``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded; Volta and
newer); older GPUs fall back to integrating ``nvmlDeviceGetPowerUsage`` (mW).
Needs ``pip install 'coupprof[nvml]'`` and an NVIDIA driver; without either,
opening raises `RuntimeUnavailableError` (exit 3) saying which is missing. The
module imports without pynvml, so the factory can list and detect it anywhere.

NVML errors are translated in one place, `translate_nvml_error` (the clock reader,
`profiler.measure.freq_trace`, uses it too).
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any

from profiler.clock import Clock, perf_clock
from profiler.errors import (
    BadInputError,
    HardwareError,
    PermissionDeniedError,
    PowerSourceError,
    ProfilerError,
    RuntimeUnavailableError,
)
from profiler.power.sources.base import CounterSource, PowerIntegrator, SourceInfo

#: How often the driver refreshes the energy counter: about 100 ms, measured on an
#: H200 (tests/test_power_sources_nvml.py). `CounterSource.measure_update_interval`
#: measures it on the GPU at hand.
UPDATE_INTERVAL_NS = 100_000_000


def _import_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError as err:
        raise RuntimeUnavailableError("the nvml power source needs the NVML bindings "
                                      "(nvidia-ml-py), which are not installed",
                                      fix="pip install 'coupprof[nvml]'") from err
    return pynvml


def init_nvml() -> ModuleType:
    """The NVML bindings, initialised (pair with ``nvmlShutdown``); errors translated."""
    pynvml = _import_pynvml()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise translate_nvml_error(pynvml, err, "initialising NVML", setup=True) from err
    return pynvml


def translate_nvml_error(pynvml: ModuleType, err: Exception, what: str, setup: bool) -> ProfilerError:
    """The one place NVML errors become coupprof errors."""
    code = getattr(err, "value", None)
    if code == getattr(pynvml, "NVML_ERROR_LIBRARY_NOT_FOUND", -1):
        return RuntimeUnavailableError(f"{what}: the NVML library (libnvidia-ml.so.1) was not "
                                       "found: no NVIDIA driver on this machine",
                                       fix="install the NVIDIA driver, or use another --power")
    if code == getattr(pynvml, "NVML_ERROR_DRIVER_NOT_LOADED", -1):
        return RuntimeUnavailableError(f"{what}: the NVIDIA driver is not loaded",
                                       fix="load it (nvidia-smi should work), or use another "
                                           "--power")
    if code == getattr(pynvml, "NVML_ERROR_NO_PERMISSION", -1):
        return PermissionDeniedError(f"{what}: NVML denied permission",
                                     fix="run as a user allowed to query the GPU")
    if code == getattr(pynvml, "NVML_ERROR_INVALID_ARGUMENT", -1):
        return BadInputError(f"{what}: no such GPU", fix="list GPUs with `nvidia-smi -L`")
    cls = HardwareError if setup else PowerSourceError
    return cls(f"{what}: NVML error: {err}", fix="check `nvidia-smi`")


class NvmlSource(CounterSource):
    """Energy of one NVIDIA GPU."""

    kind = "nvml"
    update_interval_ns = UPDATE_INTERVAL_NS

    def __init__(self, index: int = 0, spec: str | None = None,
                 clock: Clock = perf_clock) -> None:
        super().__init__(spec or f"nvml:{index}", clock)
        self.index = index
        self._nvml: Any = None
        self._handle: Any = None
        self._name = ""
        self._base_mj = 0
        self._integrator: PowerIntegrator | None = None

    def _open_device(self) -> None:
        pynvml = init_nvml()
        self._nvml = pynvml
        try:
            count = pynvml.nvmlDeviceGetCount()
            if not 0 <= self.index < count:
                raise BadInputError(f"--power {self.spec}: GPU {self.index} does not exist "
                                    f"({count} GPU(s))", fix="list GPUs with `nvidia-smi -L`")
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
            name = pynvml.nvmlDeviceGetName(self._handle)
            self._name = name.decode() if isinstance(name, bytes) else str(name)
            try:
                self._base_mj = int(pynvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
            except pynvml.NVMLError_NotSupported:
                self._integrator = PowerIntegrator(self.read_power_w, self.update_interval_ns,
                                                   self.clock, name="nvml-power")
                self._integrator.start()
        except pynvml.NVMLError as err:
            self._shutdown()
            raise translate_nvml_error(pynvml, err, f"opening GPU {self.index}", setup=True) from err
        except BaseException:
            self._shutdown()
            raise

    def _shutdown(self) -> None:
        if self._integrator is not None:
            self._integrator.stop()
            self._integrator = None
        if self._nvml is not None:
            with contextlib.suppress(self._nvml.NVMLError):  # nothing left to release
                self._nvml.nvmlShutdown()
            self._nvml = None
            self._handle = None

    def _close_device(self) -> None:
        self._shutdown()

    def read_power_w(self) -> float:
        """NVML's power reading (on Ampere and newer a ~1 s average, so prefer energy)."""
        if self._handle is None:
            self._require_open()
        try:
            return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0
        except self._nvml.NVMLError as err:
            raise translate_nvml_error(self._nvml, err, f"reading GPU {self.index} power",
                             setup=False) from err

    def read_energy_mj(self) -> float:
        self._require_open()
        if self._integrator is not None:
            return self._integrator.energy_mj()
        try:
            return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
                         - self._base_mj)
        except self._nvml.NVMLError as err:
            raise translate_nvml_error(self._nvml, err, f"reading GPU {self.index} energy",
                             setup=False) from err

    def info(self) -> SourceInfo:
        hw = self._integrator is None
        return SourceInfo(spec=self.spec, kind=self.kind, mode=self.mode,
                          device=f"GPU {self.index}: {self._name}",
                          update_interval_ns=self.update_interval_ns,
                          energy_resolution_mj=1.0 if hw else None,
                          hardware_energy_counter=hw,
                          detail="" if hw else "energy integrated from polled power")
