"""`--power sim`: the simulated board's logger on a pty, in one of two kinds.

- ``sim``: a virtual logger speaking this project's firmware protocol
  (`profiler.sim.virtual_logger`); everything after the pty is the real `arduino`
  path: collector, decoder, clock fit over the edges, attribution.
- ``sim:ina260``: ARM-CO-UP's logger, an INA260 on an Arduino printing ``pin,millis,mW``
  lines (`profiler.sim.ina260.VirtualIna260`); everything after the pty is the real
  `ina260:PORT` path: pyserial, the recording, its alignment and attribution.
- ``sim:counter``: an energy counter such as RAPL or NVML keeps (`SimCounterSource`): the
  board's true energy since it opened, refreshed every millisecond in RAPL's 15.3 µJ
  steps; everything after it is the real counter path.

Only the sensor is modelled (`profiler.sim.power.SimPowerModel` gives the board's watts
from what each processor runs). `build_sim_source` is the ``sim`` kind's builder, which
`profiler.sim.platform` registers with `profiler.power.sources`.
"""

from __future__ import annotations

from pathlib import Path

from profiler.clock import Clock, perf_clock
from profiler.errors import BadInputError
from profiler.power.sources import SourceHardware, spec_fix
from profiler.power.sources.arduino import ArduinoSource
from profiler.power.sources.base import CounterSource, PowerSource, SourceInfo
from profiler.power.sources.ina260 import Ina260Source
from profiler.sim.ina260 import VirtualIna260
from profiler.sim.power import SimPowerModel
from profiler.sim.virtual_logger import VirtualLogger

#: The simulated logger's rate: an A0-style front end, fast enough for sub-ms layers.
SIM_RATE_HZ = 20_000


class _VirtualPort:
    """A source whose logger is simulated: the virtual logger starts on a pty before the
    real back end opens that port, and stops after it closes; the `sim` marker drives
    the virtual logger's marker inputs (`set_markers`)."""

    model: SimPowerModel
    port: str
    spec: str
    mode: str
    virtual: VirtualLogger | VirtualIna260 | None
    logger_name: str  # what the sidecar calls the device
    reads: str  # how it reads the model's power

    def _start_virtual(self) -> VirtualLogger | VirtualIna260:
        raise NotImplementedError

    def _open_device(self) -> None:
        self.virtual = self._start_virtual()
        self.model.to_host_ns = self.virtual.true_clock().to_host_ns
        self.port = self.virtual.port
        try:
            super()._open_device()  # type: ignore[misc]
        except BaseException:
            self.virtual.close()
            self.virtual = None
            raise

    def _close_device(self) -> None:
        try:
            super()._close_device()  # type: ignore[misc]
        finally:
            if self.virtual is not None:
                self.virtual.close()
                self.virtual = None

    @property
    def activity(self) -> SimPowerModel:
        """The board's power model: told when each processor works, it draws that power."""
        return self.model

    def info(self) -> SourceInfo:
        base = super().info()  # type: ignore[misc]
        return SourceInfo(spec=self.spec, kind="sim", mode=self.mode,
                          device=f"{self.logger_name} on {self.port}",
                          sample_rate_hz=base.sample_rate_hz,
                          detail="simulated board power model (idle + each running layer's "
                                 f"modelled power) {self.reads}; " + base.detail)

    def set_markers(self, bits: int) -> None:
        """The `sim` marker's sink: the virtual logger's marker inputs."""
        assert self.virtual is not None, "open the sim source before the sim marker"
        self.virtual.set_markers(bits)


class SimSource(_VirtualPort, ArduinoSource):
    kind = "sim"

    def __init__(self, spec: str, model: SimPowerModel, *, rate_hz: int = SIM_RATE_HZ,
                 out_dir: str | Path | None = None, clock: Clock = perf_clock) -> None:
        if not isinstance(model, SimPowerModel):
            raise BadInputError("the sim power source needs the simulated board's power model",
                                fix="use --power sim only with --board sim")
        super().__init__(spec, port="", out_dir=out_dir, clock=clock)
        self.model = model
        self.sim_rate_hz = rate_hz
        self.virtual: VirtualLogger | None = None

    def _start_virtual(self) -> VirtualLogger:
        return VirtualLogger(self.model.power_w, rate_hz=self.sim_rate_hz,
                             clock=self.clock, fw_version="sim-1.0").start()

    logger_name = "virtual logger"
    reads = "sampled by a virtual logger"


class SimIna260Source(_VirtualPort, Ina260Source):
    """``sim:ina260``: the simulated board's power read through a virtual INA260 logger."""

    kind = "sim"

    def __init__(self, spec: str, model: SimPowerModel, *, out_dir: str | Path | None = None,
                 seed: int = 0, clock: Clock = perf_clock) -> None:
        super().__init__(spec, port="", out_dir=out_dir, timeout_s=2.0, clock=clock)
        self.model = model
        self.seed = seed
        self.virtual: VirtualIna260 | None = None

    def _start_virtual(self) -> VirtualIna260:
        return VirtualIna260(self.model.power_w, seed=self.seed, clock=self.clock).start()

    logger_name = "virtual INA260 logger"
    reads = "read by a virtual INA260 on an Arduino"


def build_sim_source(spec: str, rest: str, hw: SourceHardware) -> PowerSource:
    """``sim`` or ``sim:ina260``: a virtual logger reading the simulated board's power model
    (`SimPowerModel` of ``hw.board``, or the caller's own in ``hw.extra["sim_power_model"]``),
    which the source's `activity` tells when each processor works."""
    if rest.lower() not in ("", "ina260", "counter"):
        raise BadInputError(f"power source {spec!r}: expected sim, sim:ina260 or sim:counter",
                            fix=spec_fix())
    model = hw.extra.get("sim_power_model")
    if model is None and hw.board is not None and hw.board.simulated:
        model = SimPowerModel(hw.board)
    if model is None:
        raise BadInputError(f"--power {spec} needs the simulated board",
                            fix="use --board sim, or another --power source")
    if rest.lower() == "counter":
        return SimCounterSource(spec, model, clock=hw.clock)
    if rest:
        return SimIna260Source(spec, model, out_dir=hw.extra.get("trace_dir"), clock=hw.clock)
    return SimSource(spec, model, out_dir=hw.extra.get("trace_dir"), clock=hw.clock)


class SimCounterSource(CounterSource):
    """``sim:counter``: the simulated board's energy as a hardware counter keeps it (RAPL's
    ``energy_uj``, NVML's total energy): the power model's true energy since `open`, read
    as of the counter's last refresh and in whole steps of its resolution."""

    kind = "sim"
    update_interval_ns = 1_000_000  # RAPL refreshes about every millisecond
    RESOLUTION_MJ = 0.0153  # RAPL's energy unit, 2^-16 J

    def __init__(self, spec: str, model: SimPowerModel, *, clock: Clock = perf_clock) -> None:
        super().__init__(spec, clock)
        self.model = model
        self._t0_ns = 0

    @property
    def activity(self) -> SimPowerModel:
        return self.model

    def _open_device(self) -> None:
        self._t0_ns = self.clock()

    def _close_device(self) -> None:
        pass

    def read_energy_mj(self) -> float:
        self._require_open()
        ticks = (self.clock() - self._t0_ns) // self.update_interval_ns
        refreshed = self._t0_ns + ticks * self.update_interval_ns
        steps = self.model.true_energy_mj(self._t0_ns, refreshed) // self.RESOLUTION_MJ
        return float(steps * self.RESOLUTION_MJ)

    def info(self) -> SourceInfo:
        return SourceInfo(spec=self.spec, kind="sim", mode="counter",
                          device="simulated energy counter",
                          update_interval_ns=self.update_interval_ns,
                          energy_resolution_mj=self.RESOLUTION_MJ,
                          hardware_energy_counter=True,
                          detail="simulated board power model (idle + each running layer's "
                                 "modelled power), integrated exactly and read as a counter")
