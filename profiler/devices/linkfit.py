"""The cost of a link between two devices: latency plus bytes over bandwidth, fitted.

`coupprof transfer-matrix --devices` times the hand-over of each boundary's tensors from
one device to another; a line t = latency_ms + bytes / bandwidth through those (bytes,
time) points, by least squares, prices a boundary nobody measured (a mapping's cut at a
layer the table skipped, or another model's). Each fit keeps its residual and the 95 %
intervals of both coefficients, so a price comes with how well the line knows it. A fit
needs at least two distinct sizes: one size fixes a point, not a line.

`LinkTable` holds the fits per device pair and the measured rows; `read_link_table`
reads the CSV + JSON sidecar `transfer-matrix --devices` writes. The form:
docs/devices.md ("Link tables").
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler.devices.spec import DeviceSet, Link
from profiler.errors import BadInputError

LINKS_FORMAT = "coupprof-device-links/1"
#: The CSV's columns: one row per measured (boundary, src device, dst device).
LINK_CSV_COLUMNS = ("boundary", "src", "dst", "bytes", "tensors", "time_ms_mean",
                    "time_ms_median", "time_ms_p95", "time_ms_std", "reps")
LINK_FIX = ("measure boundaries of at least two sizes: `coupprof transfer-matrix --devices "
            "FILE` (all boundaries), or --boundaries with tensors of different sizes")
TABLE_FIX = "pass the CSV `coupprof transfer-matrix --devices` wrote, with its .json sidecar"


@dataclass(frozen=True)
class LinkFit:
    """t(bytes) = latency_ms + bytes * ms_per_mb / 1e6, fitted between devices a and b.

    ``*_ci95``: half-widths of the coefficients' 95 % intervals (nan with only two
    points: no residual is left to judge them by); ``residual_ms``: root mean square of
    the points about the line."""

    a: str
    b: str
    latency_ms: float
    ms_per_mb: float
    latency_ci95_ms: float
    ms_per_mb_ci95: float
    residual_ms: float
    points: int
    min_bytes: int
    max_bytes: int
    _cov: tuple[float, float, float] = field(default=(math.nan, math.nan, math.nan), repr=False)
    _t95: float = field(default=math.nan, repr=False)

    @property
    def bandwidth_mb_s(self) -> float:
        """MB/s (1e6 bytes); inf where the fitted slope is not positive (no cost per byte
        the measurement could resolve)."""
        return 1000.0 / self.ms_per_mb if self.ms_per_mb > 0 else math.inf

    def time_ms(self, nbytes: int) -> float:
        """The fitted hand-over time of `nbytes` (at least 0)."""
        return max(self.latency_ms + nbytes * self.ms_per_mb / 1e6, 0.0)

    def ci95_ms(self, nbytes: int) -> float:
        """Half-width of the 95 % interval of the line's mean at `nbytes`."""
        x = nbytes / 1e6
        v_ll, v_ls, v_ss = self._cov
        var = v_ll + 2 * x * v_ls + x * x * v_ss
        return self._t95 * math.sqrt(var) if var >= 0 else math.nan

    def extrapolates(self, nbytes: int) -> bool:
        return not self.min_bytes <= nbytes <= self.max_bytes

    def minus(self, other: LinkFit) -> LinkFit:
        """This line less `other` (fitted on the same sizes), e.g. a simulated link's
        hand-overs less the same hand-overs with its model off: what the link added.
        Intervals from the two fits' covariances added (independent samples)."""
        cov = tuple(x + y for x, y in zip(self._cov, other._cov, strict=True))
        t95 = max(self._t95, other._t95)
        return LinkFit(self.a, self.b, self.latency_ms - other.latency_ms,
                       self.ms_per_mb - other.ms_per_mb,
                       t95 * math.sqrt(cov[0]), t95 * math.sqrt(cov[2]),
                       math.hypot(self.residual_ms, other.residual_ms),
                       min(self.points, other.points), self.min_bytes, self.max_bytes,
                       (cov[0], cov[1], cov[2]), t95)

    def as_link(self) -> Link:
        bw = self.bandwidth_mb_s
        return Link(max(self.latency_ms, 0.0), None if math.isinf(bw) else bw)

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "latency_ms": self.latency_ms,
                "latency_ci95_ms": self.latency_ci95_ms,
                "bandwidth_mb_s": None if math.isinf(self.bandwidth_mb_s)
                else self.bandwidth_mb_s,
                "ms_per_mb": self.ms_per_mb, "ms_per_mb_ci95": self.ms_per_mb_ci95,
                "residual_ms": self.residual_ms, "points": self.points,
                "min_bytes": self.min_bytes, "max_bytes": self.max_bytes,
                "cov": list(self._cov), "t95": self._t95}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LinkFit:
        cov = d.get("cov") or [math.nan] * 3
        return cls(str(d["a"]), str(d["b"]), float(d["latency_ms"]), float(d["ms_per_mb"]),
                   _flt(d.get("latency_ci95_ms")), _flt(d.get("ms_per_mb_ci95")),
                   _flt(d.get("residual_ms")), int(d.get("points", 0)),
                   int(d.get("min_bytes", 0)), int(d.get("max_bytes", 0)),
                   (_flt(cov[0]), _flt(cov[1]), _flt(cov[2])), _flt(d.get("t95")))


def _flt(v: Any) -> float:
    return math.nan if v is None else float(v)


def fit_link(nbytes: Sequence[int], time_ms: Sequence[float], a: str = "", b: str = ""
             ) -> LinkFit:
    """Least squares of time_ms on bytes; every mistake in the data is one line."""
    x = np.asarray(nbytes, dtype=np.float64) / 1e6
    y = np.asarray(time_ms, dtype=np.float64)
    where = f" between {a} and {b}" if a and b else ""
    if x.shape != y.shape or x.size == 0:
        raise BadInputError(f"the link{where} has no (bytes, time) samples to fit", LINK_FIX)
    if not np.all(np.isfinite(y)):
        raise BadInputError(f"the link{where} has times that are not numbers", LINK_FIX)
    sizes = np.unique(x)
    if sizes.size < 2:
        raise BadInputError(
            f"every sample of the link{where} hands over {int(x[0] * 1e6)} bytes: one size "
            "fixes a point, not latency + bytes / bandwidth", LINK_FIX)
    X = np.column_stack([np.ones_like(x), x])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ coef
    n = int(x.size)
    dof = n - 2
    rms = float(np.sqrt(np.mean(resid ** 2)))
    if dof > 0:
        from scipy.stats import t as student

        s2 = float(resid @ resid) / dof
        cov = s2 * np.linalg.inv(X.T @ X)
        t95 = float(student.ppf(0.975, dof))
        ci = (t95 * math.sqrt(cov[0, 0]), t95 * math.sqrt(cov[1, 1]))
        cv = (float(cov[0, 0]), float(cov[0, 1]), float(cov[1, 1]))
    else:
        t95, ci, cv = math.nan, (math.nan, math.nan), (math.nan, math.nan, math.nan)
    return LinkFit(a, b, float(coef[0]), float(coef[1]), ci[0], ci[1], rms, n,
                   int(round(float(x.min()) * 1e6)), int(round(float(x.max()) * 1e6)), cv, t95)


def pair_key(a: str, b: str) -> frozenset[str]:
    return frozenset((a, b))


@dataclass
class LinkTable:
    """Fitted links per device pair and the hand-overs they were fitted from (one row
    per boundary and direction, `LINK_CSV_COLUMNS`)."""

    fits: dict[frozenset[str], LinkFit]
    rows: pd.DataFrame
    sources: list[str] = field(default_factory=list)
    model_sha256: str = ""  # the model whose boundaries the rows are

    def fits_only(self) -> LinkTable:
        """The fits without the measured rows: another model's boundaries are other
        tensors, priced on the fits at their own bytes."""
        return LinkTable(self.fits, self.rows.iloc[0:0], self.sources, "")

    def fit(self, a: str, b: str) -> LinkFit | None:
        return self.fits.get(pair_key(a, b))

    def measured_ms(self, boundary: int, a: str, b: str) -> float | None:
        """The measured median hand-over of `boundary` from a to b (either direction of
        the pair where only the other was measured), else None."""
        if self.rows.empty:
            return None
        r = self.rows
        for s, d in ((a, b), (b, a)):
            hit = r[(r["boundary"] == boundary) & (r["src"] == s) & (r["dst"] == d)]
            if not hit.empty:
                return float(hit["time_ms_median"].iloc[0])
        return None

    def boundary_bytes(self, boundary: int) -> int | None:
        if self.rows.empty:
            return None
        hit = self.rows[self.rows["boundary"] == boundary]
        return None if hit.empty else int(hit["bytes"].iloc[0])


def fit_links(rows: pd.DataFrame, value: str = "time_ms_median") -> dict[frozenset[str], LinkFit]:
    """A fit per device pair of the measured rows (both directions pooled: a link is one
    cable), over each boundary's `value`."""
    fits: dict[frozenset[str], LinkFit] = {}
    pairs = dict.fromkeys(pair_key(str(s), str(d)) for s, d in zip(rows["src"], rows["dst"],
                                                                   strict=True) if s != d)
    for pair in pairs:
        a, b = sorted(pair)
        mine = rows[rows["src"].isin(pair) & rows["dst"].isin(pair) & (rows["src"] != rows["dst"])]
        fits[pair] = fit_link(mine["bytes"].astype(int).tolist(),
                              mine[value].astype(float).tolist(), a, b)
    return fits


@dataclass
class FittedLinks:
    """A probe's fits: per pair, the hand-over as a run sees it (``fits``) and, where the
    link is simulated, what its model added to the real local transfer (``added``)."""

    fits: dict[frozenset[str], LinkFit]
    added: dict[frozenset[str], LinkFit]


def fit_probe(rows: pd.DataFrame) -> FittedLinks:
    """Fits of `profiler.devices.link_probe`'s rows: its ``pass`` "link" rows, and what
    the simulated link added: a fit of its "added" rows (each repetition's link frame
    less its local one, paired, so a load that comes and goes cancels), else the "link"
    fit less the "local" one."""
    has_pass = "pass" in rows.columns
    link_rows = rows[rows["pass"] == "link"] if has_pass else rows
    fits = fit_links(link_rows)
    added: dict[frozenset[str], LinkFit] = {}
    if has_pass and (rows["pass"] == "added").any():
        added = {k: v for k, v in fit_links(rows[rows["pass"] == "added"]).items()
                 if k in fits}
    elif has_pass and (rows["pass"] == "local").any():
        local = fit_links(rows[rows["pass"] == "local"])
        added = {k: fits[k].minus(v) for k, v in local.items() if k in fits}
    return FittedLinks(fits, added)


def links_sidecar(fitted: FittedLinks, info: dict[str, Any],
                  devices: DeviceSet | None = None) -> dict[str, Any]:
    """The JSON sidecar: each link's fit, and what a simulated link added beside what the
    devices file models."""
    links = []
    for key, f in fitted.fits.items():
        d = f.to_dict()
        if key in fitted.added:
            d["added"] = fitted.added[key].to_dict()
        if devices is not None:
            m = devices.link(f.a, f.b)
            if m.simulated:
                d["modelled"] = {"latency_ms": m.latency_ms,
                                 "bandwidth_mb_s": m.bandwidth_mb_s}
        links.append(d)
    return {"format": LINKS_FORMAT, "links": links,
            "model": "time_ms = latency_ms + bytes / (bandwidth_mb_s * 1e3)", **info}


def read_link_table(path: str | Path) -> LinkTable:
    """A `transfer-matrix --devices` CSV and its sidecar (the sidecar alone will do)."""
    p = Path(path)
    csv = p.with_suffix(".csv")
    side = p.with_suffix(".json")
    if not side.is_file():
        raise BadInputError(f"link table sidecar not found: {side}", TABLE_FIX)
    try:
        doc = json.loads(side.read_text())
    except (OSError, ValueError) as e:
        raise BadInputError(f"cannot read link table {side}: {e}", TABLE_FIX) from None
    if not isinstance(doc, dict) or doc.get("format") != LINKS_FORMAT:
        raise BadInputError(f"{side} is not a device link table (format {LINKS_FORMAT})",
                            TABLE_FIX)
    try:
        fits = {pair_key(str(d["a"]), str(d["b"])): LinkFit.from_dict(d)
                for d in doc.get("links", [])}
    except (KeyError, TypeError, ValueError) as e:
        raise BadInputError(f"{side}: a link lacks {e}", TABLE_FIX) from None
    rows = pd.DataFrame(columns=list(LINK_CSV_COLUMNS))
    if csv.is_file():
        try:
            rows = pd.read_csv(csv)
        except (OSError, ValueError) as e:
            raise BadInputError(f"cannot read link table {csv}: {e}", TABLE_FIX) from None
        missing = {"boundary", "src", "dst", "bytes", "time_ms_median"} - set(rows.columns)
        if missing:
            raise BadInputError(f"{csv} lacks columns {', '.join(sorted(missing))}", TABLE_FIX)
        if "pass" in rows.columns:  # the probe's hand-overs with the link's model off aside
            rows = rows[rows["pass"] == "link"].reset_index(drop=True)
        rows["src"] = rows["src"].astype(str)
        rows["dst"] = rows["dst"].astype(str)
    return LinkTable(fits, rows, [str(csv if csv.is_file() else side)],
                     str(doc.get("model_sha256", "")))


@dataclass(frozen=True)
class LinkPrice:
    """What one cut's hand-over costs and where the figure comes from."""

    time_ms: float
    source: str  # "measured", "fitted", "modelled" (the devices file's simulated link), "none"
    ci95_ms: float = math.nan


def price_handover(boundary: int, nbytes: int, a: str, b: str, table: LinkTable | None,
                   devices: DeviceSet | None = None) -> LinkPrice:
    """The hand-over of `boundary` (`nbytes`) from device a to b: measured where the
    table has it, else the pair's fit, else the devices file's simulated link, else 0."""
    if table is not None:
        ms = table.measured_ms(boundary, a, b)
        if ms is not None:
            return LinkPrice(ms, "measured")
        f = table.fit(a, b)
        if f is not None:
            return LinkPrice(f.time_ms(nbytes), "fitted", f.ci95_ms(nbytes))
    if devices is not None:
        link = devices.link(a, b)
        if link.simulated:
            return LinkPrice(link.modelled_ms(nbytes), "modelled")
    return LinkPrice(0.0, "none")
