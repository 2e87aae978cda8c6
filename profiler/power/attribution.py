"""Per-layer energy: integrate a power trace over each layer's window.

Each host boundary (a layer's start or end) is matched by time to the nearest logger
marker edge, never by counting, so a missed or spurious edge affects only its own
boundary. Each window's samples are integrated (the power held as a step at the window's
ends); windows that overlap lost frames, sample holes or hold no sample are flagged, and a
layer's power comes from its other windows. Counter sources get per-call energy from
`profiler.power.repeat.measure_repeated` instead.

The matching, integration and flagging rules, and why: docs/power.md ("Per-layer energy").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from profiler.errors import BadInputError
from profiler.power.host_trace import EdgeMode, HostTrace, WindowIntegrator

#: Default cap on how far a logger edge may be from its host boundary (after the
#: median offset is removed).
MAX_TOLERANCE_NS = 200_000


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

def attribute(start_ns: npt.ArrayLike, end_ns: npt.ArrayLike, trace: HostTrace, *, baseline_power_w: float = 0.0,
              use_edges: bool = True, levels: tuple[int, int] | None = None,
              level_mask: int = 1, max_tolerance_ns: float = MAX_TOLERANCE_NS,
              edge_mode: EdgeMode = "hold", guard_ns: float = 2000.0,
              start_lo_ns: npt.ArrayLike | None = None,
              end_hi_ns: npt.ArrayLike | None = None, hole_factor: float = 3.0) -> Attribution:
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
            hi_lv, lo_lv = levels[0] & level_mask, levels[1] & level_mask
            b_lv = np.concatenate([np.full(start.size, hi_lv), np.full(end.size, lo_lv)])
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

    integ = WindowIntegrator(trace, guard_ns)
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
