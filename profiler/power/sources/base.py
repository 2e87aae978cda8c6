"""`PowerSource`: one base class for everything that measures the board's power.

Three shapes of hardware fit under it: streaming sources (`StreamSource`: timestamped
samples and marker edges), reading sources (`ReadingSource`: readings that carry the
marker pin, milliseconds apart) and counter sources (`CounterSource`: a polled cumulative
energy counter; a power-only reading gets a software counter, `PowerIntegrator`). Units
are in the names; vendor and OS errors become coupprof errors once, inside each back end:
setting up raises exit 3, failing mid-run `PowerSourceError` (exit 4).

Each shape in full: docs/power.md ("The three shapes of source").
"""

from __future__ import annotations

import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from profiler.clock import Clock, perf_clock
from profiler.errors import PowerSourceError

if TYPE_CHECKING:
    from profiler.power.clockmap import ClockFit
    from profiler.power.host_trace import HostTrace
    from profiler.power.trace import DeviceTrace
    from profiler.recordings.traces import Recording

__all__ = ["CounterSource", "PowerIntegrator", "PowerSource", "ReadingSource", "SourceInfo",
           "StreamSource", "TickTimeoutError"]


@dataclass(frozen=True)
class SourceInfo:
    """What the run's JSON sidecar records about its power source."""

    spec: str  # as given, e.g. "hwmon:ina226"
    kind: str  # back end: arduino, sim, hwmon, nvml, rapl, none
    mode: str  # "stream", "counter" or "none"
    device: str  # what was opened: a port, a sysfs directory, a GPU name
    sample_rate_hz: float | None = None  # streaming sources
    update_interval_ns: int | None = None  # counter sources: how often the counter refreshes
    energy_resolution_mj: float | None = None  # counter step, where known
    hardware_energy_counter: bool = False  # False: energy integrated from polled power
    detail: str = ""  # anything else worth a line (channel label, zones summed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Activity(Protocol):
    """Told when a processor starts and stops working. A source whose power follows the
    work it is told of (the simulated board's model) is one; real sources measure it."""

    def busy(self, letter: str, key: int = 0) -> None: ...

    def idle(self, letter: str, key: int = 0) -> None: ...


class NoActivity:
    """Where nobody needs to be told: every real power source."""

    def busy(self, letter: str, key: int = 0) -> None:
        pass

    def idle(self, letter: str, key: int = 0) -> None:
        pass


class PowerSource(ABC):
    """Base of every power source. Use as a context manager: ``with source: ...``."""

    kind: ClassVar[str] = ""
    mode: ClassVar[str] = ""

    def __init__(self, spec: str, clock: Clock = perf_clock) -> None:
        self.spec = spec
        self.clock = clock
        self._open = False

    @property
    def is_open(self) -> bool:
        return self._open

    @property
    def activity(self) -> Activity:
        """What to tell when a processor works, for a source that models its power from
        that (the simulated board's); a real source measures it and needs nothing."""
        return NoActivity()

    def open(self) -> PowerSource:
        """Acquire the device (files, library handles, ports). Idempotent."""
        if not self._open:
            self._open_device()
            self._open = True
        return self

    def close(self) -> None:
        """Release the device. Idempotent; also called on errors by the context manager."""
        if self._open:
            self._open = False
            self._close_device()

    def __enter__(self) -> PowerSource:
        return self.open()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r}, {'open' if self._open else 'closed'})"

    @abstractmethod
    def info(self) -> SourceInfo:
        """Facts for the sidecar (valid after open)."""

    @abstractmethod
    def _open_device(self) -> None: ...

    @abstractmethod
    def _close_device(self) -> None: ...

    def _require_open(self) -> None:
        if not self._open:
            raise PowerSourceError(f"power source {self.spec!r} is not open",
                                   fix="use it inside `with source:` or call open() first")


class StreamSource(PowerSource):
    """A source that streams samples and marker edges on its own clock (the logger, real
    or virtual). A capture is mapped onto the host clock over the marker changes the
    host made (`profiler.power.clockmap`), so it can only be attributed with a marker."""

    mode = "stream"
    #: The fitted logger-to-host clock map of the last `map_clock` (None before).
    fit: ClockFit | None = None

    def keep_trace_on_disk(self) -> None:
        """Later captures stay in memory: the one on disk (the layer run's, which the
        sidecar's clock map and `coupprof plot timeline` refer to) is not overwritten by
        the short spans measured after it. Back ends that write no trace ignore this."""

    @abstractmethod
    def start(self) -> None:
        """Begin a capture (samples and edges from now on)."""

    @abstractmethod
    def stop_capture(self) -> DeviceTrace:
        """End the capture; it is on the logger's clock. On a mid-run failure the back end
        raises `PowerSourceError` with the partial capture in ``err.trace``."""

    @abstractmethod
    def map_clock(self, capture: DeviceTrace, host_ns: np.ndarray,
                  host_levels: np.ndarray | None = None,
                  host_halfwidth_ns: np.ndarray | None = None) -> HostTrace:
        """The capture on the host clock, fitted over the marker changes the host made
        (their times ``host_ns``, the level after each and how far off each time may be);
        sets ``fit``."""

    def poll(self) -> None:
        """Raise a failure noticed in the background (port gone, logger silent)."""


class ReadingSource(PowerSource):
    """A logger that prints each reading with its marker pin on its own millisecond clock
    and timestamps no edge (ARM-CO-UP's INA260 sketch). A run's windows are found in the
    recording afterwards; see docs/power.md."""

    mode = "readings"
    #: How long the marker must stay idle between two windows for the logger to see it.
    gap_ns: ClassVar[int] = 0
    #: The pin's level while a window (a layer) runs.
    active_level: int = 1
    #: A failure noticed mid-run (port gone, logger silent); the recording is what came.
    error: PowerSourceError | None = None

    @abstractmethod
    def start(self) -> None:
        """Begin a recording (readings from now on)."""

    @abstractmethod
    def stop_recording(self) -> Recording:
        """End the recording and return it; a mid-run failure leaves it partial and sets
        ``error``. Raises `PowerSourceError` when nothing was recorded."""

    def poll(self) -> None:
        """Raise a failure noticed in the background (port gone, logger silent)."""


class TickTimeoutError(PowerSourceError):
    """A counter did not change within the expected time."""


#: Between two reads of a counter awaited while a processor is kept busy (`wait_for_tick`),
#: and the interpreter's switch interval meanwhile.
TICK_POLL_S = 50e-6
TICK_SWITCH_S = 100e-6


class CounterSource(PowerSource):
    """A polled source with a cumulative energy counter (hardware or integrated)."""

    mode = "counter"
    #: How often the hardware refreshes the counter; `measure_repeated` sizes windows from it.
    update_interval_ns: int = 1_000_000

    def __init__(self, spec: str, clock: Clock = perf_clock) -> None:
        super().__init__(spec, clock)
        self._last_power_read: tuple[int, float] | None = None

    @abstractmethod
    def read_energy_mj(self) -> float:
        """Energy since open() in mJ, monotone (counter wraps are unfolded)."""

    def read_power_w(self) -> float:
        """Mean power since the previous call (from the counter); the first call waits
        for one counter update. Back ends with a direct power reading override it."""
        last = self._last_power_read or self.wait_for_tick()
        t_ns, e_mj = self.clock(), self.read_energy_mj()
        if e_mj == last[1] or t_ns <= last[0]:
            t_ns, e_mj = self.wait_for_tick(last[1])
        self._last_power_read = (t_ns, e_mj)
        return (e_mj - last[1]) * 1e6 / (t_ns - last[0])  # mJ/ns -> W

    def wait_for_tick(self, since_mj: float | None = None, timeout_ns: int | None = None,
                      busy: Callable[[], object] | None = None) -> tuple[int, float]:
        """Spin until the counter changes (from ``since_mj``, or from its value now) and
        return ``(time_ns, energy_mj)`` at that moment: aligning a window's start with a
        counter update removes up to one update interval of quantisation error.

        ``busy``: run again and again meanwhile, so that the processor measured next is
        not idle while the counter is awaited (an idle GPU lowers its clock within
        milliseconds, and the window's first frames would run slow), until an update
        comes while it runs: one that came before the first call began (a loaded host
        can take milliseconds to start the poller and the call) found the processor
        idle, and the next is awaited. The counter is read by a thread of its own,
        `TICK_POLL_S` apart, so the update's time is still known within a read, not
        within a ``busy`` call; this returns when the call in which it came has ended."""
        limit = timeout_ns if timeout_ns is not None else max(50 * self.update_interval_ns,
                                                              2_000_000_000)
        if busy is None:
            return self._poll_tick(since_mj, limit, None)
        while True:
            t_ns, e_mj, first_ns = self._tick_while_busy(since_mj, limit, busy)
            if t_ns >= first_ns:
                return t_ns, e_mj
            since_mj = None  # the processor was idle when it came: the next one from now

    def _tick_while_busy(self, since_mj: float | None, limit: int,
                         busy: Callable[[], object]) -> tuple[int, float, int]:
        """(time, energy) of the update the poller saw, and when the first busy call
        began."""
        found: list[tuple[int, float]] = []
        errors: list[BaseException] = []
        stop = threading.Event()

        def poll() -> None:
            try:
                found.append(self._poll_tick(since_mj, limit, stop))
            except BaseException as err:  # raised below, in the caller's thread
                errors.append(err)

        poller = threading.Thread(target=poll, name="coupprof-tick", daemon=True)
        # a ``busy`` that holds the GIL would keep the poller from its reads for the
        # interpreter's switch interval (5 ms): shorter while it polls
        switch_s = sys.getswitchinterval()
        sys.setswitchinterval(min(switch_s, TICK_SWITCH_S))
        poller.start()
        try:
            first_ns = self.clock()
            busy()
            while poller.is_alive():
                busy()
        finally:
            stop.set()
            poller.join()
            sys.setswitchinterval(switch_s)
        if errors:
            raise errors[0]
        return (*found[0], first_ns)

    def _poll_tick(self, since_mj: float | None, limit_ns: int,
                   stop: threading.Event | None) -> tuple[int, float]:
        start = self.read_energy_mj() if since_mj is None else since_mj
        t0 = self.clock()
        while stop is None or not stop.is_set():
            e = self.read_energy_mj()
            t = self.clock()
            if e != start:
                return t, e
            if t - t0 > limit_ns:
                break
            if stop is not None:
                time.sleep(TICK_POLL_S)  # the busy call's threads run in between
        raise TickTimeoutError(
            f"the energy counter of {self.spec!r} did not change in {limit_ns / 1e9:g} s",
            fix="check that the sensor is powered and its driver loaded, or use another "
            "--power source")

    def measure_update_interval(self, ticks: int = 5) -> int:
        """Time ``ticks`` counter updates, set ``update_interval_ns`` to their mean period
        and return it. The refresh rate varies by device and load (NVML: 20-100 ms)."""
        t_first, e = self.wait_for_tick()
        t = t_first
        for _ in range(ticks):
            t, e = self.wait_for_tick(e)
        self.update_interval_ns = max(int((t - t_first) / ticks), 1)
        return self.update_interval_ns


class PowerIntegrator:
    """A software energy counter for sources that only report power: a thread polls
    ``read_power_w`` every ``interval_ns`` and integrates it (trapezoid). Between polls
    the energy grows with the last power, so readings are continuous in time."""

    def __init__(self, read_power_w: Callable[[], float], interval_ns: int,
                 clock: Clock = perf_clock,
                 name: str = "power-integrator") -> None:
        self._read = read_power_w
        self.interval_ns = max(int(interval_ns), 100_000)
        self.clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._energy_mj = 0.0
        self._t_ns = 0
        self._p_w = 0.0
        self.samples = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._p_w, self._t_ns = float(self._read()), self.clock()
        self.samples = 1
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        wait_s = self.interval_ns / 1e9
        while not self._stop.wait(wait_s):
            try:
                p = float(self._read())
            except BaseException as err:  # reported by the next energy_mj()
                self.error = err
                return
            t = self.clock()
            with self._lock:
                self._energy_mj += (p + self._p_w) * 0.5 * (t - self._t_ns) * 1e-6
                self._t_ns, self._p_w = t, p
                self.samples += 1

    def energy_mj(self) -> float:
        if self.error is not None:
            err = self.error
            raise err if isinstance(err, PowerSourceError) else PowerSourceError(
                f"polling power failed: {err}", fix="check the sensor and its driver")
        with self._lock:
            return self._energy_mj + self._p_w * (self.clock() - self._t_ns) * 1e-6
