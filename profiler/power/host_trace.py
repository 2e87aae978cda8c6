"""A power trace on the host clock, and integrating it over windows of time.

`HostTrace` is what every streaming source hands over once its capture is mapped
onto the host clock (`profiler.power.clockmap`): power samples, the logger's marker
edges, and the spans where frames were lost. `WindowIntegrator` integrates it
over many windows at once (trapezoid, O(log n) per window, with the "hold" edge
rule `profiler.power.attribution` explains); `idle_baseline_w` is the mean power over one
idle window. Attribution builds on these; nothing here knows about layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from profiler.errors import BadInputError, PowerSourceError

EdgeMode = Literal["hold", "interpolate"]


@dataclass
class HostTrace:
    """Power samples and marker edges on the host clock (int64 ns).

    ``t_ns`` is the centre of each sample's measurement; a sensor that averages
    over ``sample_window_ns`` (e.g. an INA226 conversion) is timestamped at the
    middle of that window. Times must not decrease; samples sharing a timestamp
    are merged into one with their mean power. ``lost_*`` describe spans where frames were lost: from
    the last good sample/edge before a sequence gap to the first after it.
    """

    t_ns: np.ndarray
    power_w: np.ndarray
    edge_t_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    edge_markers: np.ndarray | None = None  # marker levels after each edge
    edge_changed: np.ndarray | None = None  # bit k set if input k changed
    markers: np.ndarray | None = None  # marker bits per sample
    lost_start_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    lost_end_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    lost_frames: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    sample_window_ns: int = 0
    corrupt_frames: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        self.t_ns = np.asarray(self.t_ns, dtype=np.int64)
        self.power_w = np.asarray(self.power_w, dtype=np.float64)
        self.edge_t_ns = np.asarray(self.edge_t_ns, dtype=np.int64)
        for name in ("lost_start_ns", "lost_end_ns", "lost_frames"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        if self.t_ns.shape != self.power_w.shape or self.t_ns.ndim != 1:
            raise BadInputError(f"power trace: {self.t_ns.shape} times but "
                                f"{self.power_w.shape} powers")
        step = np.diff(self.t_ns)
        if np.any(step < 0):
            raise BadInputError("power trace: sample times go backwards",
                                fix="sort the trace by time (host clock) first")
        if np.any(step == 0):
            # Two samples stamped in the same microsecond (a logger can do that):
            # one sample at that time with their mean power.
            t, first, counts = np.unique(self.t_ns, return_index=True, return_counts=True)
            groups = np.repeat(np.arange(t.size), counts)
            self.power_w = np.bincount(groups, weights=self.power_w) / counts
            if self.markers is not None:
                self.markers = np.asarray(self.markers)[first + counts - 1]
            self.t_ns = t
        if not (self.lost_start_ns.shape == self.lost_end_ns.shape == self.lost_frames.shape):
            raise BadInputError("power trace: lost span arrays differ in length")

    @property
    def total_lost_frames(self) -> int:
        return int(self.lost_frames.sum())

    def window_energy_mj(self, start_ns: npt.ArrayLike, end_ns: npt.ArrayLike,
                         edge_mode: EdgeMode = "hold",
                         guard_ns: float = 0.0) -> np.ndarray:
        """Energy in mJ over arbitrary windows (same shapes as ``start_ns``)."""
        return WindowIntegrator(self, guard_ns).energy_mj(np.asarray(start_ns), np.asarray(end_ns),
                                           edge_mode)[0]


def idle_baseline_w(trace: HostTrace, start_ns: int, end_ns: int) -> float:
    """Mean power over an idle window (energy / duration), for ``baseline_power_w``."""
    if end_ns <= start_ns:
        raise BadInputError(f"idle window [{start_ns}, {end_ns}] ns is empty")
    inside = (trace.t_ns >= start_ns) & (trace.t_ns < end_ns)
    if not inside.any():
        raise PowerSourceError("no power sample in the idle window",
                               fix="measure the baseline for longer (--baseline-s)")
    e = trace.window_energy_mj(np.array([start_ns]), np.array([end_ns]), "interpolate")
    return float(e[0]) * 1e6 / (end_ns - start_ns)


class WindowIntegrator:
    """Trapezoid integral of a trace with O(log n) window queries."""

    def __init__(self, trace: HostTrace, guard_ns: float = 0.0) -> None:
        if trace.t_ns.size == 0:
            raise PowerSourceError("the power trace has no samples",
                                   fix="check the logger is streaming (coupprof collect)")
        self.t0 = int(trace.t_ns[0])
        self.c = (trace.t_ns - self.t0).astype(np.float64)  # ns, float: precise near 0
        self.p = trace.power_w
        # A sample counts as inside a window (for "hold") only if its averaging
        # window is, with a guard for the edge timestamps' resolution.
        self.half_w = trace.sample_window_ns / 2.0 + guard_ns
        seg = 0.5 * (self.p[1:] + self.p[:-1]) * np.diff(self.c)
        self.cum = np.concatenate([[0.0], np.cumsum(seg)])  # W*ns

    def _F(self, x: np.ndarray) -> np.ndarray:
        """Integral from c[0] to x of the linear interpolant (constant beyond the ends)."""
        c, p, cum = self.c, self.p, self.cum
        n = c.size
        if n == 1:
            return (x - c[0]) * p[0]
        i = np.clip(np.searchsorted(c, x, side="right") - 1, 0, n - 2)
        dx = x - c[i]
        slope = (p[i + 1] - p[i]) / (c[i + 1] - c[i])
        inner = cum[i] + dx * (p[i] + 0.5 * slope * dx)
        before = (x - c[0]) * p[0]
        after = cum[-1] + (x - c[-1]) * p[-1]
        return np.where(x < c[0], before, np.where(x > c[-1], after, inner))

    def energy_mj(self, start_ns: np.ndarray, end_ns: np.ndarray, edge_mode: EdgeMode,
                  ) -> tuple[np.ndarray, np.ndarray]:
        """(energy_mj, samples inside) for each window."""
        if edge_mode not in ("hold", "interpolate"):
            raise BadInputError(f"unknown edge mode {edge_mode!r}", fix="use hold or interpolate")
        a = (start_ns.astype(np.int64) - self.t0).astype(np.float64)
        b = (end_ns.astype(np.int64) - self.t0).astype(np.float64)
        c, p, cum = self.c, self.p, self.cum
        e = self._F(b) - self._F(a)
        inside = (np.searchsorted(c, b, side="left") - np.searchsorted(c, a, side="left"))
        if edge_mode == "hold":
            j0 = np.searchsorted(c, a + self.half_w, side="left")  # first clean sample
            j1 = np.searchsorted(c, b - self.half_w, side="right") - 1  # last clean sample
            ok = j0 <= j1
            k0, k1 = np.where(ok, j0, 0), np.where(ok, j1, 0)
            held = (cum[k1] - cum[k0]) + p[k0] * (c[k0] - a) + p[k1] * (b - c[k1])
            e = np.where(ok, held, e)
        return e * 1e-6, inside  # W*ns -> mJ

    def holes_in(self, start_ns: np.ndarray, end_ns: np.ndarray, factor: float) -> np.ndarray:
        """Sample holes (spacing over ``factor`` x the median period) each window overlaps."""
        c = self.c
        if c.size < 3:
            return np.zeros(start_ns.shape, np.int64)
        d = np.diff(c)
        k = np.flatnonzero(d > factor * np.median(d))
        if k.size == 0:
            return np.zeros(start_ns.shape, np.int64)
        h0, h1 = c[k], c[k + 1]  # disjoint and sorted
        a = (start_ns.astype(np.int64) - self.t0).astype(np.float64)
        b = (end_ns.astype(np.int64) - self.t0).astype(np.float64)
        return (np.searchsorted(h0, b, side="left")
                - np.searchsorted(h1, a, side="right")).astype(np.int64)

    def lost_in(self, trace: HostTrace, start_ns: np.ndarray, end_ns: np.ndarray,
                ) -> np.ndarray:
        lost = np.zeros(start_ns.shape, dtype=np.int64)
        for s, e, n in zip(trace.lost_start_ns, trace.lost_end_ns, trace.lost_frames,
                           strict=True):
            lost += np.where((start_ns < e) & (end_ns > s), n, 0)
        return lost
