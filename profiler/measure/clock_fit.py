"""A fused table that knows its clock: each row's time as a function of the clock.

Where nobody sets an accelerator's level, its driver moves the clock while the table is
measured and again while a run uses it, so a table's figures belong to whatever clocks
its rounds happened to see. `VisitClocks` reads the processor's clock around every
visit's timed calls in the fused rounds (outside the timed window), `fit_clock` fits
each prefix's time in the rounds against it,

    t(f) = a + b * f_ref / f      (a: what does not scale with the clock, b: what does,
                                   at f_ref, the median clock of the rounds)

and takes each row's a and b as the differences of its prefixes', as the rows are. A
prediction then prices a run at the clock the run measured (`ClockFit.layer_ms`). Where
the clock hardly moved the scaling is not identified, and the plain figures stand.

Why, and what it gave on the simulated board: docs/fused.md ("The accelerator's clock").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from profiler.errors import ProfilerError

if TYPE_CHECKING:
    from profiler.measure.freq_trace import FreqReader
    from profiler.measure.fused import FusedResult
    from profiler.measure.tables import RunTables

#: Reads before and after a visit's timed calls further apart than this share are a
#: clock that moved during the visit: that visit is left out of the fit.
AGREE_REL = 0.02
#: A prefix's clocks must span this much (10th to 90th percentile over the median) for
#: its scaling to be identified.
MIN_SPREAD = 0.10
#: Visits a prefix needs at known clocks to be fitted.
MIN_VISITS = 6
#: Residuals beyond this many robust deviations (1.4826 MAD) are left out of the refit.
OUTLIER_SIGMAS = 3.0
#: The run's clock may lie this far outside the range the rounds saw before it is said to.
RANGE_SLACK = 0.02
MODEL = "t = a + b * freq_ref_khz / freq_khz"


class VisitClocks:
    """``hooks(position, start)`` for `profiler.measure.fused.FusedProfiler.measure`: reads
    ``reader`` before and after each visit's timed calls. A round is one visit of every
    position; a read that fails ends the reading (``error`` says why) and the rest is
    unknown."""

    def __init__(self, reader: FreqReader) -> None:
        self.reader: FreqReader | None = reader
        self.source = reader.source
        self.error: str | None = None
        self._before: list[dict[int, float]] = []
        self._after: list[dict[int, float]] = []

    def __call__(self, position: int, start: bool) -> None:
        if start and (not self._before or position in self._before[-1]):
            self._before.append({})
            self._after.append({})
        if not self._before:
            return
        (self._before if start else self._after)[-1][position] = self._read()

    def _read(self) -> float:
        if self.reader is None:
            return math.nan
        try:
            khz = self.reader.read_khz()
        except ProfilerError as err:
            self.error, self.reader = str(err), None
            return math.nan
        return math.nan if khz is None else float(khz)

    def visit_khz(self, positions: int) -> np.ndarray:
        """(rounds, positions): each visit's clock in kHz, NaN where it was not read or
        moved during the visit (the reads around it differ by more than ``AGREE_REL``)."""
        out = np.full((len(self._before), positions), np.nan)
        for r, (before, after) in enumerate(zip(self._before, self._after, strict=True)):
            for p, b in before.items():
                a = after.get(p, math.nan)
                if 0 <= p < positions and b > 0 and a > 0 and abs(a - b) <= AGREE_REL * b:
                    out[r, p] = 0.5 * (a + b)
        return out


@dataclass(frozen=True)
class PrefixFit:
    """One prefix's time against the clock: t = a_ms + b_ms * f_ref / f."""

    a_ms: float
    b_ms: float
    visits: int  # visits the fit used (outliers left out)
    rms_ms: float  # residuals' root mean square
    x_mean: float  # the mean and the sum of squared deviations of f_ref / f over them
    x_sxx: float

    def ci95_ms(self, x: float) -> float:
        """Half-width of the 95 % interval of the fitted time at f_ref / f = ``x``."""
        n = max(self.visits, 3)
        return 2.0 * self.rms_ms * math.sqrt(1 / n + (x - self.x_mean) ** 2 / max(self.x_sxx, 1e-12))


@dataclass
class ClockFit:
    """Each row's time against the clock in a fused table's rounds (module docstring).

    ``identified`` False: the clock hardly moved (``why``), and only the range and the
    visits' clocks are kept. Rows and the fixed row are differences of the prefixes'
    fits, so at any clock they add up to the whole model's fit."""

    source: str
    identified: bool
    why: str
    freq_ref_khz: int
    freq_min_khz: int
    freq_max_khz: int
    visits: int  # visits at a known clock
    layer_a_ms: list[float] = field(default_factory=list)
    layer_b_ms: list[float] = field(default_factory=list)
    prefix_a_ms: list[float] = field(default_factory=list)  # 0 = the empty prefix
    prefix_b_ms: list[float] = field(default_factory=list)
    prefix_rms_ms: list[float] = field(default_factory=list)
    whole: PrefixFit | None = None  # the whole model's fit (its interval)
    visit_khz: list[list[int | None]] = field(default_factory=list, repr=False)

    @property
    def fixed_a_ms(self) -> float:
        return self.prefix_a_ms[0]

    @property
    def fixed_b_ms(self) -> float:
        return self.prefix_b_ms[0]

    def scale(self, freq_khz: float) -> float:
        return self.freq_ref_khz / freq_khz

    def layer_ms(self, freq_khz: float) -> np.ndarray:
        """Each row's time at ``freq_khz``."""
        return np.asarray(self.layer_a_ms) + np.asarray(self.layer_b_ms) * self.scale(freq_khz)

    def fixed_ms(self, freq_khz: float) -> float:
        return self.fixed_a_ms + self.fixed_b_ms * self.scale(freq_khz)

    def whole_ms(self, freq_khz: float) -> float:
        return self.prefix_a_ms[-1] + self.prefix_b_ms[-1] * self.scale(freq_khz)

    def whole_ci95_ms(self, freq_khz: float) -> float:
        return self.whole.ci95_ms(self.scale(freq_khz)) if self.whole is not None else math.nan

    def outside(self, freq_khz: float) -> float:
        """How far ``freq_khz`` lies outside the range the rounds saw, as a share of the
        nearer end (0 inside it, within ``RANGE_SLACK``)."""
        lo, hi = self.freq_min_khz, self.freq_max_khz
        if freq_khz < lo * (1 - RANGE_SLACK):
            return (lo - freq_khz) / lo
        if freq_khz > hi * (1 + RANGE_SLACK):
            return (freq_khz - hi) / hi
        return 0.0

    def range_text(self) -> str:
        return f"{self.freq_min_khz / 1000:.0f}-{self.freq_max_khz / 1000:.0f} MHz"

    def info(self) -> dict[str, Any]:
        """What the sidecar keeps (``clock_fit``)."""
        out: dict[str, Any] = {
            "model": MODEL, "source": self.source, "identified": self.identified,
            "why": self.why, "freq_ref_khz": self.freq_ref_khz,
            "freq_min_khz": self.freq_min_khz, "freq_max_khz": self.freq_max_khz,
            "visits": self.visits}
        if self.identified:
            out.update({"fixed_a_ms": self.fixed_a_ms, "fixed_b_ms": self.fixed_b_ms,
                        "whole_a_ms": self.prefix_a_ms[-1], "whole_b_ms": self.prefix_b_ms[-1],
                        "layer_a_ms": self.layer_a_ms, "layer_b_ms": self.layer_b_ms,
                        "prefix_a_ms": self.prefix_a_ms, "prefix_b_ms": self.prefix_b_ms,
                        "prefix_rms_ms": self.prefix_rms_ms,
                        "whole_fit": None if self.whole is None else asdict(self.whole)})
        out["visit_clock_khz"] = self.visit_khz
        return out

    @classmethod
    def from_info(cls, d: dict[str, Any]) -> ClockFit:
        ident = bool(d.get("identified"))

        def floats(key: str) -> list[float]:
            return [float(v) for v in d.get(key) or []] if ident else []

        whole = d.get("whole_fit") if ident else None
        return cls(str(d.get("source", "")), ident, str(d.get("why", "")),
                   int(d["freq_ref_khz"]), int(d["freq_min_khz"]), int(d["freq_max_khz"]),
                   int(d.get("visits", 0)), floats("layer_a_ms"), floats("layer_b_ms"),
                   floats("prefix_a_ms"), floats("prefix_b_ms"), floats("prefix_rms_ms"),
                   PrefixFit(**whole) if isinstance(whole, dict) else None,
                   [list(r) for r in d.get("visit_clock_khz") or []])


def fit_prefix(t_ms: np.ndarray, x: np.ndarray) -> PrefixFit:
    """Least squares of t = a + b x, refitted without the residuals beyond
    ``OUTLIER_SIGMAS`` robust deviations of the last fit (a late or preempted call),
    until the visits it keeps stop changing."""
    finite = np.isfinite(t_ms) & np.isfinite(x)
    keep = finite
    a = b = math.nan
    for _ in range(6):
        b, a = np.polyfit(x[keep], t_ms[keep], 1)
        resid = np.where(finite, t_ms - (a + b * x), np.nan)
        centre = np.nanmedian(resid)
        wide = OUTLIER_SIGMAS * 1.4826 * float(np.nanmedian(np.abs(resid - centre)))
        new = finite & (np.abs(resid - centre) <= wide) if wide > 0 else finite
        if new.sum() < MIN_VISITS or (new == keep).all():
            break
        keep = new
    resid = t_ms[keep] - (a + b * x[keep])
    xs = x[keep]
    return PrefixFit(float(a), float(b), int(keep.sum()), float(np.sqrt(np.mean(resid ** 2))),
                     float(xs.mean()), float(((xs - xs.mean()) ** 2).sum()))


def fit_clock(result: FusedResult, clocks: VisitClocks) -> ClockFit | None:
    """Each row of ``result`` against the clock ``clocks`` read in its rounds; None when
    no visit's clock is known."""
    if result.round_ns is None:
        return None
    t_ms = np.asarray(result.round_ns, dtype=np.float64) / 1e6
    # with blocks, a round of each block is a row of its own (`FusedResult.visit_matrix`)
    khz = result.visit_matrix(clocks.visit_khz(t_ms.shape[1]))
    if khz.shape[0] != t_ms.shape[0]:  # the hooks run in the measured rounds only
        rows = min(khz.shape[0], t_ms.shape[0])
        khz, t_ms = khz[-rows:], t_ms[-rows:]
    known = khz[np.isfinite(khz)]
    if known.size == 0:
        return None
    ref = int(round(float(np.median(known))))
    fit = ClockFit(clocks.source, False, _unidentified(khz), ref, int(known.min()),
                   int(known.max()), int(known.size),
                   visit_khz=[[None if not np.isfinite(v) else int(round(v)) for v in row]
                              for row in khz])
    if fit.why:
        return fit
    fits = [fit_prefix(t_ms[:, p], ref / khz[:, p]) for p in range(t_ms.shape[1])]
    pa = np.array([f.a_ms for f in fits])
    pb = np.array([f.b_ms for f in fits])
    pos = np.asarray(result.positions(), dtype=np.int64)
    fit.identified = True
    fit.why = f"the clock moved over {fit.range_text()} in {known.size} visits"
    fit.layer_a_ms = [float(v) for v in pa[pos] - pa[pos - 1]]
    fit.layer_b_ms = [float(v) for v in pb[pos] - pb[pos - 1]]
    fit.prefix_a_ms, fit.prefix_b_ms = [float(v) for v in pa], [float(v) for v in pb]
    fit.prefix_rms_ms = [f.rms_ms for f in fits]
    fit.whole = fits[-1]
    return fit


def _unidentified(khz: np.ndarray) -> str:
    """Why a scaling cannot be fitted from these visits' clocks ('' where it can)."""
    for p in range(khz.shape[1]):
        col = khz[:, p][np.isfinite(khz[:, p])]
        if col.size < MIN_VISITS:
            return (f"prefix {p} has {col.size} visits at a known clock (a fit needs "
                    f"{MIN_VISITS})")
        lo, med, hi = np.percentile(col, [10, 50, 90])
        if (hi - lo) < MIN_SPREAD * med:
            return (f"the clock hardly moved (prefix {p}: {lo / 1000:.0f}-{hi / 1000:.0f} "
                    f"MHz, 10th-90th percentile), so how the rows scale with it is not "
                    "identified; the rows hold at that clock")
    return ""


#: The CSV's columns of an identified fit (`with_clock_fit`).
CLOCK_COLUMNS = ("time_ms_clock_fixed", "time_ms_clock_scaled", "freq_ref_khz")


def with_clock_fit(tables: RunTables, fit: ClockFit) -> RunTables:
    """``tables`` with ``fit`` in the sidecar (``clock_fit``) and, where identified, each
    row's a (``time_ms_clock_fixed``) and b at f_ref (``time_ms_clock_scaled``) and f_ref
    (``freq_ref_khz``) in the CSV: the row at clock f takes a + b * f_ref / f ms."""
    from profiler.measure.tables import RunTables

    df = tables.layers.copy()
    if fit.identified and len(fit.layer_a_ms) == len(df):
        df["time_ms_clock_fixed"] = fit.layer_a_ms
        df["time_ms_clock_scaled"] = fit.layer_b_ms
        df["freq_ref_khz"] = pd.array([fit.freq_ref_khz] * len(df), dtype="Int64")
    info = dict(tables.info)
    info["clock_fit"] = fit.info()
    return RunTables(layers=df, frames=tables.frames, info=info, totals=dict(tables.totals))


__all__ = ["CLOCK_COLUMNS", "ClockFit", "PrefixFit", "VisitClocks", "fit_clock", "fit_prefix",
           "with_clock_fit"]
