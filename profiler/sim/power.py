"""The simulated board's execution and power: real LiteRT on the host, modelled speed and watts.

On `--board sim` every software path is the real one; only the silicon is modelled:

- **Execution** (`profiler.executors.factory.make_executor`): each layer's
  sub-model runs in LiteRT on the host CPU; its wall time is stretched, inside the
  timed window, to what the modelled processor would take at the frequency in
  effect *now* (the sim governor's `effective_khz`, which lags each write by
  ARM-CO-UP Table 10's transition delay): ``t_sim = t_host * stretch_factor(proc, f)``.
- **Power.** A `SimPowerModel` gives the virtual logger its ``power_w(t, markers)``:
  the board's idle power plus every processor's static power, plus, while the
  marker line is high, the busy processor's dynamic power
  ``C_eff * V^2 * f`` at the frequency set for that layer. The logger samples
  it, timestamps the marker edges with its own clock and streams protocol frames
  over a pty to the real collector, whose trace the real attribution integrates.

So attributed energy can be checked against the model: for a layer that ran
``t`` seconds at ``P_busy``, energy = ``(P_idle_total + P_dyn) * t``.

**Several processors at once** (`coupprof run`, `coupprof transfer-matrix`): the
code that drives a processor reports its activity with ``busy(letter, key)`` and
``idle(letter, key)`` (key: which stage or thread, so a processor serving two
stages is busy while either is). While busy, the processor adds its dynamic power
at the frequency in effect when ``busy`` was called (the sim governor's
``effective_khz``; call ``busy`` again to pick up a DVFS change); the board's power
is the baseline plus the sum over busy processors. This activity is recorded on the
host clock and does not depend on the marker lines, which stay free for what they
do on a real rig: windows and the clock fit. Every busy interval is kept
(`intervals`), so `true_energy_mj(t0, t1)` gives the ground truth of any window
without going through the logger, collector, clock fit or attribution.

What counts as busy is the caller's choice, documented where it is made: in
`profiler.pipeline` a stage's processor is busy from taking a frame to putting it
on (hand-overs in, layers, read-out); in `profiler.transfer` the producer's
processor while it runs and copies out, the consumer's while it copies in.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from profiler.boards.model import Board
from profiler.clock import Clock, perf_clock
from profiler.sim import model as sim_model


@dataclass(frozen=True)
class BusyInterval:
    """A processor busy from ``start_ns`` to ``end_ns`` (host clock), adding ``power_w``."""

    letter: str
    start_ns: int
    end_ns: int
    power_w: float  # dynamic power on top of the baseline

    def energy_mj(self, t0_ns: int, t1_ns: int) -> float:
        """Its dynamic energy inside [t0_ns, t1_ns]."""
        overlap = min(self.end_ns, t1_ns) - max(self.start_ns, t0_ns)
        return self.power_w * overlap / 1e6 if overlap > 0 else 0.0


@dataclass
class _Active:
    start_ns: int
    power_w: float
    keys: set[int] = field(default_factory=set)


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


class SimPowerModel:
    """Board power as the virtual logger samples it: ``power_w(t_s, markers)``.

    ``set_busy(letter, freq_khz)`` names the processor (and its frequency) that the
    next marker-high window runs on; the runner's hooks call it before raising the
    marker. Changes are kept as a timeline on the host clock and looked up at each
    sample's own time (the logger synthesises samples in batches, after the fact),
    through ``to_host_ns`` (device microseconds -> host ns; the logger's true clock).
    """

    def __init__(self, board: Board, clock: Clock = perf_clock) -> None:
        self.board = board
        self.clock = clock
        self.idle_w = float(board.extra.get("sim", {}).get("idle_power_mw", 0.0)) / 1000
        self.static_w = sum(sim_model.constants(p).p_static_mw for p in board.processors.values()
                            if isinstance(p.extra.get("sim"), dict)) / 1000
        self._lock = threading.Lock()
        self._marked = _Steps()  # set_busy: what a marker-high window adds
        self.to_host_ns: Callable[[np.ndarray], np.ndarray] | None = None
        # Activity (busy/idle): the summed dynamic power, and every finished interval
        # for the ground truth.
        self._activity = _Steps()
        self._active: dict[str, _Active] = {}
        self._intervals: list[BusyInterval] = []
        self._freq_fns: dict[str, Callable[[], int | None]] = {}

    @property
    def baseline_w(self) -> float:
        """Power with every processor idle (what the idle baseline should measure)."""
        return self.idle_w + self.static_w

    def busy_extra_w(self, letter: str, freq_khz: int | None) -> float:
        """What a busy processor adds to the baseline: its dynamic power C_eff V^2 f."""
        proc = self.board.processor(letter)
        c = sim_model.constants(proc)
        return (sim_model.power_mw(proc, freq_khz) - c.p_static_mw) / 1000

    def set_busy(self, letter: str, freq_khz: int | None) -> None:
        w = self.busy_extra_w(letter, freq_khz)
        with self._lock:
            self._marked.push(self.clock(), w)

    def power_w(self, t_s: np.ndarray, markers: np.ndarray) -> np.ndarray:
        t_s = np.asarray(t_s, dtype=np.float64)
        if self.to_host_ns is not None:
            host = self.to_host_ns(np.round(t_s * 1e6).astype(np.int64))
        else:
            host = np.full(t_s.shape, self.clock(), dtype=np.int64)
        with self._lock:
            extra = self._marked.at(host)
            active = self._activity.at(host)
        high = (np.asarray(markers) & 1) != 0
        return np.where(high, self.baseline_w + extra, self.baseline_w) + active

    # -- activity: several processors busy at once ------------------------------------
    def freq_khz(self, letter: str) -> int | None:
        """The frequency in effect on `letter` now (None: its top level or nominal point)."""
        fn = self._freq_fns.get(letter)
        if fn is None:
            fn = self._freq_fns[letter] = self._freq_reader(letter)
        return fn()

    def _freq_reader(self, letter: str) -> Callable[[], int | None]:
        from governors.factory import make_governor
        from profiler.sim.governor import SimGovernor

        proc = self.board.processor(letter)
        if not proc.has_dvfs:
            return lambda: None  # the NPU: its nominal operating point
        gov = make_governor(self.board, self.board.dvfs_domain(letter))
        if not isinstance(gov, SimGovernor):
            return lambda: None
        table = set(proc.freqs_khz)
        return lambda: (khz if (khz := gov.effective_khz()) in table else None)

    def busy(self, letter: str, key: int = 0) -> None:
        """`letter` works (for `key`) from now on; again while busy: re-read its frequency."""
        w = self.busy_extra_w(letter, self.freq_khz(letter))
        with self._lock:  # the time is read under the lock: see activity_w_at
            now = self.clock()
            act = self._active.get(letter)
            if act is None:
                self._active[letter] = _Active(now, w, {key})
            else:
                act.keys.add(key)
                if act.power_w != w:
                    self._intervals.append(BusyInterval(letter, act.start_ns, now, act.power_w))
                    act.start_ns, act.power_w = now, w
            self._push(now)

    def idle(self, letter: str, key: int = 0) -> None:
        """`letter` stops working for `key` (idle once no key keeps it busy)."""
        with self._lock:
            now = self.clock()
            act = self._active.get(letter)
            if act is None or key not in act.keys:
                return
            act.keys.discard(key)
            if not act.keys:
                self._intervals.append(BusyInterval(letter, act.start_ns, now, act.power_w))
                del self._active[letter]
            self._push(now)

    def _push(self, now: int) -> None:
        self._activity.push(now, sum(a.power_w for a in self._active.values()))

    def activity_w_at(self, host_ns: np.ndarray) -> np.ndarray:
        """Summed dynamic power of the busy processors at each host time.

        Times are read under the lock in `busy`/`idle`, and the logger reads its own
        time before asking, so a change it has not seen yet lies after every sample it
        asks about.
        """
        with self._lock:
            return self._activity.at(np.asarray(host_ns, dtype=np.int64))

    @property
    def intervals(self) -> list[BusyInterval]:
        """Every busy interval so far; one still open ends now."""
        with self._lock:
            now = self.clock()
            return [*self._intervals,
                    *(BusyInterval(k, a.start_ns, now, a.power_w) for k, a in self._active.items())]

    def true_energy_mj(self, t0_ns: int, t1_ns: int) -> float:
        """Ground truth: board energy over [t0_ns, t1_ns] from the recorded activity
        (baseline x time + each busy interval's dynamic power x its overlap)."""
        dyn = sum(iv.energy_mj(t0_ns, t1_ns) for iv in self.intervals)
        return self.baseline_w * max(t1_ns - t0_ns, 0) / 1e6 + dyn
