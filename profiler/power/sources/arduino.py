"""`arduino:PORT`: this project's logger firmware over serial, as a streaming source.

The capture is on the logger's clock; `map_clock()` puts it on the host clock with a
fit over the marker edges (`profiler.power.clockmap`), from the host marker
changes the caller hands it after `stop_capture()`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from profiler.clock import Clock, perf_clock
from profiler.errors import (
    HardwareError,
    LoggerTimeoutError,
    MarkerError,
    PowerSourceError,
    ProfilerError,
)
from profiler.power import protocol as P
from profiler.power.clockmap import ClockFit, fit_clock_map
from profiler.power.collector import Collector
from profiler.power.host_trace import HostTrace
from profiler.power.sources.base import SourceInfo, StreamSource
from profiler.power.trace import DeviceTrace

#: How long one reading averages over, per front end (IDENT does not say): an INA226
#: conversion at the firmware's 140 us setting; the virtual logger samples instants.
#: The A0 front end is not fixed: see `sample_window_ns`.
SAMPLE_WINDOW_NS = {P.FrontEnd.INA226: 140_000, P.FrontEnd.SYNTHETIC: 0}

#: What to check when the port cannot be opened, or the logger on it does not answer.
_OPEN_FIX: dict[type[ProfilerError], str] = {
    HardwareError: "check the port in --power {spec} (list ports with "
                   "`ls /dev/ttyACM* /dev/ttyUSB*`, or `coupprof doctor`)",
    LoggerTimeoutError: "check that the logger in --power {spec} is plugged in, runs the "
                        "coupprof firmware (`make -C firmware upload`) and that no other "
                        "program holds its port",
}


class ArduinoSource(StreamSource):
    kind = "arduino"

    def __init__(self, spec: str, port: str, *, out_dir: str | Path | None = None,
                 rate_hz: int | None = None, timeout_s: float = 3.0,
                 clock: Clock = perf_clock) -> None:
        super().__init__(spec, clock)
        self.port = port
        self.out_dir = out_dir
        self.rate_hz = rate_hz
        self.timeout_s = timeout_s
        self.collector: Collector | None = None
        self.logger: P.LoggerInfo | None = None
        self.trace: DeviceTrace | None = None  # the last capture, on the logger's clock
        self.fit: ClockFit | None = None

    # -- PowerSource ------------------------------------------------------------------
    def _open_device(self) -> None:
        self.collector = Collector(self.port, out_dir=self.out_dir, timeout_s=self.timeout_s,
                                   clock=self.clock)
        try:
            self.logger = self.collector.open()
            if self.rate_hz:
                self.logger = self.collector.set_rate(self.rate_hz)
        except BaseException as err:
            self.collector.close()
            self.collector = None
            if not isinstance(err, ProfilerError) or type(err) not in _OPEN_FIX:
                raise
            # The collector's hints name `coupprof collect --port`; here the port is
            # the one in the power spec.
            fix = _OPEN_FIX[type(err)].format(spec=self.spec)
            raise type(err)(err.message, fix=fix) from None

    def _close_device(self) -> None:
        if self.collector is not None:
            self.collector.close()
            self.collector = None

    def keep_trace_on_disk(self) -> None:
        self.out_dir = None
        if self.collector is not None:
            self.collector.out_dir = None

    def info(self) -> SourceInfo:
        lg = self.logger
        return SourceInfo(
            spec=self.spec, kind=self.kind, mode=self.mode, device=self.port,
            sample_rate_hz=float(lg.rate_hz) if lg else None,
            detail=(f"front end {lg.front_end_name}, firmware {lg.fw_version}, protocol "
                    f"{lg.protocol}, shunt {lg.shunt_uohm} uOhm") if lg else "",
        )

    @property
    def sample_window_ns(self) -> int:
        """How long one sample averages the current over (for attribution's guard)."""
        lg = self.logger
        if lg is None:
            return 0
        if lg.front_end == P.FrontEnd.SHUNT_AMP:
            # Each A0 sample is the mean of k back-to-back conversions filling its sample
            # period (firmware/coupprof_logger/frontend_a0.cpp); k is not in IDENT, so take
            # the whole period: a sample counts as inside a layer only if all of it is.
            return int(1e9 / lg.rate_hz) if lg.rate_hz > 0 else 0
        return SAMPLE_WINDOW_NS.get(P.FrontEnd(lg.front_end), 0) \
            if lg.front_end in P.FrontEnd._value2member_map_ else 0

    # -- StreamSource -----------------------------------------------------------------
    def start(self) -> None:
        self._require_open()
        assert self.collector is not None
        self.trace, self.fit = None, None
        self.collector.start()

    def poll(self) -> None:
        """Raise a failure the reader thread noticed (port gone, logger silent)."""
        if self.collector is not None:
            self.collector.poll()

    def stop_capture(self) -> DeviceTrace:
        """Stop and return the capture on the logger's clock. A mid-run failure raises
        `PowerSourceError` with the partial trace in ``err.trace`` (and in self.trace)."""
        self._require_open()
        assert self.collector is not None
        try:
            self.trace = self.collector.stop()
        except PowerSourceError as err:
            self.trace = err.trace
            raise
        return self.trace

    def map_clock(self, trace: DeviceTrace, host_ns: np.ndarray,
                  host_levels: np.ndarray | None = None,
                  host_halfwidth_ns: np.ndarray | None = None) -> HostTrace:
        """Fit the logger clock to the host clock over the edges; the trace on the host clock."""
        host_ns = np.asarray(host_ns, dtype=np.int64)
        levels = None if host_levels is None else np.asarray(host_levels, dtype=np.int64)
        if host_ns.size < 2:
            raise MarkerError(
                f"cannot map the logger's clock on {self.port}: fewer than 2 host marker changes",
                fix="run with a marker (--marker) wired to the logger's D2 input")
        edges = trace.edges
        dev_levels = (np.asarray(edges["markers"]) & 1) if levels is not None else None
        # Same-level edges are at least a layer apart; stay under half the closest pair.
        tol = 500_000.0
        if levels is not None:
            for lv in (0, 1):
                h = host_ns[levels == lv]
                if h.size > 1:
                    tol = min(tol, 0.45 * float(np.diff(h).min()))
        try:
            self.fit = fit_clock_map(np.asarray(edges["t_us"], dtype=np.int64), host_ns,
                                     device_levels=dev_levels, host_levels=levels,
                                     tol_ns=max(tol, 2_000.0),
                                     host_halfwidth_ns=host_halfwidth_ns)
        except MarkerError as err:
            raise MarkerError(
                f"the logger on {self.port} saw {edges.size} marker edges for "
                f"{host_ns.size} host marker changes, and they do not line up ({err.message})",
                fix="check that the marker line goes to the logger's D2 input with a common "
                    "ground, and that --marker names that line") from None
        fields = trace.host_fields(self.fit.clock)
        fields["source"] = self.spec
        fields["sample_window_ns"] = self.sample_window_ns
        return HostTrace(**fields)
