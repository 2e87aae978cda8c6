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
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from governors import sim_model
from profiler.boards.model import Board
from profiler.clock import Clock, perf_clock


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
        self._t_ns: list[int] = []
        self._extra_w: list[float] = []
        self.to_host_ns: Callable[[np.ndarray], np.ndarray] | None = None

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
            if not self._extra_w or self._extra_w[-1] != w:
                self._t_ns.append(self.clock())
                self._extra_w.append(w)

    def extra_at(self, host_ns: np.ndarray) -> np.ndarray:
        with self._lock:
            t = np.array(self._t_ns, dtype=np.int64)
            w = np.array(self._extra_w, dtype=np.float64)
        if t.size == 0:
            return np.zeros(np.shape(host_ns))
        idx = np.searchsorted(t, host_ns, side="right") - 1
        return np.where(idx >= 0, w[np.clip(idx, 0, None)], 0.0)

    def power_w(self, t_s: np.ndarray, markers: np.ndarray) -> np.ndarray:
        t_s = np.asarray(t_s, dtype=np.float64)
        if self.to_host_ns is not None:
            extra = self.extra_at(self.to_host_ns(np.round(t_s * 1e6).astype(np.int64)))
        else:
            extra = self.extra_at(np.full(t_s.shape, self.clock(), dtype=np.int64))
        high = (np.asarray(markers) & 1) != 0
        return np.where(high, self.baseline_w + extra, self.baseline_w)
