"""The simulated board's power over time, as its logger samples it.

The board draws its idle power plus, per processor, a running sub-model's modelled power
(reported by the simulated executor) or, while it is busy without running one
(``busy(letter, key)`` / ``idle(letter, key)``), its dynamic power at the overhead
activity; processors add up. The virtual logger asks for ``power_w(t, markers)`` at each
sample's time, and `true_energy_mj(t0, t1)` gives the ground truth of any window. The
executor finds the board's model with `current(board)`.

In full: profiler/sim/README.md ("The board's power over time").
"""

from __future__ import annotations

import bisect
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from profiler.boards.model import Board
from profiler.clock import Clock, perf_clock
from profiler.sim import model as sim_model
from profiler.sim import perf
from profiler.sim.governor import Levels, level_reader

_current: weakref.WeakValueDictionary[str, SimPowerModel] = weakref.WeakValueDictionary()
_current_lock = threading.Lock()


def current(board: Board) -> SimPowerModel | None:
    """The live power model of the simulated board named like `board`, if any."""
    with _current_lock:
        return _current.get(board.name)


class _Steps:
    """A power step function on the host clock: ``push(t, w)`` from then on, ``at(times)``.

    The logger asks for ever later times, so steps older than the earliest time asked
    for (but the one in force then) are dropped. Callers hold the model's lock."""

    def __init__(self) -> None:
        self.t: list[int] = []
        self.w: list[float] = []

    def push(self, t_ns: int, w: float) -> None:
        if not self.w or self.w[-1] != w:
            self.t.append(t_ns)
            self.w.append(w)

    def at(self, host_ns: np.ndarray) -> np.ndarray:
        if not self.t or host_ns.size == 0:
            return np.zeros(host_ns.shape)
        first = bisect.bisect_right(self.t, int(host_ns.min())) - 1
        if first > 0:
            del self.t[:first], self.w[:first]
        idx = np.searchsorted(np.array(self.t, dtype=np.int64), host_ns, side="right") - 1
        return np.where(idx >= 0, np.array(self.w)[np.clip(idx, 0, None)], 0.0)


class _History:
    """Every step of the summed dynamic power, for the ground truth of any window."""

    def __init__(self) -> None:
        self.t: list[int] = []
        self.w: list[float] = []

    def push(self, t_ns: int, w: float) -> None:
        if self.t and self.t[-1] == t_ns:
            self.w[-1] = w
        elif not self.w or self.w[-1] != w:
            self.t.append(t_ns)
            self.w.append(w)

    def energy_mj(self, t0_ns: int, t1_ns: int) -> float:
        if not self.t or t1_ns <= t0_ns:
            return 0.0
        t = np.array(self.t, dtype=np.int64)
        w = np.array(self.w)
        edges = np.clip(np.append(t, max(t1_ns, int(t[-1]))), t0_ns, t1_ns)
        return float(np.sum(w * np.diff(edges))) / 1e6


@dataclass(frozen=True)
class BusyInterval:
    """Processor `letter` drawing `power_w` above idle from ``start_ns`` to ``end_ns``."""

    letter: str
    start_ns: int
    end_ns: int
    power_w: float

    def energy_mj(self, t0_ns: int, t1_ns: int) -> float:
        """Its dynamic energy inside [t0_ns, t1_ns]."""
        overlap = min(self.end_ns, t1_ns) - max(self.start_ns, t0_ns)
        return self.power_w * overlap / 1e6 if overlap > 0 else 0.0


@dataclass
class _Proc:
    run_w: float | None = None  # a sub-model run in progress
    busy_w: float = 0.0
    busy_keys: set[int] = field(default_factory=set)
    since_ns: int = 0  # when `drawn_w` started
    drawn_w: float = 0.0  # what it drew since then

    @property
    def watts(self) -> float:
        if self.run_w is not None:
            return self.run_w
        return self.busy_w if self.busy_keys else 0.0


class SimPowerModel:
    """Board power as the virtual logger samples it: ``power_w(t_s, markers)``."""

    def __init__(self, board: Board, clock: Clock = perf_clock) -> None:
        self.board = board
        self.clock = clock
        self.idle_w = sim_model.idle_power_w(board)
        self._lock = threading.Lock()
        self.to_host_ns: Callable[[np.ndarray], np.ndarray] | None = None
        self._procs: dict[str, _Proc] = {}
        self._steps = _Steps()
        self._history = _History()
        self._intervals: list[BusyInterval] = []
        self._freq_fns: dict[str, Callable[[], Levels]] = {}
        self._busy_price: dict[tuple[str, Levels], float] = {}
        self._seen_ns = 0  # the latest time a reader has been told the power at
        self._pushed_ns = 0  # the latest change's time
        with _current_lock:
            _current[board.name] = self

    @property
    def baseline_w(self) -> float:
        """Power with every processor idle (what the idle baseline should measure)."""
        return self.idle_w

    # -- what the executor reports ----------------------------------------------------
    def running(self, letter: str, watts: float, at_ns: int | None = None) -> None:
        """A sub-model run on `letter` starts at ``at_ns`` (default: now), drawing `watts`
        above idle. A call's start is told once it has been priced (the frequencies read,
        tens of microseconds later on a slow host): its power is dated back to when the
        call began, as its modelled time is, but never before a time a reader has
        already been given the power at."""
        with self._lock:
            self._procs.setdefault(letter, _Proc()).run_w = watts
            self._push(at_ns)

    def stopped(self, letter: str) -> None:
        """The run on `letter` ended now (the host's pacing thread, woken late, tells it
        late: the processor draws its power until then, as it does through an overrun)."""
        with self._lock:
            p = self._procs.get(letter)
            if p is not None and p.run_w is not None:
                p.run_w = None
                self._push()

    # -- busy between runs (hand-overs, copies) ----------------------------------------
    def busy_w(self, letter: str) -> float:
        """What `letter` draws while busy between runs: its dynamic power at the
        overhead activity, at the frequencies in effect now."""
        fn = self._freq_fns.get(letter)
        if fn is None:
            fn = self._freq_fns[letter] = level_reader(self.board, self.board.processor(letter))
        levels = fn()
        key = (letter, levels)
        got = self._busy_price.get(key)
        if got is None:
            proc = self.board.processor(letter)
            c = sim_model.constants(proc)
            f_khz, volts = sim_model.operating_point(proc, levels[0])
            host = self.board.processors.get(proc.host) if proc.host else None
            fh_khz, vh = (sim_model.operating_point(host, levels[1])
                          if host is not None and host.has_dvfs else (0, 0.0))
            overhead = perf.TimeSplit(np.array(0.0), np.array(0.0), np.array(1.0))
            got = self._busy_price[key] = float(perf.dynamic_power_w(
                c.power, overhead, volts, f_khz / 1e6, vh, fh_khz / 1e6))
        return got

    def busy(self, letter: str, key: int = 0) -> None:
        """`letter` works (for `key`) from now on; again while busy: re-read its frequency."""
        w = self.busy_w(letter)
        with self._lock:
            p = self._procs.setdefault(letter, _Proc())
            p.busy_keys.add(key)
            p.busy_w = w
            self._push()

    def idle(self, letter: str, key: int = 0) -> None:
        """`letter` stops working for `key` (idle once no key keeps it busy)."""
        with self._lock:
            p = self._procs.get(letter)
            if p is None or key not in p.busy_keys:
                return
            p.busy_keys.discard(key)
            self._push()

    def _push(self, at_ns: int | None = None) -> None:
        # The time is read under the lock: see activity_w_at.
        now = self.clock()
        if at_ns is not None:
            now = min(now, max(at_ns, self._seen_ns + 1, self._pushed_ns))
        self._pushed_ns = now
        for letter, p in self._procs.items():
            w = p.watts
            if w != p.drawn_w:
                if p.drawn_w > 0 and now > p.since_ns:
                    self._intervals.append(BusyInterval(letter, p.since_ns, now, p.drawn_w))
                p.since_ns, p.drawn_w = now, w
        total = sum(p.watts for p in self._procs.values())
        self._steps.push(now, total)
        self._history.push(now, total)

    @property
    def intervals(self) -> list[BusyInterval]:
        """Every stretch a processor drew power above idle, in order; one still open ends
        now."""
        with self._lock:
            now = self.clock()
            return [*self._intervals,
                    *(BusyInterval(k, p.since_ns, now, p.drawn_w)
                      for k, p in self._procs.items() if p.drawn_w > 0)]

    # -- what the logger and the tests read ----------------------------------------------
    def power_w(self, t_s: np.ndarray, markers: np.ndarray) -> np.ndarray:
        t_s = np.asarray(t_s, dtype=np.float64)
        if self.to_host_ns is not None:
            host = self.to_host_ns(np.round(t_s * 1e6).astype(np.int64))
        else:
            host = np.full(t_s.shape, self.clock(), dtype=np.int64)
        return self.baseline_w + self.activity_w_at(host)

    def activity_w_at(self, host_ns: np.ndarray) -> np.ndarray:
        """Summed dynamic power of the processors at each host time.

        Times are read under the lock when a change is pushed, and the logger reads
        its own time before asking, so a change it has not seen yet lies after every
        sample it asks about; one dated back (`running`) lies after every time asked.
        """
        host = np.asarray(host_ns, dtype=np.int64)
        with self._lock:
            if host.size:
                self._seen_ns = max(self._seen_ns, int(host.max()))
            return self._steps.at(host)

    def true_energy_mj(self, t0_ns: int, t1_ns: int) -> float:
        """Ground truth: board energy over [t0_ns, t1_ns] (idle x time + the recorded
        dynamic power integrated over the window)."""
        with self._lock:
            self._seen_ns = max(self._seen_ns, t1_ns)
            dyn = self._history.energy_mj(t0_ns, t1_ns)
        return self.baseline_w * max(t1_ns - t0_ns, 0) / 1e6 + dyn
