"""Fit the simulated board's timing and power model (`profiler.sim.perf`) to measured layers.

Input: a `Measurements` per processor (one row per model, layer and setting, with the
layer's measured time and power) and the operators of every layer as `OpWork`; both
ARM-CO-UP's ``Layers.csv`` and coupprof's own sweep tables become that
(`profiler.calibrate.board`). The timing fit minimises relative errors with a robust loss
in log space; the power fit models the sensor's lag, which is fitted too and reported,
and the simulated board draws the lag-free power.

Where the layers cannot tell parameters apart (one level), they keep the board's prior
values (`held_at_prior`); each fit says which parameters no layer depends on
(`unbound_parameters`) and how closely the layers bind the others (`timing_spread`).

The losses, priors and the lag model: profiler/sim/README.md ("Calibration").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pandas as pd

from profiler.errors import BadInputError
from profiler.jsonfile import write_json_atomic
from profiler.sim import perf
from profiler.sim.work import COMPUTE_KINDS, OpWork

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

#: Columns of a `Measurements.rows` frame.
ROW_COLUMNS = ("model", "layer", "f_ghz", "fh_ghz", "volts", "host_volts", "time_ms", "power_w")
P = TypeVar("P", bound="DataclassInstance")
_PRIOR_KINDS = 0.3  # weight of the pull of each kind's MACs per cycle towards conv1x1's
_PRIOR_FC = 1.0  # weight of the pull of fc weight bandwidth towards activation bandwidth
_PRIOR_FULL_ROWS = 200  # from this many rows on the priors weigh fully
_WHOLE_WEIGHT = 0.5  # a whole model's residual weighs sqrt(its layers) x this
_STARTS = (0.0, 1.0, -1.0)  # log-space offsets of the fit's starting points
# Parameters the data do not bound run off towards 0 (log space has no 0) and stop
# wherever the optimiser's tolerances leave them, which moves with the numerical stack:
# the same Layers.csv gave B's op_kcycles 3.0e-7 on one machine and 1.6e-6 on another
# (NumPy 2.4.6, SciPy 1.17.1). Where 0 predicts every row the same, the fit says 0, so a
# calibration writes the same profile everywhere.
_ZERO_REL = 1e-6  # how far (relative) 0 may move any row's prediction
_TIMING_ZEROABLE = ("call_us", "call_kcycles", "host_call_kcycles", "op_kcycles",
                    "host_op_kcycles", "half_occupancy_pixels")
_POWER_ZEROABLE = ("static_mw_per_v2", "activity_overhead", "activity_memory",
                   "activity_weights", "host_ceff_nf")


@dataclass
class Measurements:
    """One processor's measured layers."""

    processor: str
    rows: pd.DataFrame  # ROW_COLUMNS
    works: dict[tuple[str, int], list[OpWork]]
    f_max_ghz: float
    has_host: bool  # G and N: driven from a host CPU whose level matters
    # timing parameters the processor's runtime fixes, kept as they are (not fitted)
    fixed_timing: dict[str, float] = field(default_factory=dict)
    # The model the board had before (its profile's tables): what a parameter the data
    # cannot tell apart keeps (`held_at_prior`). None: every parameter is fitted.
    prior_timing: perf.TimingParams | None = None
    prior_power: perf.PowerParams | None = None
    dvfs: bool = True  # its own clock has levels (an NPU without DVFS runs at one point)
    host_dvfs: bool = True  # its host's clock has levels

    def __post_init__(self) -> None:
        missing = [c for c in ROW_COLUMNS if c not in self.rows.columns]
        if missing:
            raise ValueError(f"measurements lack columns {missing}")
        keys = set(zip(self.rows["model"], self.rows["layer"].astype(int), strict=True))
        lacking = sorted(k for k in keys if k not in self.works)
        if lacking:
            raise BadInputError(f"no operators known for {lacking[0][0]} layer {lacking[0][1]}")

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(self.rows["model"]))

    def subset(self, models: Sequence[str]) -> Measurements:
        rows = self.rows[self.rows["model"].isin(list(models))].reset_index(drop=True)
        return replace(self, rows=rows)


class _Design:
    """Rows x operators, flattened once: every (row, op) pair with the row's clocks."""

    def __init__(self, m: Measurements) -> None:
        rows = m.rows
        self.n = len(rows)
        keys = list(zip(rows["model"], rows["layer"].astype(int), strict=True))
        per_key: dict[tuple[str, int], perf.Works] = {}
        row_of: list[np.ndarray] = []
        parts: list[perf.Works] = []
        for r, k in enumerate(keys):
            w = per_key.get(k)
            if w is None:
                w = per_key[k] = perf.Works.of(m.works[k])
            parts.append(w)
            row_of.append(np.full(len(w), r, dtype=np.int64))
        self.row = np.concatenate(row_of) if row_of else np.zeros(0, dtype=np.int64)
        self.works = perf.Works.concat(parts)
        self.f = rows["f_ghz"].to_numpy(np.float64)
        self.fh = rows["fh_ghz"].to_numpy(np.float64)
        self.f_op = self.f[self.row]
        self.fh_op = self.fh[self.row]
        self.f_max = m.f_max_ghz

    def split(self, p: perf.TimingParams) -> perf.TimeSplit:
        s = perf.op_split(p, self.works, self.f_op, self.fh_op, self.f_max)

        def per_row(x: np.ndarray) -> np.ndarray:
            return np.bincount(self.row, weights=x, minlength=self.n)

        return perf.TimeSplit(per_row(s.compute_ms), per_row(s.memory_ms),
                              per_row(s.overhead_ms) + perf.call_overhead_ms(p, self.f, self.fh),
                              per_row(np.asarray(s.weights_ms)), per_row(np.asarray(s.end_ms)))


# ---- timing ---------------------------------------------------------------------------

_SCALARS = ("call_us", "call_kcycles", "host_call_kcycles", "op_kcycles", "host_op_kcycles",
            "act_gb_s", "weight_gb_s", "stream_gb_s", "memory_clock_share", "roofline_p",
            "half_occupancy_pixels", "weight_cache_kb")
_HOST_ONLY = ("host_call_kcycles", "host_op_kcycles")
_START = {"call_us": 1000.0, "call_kcycles": 500.0, "host_call_kcycles": 300.0,
          "op_kcycles": 50.0, "host_op_kcycles": 20.0, "act_gb_s": 3.0, "weight_gb_s": 3.0,
          "stream_gb_s": 5.0, "memory_clock_share": 0.3, "roofline_p": 2.0,
          "half_occupancy_pixels": 50.0, "weight_cache_kb": 256.0}


class _TimingVector:
    """TimingParams <-> an unbounded vector (logs; logits for the bounded ones)."""

    def __init__(self, has_host: bool, rows: int = _PRIOR_FULL_ROWS,
                 fixed: dict[str, float] | None = None) -> None:
        self.fixed = dict(fixed or {})
        # The priors weigh as much as a couple of hundred rows do: on fewer (one model's
        # sweep) they would outweigh the data, so they shrink with sqrt(rows).
        self.prior_weight = min(1.0, math.sqrt(rows / _PRIOR_FULL_ROWS))
        self.names = [n for n in _SCALARS
                      if (has_host or n not in _HOST_ONLY) and n not in self.fixed]
        self.names += [f"mpc_{k}" for k in COMPUTE_KINDS]

    def start(self) -> np.ndarray:
        x = []
        for n in self.names:
            if n == "memory_clock_share":
                x.append(_logit(_START[n]))
            elif n == "roofline_p":
                x.append(_logit((_START[n] - 1.0) / 7.0))
            else:
                x.append(math.log(_START.get(n, 6.0)))
        return np.array(x)

    def params(self, x: np.ndarray) -> perf.TimingParams:
        kw: dict[str, float] = {}
        mpc: dict[str, float] = {}
        for n, v in zip(self.names, x, strict=True):
            if n == "memory_clock_share":
                kw[n] = _sigmoid(v)
            elif n == "roofline_p":
                kw[n] = 1.0 + 7.0 * _sigmoid(v)  # 1 (sum) .. 8 (nearly max)
            elif n.startswith("mpc_"):
                mpc[n[4:]] = _exp(v)
            else:
                kw[n] = _exp(v)
        return perf.TimingParams(**kw, **self.fixed, macs_per_cycle=mpc)

    def priors(self, x: np.ndarray) -> np.ndarray:
        ix = {n: i for i, n in enumerate(self.names)}
        base = x[ix["mpc_conv1x1"]]
        out = [_PRIOR_KINDS * (x[ix[f"mpc_{k}"]] - base) for k in COMPUTE_KINDS if k != "conv1x1"]
        out.append(_PRIOR_FC * (x[ix["stream_gb_s"]] - x[ix["act_gb_s"]]))
        return self.prior_weight * np.array(out)


#: Parameters that only a second level tells apart from others: per cycle or per call,
#: memory time that follows the clock or not; the static power (V^2) or the idle power;
#: the dynamic power's scale (C_eff V^2 f, against the activities) or the idle power.
_LEVEL_BOUND = {"timing": ("memory_clock_share", "call_kcycles", "op_kcycles"),
                "power": ("static_mw_per_v2", "ceff_nf")}
_HOST_LEVEL_BOUND = {"timing": ("host_call_kcycles", "host_op_kcycles"),
                     "power": ("host_ceff_nf",)}


def held_at_prior(m: Measurements) -> dict[str, str]:
    """The parameters `m`'s layers cannot tell apart from others, which keep the prior's
    value (``timing.NAME`` / ``power.NAME`` -> why).

    At one level of a processor with DVFS a cost per cycle is a cost per call, memory
    time that follows the clock is memory time that does not, and the static power is
    part of the idle power; so is C_eff V^2 f, as the layers' activities only say how
    their powers differ. The same goes for the host's share at one host level. The
    simulated board runs the other levels too, where they differ, so they keep the
    prior's split and the fit sets the rest. A processor without DVFS (an NPU) always
    runs at its one point, where the split changes nothing: it is fitted as it comes.
    Without a prior (`Measurements.prior_timing` / ``prior_power``) nothing is held."""
    out: dict[str, str] = {}
    rows = m.rows
    for what, r, prior in (("timing", rows, m.prior_timing),
                           ("power", rows[np.isfinite(rows["power_w"])], m.prior_power)):
        if prior is None or not len(r):
            continue
        if m.dvfs and r["f_ghz"].nunique() == 1:
            why = f"one level measured ({r['f_ghz'].iloc[0] * 1e3:g} MHz)"
            out.update({f"{what}.{n}": why for n in _LEVEL_BOUND[what]})
        if m.has_host and m.host_dvfs and r["fh_ghz"].nunique() == 1:
            why = f"one host level measured ({r['fh_ghz'].iloc[0] * 1e3:g} MHz)"
            out.update({f"{what}.{n}": why for n in _HOST_LEVEL_BOUND[what]})
    return out


def _prior_values(held: dict[str, str], what: str, prior: object) -> dict[str, float]:
    return {k.split(".", 1)[1]: float(getattr(prior, k.split(".", 1)[1]))
            for k in held if k.startswith(what + ".")}


def _start_signs(n: int) -> np.ndarray:
    """A fixed +-1 pattern over the parameters (the direction of the other starts)."""
    return np.where(np.arange(n) % 3 == 1, -1.0, 1.0)


def _exp(v: float) -> float:
    # A parameter the data do not bound (a bandwidth nothing in the set approaches, e.g.
    # weight_gb_s on a model whose weights all fit the cache) may run off; e^20 (5e8) is
    # as good as infinite for every one of them, and inside what a board profile accepts
    # (1e9: at e^30 a one-model sweep wrote a profile that could not be loaded).
    return math.exp(max(min(v, 20.0), -30.0))


def _sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(min(v, 50.0), -50.0)))


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def _least_squares() -> Callable[..., Any]:
    try:
        from scipy.optimize import least_squares
    except ImportError:
        raise BadInputError("calibration needs SciPy",
                            "pip install 'coupprof[calibrate]' (or pip install scipy)") from None
    return least_squares


def fit_timing(m: Measurements) -> perf.TimingParams:
    """The timing parameters of `m.processor` that best explain its measured layer times."""
    if len(m.rows) < 3:
        raise BadInputError(f"too few measured layers of processor {m.processor} to fit "
                            f"({len(m.rows)})")
    d = _Design(m)
    held = _prior_values(held_at_prior(m), "timing", m.prior_timing)
    vec = _TimingVector(m.has_host, len(m.rows), {**m.fixed_timing, **held})
    y = m.rows["time_ms"].to_numpy(np.float64)
    # Each (model, setting): its layers summed, so the whole model is fitted too (the
    # per-layer residuals weigh a 2 ms layer like a 40 ms one).
    setting = m.rows.groupby(["model", "f_ghz", "fh_ghz"], sort=False).ngroup().to_numpy()
    whole_y = np.bincount(setting, weights=y)
    per_setting = np.bincount(setting)
    whole_w = _WHOLE_WEIGHT * np.sqrt(per_setting)

    def residuals(x: np.ndarray) -> np.ndarray:
        pred = d.split(vec.params(x)).total_ms
        whole = np.bincount(setting, weights=pred) / whole_y
        return np.concatenate([np.log(np.maximum(pred, 1e-9) / y),
                               whole_w * np.log(np.maximum(whole, 1e-9)), vec.priors(x)])

    least_squares = _least_squares()
    # The fit has local minima (a bandwidth and a rate can trade places): start from a few
    # fixed points around the default and keep the best. Deterministic, so a calibration
    # gives the same profile every time.
    best = min((least_squares(residuals, vec.start() + shift * _start_signs(len(vec.names)),
                              loss="soft_l1", f_scale=0.1, max_nfev=4000) for shift in _STARTS),
               key=lambda res: res.cost)  # the first of equals, as a strict < would keep
    return _zeroed(vec.params(best.x), [n for n in _TIMING_ZEROABLE if n in vec.names],
                   lambda p: d.split(p).total_ms)


def _zeroed(fitted: P, names: Sequence[str], predict: Callable[[P], np.ndarray],
            at: Callable[[P, str], P] | None = None) -> P:
    """`fitted` with each of `names` set to 0 where that moves no row's prediction by more
    than `_ZERO_REL` (see there): a parameter the data do not bound."""
    def zero(p: P, name: str) -> P:
        return replace(p, **{name: 0.0})

    at = at or zero
    ref = predict(fitted)
    out = fitted
    for name in names:
        trial = at(out, name)
        if np.all(np.abs(predict(trial) / ref - 1.0) <= _ZERO_REL):
            out = trial
    return out


def predict_split(p: perf.TimingParams, m: Measurements) -> perf.TimeSplit:
    """The model's time split for every row of `m`."""
    return _Design(m).split(p)


# ---- power ----------------------------------------------------------------------------

@dataclass(frozen=True)
class PowerFit:
    power: perf.PowerParams
    idle_mw: float  # the board while this processor idles between layers
    lag_ms: float  # the sensor's lag behind the marker, as the data show it
    gap_activity: float  # share of dynamic power still drawn in the gap before a layer


_POWER_NAMES = ("idle_mw", "ceff_nf", "activity_memory", "activity_overhead", "activity_weights",
                "lag_ms", "gap_activity", "host_ceff_nf", "static_mw_per_v2")
_POWER_START = {"idle_mw": 3000.0, "ceff_nf": 0.5, "activity_memory": 0.7,
                "activity_overhead": 0.5, "activity_weights": 0.5, "lag_ms": 2.5,
                "gap_activity": 0.1, "host_ceff_nf": 0.2, "static_mw_per_v2": 50.0}


def true_power_w(pf: PowerFit, s: perf.TimeSplit, rows: pd.DataFrame) -> np.ndarray:
    """Board power while each row's layer runs (no sensor)."""
    return pf.idle_mw / 1e3 + perf.dynamic_power_w(
        pf.power, s, rows["volts"].to_numpy(np.float64), rows["f_ghz"].to_numpy(np.float64),
        rows["host_volts"].to_numpy(np.float64), rows["fh_ghz"].to_numpy(np.float64))


def sensed_power_w(pf: PowerFit, s: perf.TimeSplit, rows: pd.DataFrame) -> np.ndarray:
    """What a lagging sensor reports for each row's layer window."""
    true = true_power_w(pf, s, rows)
    v = rows["volts"].to_numpy(np.float64)
    f = rows["f_ghz"].to_numpy(np.float64)
    vh = rows["host_volts"].to_numpy(np.float64)
    fh = rows["fh_ghz"].to_numpy(np.float64)
    gap = (pf.idle_mw / 1e3 + pf.power.static_mw_per_v2 / 1e3 * v * v
           + pf.gap_activity * (pf.power.ceff_nf * v * v * f + pf.power.host_ceff_nf * vh * vh * fh))
    t = rows["time_ms"].to_numpy(np.float64)
    share = np.minimum(pf.lag_ms, t) / t
    return true - (true - gap) * share


def fit_power(m: Measurements, timing: perf.TimingParams) -> PowerFit:
    rows = m.rows[np.isfinite(m.rows["power_w"])].reset_index(drop=True)
    if len(rows) < 5:
        raise BadInputError(f"too few layers of processor {m.processor} with a measured power "
                            f"to fit a power model ({len(rows)})")
    mm = replace(m, rows=rows)
    s = predict_split(timing, mm)
    held = _prior_values(held_at_prior(mm), "power", m.prior_power)
    names = [n for n in _POWER_NAMES if (m.has_host or n != "host_ceff_nf") and n not in held]
    y = rows["power_w"].to_numpy(np.float64)

    def unpack(x: np.ndarray) -> PowerFit:
        v = {**dict(zip(names, np.exp(x), strict=True)), **held}
        pp = perf.PowerParams(ceff_nf=v["ceff_nf"], static_mw_per_v2=v["static_mw_per_v2"],
                              activity_memory=v["activity_memory"],
                              activity_overhead=v["activity_overhead"],
                              activity_weights=v["activity_weights"],
                              host_ceff_nf=v.get("host_ceff_nf", 0.0))
        return PowerFit(pp, v["idle_mw"], v["lag_ms"], v["gap_activity"])

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.log(sensed_power_w(unpack(x), s, rows) / y)

    def zero(pf: PowerFit, name: str) -> PowerFit:
        return replace(pf, power=replace(pf.power, **{name: 0.0}))

    least_squares = _least_squares()
    x0 = np.log([_POWER_START[n] for n in names])
    # A lag started beyond every layer has no gradient (each layer reads its gap's power
    # whatever the lag), and the fit stays there: on layers shorter than the start (a
    # sweep of a small model, 0.5 ms each) it starts at half the longest layer instead.
    longest_ms = float(rows["time_ms"].max())
    if _POWER_START["lag_ms"] >= longest_ms:
        x0[names.index("lag_ms")] = math.log(longest_ms / 2)
    starts = [x0]
    if held:
        # With the prior's C_eff the default start (3 W idle) can sit above every measured
        # power, and the fit then settles where a lag longer than every layer explains it
        # all (each reads its gap's power). A start under every measured power is tried too.
        low = x0.copy()
        low[names.index("idle_mw")] = math.log(250.0 * float(y.min()))  # a quarter, in mW
        starts.append(low)
    res = min((least_squares(residuals, x, loss="soft_l1", f_scale=0.05, max_nfev=3000)
               for x in starts), key=lambda r: r.cost)
    return _zeroed(unpack(res.x), [n for n in _POWER_ZEROABLE if n in names],
                   lambda pf: sensed_power_w(pf, s, rows), zero)


# ---- a processor's whole fit, and leave-one-model-out -----------------------------------

@dataclass(frozen=True)
class ProcessorFit:
    processor: str
    timing: perf.TimingParams
    power: PowerFit | None
    models: tuple[str, ...]  # the models it was fitted on
    rows: int
    # ``timing.NAME`` / ``power.NAME`` kept at the prior's value -> why (`held_at_prior`)
    prior: dict[str, str] = field(default_factory=dict)
    # fitted parameters no measured layer depends on (`unbound_parameters`)
    unbound: tuple[str, ...] = ()
    has_host: bool = False  # G and N: the host's share was fitted too
    # fitted timing parameter -> how closely the layers bind it (`timing_spread`)
    spread: dict[str, float] = field(default_factory=dict)

    def fitted(self) -> list[str]:
        """The parameters the data set (``timing.NAME``, ``timing.macs_per_cycle.KIND``,
        ``power.NAME``): every one neither kept at the prior nor unbound."""
        names = [f"timing.{n}" for n in _SCALARS if self.has_host or n not in _HOST_ONLY]
        names += [f"timing.macs_per_cycle.{k}" for k in COMPUTE_KINDS]
        if self.power is not None:
            names += [f"power.{n}" for n in _POWER_NAMES
                      if n in _POWER_PARAMS and (self.has_host or n != "host_ceff_nf")]
        kept = self.kept_prior()
        return [n for n in names if n not in kept and n not in self.unbound]

    def kept_prior(self) -> dict[str, str]:
        """The parameters that kept the prior's value -> why: those the layers cannot
        tell apart (`prior`), and the power model's where no layer had a power."""
        out = dict(self.prior)
        if self.power is None:
            out.update({f"power.{n}": "no measured power" for n in _POWER_NAMES
                        if n in _POWER_PARAMS and (self.has_host or n != "host_ceff_nf")})
        return out

    def loose(self) -> list[str]:
        """The fitted parameters the layers bind only loosely (`LOOSE_SPREAD`)."""
        return [n for n, v in self.spread.items() if v > LOOSE_SPREAD and n not in self.unbound]


_POWER_PARAMS = set(perf.PowerParams.__dataclass_fields__)


def fit_processor(m: Measurements) -> ProcessorFit:
    timing = fit_timing(m)
    has_power = bool(np.isfinite(m.rows["power_w"]).sum() >= 5)
    power = fit_power(m, timing) if has_power else None
    prior = held_at_prior(m)
    if power is None:
        prior = {k: v for k, v in prior.items() if not k.startswith("power.")}
    return ProcessorFit(m.processor, timing, power, tuple(m.models), len(m.rows), prior,
                        unbound_parameters(m, timing, power, prior), m.has_host,
                        timing_spread(m, timing, prior))


def unbound_parameters(m: Measurements, timing: perf.TimingParams, power: PowerFit | None,
                       held: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The fitted parameters no measured layer depends on: doubling or halving one
    (memory_clock_share: +-0.25; roofline_p: +1) moves no row's predicted time, or power,
    by more than `_ZERO_REL`. One fitted to 0 counts as bound (0 is what the data say),
    and `held` ones (kept at the prior) are left out. Of the unbound, a kind's rate
    follows conv1x1's and the stream bandwidth the activations' (the fit's priors); the
    others stay where the fit left them, which no prediction of these layers shows."""
    held = held or {}
    out: list[str] = []

    def moves(trials: Sequence[P], predict: Callable[[P], np.ndarray], ref: np.ndarray) -> bool:
        return any(np.any(np.abs(predict(t) / ref - 1.0) > _ZERO_REL) for t in trials)

    d = _Design(m)
    times = d.split(timing).total_ms
    for n in _SCALARS:
        if (not m.has_host and n in _HOST_ONLY) or f"timing.{n}" in held:
            continue
        v = float(getattr(timing, n))
        if v == 0:
            continue
        vals = ([max(0.0, v - 0.25), min(1.0, v + 0.25)] if n == "memory_clock_share"
                else [v + 1.0] if n == "roofline_p" else [2 * v, v / 2])
        trials: list[perf.TimingParams] = [replace(timing, **{n: x})  # type: ignore[arg-type]
                                           for x in vals if x != v]
        if not moves(trials, lambda p: d.split(p).total_ms, times):
            out.append(f"timing.{n}")
    rates = timing.macs_per_cycle
    for k in COMPUTE_KINDS:
        if not moves([replace(timing, macs_per_cycle={**rates, k: rates[k] * f})
                      for f in (2.0, 0.5)], lambda p: d.split(p).total_ms, times):
            out.append(f"timing.macs_per_cycle.{k}")
    if power is not None:
        rows = m.rows[np.isfinite(m.rows["power_w"])].reset_index(drop=True)
        s = predict_split(timing, replace(m, rows=rows))
        watts = sensed_power_w(power, s, rows)
        for n in _POWER_NAMES:
            if (n not in _POWER_PARAMS or (not m.has_host and n == "host_ceff_nf")
                    or f"power.{n}" in held):
                continue
            v = float(getattr(power.power, n))
            if v == 0:
                continue
            if not moves([replace(power, power=replace(power.power, **{n: v * f}))
                          for f in (2.0, 0.5)], lambda pf: sensed_power_w(pf, s, rows), watts):
                out.append(f"power.{n}")
    return tuple(out)


#: A layer's time as measured scatters by about this much (relative): what
#: `timing_spread` assumes to say how closely the layers bind each parameter.
LAYER_SCATTER = 0.05
#: A fitted timing parameter whose spread exceeds this is only loosely bound: the fit's
#: priors, or a trade with another parameter, set it more than the layers do.
LOOSE_SPREAD = 0.25


def timing_spread(m: Measurements, timing: perf.TimingParams,
                  held: Mapping[str, str] | None = None) -> dict[str, float]:
    """How closely `m`'s layers bind each fitted, non-zero timing parameter: its relative
    standard error were every layer's time measured to `LAYER_SCATTER` (from the
    sensitivity of every row's log-time to the parameter's log, all parameters at once,
    so a pair that trades, such as a bandwidth and the roofline's p, spreads both). It
    depends on which layers at which levels were measured, not on how well they fit."""
    held = held or {}
    d = _Design(m)
    base = timing.macs_per_cycle
    names: list[str] = []
    cols: list[np.ndarray] = []
    h = 1e-3

    def at(name: str, factor: float) -> perf.TimingParams:
        if name.startswith("macs_per_cycle."):
            k = name.split(".", 1)[1]
            return replace(timing, macs_per_cycle={**base, k: base[k] * factor})
        return replace(timing, **{name: getattr(timing, name) * factor})  # type: ignore[arg-type]

    candidates = [n for n in _SCALARS if (m.has_host or n not in _HOST_ONLY)
                  and f"timing.{n}" not in held and n not in m.fixed_timing]
    candidates += [f"macs_per_cycle.{k}" for k in COMPUTE_KINDS]
    for n in candidates:
        v = base[n.split(".", 1)[1]] if n.startswith("macs_per_cycle.") else getattr(timing, n)
        if v == 0:
            continue
        up, down = (np.log(d.split(at(n, f)).total_ms) for f in (1 + h, 1 - h))
        names.append(n)
        cols.append((up - down) / (2 * h))
    if not cols:
        return {}
    jac = np.column_stack(cols)
    se = LAYER_SCATTER * np.sqrt(np.abs(np.diag(np.linalg.pinv(jac.T @ jac))))
    # A direction the layers do not see at all has no finite spread.
    se = np.where(np.linalg.norm(jac, axis=0) > _ZERO_REL, se, np.inf)
    return {f"timing.{n}": float(x) for n, x in zip(names, se, strict=True)}


@dataclass
class HeldOut:
    """Errors on one model a fit never saw (absolute relative errors)."""

    processor: str
    model: str
    layer_time_err: np.ndarray  # per row
    whole_time_err: np.ndarray  # per setting: the model's layers summed
    power_err: np.ndarray  # per row with a measured power
    predicted: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)


def evaluate(fit: ProcessorFit, m: Measurements) -> HeldOut:
    """`fit`'s errors on every row of `m` (which should hold one model)."""
    rows = m.rows.reset_index(drop=True)
    s = predict_split(fit.timing, m)
    pred = s.total_ms
    err = np.abs(pred / rows["time_ms"].to_numpy(np.float64) - 1.0)
    frame = rows.assign(pred_time_ms=pred)
    whole = frame.groupby(["model", "f_ghz", "fh_ghz"])[["pred_time_ms", "time_ms"]].sum()
    whole_err = np.abs(whole["pred_time_ms"] / whole["time_ms"] - 1.0).to_numpy()
    perr = np.array([])
    if fit.power is not None:
        ok = np.isfinite(rows["power_w"].to_numpy(np.float64))
        sensed = sensed_power_w(fit.power, s, rows)
        frame = frame.assign(pred_power_w=sensed)
        perr = np.abs(sensed[ok] / rows["power_w"].to_numpy(np.float64)[ok] - 1.0)
    return HeldOut(fit.processor, str(rows["model"].iloc[0]) if len(rows) else "", err,
                   whole_err, perr, frame)


def leave_one_model_out(m: Measurements, progress: Callable[[str, str], None] | None = None
                        ) -> list[HeldOut]:
    """Fit on every model but one, evaluate on that one; once per model."""
    out = []
    models = m.models
    if len(models) < 2:
        raise BadInputError(f"leave-one-model-out needs two models or more for processor "
                            f"{m.processor} (it has {len(models)})")
    for held in models:
        fit = fit_processor(m.subset([x for x in models if x != held]))
        out.append(evaluate(fit, m.subset([held])))
        if progress is not None:
            progress(m.processor, held)
    return out


#: The issue's validation targets (absolute relative errors, in %), per processor.
TARGETS_PCT = {"layer_median_pooled": 15.0, "layer_median_each": 20.0,
               "whole_median_pooled": 10.0, "whole_worst": 25.0,
               "power_median": 4.0, "power_p90": 10.0}


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.quantile(x, q) * 100) if x.size else float("nan")


def lomo_table(held: Sequence[HeldOut]) -> pd.DataFrame:
    """One row per (processor, held-out model) and a pooled row per processor: errors in
    % (median / 90th percentile of per-layer time over every level; whole-model time per
    setting, median and worst; per-layer power, median and 90th percentile)."""
    rows = []
    by_proc: dict[str, list[HeldOut]] = {}
    for h in held:
        by_proc.setdefault(h.processor, []).append(h)
    for proc, hs in by_proc.items():
        for one in [*hs, None]:
            parts = hs if one is None else [one]
            lt = np.concatenate([p.layer_time_err for p in parts])
            wt = np.concatenate([p.whole_time_err for p in parts])
            pe = np.concatenate([p.power_err for p in parts])
            rows.append({
                "processor": proc, "held_out": "pooled" if one is None else one.model,
                "layers": int(lt.size),
                "layer_time_err_median_pct": _pct(lt, 0.5), "layer_time_err_p90_pct": _pct(lt, 0.9),
                "whole_time_err_median_pct": _pct(wt, 0.5), "whole_time_err_max_pct": _pct(wt, 1.0),
                "power_err_median_pct": _pct(pe, 0.5), "power_err_p90_pct": _pct(pe, 0.9),
            })
    return pd.DataFrame(rows)


def target_misses(table: pd.DataFrame) -> list[str]:
    """The targets a `lomo_table` misses, one line each (empty: all met)."""
    t = TARGETS_PCT
    out = []
    for proc, g in table.groupby("processor", sort=False):
        pooled = g[g["held_out"] == "pooled"].iloc[0]
        each = g[g["held_out"] != "pooled"]
        checks = [
            (pooled["layer_time_err_median_pct"], t["layer_median_pooled"], "pooled per-layer time median"),
            (pooled["whole_time_err_median_pct"], t["whole_median_pooled"], "pooled whole-model time median"),
            (each["whole_time_err_median_pct"].max(), t["whole_worst"], "worst held-out model's whole-model time (its median over settings)"),
            (pooled["power_err_median_pct"], t["power_median"], "pooled per-layer power median"),
            (pooled["power_err_p90_pct"], t["power_p90"], "pooled per-layer power 90th percentile"),
        ]
        checks += [(r["layer_time_err_median_pct"], t["layer_median_each"],
                    f"per-layer time median with {r['held_out']} held out")
                   for _, r in each.iterrows()]
        out += [f"{proc}: {what} {v:.1f} % > {limit:g} %" for v, limit, what in checks
                if np.isfinite(v) and v > limit]
    return out


#: The sidecar format of a leave-one-model-out table (`coupprof report` reads it).
LOMO_FORMAT = "coupprof-lomo/1"


def write_lomo(table: pd.DataFrame, csv: Path, board: str, source: str,
               misses: Sequence[str]) -> Path:
    """``table`` (`lomo_table`) as ``csv``, with a JSON sidecar beside it saying which
    board and measurements it validates and which targets it missed; returns the
    sidecar's path."""
    csv.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(csv, index=False)
    side = csv.with_suffix(".json")
    write_json_atomic(side, {"format": LOMO_FORMAT, "csv": csv.name, "board": board,
                             "source": source, "targets_pct": dict(TARGETS_PCT),
                             "targets_missed": list(misses)})
    return side
