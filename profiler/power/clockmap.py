"""Mapping the logger's clock onto the host clock from matched marker edges.

The two clocks differ by an offset and a drift, so ``host_ns = a + b * device_us``.
``fit_clock_map`` finds which device edge belongs to which host event without assuming
the two lists line up one to one (hypotheses from anchor pairs, then matching, a
least-squares fit and outlier rejection until stable; on a long capture a piecewise-linear
map where it clearly cuts the residual). Unmatched host events are missed edges; unmatched
device edges are spurious.

The fit step by step: docs/power.md ("The logger's clock onto the host clock").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from profiler.errors import MarkerError

NOMINAL_NS_PER_US = 1000.0


@dataclass(frozen=True)
class ClockMap:
    """``host_ns = host_ref_ns + ns_per_us * (device_us - device_ref_us)``.

    The reference pair keeps the arithmetic precise (host times are ~1e15 ns).
    With knots the map is piecewise linear instead: ``knots_us`` (device µs after
    ``device_ref_us``) map to ``knots_ns`` (host ns after ``host_ref_ns``), straight
    in between and along the end segments beyond; ``ns_per_us`` is then the mean
    rate from the first knot to the last.
    """

    device_ref_us: int
    host_ref_ns: int
    ns_per_us: float = NOMINAL_NS_PER_US
    matched: int = 0
    rejected: int = 0
    residual_rms_ns: float = 0.0
    residual_max_ns: float = 0.0
    knots_us: tuple[float, ...] = ()
    knots_ns: tuple[float, ...] = ()

    @property
    def drift_ppm(self) -> float:
        """How much faster the device clock runs than the host's, in ppm (the mean)."""
        return (NOMINAL_NS_PER_US / self.ns_per_us - 1.0) * 1e6

    @property
    def offset_ns(self) -> float:
        """``a`` in ``host_ns = a + b * device_us`` (of the mean line, with knots)."""
        return self.host_ref_ns - self.ns_per_us * self.device_ref_us

    def to_host_ns(self, device_us: np.ndarray | int) -> np.ndarray:
        d = np.asarray(device_us, dtype=np.int64) - self.device_ref_us
        if self.knots_us:
            y = _piecewise(d.astype(np.float64), np.asarray(self.knots_us), np.asarray(self.knots_ns))
            return self.host_ref_ns + np.rint(y).astype(np.int64)
        return self.host_ref_ns + np.rint(d * self.ns_per_us).astype(np.int64)

    def to_device_us(self, host_ns: np.ndarray | int) -> np.ndarray:
        h = np.asarray(host_ns, dtype=np.int64) - self.host_ref_ns
        if self.knots_us:  # the segments all rise, so the inverse is piecewise linear too
            return self.device_ref_us + _piecewise(
                h.astype(np.float64), np.asarray(self.knots_ns), np.asarray(self.knots_us))
        return self.device_ref_us + h / self.ns_per_us

    def to_dict(self) -> dict[str, float | int | list[float]]:
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in ((k, getattr(self, k)) for k in self.__dataclass_fields__)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ClockMap:
        kw: dict[str, Any] = {k: tuple(d[k]) if k.startswith("knots_") else d[k]
                              for k in cls.__dataclass_fields__ if k in d}
        return cls(**kw)


def _segment(x: np.ndarray, kx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each x's segment j (the end ones reach beyond the knots) and its place w in it."""
    j = np.clip(np.searchsorted(kx, x, side="right") - 1, 0, kx.size - 2)
    return j, (x - kx[j]) / (kx[j + 1] - kx[j])


def _piecewise(x: np.ndarray, kx: np.ndarray, ky: np.ndarray) -> np.ndarray:
    """The line through the knots at ``x``, the end segments carried on beyond them."""
    j, w = _segment(x, kx)
    return ky[j] + w * (ky[j + 1] - ky[j])


def _hat_fit(x: np.ndarray, y: np.ndarray, kx: np.ndarray) -> np.ndarray:
    """Least-squares knot values of the continuous piecewise-linear fit of ``y(x)``.

    Each x touches two hat functions, so the normal equations are tridiagonal; they
    are summed with bincount in O(n + k) memory. (The dense n x k design matrix
    for lstsq took 100 MB, and lstsq twice that, for an hour of 20 Hz edges and
    180 knots.) The hats' Gram matrix is well conditioned (a mass matrix).
    """
    j, w = _segment(x, kx)
    k = kx.size
    u = 1.0 - w
    gram = np.zeros((k, k))
    idx = np.arange(k)
    gram[idx, idx] = np.bincount(j, u * u, k) + np.bincount(j + 1, w * w, k)
    off = np.bincount(j, u * w, k - 1)
    gram[idx[:-1], idx[1:]] = off
    gram[idx[1:], idx[:-1]] = off
    rhs = np.bincount(j, u * y, k) + np.bincount(j + 1, w * y, k)
    return np.linalg.solve(gram, rhs)


@dataclass(frozen=True)
class ClockFit:
    """A fitted map plus which events matched.

    ``host_index[i]`` and ``device_index[i]`` are a matched pair (indices into
    the arrays given to ``fit_clock_map``), in time order.
    """

    clock: ClockMap
    host_index: np.ndarray
    device_index: np.ndarray
    missed_host: np.ndarray  # host events no device edge matched (missed edges)
    spurious_device: np.ndarray  # device edges no host event matched
    residual_ns: np.ndarray  # per matched pair: host - mapped device


def _nearest(ref: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index into sorted ``ref`` of the value nearest each ``x`` and its distance."""
    i = np.searchsorted(ref, x)
    lo = np.clip(i - 1, 0, ref.size - 1)
    hi = np.clip(i, 0, ref.size - 1)
    dlo = np.abs(x - ref[lo])
    dhi = np.abs(ref[hi] - x)
    pick = np.where(dhi < dlo, hi, lo)
    return pick, np.minimum(dlo, dhi)


def _distinct(levels: np.ndarray) -> np.ndarray:
    """The distinct marker levels (small non-negative ints: a count is far quicker than
    np.unique on a million edges)."""
    if levels.size and levels.min() >= 0 and levels.max() < 1 << 16:
        return np.flatnonzero(np.bincount(levels.ravel()))
    return np.unique(levels)


def _unmatched(n: int, matched: np.ndarray) -> np.ndarray:
    keep = np.ones(n, dtype=bool)
    keep[matched] = False
    return np.flatnonzero(keep)


def _nearest_same_level(
    ref: np.ndarray, ref_lv: np.ndarray | None, x: np.ndarray, x_lv: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    if ref_lv is None or x_lv is None:
        return _nearest(ref, x)
    idx = np.full(x.shape, -1, dtype=np.int64)
    dist = np.full(x.shape, np.inf)
    for lv in _distinct(x_lv):
        rsel = np.flatnonzero(ref_lv == lv)
        xsel = x_lv == lv
        if rsel.size:
            j, dd = _nearest(ref[rsel], x[..., xsel])
            idx[..., xsel] = rsel[j]
            dist[..., xsel] = dd
    return idx, dist


def _mutual_matches(
    h: np.ndarray, hl: np.ndarray | None, mapped: np.ndarray, dl: np.ndarray | None,
    tol: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Mutual nearest (device, host) pairs within the host event's tolerance ``tol``."""
    hi, hd = _nearest_same_level(h, hl, mapped, dl)  # device -> host
    order = np.argsort(mapped, kind="stable")
    di, _ = _nearest_same_level(mapped[order], None if dl is None else dl[order], h, hl)
    di = np.where(di >= 0, order[np.maximum(di, 0)], -1)  # host -> device
    dev = np.flatnonzero((hi >= 0) & (hd <= tol[np.maximum(hi, 0)]))
    dev = dev[di[hi[dev]] == dev]
    return hi[dev], dev


def fit_clock_map(
    device_us: npt.ArrayLike,
    host_ns: npt.ArrayLike,
    *,
    device_levels: npt.ArrayLike | None = None,
    host_levels: npt.ArrayLike | None = None,
    tol_ns: float = 500_000.0,
    max_drift_ppm: float = 10_000.0,
    floor_ns: float = 50_000.0,
    anchors: int = 4,
    slack: int = 4,
    min_fraction: float = 0.5,
    segment_s: float = 20.0,
    host_halfwidth_ns: npt.ArrayLike | None = None,
) -> ClockFit:
    """Fit ``host_ns = a + b * device_us`` from two edge lists that mostly pair up.

    ``device_us``: device edge times (unwrapped µs, ascending); ``host_ns``:
    host marker-change times (ascending). Optional ``*_levels`` (marker bits
    after each change) restrict matches to equal levels. ``tol_ns`` is the
    largest distance at which an edge can still match (keep it below half the
    shortest interval between marker changes); ``anchors`` and ``slack`` bound
    how many edges may be missing or spurious at either end of the run. Fewer
    than ``min_fraction`` of the shorter list matched (or fewer than 2) raises
    ``MarkerError``: the wiring or the port is wrong, not a stray edge.
    ``segment_s``: a piecewise map has one segment per whole ``segment_s`` of the
    run, and at least two (0 keeps one straight line). ``host_halfwidth_ns``: how far
    each host time may be off (half its clock-read bracket); see docs/power.md.
    """
    d_all = np.asarray(device_us, dtype=np.int64)
    h_all = np.asarray(host_ns, dtype=np.int64)
    if d_all.size == 0 or h_all.size == 0:
        raise MarkerError(
            f"cannot map the logger clock: {d_all.size} logger edges, {h_all.size} host marker changes",
            fix="check that the marker line is wired to the logger's marker input and that "
            "--marker names the right line",
        )
    dl = None if device_levels is None else np.asarray(device_levels, dtype=np.int64)
    hl = None if host_levels is None else np.asarray(host_levels, dtype=np.int64)
    d0, h0 = int(d_all[0]), int(h_all[0])
    d = (d_all - d0).astype(np.float64)
    h = (h_all - h0).astype(np.float64)
    hw = (np.zeros(h.size) if host_halfwidth_ns is None
          else np.maximum(np.asarray(host_halfwidth_ns, dtype=np.float64), 0.0))
    if hw.shape != h.shape:
        raise ValueError("host_halfwidth_ns needs one entry per host marker change")
    tol = tol_ns + hw
    # Events timed tightly set the line; the rest only match (if none is tight, all set it).
    tight = hw <= 0.25 * tol_ns
    if not tight.any():
        tight[:] = True

    line = _Line(*_best_hypothesis(d, dl, h, hl, tol, tight, max_drift_ppm, anchors, slack))
    line, hi, dv, inl = _match_loop(d, dl, h, hl, line, tol, tight, floor_ns)
    model: _Line | _Knots = line
    if segment_s > 0 and dv.size:
        bent = _piecewise_fit(d, dl, h, hl, model, hi, dv, inl, tol, tight, floor_ns,
                              segment_s * 1e6, max_drift_ppm)
        if bent is not None:
            model, hi, dv, inl = bent
    need = max(min(2, d_all.size, h_all.size), int(np.ceil(min_fraction * min(d_all.size, h_all.size))))
    if dv.size < need:
        raise MarkerError(  # (tol_ns below: the tolerance of a tightly timed change)
            f"cannot map the logger clock: only {dv.size} of {d_all.size} logger edges lie "
            f"within {tol_ns / 1e6:g} ms of the {h_all.size} host marker changes",
            fix="check the marker wiring (line to logger input) and that the logger and the "
            "marker back end are the ones in use",
        )
    r = h[hi] - model(d[dv])
    rin = r[inl & tight[hi]]
    if isinstance(model, _Knots):
        kx, ky = model.kx, model.ky
        ref_ns, rate = h0, float((ky[-1] - ky[0]) / (kx[-1] - kx[0]))
        knots_us, knots_ns = tuple(float(v) for v in kx), tuple(float(v) for v in ky)
    else:
        ref_ns, rate = h0 + int(round(model.a)), float(model.b)
        knots_us = knots_ns = ()
    clock = ClockMap(device_ref_us=d0, host_ref_ns=ref_ns, ns_per_us=rate,
                     matched=int(dv.size), rejected=int((~inl).sum()),
                     residual_rms_ns=float(np.sqrt(np.mean(rin**2))) if rin.size else 0.0,
                     residual_max_ns=float(np.max(np.abs(rin))) if rin.size else 0.0,
                     knots_us=knots_us, knots_ns=knots_ns)
    # host_ref_ns was rounded: express residuals against the stored map.
    resid = h_all[hi] - clock.to_host_ns(d_all[dv])
    return ClockFit(
        clock=clock,
        host_index=hi,
        device_index=dv,
        missed_host=_unmatched(h_all.size, hi),
        spurious_device=_unmatched(d_all.size, dv),
        residual_ns=resid.astype(np.float64),
    )


class _Line:
    """``y = a + b x``; refits by least squares (keeping ``b`` with one distinct x)."""

    def __init__(self, a: float, b: float) -> None:
        self.a, self.b = a, b

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.a + self.b * x

    def refit(self, x: np.ndarray, y: np.ndarray) -> _Line:
        return _Line(*_lsq(x, y, self.b))


class _Knots:
    """Continuous piecewise-linear ``y(x)`` through (kx, ky); refits ky by least squares."""

    def __init__(self, kx: np.ndarray, ky: np.ndarray) -> None:
        self.kx, self.ky = kx, ky

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return _piecewise(x, self.kx, self.ky)

    def refit(self, x: np.ndarray, y: np.ndarray) -> _Knots:
        seg, _ = _segment(x, self.kx)
        if np.bincount(seg, minlength=self.kx.size - 1).min() < 2:
            return self  # a segment left without points: keep the last good fit
        base = y.mean()  # keeps the solve well scaled (host offsets reach 1e12 ns)
        ky = _hat_fit(x, y - base, self.kx)
        return _Knots(self.kx, ky + base)


_Model = TypeVar("_Model", _Line, _Knots)  # the loop refits and returns the kind it was given


def _match_loop(
    d: np.ndarray, dl: np.ndarray | None, h: np.ndarray, hl: np.ndarray | None,
    model: _Model, tol: np.ndarray, tight: np.ndarray, floor: float,
) -> tuple[_Model, np.ndarray, np.ndarray, np.ndarray]:
    """Match by ``model``, fit, reject residual outliers; repeat until the matched set
    is stable. Returns the model, the matched (host, device) indices and the inliers.
    Only tightly timed events (``tight``) are fitted and set the spread, where any
    matched; the others count as inliers within their own widened tolerance."""
    hi = dv = np.zeros(0, dtype=np.int64)
    inl = np.zeros(0, dtype=bool)
    prev: tuple[bytes, bytes] | None = None
    for _ in range(8):
        hi, dv = _mutual_matches(h, hl, model(d), dl, tol)
        if dv.size == 0:
            break
        inl = np.ones(dv.size, dtype=bool)
        firm = tight[hi] if tight[hi].any() else np.ones(dv.size, dtype=bool)
        slack = tol[hi] - tol.min()  # a wide bracket's extra room
        for _ in range(3):
            use = inl & firm
            if not use.any():
                break
            model = model.refit(d[dv[use]], h[hi[use]])
            r = h[hi] - model(d[dv])
            med = np.median(r[use])
            sigma = 1.4826 * np.median(np.abs(r[use] - med))
            new = np.abs(r - med) <= max(6.0 * sigma, floor) + slack
            if np.array_equal(new, inl) or not new.any():
                break
            inl = new
        key = (hi.tobytes(), dv.tobytes())
        if key == prev:
            break
        prev = key
    return model, hi, dv, inl


def _rms(model: _Line | _Knots, d: np.ndarray, h: np.ndarray, hi: np.ndarray,
         dv: np.ndarray, inl: np.ndarray, tight: np.ndarray) -> float:
    use = inl & tight[hi]
    r = h[hi[use]] - model(d[dv[use]])
    return float(np.sqrt(np.mean(r**2))) if r.size else 0.0


def _piecewise_fit(
    d: np.ndarray, dl: np.ndarray | None, h: np.ndarray, hl: np.ndarray | None,
    line: _Line | _Knots, hi: np.ndarray, dv: np.ndarray, inl: np.ndarray,
    tol: np.ndarray, tight: np.ndarray, floor: float, segment_us: float, max_drift_ppm: float,
) -> tuple[_Knots, np.ndarray, np.ndarray, np.ndarray] | None:
    """The matching loop again with a piecewise-linear map, where the run is long
    enough for two segments of at least 20 matched edges each; None where that does
    not cut the straight line's residual by a fifth (a steady clock), or a segment's
    rate leaves ``max_drift_ppm``."""
    x = d[dv[inl & tight[hi]]]
    nseg = min(int((x.max() - x.min()) // segment_us), x.size // 20)
    if nseg < 2:
        return None
    kx = np.quantile(x, np.linspace(0.0, 1.0, nseg + 1))  # equal edge counts per segment
    if np.any(np.diff(kx) <= 0):
        return None
    start = _Knots(kx, line(kx))
    bent, bhi, bdv, binl = _match_loop(d, dl, h, hl, start, tol, tight, floor)
    if bent is start or bdv.size < dv.size:
        return None
    rates = np.diff(bent.ky) / np.diff(bent.kx)
    if np.any(np.abs(rates / NOMINAL_NS_PER_US - 1.0) > max_drift_ppm * 1e-6):
        return None
    if _rms(bent, d, h, bhi, bdv, binl, tight) >= 0.8 * _rms(line, d, h, hi, dv, inl, tight):
        return None
    return bent, bhi, bdv, binl


def _lsq(x: np.ndarray, y: np.ndarray, b_prev: float) -> tuple[float, float]:
    if x.size < 2 or np.ptp(x) == 0:
        return float(np.mean(y - b_prev * x)), b_prev
    xm, ym = x.mean(), y.mean()
    b = float(np.sum((x - xm) * (y - ym)) / np.sum((x - xm) ** 2))
    return float(ym - b * xm), b


def _best_hypothesis(
    d: np.ndarray, dl: np.ndarray | None, h: np.ndarray, hl: np.ndarray | None,
    tol: np.ndarray, tight: np.ndarray, max_drift_ppm: float, anchors: int, slack: int,
) -> tuple[float, float]:
    nd, nh = d.size, h.size
    firm = np.flatnonzero(tight)  # anchors: the tightly timed events
    k = min(anchors, firm.size)
    early_h = firm[:k]
    late_h = firm[max(firm.size - k, 0):]
    # Each anchor's edge is looked for near its own place in the list, counted from the
    # start for the early ones and from the end for the late ones, ``slack`` either way:
    # on a busy host the first or last tightly timed changes may come many changes in,
    # and the first edges of the logger's list are then not theirs.
    def near(hs: np.ndarray, shift: int) -> np.ndarray:
        if hs.size == 0:
            return np.arange(0)
        return np.arange(max(int(hs[0]) + shift - slack, 0),
                         min(int(hs[-1]) + shift + slack + 1, nd))

    early_d = near(early_h, 0)
    late_d = near(late_h, nd - nh)

    def pairs(hs: np.ndarray, ds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        hh, dd = np.meshgrid(hs, ds, indexing="ij")
        hh, dd = hh.ravel(), dd.ravel()
        if hl is not None and dl is not None:
            same = hl[hh] == dl[dd]
            hh, dd = hh[same], dd[same]
        return hh, dd

    eh, ed = pairs(early_h, early_d)
    lh, ld = pairs(late_h, late_d)
    # Two-anchor lines (early x late).
    g1, g2 = np.meshgrid(np.arange(eh.size), np.arange(lh.size), indexing="ij")
    i1, i2 = g1.ravel(), g2.ravel()
    span_d = d[ld[i2]] - d[ed[i1]]
    span_h = h[lh[i2]] - h[eh[i1]]
    ok = (span_d > 0) & (span_h > 0)
    b = np.full(i1.shape, NOMINAL_NS_PER_US)
    b[ok] = span_h[ok] / span_d[ok]
    ok &= np.abs(b / NOMINAL_NS_PER_US - 1.0) <= max_drift_ppm * 1e-6
    a = h[eh[i1]] - b * d[ed[i1]]
    # One-anchor lines with the nominal slope (short runs, or a single edge).
    a1 = h[eh] - NOMINAL_NS_PER_US * d[ed]
    A = np.concatenate((a[ok], a1))
    B = np.concatenate((b[ok], np.full(a1.size, NOMINAL_NS_PER_US)))
    if A.size == 0:
        return float(h[0] - NOMINAL_NS_PER_US * d[0]), NOMINAL_NS_PER_US

    # Score on at most 400 device edges spread over the run.
    sub = np.unique(np.linspace(0, nd - 1, min(nd, 400)).astype(np.int64))
    mapped = A[:, None] + B[:, None] * d[sub][None, :]
    idx, dist = _nearest_same_level(h, hl, mapped, None if dl is None else dl[sub])
    t = tol[np.maximum(idx, 0)]
    hit = dist <= t
    score = hit.sum(axis=1) - (np.minimum(dist, t) / t).sum(axis=1) / (sub.size + 1)
    best = int(np.argmax(score))
    return float(A[best]), float(B[best])


def local_offset(fit: ClockFit | None, host_ns: np.ndarray, neighbours: int = 7,
                 halfwidth_ns: np.ndarray | None = None, tight_ns: float = 125_000.0,
                 ) -> Callable[[np.ndarray], np.ndarray] | None:
    """Where the logger's edges lie around host time t, relative to the fitted line.

    The clock map is one line (offset and drift), which is what integration needs. But
    the logger's clock can wander off a line by more than the edge-matching tolerance
    over a run: a ceramic resonator's rate follows its temperature, and the simavr rig,
    paced to the wall clock, falls behind and catches up with the host's load. Each
    matched edge's residual (host time - mapped edge time) says how far off the line
    it is; a running median over ``neighbours`` matched edges follows the wander
    without following one late marker call. ``halfwidth_ns`` (per host event, half its
    clock-read bracket): only edges of events timed within ``tight_ns`` say where the
    line is, as in the fit; a marker call held up for a millisecond on a busy host has a
    residual of up to that, and a burst of them would drag the median. Returns
    ``t -> residual`` (int64 ns) for shifting host boundaries onto the trace's time axis
    before matching, or None without a fit."""
    if fit is None or fit.host_index.size < 3:
        return None
    order = np.argsort(fit.host_index, kind="stable")
    hi = fit.host_index[order]
    r = np.asarray(fit.residual_ns, dtype=np.float64)[order]
    if halfwidth_ns is not None:
        tight = np.asarray(halfwidth_ns, dtype=np.float64)[hi] <= tight_ns
        if tight.sum() >= 3:
            hi, r = hi[tight], r[tight]
    at = np.asarray(host_ns, dtype=np.int64)[hi]
    k = min(neighbours, r.size) | 1  # odd: a centred window
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(r, k // 2, mode="edge"), k)
    smooth = np.median(windows, axis=1)
    t0 = int(at[0])
    x = (at - t0).astype(np.float64)

    def residual_at(t: np.ndarray) -> np.ndarray:
        tt = (np.asarray(t, dtype=np.int64) - t0).astype(np.float64)
        return np.rint(np.interp(tt, x, smooth)).astype(np.int64)

    return residual_at
