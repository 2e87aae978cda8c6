"""Per-layer energy: integrate a power trace over each layer's window.

Inputs: the host's layer timeline (``start_ns``/``end_ns`` per frame and layer,
from the runner, host clock), a `PowerTrace` already on the host clock (samples
and the logger's marker edges, mapped by `profiler.power.clockmap`), and an idle
baseline power measured before the run.

**Windows from edges, matched by time.** The logger timestamps each marker edge
on the same clock as its samples, so the best window boundaries are the logger's
own edges. Each host boundary (a layer start or end) is paired with the nearest
logger edge within a tolerance, after removing the median host-to-edge offset
(any clock-map bias). Optional brackets (``start_lo_ns``, ``end_hi_ns``: clock
reads just before a start's marker call and just after an end's) widen the
target to the whole marker call, so a call that stalled still finds its edge.
Boundaries are never paired by counting: a missed edge leaves its one boundary
unmatched (it falls back to the host time plus the median edge-minus-host
offset of the matched ones, and is counted in ``edges_missed``), a spurious edge
matches nothing (``edges_spurious``), and every later layer is unaffected. The
tolerance of a boundary is ``min(max_tolerance_ns, 0.45 * gap to its
neighbours)``, so two boundaries can never claim the same edge. With
``levels=(1, 0)`` an edge must also leave the marker line high at a start and
low at an end.

**Integration.** Energy is the trapezoid integral of the samples over the
window. At the window's ends (``edge_mode``):

* ``"hold"`` (default): the partial segment between a boundary and the first
  (last) sample inside the window takes that sample's power. Power changes at
  layer boundaries are steps; interpolating across a boundary would smear each
  step into both neighbours, a bias of about ``dP * dt / 6`` per boundary for
  sample period ``dt`` (4.8 % of a 1 ms layer at 3.5 kS/s when dP is half the
  power). Holding is exact for steps and second order for smooth power.
  Samples that average over ``sample_window_ns`` count as inside only if their
  whole averaging window is, and none closer than ``guard_ns`` (default 2 us,
  twice the logger's timestamp resolution) to the boundary: such a sample may
  have been taken on either side of the edge.
* ``"interpolate"``: linear interpolation between the samples on either side
  of the boundary.

A window with no sample inside is interpolated either way (``samples = 0``) and
flagged.

**Lost frames are never silently attributed.** The trace lists spans where the
logger's sequence numbers jumped (frames lost). A window overlapping one counts
those frames in ``lost_frames`` and is flagged, as is a window that overlaps a
sample hole (samples more than ``hole_factor`` median periods apart although no
frame was lost: the logger skipped conversions) or holds no sample at all. A
layer's power comes from its unflagged windows only (if every window is
flagged, from all of them, interpolated over the gaps), and its energy per
frame is that power times the mean length of all its windows: the mean energy
of the unflagged windows alone would favour the longer ones, since windows
shorter than a sample period are the ones likely to hold no sample. Either way
the layer reports ``flagged_windows`` (and ``lost``, ``lost_frames`` for lost
frames).

For counter sources (RAPL, NVML, hwmon), `measure_repeated` repeats a call
until the counter window is long enough and divides.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from profiler.errors import BadInputError, PowerSourceError

if TYPE_CHECKING:
    from profiler.power.sources.base import CounterSource

EdgeMode = Literal["hold", "interpolate"]

#: Default cap on how far a logger edge may be from its host boundary (after the
#: median offset is removed).
MAX_TOLERANCE_NS = 200_000


# --------------------------------------------------------------------------
# Input: the power trace on the host clock
# --------------------------------------------------------------------------

@dataclass
class PowerTrace:
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

    def window_energy_mj(self, start_ns: Any, end_ns: Any, edge_mode: EdgeMode = "hold",
                         guard_ns: float = 0.0) -> np.ndarray:
        """Energy in mJ over arbitrary windows (same shapes as ``start_ns``)."""
        return _Integrator(self, guard_ns).energy_mj(np.asarray(start_ns), np.asarray(end_ns),
                                           edge_mode)[0]


def idle_baseline_w(trace: PowerTrace, start_ns: int, end_ns: int) -> float:
    """Mean power over an idle window (energy / duration), for ``baseline_power_w``."""
    if end_ns <= start_ns:
        raise BadInputError(f"idle window [{start_ns}, {end_ns}] ns is empty")
    inside = (trace.t_ns >= start_ns) & (trace.t_ns < end_ns)
    if not inside.any():
        raise PowerSourceError("no power sample in the idle window",
                               fix="measure the baseline for longer (--baseline-s)")
    e = trace.window_energy_mj(np.array([start_ns]), np.array([end_ns]), "interpolate")
    return float(e[0]) * 1e6 / (end_ns - start_ns)


# --------------------------------------------------------------------------
# Integration
# --------------------------------------------------------------------------

class _Integrator:
    """Trapezoid integral of a trace with O(log n) window queries."""

    def __init__(self, trace: PowerTrace, guard_ns: float = 0.0) -> None:
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

    def lost_in(self, trace: PowerTrace, start_ns: np.ndarray, end_ns: np.ndarray,
                ) -> np.ndarray:
        lost = np.zeros(start_ns.shape, dtype=np.int64)
        for s, e, n in zip(trace.lost_start_ns, trace.lost_end_ns, trace.lost_frames,
                           strict=True):
            lost += np.where((start_ns < e) & (end_ns > s), n, 0)
        return lost


# --------------------------------------------------------------------------
# Matching host boundaries to logger edges
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class EdgeMatch:
    """Which host boundaries found a logger edge."""

    time_ns: np.ndarray  # refined boundary times, same order as the input boundaries
    matched: np.ndarray  # bool per boundary
    offset_ns: np.ndarray  # per boundary: its group's median (edge - host time) when matched
    spurious: int  # logger edges inside the run that matched no boundary


def match_edges(boundary_ns: np.ndarray, edge_ns: np.ndarray, *,
                lo_ns: np.ndarray | None = None, hi_ns: np.ndarray | None = None,
                boundary_levels: np.ndarray | None = None,
                edge_levels: np.ndarray | None = None,
                groups: np.ndarray | None = None,
                max_tolerance_ns: float = MAX_TOLERANCE_NS) -> EdgeMatch:
    """Pair each host boundary with the nearest logger edge (both on the host clock).

    ``lo_ns``/``hi_ns``: optional brackets: host times known to lie before and
    after the marker change of each boundary (the clock reads around the marker
    call); an edge inside its bracket is at distance 0, so a slow marker call does
    not push its edge out of reach. ``boundary_levels``/``edge_levels``: optional
    expected/observed marker level after each edge; then only same-level pairs
    match, and gaps are measured between same-level boundaries. ``groups``:
    boundaries whose host latency differs (a layer's start is timestamped after
    its marker edge, its end before) get their own median offset.
    """
    x = np.asarray(boundary_ns, dtype=np.int64)
    y = np.sort(np.asarray(edge_ns, dtype=np.int64))
    n = x.size
    if n == 0:
        return EdgeMatch(x.copy(), np.zeros(0, bool), np.zeros(0), int(y.size))
    lo = x if lo_ns is None else np.minimum(np.asarray(lo_ns, dtype=np.int64), x)
    hi = x if hi_ns is None else np.maximum(np.asarray(hi_ns, dtype=np.int64), x)
    if boundary_levels is None or edge_levels is None:
        bl = np.zeros(n, np.int64)
        el = np.zeros(y.size, np.int64)
    else:
        order = np.argsort(np.asarray(edge_ns, dtype=np.int64), kind="stable")
        bl = np.asarray(boundary_levels, dtype=np.int64)
        el = np.asarray(edge_levels, dtype=np.int64)[order]
    ref = int(lo.min())  # work in float relative to the run's start
    xf, lof, hif = ((v - ref).astype(np.float64) for v in (x, lo, hi))
    yf = (y - ref).astype(np.float64)

    # Per-boundary tolerance: under half the gap to the neighbours of the same level.
    tol = np.full(n, float(max_tolerance_ns))
    for level in np.unique(bl):
        idx = np.flatnonzero(bl == level)
        order = idx[np.argsort(xf[idx], kind="stable")]
        gaps = np.maximum(lof[order][1:] - hif[order][:-1], 0.0)
        left = np.concatenate([[np.inf], gaps])
        right = np.concatenate([gaps, [np.inf]])
        tol[order] = np.minimum(tol[order], 0.45 * np.minimum(left, right))

    def nearest(shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index of, and signed distance to, the nearest same-level edge per boundary
        bracket (0 inside it; ties go to the edge nearest the boundary time)."""
        best_i = np.full(n, -1)
        best_d = np.full(n, np.inf)
        for level in np.unique(bl):
            bi = np.flatnonzero(bl == level)
            ei = np.flatnonzero(el == level)
            if ei.size == 0:
                continue
            ye = yf[ei]
            L, H, X = lof[bi] + shift[bi], hif[bi] + shift[bi], xf[bi] + shift[bi]
            pl, ph = np.searchsorted(ye, L), np.searchsorted(ye, H, side="right")
            cand = np.clip(np.stack([pl - 1, pl, ph - 1, ph]), 0, ye.size - 1)
            e = ye[cand]
            d = np.where(e < L, e - L, np.where(e > H, e - H, 0.0))
            # Lexicographic (|d|, |e - X|) in one exact float key: ns are integers.
            key = np.abs(d) * 2.0**22 + np.minimum(np.abs(e - X), 2.0**22 - 1)
            pick = np.argmin(key, axis=0)
            cols = np.arange(bi.size)
            best_i[bi] = ei[cand[pick, cols]]
            best_d[bi] = d[pick, cols]
        return best_i, best_d

    _, d0 = nearest(np.zeros(n))
    close = np.abs(d0) <= max_tolerance_ns
    g = np.zeros(n, np.int64) if groups is None else np.asarray(groups, dtype=np.int64)
    offset = np.zeros(n)
    for group in np.unique(g):
        sel = g == group
        if (sel & close).any():
            offset[sel] = float(np.median(d0[sel & close]))
    idx, d = nearest(offset)
    matched = np.abs(d) <= tol
    # Tolerances under half the gaps keep pairs one to one; guard anyway.
    if matched.any():
        used, counts = np.unique(idx[matched], return_counts=True)
        for edge in used[counts > 1]:
            claim = np.flatnonzero(matched & (idx == edge))
            keep = claim[np.argmin(np.abs(d[claim]))]
            matched[claim[claim != keep]] = False
    edge_t = y[np.clip(idx, 0, max(y.size - 1, 0))] if y.size else x
    # An unmatched boundary falls back to its host time plus the median
    # (edge - host time) of its group's matched boundaries.
    fallback = np.zeros(n)
    for group in np.unique(g):
        sel = (g == group) & matched
        if sel.any():
            fallback[g == group] = float(np.median(edge_t[sel] - x[sel]))
    times = np.where(matched, edge_t, x + np.rint(fallback).astype(np.int64))
    span = (y >= lo.min() - max_tolerance_ns) & (y <= hi.max() + max_tolerance_ns)
    spurious = int(span.sum() - np.unique(idx[matched]).size)
    return EdgeMatch(times.astype(np.int64), matched, fallback, spurious)


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerEnergy:
    """One layer's energy per frame (means over the frames it was attributed from)."""

    layer: int
    frames: int  # windows used for the power (clean ones, unless none was clean)
    time_ms: float  # mean window length over every window (logger edges where matched)
    energy_mj: float  # per frame: power_w x time_ms
    power_w: float  # energy / time over the windows used
    dynamic_energy_mj: float  # energy - baseline * time, per frame
    fps_per_w: float  # 1 / (energy in J)
    samples: int  # power samples inside the windows used
    lost_frames: int  # logger frames lost inside any of the layer's windows
    lost: bool  # some window lost frames: the numbers are flagged
    flagged_windows: int  # windows with lost frames, sample holes or no sample (not used
    #                       unless every window of the layer is flagged)
    edges_missed: int  # boundaries with no logger edge (host time used)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Attribution:
    """Per-layer energies, per-window detail, and how well edges matched."""

    layers: list[LayerEnergy]
    window_energy_mj: np.ndarray  # (frames, layers)
    window_samples: np.ndarray  # (frames, layers)
    window_lost_frames: np.ndarray  # (frames, layers)
    window_holes: np.ndarray  # (frames, layers): sample holes overlapping the window
    window_flagged: np.ndarray  # bool (frames, layers): lost frames, holes or no sample
    window_start_ns: np.ndarray  # refined (frames, layers)
    window_end_ns: np.ndarray
    start_matched: np.ndarray  # bool (frames, layers)
    end_matched: np.ndarray
    frame_energy_mj: np.ndarray  # (frames,) first layer start .. last layer end
    baseline_power_w: float
    edge_offset_ns: tuple[float, float]  # median logger edge - host time, (starts, ends)
    edges_spurious: int
    edge_mode: str

    @property
    def edges_missed(self) -> int:
        return int((~self.start_matched).sum() + (~self.end_matched).sum())

    @property
    def lost(self) -> bool:
        return any(layer.lost for layer in self.layers)

    def columns(self) -> dict[str, np.ndarray]:
        """Per-layer columns for `LayerRun.layer_extras` (units in the names)."""
        keys = ("power_w", "energy_mj", "dynamic_energy_mj", "fps_per_w", "samples",
                "lost_frames", "flagged_windows", "edges_missed")
        return {k: np.array([getattr(layer, k) for layer in self.layers]) for k in keys}

    def totals(self) -> dict[str, float]:
        """Per-frame totals for `LayerRun.total_extras`. ``energy_mj`` sums the layers
        (as ``time_ms`` sums their times); ``frame_energy_mj`` also covers the hand-overs
        between them, from the first layer's start to the last layer's end."""
        energy = sum(layer.energy_mj for layer in self.layers)
        time_ms = sum(layer.time_ms for layer in self.layers)
        frame = float(np.mean(self.frame_energy_mj)) if self.frame_energy_mj.size else 0.0
        return {
            "power_w": energy / time_ms if time_ms > 0 else float("nan"),
            "energy_mj": energy,
            "dynamic_energy_mj": sum(layer.dynamic_energy_mj for layer in self.layers),
            "fps_per_w": fps_per_w(energy),
            "samples": float(sum(layer.samples for layer in self.layers)),
            "lost_frames": float(sum(layer.lost_frames for layer in self.layers)),
            "flagged_windows": float(sum(layer.flagged_windows for layer in self.layers)),
            "frame_energy_mj": frame,
            "frame_fps_per_w": fps_per_w(frame),
            "baseline_power_w": self.baseline_power_w,
            "edges_missed": float(self.edges_missed),
            "edges_spurious": float(self.edges_spurious),
        }


def fps_per_w(energy_mj: float) -> float:
    """Frames per second per watt = 1 / (energy per frame in J), as ARM-CO-UP Fig. 16."""
    return 1000.0 / energy_mj if energy_mj > 0 else float("inf")


# --------------------------------------------------------------------------
# Attribution of a streamed trace
# --------------------------------------------------------------------------

def attribute(start_ns: Any, end_ns: Any, trace: PowerTrace, *, baseline_power_w: float = 0.0,
              use_edges: bool = True, levels: tuple[int, int] | None = None,
              level_mask: int = 1, max_tolerance_ns: float = MAX_TOLERANCE_NS,
              edge_mode: EdgeMode = "hold", guard_ns: float = 2000.0,
              start_lo_ns: Any = None, end_hi_ns: Any = None,
              hole_factor: float = 3.0) -> Attribution:
    """Energy per layer from the host timeline ``start_ns``/``end_ns`` (frames, layers).

    ``start_lo_ns``/``end_hi_ns`` (same shape, optional): host times known to be
    before each start marker change and after each end marker change (the runner's
    ``transfer_end_ns``, and a clock read after the end marker call), so a marker
    call that took long still finds its edge (see `match_edges`).

    ``hole_factor``: a spacing between samples over this many times the median
    period is a hole (the logger skipped samples without losing frames).

    ``use_edges=False`` integrates over the host windows as given (for sources
    without marker edges). ``levels=(high, low)``: the marker level (under
    ``level_mask``) the logger must see after a layer's start and end edges.
    """
    start = np.asarray(start_ns, dtype=np.int64)
    end = np.asarray(end_ns, dtype=np.int64)
    if start.ndim == 1:
        start, end = start[None, :], end[None, :]
    if start.shape != end.shape or start.ndim != 2:
        raise BadInputError(f"layer timeline: start {start.shape} and end {end.shape} must "
                            "both be (frames, layers)")
    if np.any(end < start):
        raise BadInputError("layer timeline: a layer ends before it starts")
    frames, nl = start.shape

    offset, spurious = (0.0, 0.0), 0
    w_start, w_end = start.copy(), end.copy()
    s_ok = np.zeros(start.shape, bool)
    e_ok = np.zeros(start.shape, bool)
    if use_edges and trace.edge_t_ns.size:
        edges, edge_lv = trace.edge_t_ns, None
        if trace.edge_changed is not None:
            keep = (np.asarray(trace.edge_changed) & level_mask) != 0
            edges = edges[keep]
            if trace.edge_markers is not None:
                edge_lv = (np.asarray(trace.edge_markers)[keep] & level_mask)
        elif trace.edge_markers is not None:
            edge_lv = np.asarray(trace.edge_markers) & level_mask
        boundaries = np.concatenate([start.ravel(), end.ravel()])
        b_lv = None
        if levels is not None and edge_lv is not None:
            hi, lo = levels[0] & level_mask, levels[1] & level_mask
            b_lv = np.concatenate([np.full(start.size, hi), np.full(end.size, lo)])
        groups = np.concatenate([np.zeros(start.size, np.int64), np.ones(end.size, np.int64)])
        lo = np.concatenate([
            (start if start_lo_ns is None else np.asarray(start_lo_ns, np.int64).reshape(
                start.shape)).ravel(), end.ravel()])
        hi = np.concatenate([start.ravel(), (end if end_hi_ns is None else np.asarray(
            end_hi_ns, np.int64).reshape(end.shape)).ravel()])
        m = match_edges(boundaries, edges, lo_ns=lo, hi_ns=hi, boundary_levels=b_lv,
                        edge_levels=edge_lv if b_lv is not None else None,
                        groups=groups, max_tolerance_ns=max_tolerance_ns)
        w_start = m.time_ns[:start.size].reshape(start.shape)
        w_end = m.time_ns[start.size:].reshape(start.shape)
        s_ok = m.matched[:start.size].reshape(start.shape)
        e_ok = m.matched[start.size:].reshape(start.shape)
        offset = (float(m.offset_ns[0]), float(m.offset_ns[-1]))
        spurious = m.spurious
        w_end = np.maximum(w_end, w_start)

    integ = _Integrator(trace, guard_ns)
    energy, samples = integ.energy_mj(w_start, w_end, edge_mode)
    lost = integ.lost_in(trace, w_start, w_end)
    holes = integ.holes_in(w_start, w_end, hole_factor)
    flagged = (lost > 0) | (holes > 0) | (samples == 0)
    frame_e, _ = integ.energy_mj(w_start[:, 0], w_end[:, -1], edge_mode)

    layers = []
    dur_ms = (w_end - w_start) / 1e6
    for j in range(nl):
        clean = ~flagged[:, j]
        use = clean if clean.any() else np.ones(frames, bool)
        # The layer's power comes from the windows used; its time from every window
        # (each has its edges, flagged or not). Their product is the energy per frame:
        # the mean energy of the windows used alone would favour the longer windows,
        # as those shorter than a sample period are the ones with no sample inside.
        t_used = float(dur_ms[use, j].sum())
        p_w = float(energy[use, j].sum()) / t_used if t_used > 0 else float("nan")
        t_ms = float(dur_ms[:, j].mean())
        e = p_w * t_ms if t_used > 0 else float(energy[use, j].mean())
        layers.append(LayerEnergy(
            layer=j,
            frames=int(use.sum()),
            time_ms=t_ms,
            energy_mj=e,
            power_w=p_w,
            dynamic_energy_mj=e - baseline_power_w * t_ms,
            fps_per_w=fps_per_w(e),
            samples=int(samples[use, j].sum()),
            lost_frames=int(lost[:, j].sum()),
            lost=bool((lost[:, j] > 0).any()),
            flagged_windows=int(flagged[:, j].sum()),
            edges_missed=int((~s_ok[:, j]).sum() + (~e_ok[:, j]).sum()) if use_edges else 0,
        ))
    if not use_edges:
        s_ok[:] = True
        e_ok[:] = True
    return Attribution(layers=layers, window_energy_mj=energy, window_samples=samples,
                       window_lost_frames=lost, window_holes=holes, window_flagged=flagged,
                       window_start_ns=w_start, window_end_ns=w_end,
                       start_matched=s_ok, end_matched=e_ok, frame_energy_mj=frame_e,
                       baseline_power_w=baseline_power_w, edge_offset_ns=offset,
                       edges_spurious=spurious, edge_mode=edge_mode)


# --------------------------------------------------------------------------
# Counter sources: repeat a call until the counter window resolves it
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class RepeatedEnergy:
    """Energy of one call, from a counter window over ``repeats`` calls."""

    repeats: int
    window_ns: int
    energy_mj: float  # per call
    time_ns: float  # per call (window / repeats)
    power_w: float  # mean over the window
    dynamic_energy_mj: float  # per call, above the baseline
    fps_per_w: float
    counter_updates: int  # counter refresh intervals the window spans (resolution ~ 1/this)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure_repeated(call: Callable[[], object], source: CounterSource, *,
                     min_window_ns: int | None = None, min_updates: int = 100,
                     baseline_power_w: float = 0.0, max_repeats: int = 1_000_000,
                     ) -> RepeatedEnergy:
    """Run ``call`` enough times back to back that the counter window spans at least
    ``min_updates`` counter refreshes (so quantisation is under 1/min_updates) and
    ``min_window_ns``, then divide. The window starts right after a counter update
    (`CounterSource.wait_for_tick`), so only the end is quantised. Times come from
    the source's clock.
    """
    clock = source.clock
    need_ns = max(int(min_window_ns or 0), min_updates * int(source.update_interval_ns))
    t0 = clock()
    call()  # probe: also warms caches, as the timed calls will be
    probe_ns = max(clock() - t0, 1)
    repeats = int(min(max(1, math.ceil(need_ns / probe_ns)), max_repeats))
    t_start, e_start = source.wait_for_tick()
    for _ in range(repeats):
        call()
    e_end = source.read_energy_mj()
    t_end = clock()
    window = t_end - t_start
    if window < need_ns and repeats < max_repeats:
        # The probe was slower than the calls: extend with a second pass.
        more = int(min(math.ceil((need_ns - window) * repeats / max(window, 1)),
                       max_repeats - repeats))
        for _ in range(more):
            call()
        e_end = source.read_energy_mj()
        t_end = clock()
        window = t_end - t_start
        repeats += more
    energy = (e_end - e_start) / repeats
    time_ns = window / repeats
    return RepeatedEnergy(
        repeats=repeats,
        window_ns=int(window),
        energy_mj=energy,
        time_ns=time_ns,
        power_w=(e_end - e_start) * 1e6 / window if window > 0 else float("nan"),
        dynamic_energy_mj=energy - baseline_power_w * time_ns * 1e-6,
        fps_per_w=fps_per_w(energy),
        counter_updates=int(window // max(int(source.update_interval_ns), 1)),
    )
