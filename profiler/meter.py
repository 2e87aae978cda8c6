"""Energy of spans and windows of work, from any power source (`coupprof run` and
`coupprof transfer-matrix`).

`EnergyMeter` wraps an open power source:

* **Counter sources** (NVML, RAPL, hwmon): `span` starts right after a counter
  update; `per_call` repeats short work until the window spans ``min_updates``
  updates (`profiler.attribution.measure_repeated`).
* **Streaming sources** (the logger: ``arduino``, ``sim``) need a marker wired to
  the logger, as `coupprof layers` does. `capture()` opens a `StreamCapture`:
  the stream starts, the first capture of a meter measures the idle baseline
  (marker low, nothing running), the caller moves the marker with
  ``capture.mark(level)`` around the work (each change is bracketed by clock
  reads), and `stop()` fits the logger clock to those changes and returns the
  trace on the host clock. Windows are then integrated either on the logger's
  edges (`windows_on_edges`: windows whose start and end are marker changes, as
  layers are) or on host times through the fitted clock (`windows_on_host`:
  windows between arbitrary host timestamps, e.g. frame completions).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from profiler.attribution import Attribution, PowerTrace, attribute, idle_baseline_w
from profiler.clock import Clock, perf_clock
from profiler.errors import BadInputError


class StreamCapture:
    """One capture of a streaming source; see the module docstring."""

    def __init__(self, meter: EnergyMeter) -> None:
        self.meter = meter
        self.clock = meter.clock
        marker = meter.marker
        self._set = marker.set if marker is not None else None
        self._t: list[int] = []  # middle of each marker change's bracket
        self._lv: list[int] = []
        self._level = 0
        self.trace: PowerTrace | None = None
        self._baseline_window: tuple[int, int] | None = None
        self.info: dict[str, Any] = {}

    def start(self) -> StreamCapture:
        src = self.meter.source
        src.start()
        if self._set is not None:
            self._set(0)
        if self.meter.baseline_w is None:
            t0 = self.clock()
            time.sleep(self.meter.baseline_s)
            self._baseline_window = (t0, self.clock())
        return self

    def mark(self, level: int) -> tuple[int, int]:
        """Drive the marker to `level`; (clock before, clock after) the change."""
        t0 = self.clock()
        if self._set is not None:
            self._set(level)
        t1 = self.clock()
        if level != self._level:
            self._level = level
            self._t.append((t0 + t1) // 2)
            self._lv.append(level)
        return t0, t1

    def host_events(self) -> tuple[np.ndarray, np.ndarray]:
        t = np.asarray(self._t, dtype=np.int64)
        lv = np.asarray(self._lv, dtype=np.int64)
        order = np.argsort(t, kind="stable")
        return t[order], lv[order]

    def stop(self) -> PowerTrace:
        """Stop the stream; the trace on the host clock (fitted over the marker changes)."""
        src = self.meter.source
        if self._set is not None and self._level != 0:
            self.mark(0)
        t, lv = self.host_events()
        set_events = getattr(src, "set_host_events", None)
        if set_events is not None:
            set_events(t, lv)
        trace: PowerTrace = src.stop()
        self.trace = trace
        meter = self.meter
        if self._baseline_window is not None:
            b0, b1 = self._baseline_window
            meter.baseline_w = idle_baseline_w(trace, b0, b1)
        fit = getattr(src, "fit", None)
        self.info = {"marker_changes": int(t.size), "samples": int(trace.t_ns.size),
                     "lost_frames": trace.total_lost_frames,
                     "corrupt_frames": trace.corrupt_frames}
        if fit is not None:
            self.info["clock_map"] = fit.clock.to_dict()
        return trace

    def _trace(self) -> PowerTrace:
        if self.trace is None:
            raise RuntimeError("StreamCapture: stop() first")
        return self.trace

    def windows_on_edges(self, start_ns: Any, end_ns: Any, start_lo_ns: Any = None,
                         end_hi_ns: Any = None) -> Attribution:
        """Windows (frames, items) that the marker went high at (start) and low at (end)."""
        return attribute(start_ns, end_ns, self._trace(),
                         baseline_power_w=self.meter.baseline_w or 0.0, levels=(1, 0),
                         start_lo_ns=start_lo_ns, end_hi_ns=end_hi_ns)

    def windows_on_host(self, start_ns: Any, end_ns: Any) -> Attribution:
        """Windows between host timestamps, through the fitted clock (no edge matching)."""
        return attribute(start_ns, end_ns, self._trace(),
                         baseline_power_w=self.meter.baseline_w or 0.0, use_edges=False)


class EnergyMeter:
    """Energy of a span of work from a `PowerSource` (counter or streaming).

    marker: for streaming sources, the marker wired to the logger (the clock fit and
    the windows need its edges). baseline_s: how long the first capture measures the
    idle baseline.
    """

    def __init__(self, source: Any, clock: Clock | None = None, min_updates: int = 20,
                 marker: Any = None, baseline_s: float = 0.5) -> None:
        self.source = source
        self.clock = clock or getattr(source, "clock", perf_clock)
        self.min_updates = min_updates
        self.marker = marker
        self.baseline_s = baseline_s
        self.baseline_w: float | None = None  # idle power, once a capture measured it

    @property
    def streaming(self) -> bool:
        return getattr(self.source, "mode", "") == "stream"

    @property
    def window_ns(self) -> int:
        """Shortest span worth measuring: `min_updates` counter updates (0 when streaming)."""
        if getattr(self.source, "mode", "") == "counter":
            return int(self.min_updates * int(self.source.update_interval_ns))
        return 0

    @property
    def name(self) -> str:
        return str(getattr(self.source, "spec", type(self.source).__name__))

    def capture(self) -> StreamCapture:
        """A new capture of a streaming source (not started)."""
        if not self.streaming:
            raise BadInputError(f"power source {self.name} does not stream")
        return StreamCapture(self)

    def span(self, work: Callable[[], Any]) -> tuple[Any, float, int, int]:
        """Run `work` once; (its result, energy_mj, t0_ns, t1_ns)."""
        if not self.streaming:
            t0, e0 = self.source.wait_for_tick()
            result = work()
            e1 = self.source.read_energy_mj()
            return result, float(e1 - e0), t0, self.clock()
        cap = self.capture().start()
        try:
            lo, t0 = cap.mark(1)
            result = work()
            t1, hi = cap.mark(0)
        finally:
            cap.stop()
        att = cap.windows_on_edges([[t0]], [[t1]], [[lo]], [[hi]])
        return result, float(att.layers[0].energy_mj), t0, t1

    def per_call(self, call: Callable[[], Any], min_calls: int = 20) -> float:
        """Mean energy of one `call`, from a window long enough to resolve it."""
        if not self.streaming:
            from profiler.attribution import measure_repeated

            return float(measure_repeated(call, self.source, min_updates=self.min_updates)
                         .energy_mj)

        def many() -> None:
            for _ in range(min_calls):
                call()

        _, energy, _, _ = self.span(many)
        return energy / min_calls
