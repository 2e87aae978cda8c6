"""Fused per-layer times: what each layer costs inside an uninterrupted run of the model.

A sliced layer (`profiler.measure.runner`) pays the processor's fixed per-call cost, which on
an accelerator outweighs most layers. Here the model's cumulative prefixes P(-1)..P(n-1)
(`profiler.slicing.prefix`) are visited in interleaved rounds: layer k = T(P(k)) - T(P(k-1)),
the fixed per-call cost T(P(-1)) is a row of its own, and the rows add up to the whole model.
Options: windows with a lead (deep models on CPU clusters), the cache state, energy from a
counter source's prefix powers, and a call factor for disturbed calls.

`FusedProfiler(prefixes, executor).measure(settings)` returns a `FusedResult`. The
clock is a parameter (`profiler.clock`), so the maths is checked exactly in tests.

Why this scheme, the measurements behind its defaults and what was tried: docs/fused.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from profiler.clock import Clock, perf_clock
from profiler.errors import BadInputError
from profiler.executors.base import overrun_ns
from profiler.measure.cpu_cache import Evictor, last_level_cache_bytes
from profiler.measure.method import Method

if TYPE_CHECKING:  # types only: importing profiler.executors loads LiteRT's runtimes
    from profiler.boards.model import ProcessorKind
    from profiler.executors.base import Executor, SubModel
    from profiler.slicing.prefix import PrefixModel
    from profiler.slicing.specs import SlicedModel

CACHE_STATES = ("auto", "warm", "cold")
#: Share of rounds cut from each end before averaging a layer's differences.
TRIM = 0.2


@dataclass(frozen=True)
class FusedSettings:
    """How long to measure: rounds adapt between min_rounds and max_rounds until every
    layer's 95 % half-width is within max(target_ms, target_rel * |time|), or budget_s
    (wall seconds of measured rounds) is spent."""

    target_ms: float = 0.02
    target_rel: float = 0.02
    budget_s: float = 60.0
    min_rounds: int = 10
    max_rounds: int = 10_000
    warmup_rounds: int = 2
    check_every: int = 5
    visit_calls: int = 3  # calls of a prefix back to back per round ...
    visit_warm: int = 1  # ... of which the first are not timed
    alone_calls: int = 20  # groups of the whole model's calls alone after the rounds (0: not)
    alone_warm: int = 5  # ... after this many untimed calls
    window: int = 0  # layers per segment (0: prefixes of the whole model; docs/fused.md)
    lead: int = 6  # layers a window starts before its segment, differenced out
    # the caches a timed call finds: "warm" (left by the visit's previous call), "cold"
    # (the last-level cache emptied first), "auto" (cold where the model's weights
    # outgrow a CPU cluster's last-level cache; docs/fused.md, "Cache state")
    cache: str = "auto"

    def __post_init__(self) -> None:
        if self.min_rounds < 3:
            raise BadInputError(f"--min-rounds {self.min_rounds}: an interval needs 3 rounds or more",
                                "give --min-rounds 3 or more")
        if self.max_rounds < self.min_rounds:
            raise BadInputError(f"--max-rounds {self.max_rounds} is below --min-rounds "
                                f"{self.min_rounds}", "raise --max-rounds")
        if not 0 <= self.visit_warm < self.visit_calls:
            raise BadInputError(f"visit of {self.visit_calls} calls with {self.visit_warm} "
                                "untimed: at least one call must be timed", "")
        if self.alone_calls < 0 or self.alone_warm < 0 or 0 < self.alone_calls < 3:
            raise BadInputError(f"{self.alone_calls} calls alone: give 0 or 3 and more", "")
        if self.window < 0:
            raise BadInputError(f"--window {self.window}: give 0 (whole prefixes) or a "
                                "number of layers", "e.g. --window 4")
        if self.lead < 1:
            raise BadInputError(f"--lead {self.lead}: a window starts at least one layer "
                                "before its segment", "e.g. --lead 6")
        if self.cache not in CACHE_STATES:
            raise BadInputError(f"--cache {self.cache!r}: give one of "
                                f"{', '.join(CACHE_STATES)}", "e.g. --cache auto")
        if self.budget_s <= 0 or self.target_ms < 0 or self.target_rel < 0:
            raise BadInputError("--budget-s must be positive and the targets not negative",
                                "e.g. --budget-s 60 --target-ms 0.02")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Estimate:
    """A time from repeated rounds: trimmed mean and the half-width of its 95 % interval."""

    time_ms: float
    ci95_ms: float

    @property
    def below_resolution(self) -> bool:
        """The interval reaches zero (or below): the figure is only an upper bound."""
        return self.time_ms - self.ci95_ms <= 0.0

    @property
    def upper_ms(self) -> float:
        return self.time_ms + self.ci95_ms


@dataclass(frozen=True)
class FusedLayer:
    index: int
    time_ms: float
    ci95_ms: float
    below_resolution: bool
    within_target: bool


@dataclass
class FusedResult:
    """Per-layer fused times, the fixed per-call row, and how they were measured."""

    layers: list[FusedLayer]
    fixed: Estimate  # what a call costs beyond its layers (docs/fused.md)
    whole: Estimate  # the whole model, one call (alone, when measured so)
    rounds: int
    elapsed_s: float
    converged: bool  # every layer within its target (else the budget or max_rounds ended it)
    settings: FusedSettings
    prefix_read_bytes: list[int] = field(default_factory=list)
    prefix_reduced: list[int] = field(default_factory=list)
    round_ns: np.ndarray | None = field(default=None, repr=False)  # (rounds, n + 1)
    # the whole model's calls alone: (groups, calls a group) ns
    alone_ns: np.ndarray | None = field(default=None, repr=False)
    whole_alone: Estimate | None = None  # their groups' fastest, trimmed mean (information)
    whole_alone_mean_ms: float | None = None  # every one of those calls, plain mean
    # Where the processor hands nothing back (a CPU cluster): how much longer a call takes
    # on average than undisturbed, whole_alone_mean_ms / whole_alone (>= 1; module
    # docstring, "Disturbed calls"). None: not measured, or an accelerator.
    call_factor: float | None = None
    # Simulated processors: per prefix (0 = the empty one), its calls that took the host's
    # time because this machine was slower than the model (`PacedSubModel`).
    prefix_late_runs: list[int] = field(default_factory=list)
    # Per layer, the position of the prefix (or window) that ends with it; its difference
    # is with the position before. Empty: prefixes of the whole model, layer k at k + 1.
    layer_positions: list[int] = field(default_factory=list)
    # settings.cache holds the cache state the calls found; the bytes read to empty the
    # caches before each timed call (0: warm), and why that state (`cache_state`).
    evict_bytes: int = 0
    cache_choice: CacheChoice | None = None

    def positions(self) -> list[int]:
        return self.layer_positions or list(range(1, len(self.layers) + 1))

    def layer_late_runs(self) -> list[int]:
        """Per layer, the late calls of the two prefixes its difference uses. A late prefix
        lasted max(host, model) while its neighbour may have lasted the model's time, so
        the difference is neither the layer's modelled time nor the host's: such a layer's
        figure is not the board's, even where its own sliced runs kept up."""
        late = self.prefix_late_runs
        if not late:
            return [0] * len(self.layers)
        return [late[p - 1] + late[p] for p in self.positions()]

    @property
    def layer_sum_ms(self) -> float:
        return float(sum(layer.time_ms for layer in self.layers))

    def times_ms(self) -> np.ndarray:
        return np.array([layer.time_ms for layer in self.layers])

    def prefix_ms(self) -> np.ndarray:
        """Each prefix's time per call in the rounds (trimmed mean; 0 = the empty prefix)."""
        if self.round_ns is not None:
            return np.asarray(trimmed_estimate(self.round_ns)[0], dtype=np.float64)
        if self.layer_positions:
            raise ValueError("windows' times need the rounds")
        return np.concatenate([[self.fixed.time_ms],
                               self.fixed.time_ms + np.cumsum(self.times_ms())])

    def info(self) -> dict[str, Any]:
        """What the JSON sidecar records of the method."""
        w = self.settings.window
        scheme = (f"prefixes within segments of {w} layers, each from the segment's real "
                  "inputs, and the whole model" if self.layer_positions else
                  "cumulative prefixes") + ", large outputs reduced on a processor that " \
            "downloads them (MEAN over H, W)"
        return {
            "method": Method.FUSED,
            "scheme": scheme,
            "rounds": self.rounds,
            "elapsed_s": round(self.elapsed_s, 3),
            "converged": self.converged,
            "settings": self.settings.to_dict(),
            "cache": self.settings.cache,
            "evict_bytes": self.evict_bytes,
            "cache_choice": None if self.cache_choice is None else asdict(self.cache_choice),
            "fixed_ms": self.fixed.time_ms,
            "fixed_ms_ci95": self.fixed.ci95_ms,
            "whole_ms": self.whole.time_ms,
            "whole_ms_ci95": self.whole.ci95_ms,
            "whole_alone_ms": None if self.whole_alone is None else self.whole_alone.time_ms,
            "whole_alone_ms_ci95": None if self.whole_alone is None
            else self.whole_alone.ci95_ms,
            "whole_alone_mean_ms": self.whole_alone_mean_ms,
            "call_factor": self.call_factor,
            "layer_sum_ms": self.layer_sum_ms,
            "prefix_read_bytes": list(self.prefix_read_bytes),
            "prefix_reduced_outputs": list(self.prefix_reduced),
            "below_resolution": [layer.index for layer in self.layers if layer.below_resolution],
            "late_prefixes": [p for p, n in enumerate(self.prefix_late_runs) if n > 0],
        }


# -- statistics ----------------------------------------------------------------------

def _t_quantile_975(dof: int) -> float:
    """Student's t 0.975 quantile (Cornish-Fisher expansion; within 0.2 % for dof >= 3)."""
    z = 1.959963984540054
    v = max(dof, 1)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3))


def trimmed_estimate(values_ns: np.ndarray, trim: float = TRIM, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(trimmed mean, 95 % half-width) in ms along ``axis`` (Tukey-McLaughlin interval).

    With g values cut from each end of n: mean of the middle n - 2g, standard error
    s_w / ((1 - 2 trim) sqrt(n)) where s_w is the sample deviation of the winsorized
    values, and t with n - 2g - 1 degrees of freedom."""
    x = np.sort(np.moveaxis(np.asarray(values_ns, dtype=np.float64) / 1e6, axis, 0), axis=0)
    n = x.shape[0]
    g = int(math.floor(trim * n))
    mid = x[g:n - g] if g else x
    mean = mid.mean(axis=0)
    if n < 2:
        return mean, np.full(mean.shape, np.inf)
    w = x.copy()
    if g:
        w[:g] = x[g]
        w[n - g:] = x[n - g - 1]
    s_w = w.std(axis=0, ddof=1)
    h = n - 2 * g
    se = s_w / ((h / n) * math.sqrt(n))
    return mean, _t_quantile_975(h - 1) * se


def layer_estimates(round_ns: np.ndarray, trim: float = TRIM,
                    positions: Sequence[int] | None = None,
                    ) -> tuple[Estimate, list[Estimate], Estimate]:
    """(fixed, layers, whole) from per-round prefix times (rounds, prefixes); the whole
    model is the last column, the fixed row the first.

    Layer k's figure is the difference of the trimmed means of the prefix that ends with
    it (column ``positions[k]``, by default k + 1) and the column before, so with
    prefixes the fixed row and the layers add up to the whole model's figure exactly;
    its interval comes from the paired differences of each round, whose spread is free
    of the drift that both calls of a round share."""
    t = np.asarray(round_ns, dtype=np.int64)
    pos = np.asarray(list(positions) if positions else range(1, t.shape[1]), dtype=np.int64)
    means, halves = trimmed_estimate(t, trim)
    _, diff_halves = trimmed_estimate(t[:, pos] - t[:, pos - 1], trim)
    layers = [Estimate(float(means[p] - means[p - 1]), float(diff_halves[k]))
              for k, p in enumerate(pos)]
    return (Estimate(float(means[0]), float(halves[0])), layers,
            Estimate(float(means[-1]), float(halves[-1])))


def within_target(est: Estimate, settings: FusedSettings) -> bool:
    return est.ci95_ms <= max(settings.target_ms, settings.target_rel * abs(est.time_ms))


@dataclass(frozen=True)
class FusedEnergy:
    """Energy per call from a counter: each prefix's repeat-window power times its time
    in the rounds, and the differences (docs/fused.md)."""

    prefix_power_w: list[float]  # per prefix, 0 = the empty prefix
    prefix_energy_mj: list[float]  # per call: power x the prefix's time
    layer_energy_mj: list[float]  # E(k) - E(k - 1)
    fixed_energy_mj: float  # E(-1)

    @property
    def whole_energy_mj(self) -> float:
        """The whole model's energy per call (= fixed + the layers, exactly)."""
        return self.prefix_energy_mj[-1]

    def info(self) -> dict[str, Any]:
        return {"method": "prefix energies: repeat-window power x time in the rounds, "
                          "differenced", **asdict(self)}


def energy_by_prefix(result: FusedResult, prefix_power_w: Sequence[float]) -> FusedEnergy:
    """Layer and fixed-row energies per call from each prefix's power (docs/fused.md):
    E(k) = P(k) T(k) with the rounds' times, layer k's E(k) - E(k-1), the fixed row's E(-1)."""
    t_ms = result.prefix_ms()
    power = np.asarray(prefix_power_w, dtype=np.float64)
    if power.shape != t_ms.shape:
        raise ValueError(f"{power.size} prefix powers for {t_ms.size} prefixes")
    e_mj = power * t_ms  # W x ms = mJ
    pos = np.asarray(result.positions(), dtype=np.int64)
    return FusedEnergy([float(p) for p in power], [float(e) for e in e_mj],
                       [float(d) for d in e_mj[pos] - e_mj[pos - 1]], float(e_mj[0]))


# -- measuring -----------------------------------------------------------------------

class FusedProfiler:
    """Loads every prefix on an open executor, then measures rounds (`measure`).

    One call of a prefix: set every input (untimed: the hand-over into a call), then,
    timed, run and with ``read_outputs`` read every output into host memory (a GPU's
    download; on a CPU the outputs are already there). ``hooks(position, start)`` is
    called before (start=True) and after the timed calls of each visit of a measured
    round (position 0 = the empty prefix), e.g. to move a marker; its cost falls outside
    the timed window (cold, the evictions before those calls fall inside the bracket).
    ``evict``: called before every timed call of a round, outside its
    window (a cold cache state, `profiler.measure.cpu_cache.Evictor`); its inputs are written
    after it, as the layer before them leaves them in an application's frame.
    """

    def __init__(self, prefixes: Sequence[PrefixModel], executor: Executor, *,
                 inputs: Sequence[np.ndarray] | None = None, seed: int = 0,
                 clock: Clock = perf_clock, model_name: str = "model",
                 read_outputs: bool = True, model_data: bytes | None = None,
                 evict: Evictor | None = None, cache_choice: CacheChoice | None = None,
                 ) -> None:
        """``model_data``: the model's bytes, which windows (prefixes starting after layer
        0) need to compute their inputs' values. ``cache_choice``: why ``evict`` is given
        or not (`cache_state`), recorded in the result."""
        self.evict = evict
        self.cache_choice = cache_choice
        from profiler.measure.runner import random_input

        if not prefixes or prefixes[0].last != -1:
            raise ValueError("prefixes must start with the empty prefix (prefix_models)")
        self.prefixes = list(prefixes)
        self.clock = clock
        self.read_outputs = read_outputs
        # a CPU cluster's calls alone give a call factor; an accelerator's move with its clock
        self.factor_from_alone = not executor.proc.kind.downloads_results
        self.subs: list[SubModel] = [
            executor.load(p.model_bytes, name=f"prefix {p.first}..{p.last} of {model_name}")
            for p in self.prefixes]
        rng = np.random.default_rng(seed)
        if inputs is None:
            inputs = [random_input(io.shape, io.dtype, rng) for io in self.subs[0].inputs]
        self.inputs = [np.ascontiguousarray(x) for x in inputs]
        windowed = any(p.role == "whole" for p in self.prefixes)
        if windowed and read_outputs:
            raise ValueError("windows are for processors whose outputs stay in host memory "
                             "(settings_for)")
        # Where each layer's prefix is ([]: prefixes of the whole model, layer k at k + 1).
        self.positions = [i for i, p in enumerate(self.prefixes) if p.role == "layer"] \
            if windowed else []
        # the segment length the prefixes were cut with: the first segment's layers, those
        # between the empty prefix and the next base (later segments may start at 0 too)
        bases = [i for i, p in enumerate(self.prefixes) if p.role != "layer"]
        self.window = bases[1] - 1 if windowed else 0
        values = self._window_values(model_data) if windowed else {}
        self.sub_inputs = [values[p.first] if p.first else self.inputs for p in self.prefixes]
        for sub, xs in zip(self.subs, self.sub_inputs, strict=True):
            if [tuple(io.shape) for io in sub.inputs] != [x.shape for x in xs]:
                raise ValueError(f"{sub.name}: inputs differ from its empty prefix's")
        self._calls = [self._timed_call(sub, xs)
                       for sub, xs in zip(self.subs, self.sub_inputs, strict=True)]

    def _window_values(self, model_data: bytes | None) -> dict[int, list[np.ndarray]]:
        """Per window start, its inputs' values from one run of the model on ``inputs``."""
        from profiler.slicing.prefix import tensor_values

        if model_data is None:
            raise ValueError("windows need the model's bytes for their inputs")
        starts = {p.first: list(p.input_tensors) for p in self.prefixes if p.first > 0}
        wanted = sorted({t for ts in starts.values() for t in ts})
        got = dict(zip(wanted, tensor_values(model_data, self.inputs, wanted), strict=True))
        return {first: [np.ascontiguousarray(got[t]) for t in ts] for first, ts in starts.items()}

    def _timed_call(self, sub: SubModel, inputs: list[np.ndarray]) -> Callable[[], int]:
        clock = self.clock
        set_input, run, output = sub.set_input, sub.run, sub.output
        n_out = len(sub.outputs) if self.read_outputs else 0

        def call() -> int:
            for i, x in enumerate(inputs):
                set_input(i, x)
            o0 = overrun_ns()
            t0 = clock()
            run()
            for i in range(n_out):
                np.array(output(i), copy=True)  # the read-back an application does
            return clock() - t0 - (overrun_ns() - o0)  # a late wake-up is the host's

        return call

    def call(self, position: int) -> Callable[[], int]:
        """The timed call of prefix ``position`` (0 = the empty prefix), e.g. to repeat it
        for a counter's energy; returns its duration in ns."""
        return self._calls[position]

    @property
    def calls(self) -> list[Callable[[], int]]:
        """Every prefix's call, the empty prefix first."""
        return list(self._calls)

    def run_round(self, backward: bool, hooks: Callable[[int, bool], None] | None = None,
                  calls: int = 3, warm: int = 1) -> np.ndarray:
        """One visit of every prefix (``calls`` calls, the first ``warm`` untimed); returns
        each prefix's fastest timed call (ns) in prefix order. ``hooks`` bracket the timed
        calls of each visit."""
        n = len(self._calls)
        out = np.empty(n, dtype=np.int64)
        order = range(n - 1, -1, -1) if backward else range(n)
        timed = calls - warm
        evict = self.evict
        for p in order:
            call = self._calls[p]
            for _ in range(warm):
                call()
            if hooks:
                hooks(p, True)
            times_ns = []
            for _ in range(timed):
                if evict is not None:
                    evict()
                times_ns.append(call())
            if hooks:
                hooks(p, False)
            out[p] = min(times_ns)
        return out

    def measure(self, settings: FusedSettings | None = None,
                progress: Callable[[int, int], None] | None = None,
                hooks: Callable[[int, bool], None] | None = None,
                wall: Callable[[], float] = time.monotonic) -> FusedResult:
        """Warm-up rounds, then measured rounds until every layer is within its target
        (checked every ``check_every`` rounds after ``min_rounds``), the budget is spent
        or ``max_rounds`` is reached. ``progress(done, expected)``: rounds so far and an
        estimate of the rounds the budget allows."""
        s = settings or FusedSettings()
        late0 = [sub.late_runs for sub in self.subs]
        for r in range(s.warmup_rounds):
            self.run_round(backward=bool(r % 2), calls=s.visit_calls, warm=s.visit_warm)
        rows: list[np.ndarray] = []
        start = wall()
        converged = False
        while True:
            rows.append(self.run_round(backward=bool(len(rows) % 2), hooks=hooks,
                                       calls=s.visit_calls, warm=s.visit_warm))
            done = len(rows)
            spent = wall() - start
            if progress:
                per_round = spent / done
                progress(done, max(done, min(s.max_rounds, int(s.budget_s / max(per_round, 1e-9)))))
            if done >= s.min_rounds and (done - s.min_rounds) % s.check_every == 0:
                fixed, layers, _ = layer_estimates(np.array(rows), positions=self.positions)
                if all(within_target(e, s) for e in [fixed, *layers]):
                    converged = True
                    break
            if done >= s.max_rounds or (spent >= s.budget_s and done >= s.min_rounds):
                break
        elapsed = wall() - start
        res = self.result(np.array(rows), s, elapsed, converged, self.alone(s))
        res.prefix_late_runs = [sub.late_runs - n for sub, n in zip(self.subs, late0, strict=True)]
        return res

    def measure_energy(self, settings: FusedSettings,
                       progress: Callable[[int, int], None] | None = None,
                       prefix_powers: PrefixPowers | None = None,
                       ) -> tuple[FusedResult, FusedEnergy | None]:
        """`measure`, then with ``prefix_powers`` (each prefix call's power,
        `profiler.power.session.PowerSession.call_powers`) the energies per call
        (`energy_by_prefix`)."""
        result = self.measure(settings, progress=progress)
        if prefix_powers is None:
            return result, None
        return result, energy_by_prefix(result, prefix_powers(self.calls))

    def alone(self, settings: FusedSettings) -> np.ndarray | None:
        """The whole model called alone, back to back: (groups, calls a group) ns."""
        if settings.alone_calls == 0:
            return None
        call = self._calls[-1]
        for _ in range(settings.alone_warm):
            call()
        timed = settings.visit_calls - settings.visit_warm
        return np.array([[call() for _ in range(timed)] for _ in range(settings.alone_calls)],
                        dtype=np.int64)

    def result(self, round_ns: np.ndarray, settings: FusedSettings, elapsed_s: float,
               converged: bool, alone_ns: np.ndarray | None = None) -> FusedResult:
        fixed, layers, whole = layer_estimates(round_ns, positions=self.positions)
        # what the prefixes were cut with, and the cache state the calls found
        settings = replace(settings, window=self.window,
                           cache="cold" if self.evict is not None else "warm")
        alone = alone_mean = factor = None
        if alone_ns is not None:
            mean, half = trimmed_estimate(alone_ns.min(axis=1))
            alone = Estimate(float(mean), float(half))
            alone_mean = float(alone_ns.mean()) / 1e6
            if self.factor_from_alone and alone.time_ms > 0:
                factor = max(1.0, alone_mean / alone.time_ms)
        return FusedResult(
            layers=[FusedLayer(k, e.time_ms, e.ci95_ms, e.below_resolution,
                               within_target(e, settings)) for k, e in enumerate(layers)],
            fixed=fixed, whole=whole, rounds=int(round_ns.shape[0]), elapsed_s=elapsed_s,
            converged=converged, settings=settings,
            prefix_read_bytes=[p.read_bytes for p in self.prefixes],
            prefix_reduced=[p.reduced for p in self.prefixes],
            round_ns=round_ns, alone_ns=alone_ns, whole_alone=alone,
            whole_alone_mean_ms=alone_mean, call_factor=factor,
            layer_positions=list(self.positions),
            evict_bytes=self.evict.nbytes if self.evict is not None else 0,
            cache_choice=self.cache_choice,
        )


def settings_for(settings: FusedSettings, kind: ProcessorKind) -> FusedSettings:
    """``settings`` for a processor of this kind: windows on CPU clusters only. On a GPU
    or NPU a window is handed its segment's inputs, and if the runtime uploads an input
    only once a layer of the call reads it (the likeliest cause of what we measured), a
    difference carries the upload of a residual's skip tensor: on an H100, windows of 6
    over ResNet50 summed to 7.04 ms with the fixed row against 4.65 ms for the whole
    model in the same rounds (`data/validation/h100-run/windows-gpu/`). Whole prefixes
    suffice there."""
    return replace(settings, window=0) if settings.window and kind.downloads_results \
        else settings


PrefixPowers = Callable[[Sequence[Callable[[], int]]], Sequence[float]]

#: A cold call reads this many times the last-level cache's size first: enough to
#: displace every line of an LRU-like cache, and of the smaller levels below it.
EVICT_FACTOR = 2


@dataclass(frozen=True)
class CacheChoice:
    """The cache state a fused measurement's timed calls find, and why."""

    state: str  # "warm" | "cold"
    llc_bytes: int | None  # the cluster's last-level cache (None: sysfs does not say)
    weight_bytes: int  # the model's constant tensors
    reason: str


def cache_state(settings: FusedSettings, executor: Executor, weight_bytes: int,
                sysfs_root: Path) -> CacheChoice:
    """``settings.cache`` resolved for this executor and model (docs/fused.md, "Cache
    state"): "auto" is cold on a real CPU cluster whose last-level cache (that of its
    first core, from ``sysfs_root``) is smaller than the model's weights, warm otherwise:
    an accelerator's weights live in its own memory, and a simulated processor's time is
    modelled."""
    real_cpu = executor.kind == "cpu" and executor.modelled is None
    llc = last_level_cache_bytes(executor.cores[0], sysfs_root) if real_cpu else None
    if settings.cache != "auto":
        if settings.cache == "cold" and llc is None:
            raise BadInputError(
                f"--cache cold: no last-level cache size for processor {executor.proc.letter}"
                + (f" (core {executor.cores[0]} under {sysfs_root})" if real_cpu
                   else f" ({'simulated' if executor.modelled else executor.kind}: only a "
                   "CPU cluster's host caches can be emptied)"),
                "use --cache warm or auto")
        return CacheChoice(settings.cache, llc, weight_bytes, "asked")
    if not real_cpu:
        why = "simulated processor" if executor.modelled is not None else \
            "accelerator: its weights are in its own memory"
        return CacheChoice("warm", None, weight_bytes, why)
    if llc is None:
        return CacheChoice("warm", None, weight_bytes,
                           f"no cache size under {sysfs_root} for core {executor.cores[0]}")
    if weight_bytes > llc:
        return CacheChoice("cold", llc, weight_bytes,
                           "the weights outgrow the last-level cache")
    return CacheChoice("warm", llc, weight_bytes, "the weights fit in the last-level cache")


def fused_profiler(executor: Executor, data: bytes, sliced: SlicedModel, settings: FusedSettings,
                   *, seed: int = 0, clock: Clock = perf_clock,
                   model_name: str = "model", sysfs_root: Path | None = None,
                   ) -> FusedProfiler:
    """The prefixes of ``data`` cut as ``sliced``, loaded on the open ``executor``: outputs
    reduced and read back where the processor downloads them
    (`ProcessorKind.downloads_results`), in windows where ``settings`` asks and the
    processor allows (`settings_for`), the caches emptied before each timed call where
    `cache_state` says cold (``sysfs_root``: where the CPU's cache sizes are read;
    default $COUPPROF_SYSFS_ROOT or /sys)."""
    from governors.sysfs_io import sysfs_root_from_env
    from profiler.slicing.prefix import REDUCE_ABOVE_BYTES, prefix_models

    down = executor.proc.kind.downloads_results
    s = settings_for(settings, executor.proc.kind)
    prefixes = prefix_models(data, sliced, reduce_above_bytes=REDUCE_ABOVE_BYTES if down else None,
                             window=s.window, lead=s.lead)
    choice = cache_state(s, executor, sum(layer.param_bytes for layer in sliced.layers),
                         sysfs_root if sysfs_root is not None else sysfs_root_from_env())
    evict = Evictor(EVICT_FACTOR * choice.llc_bytes) \
        if choice.state == "cold" and choice.llc_bytes else None
    return FusedProfiler(prefixes, executor, seed=seed, clock=clock, model_name=model_name,
                         read_outputs=down, model_data=data, evict=evict, cache_choice=choice)


def measure_model(executor: Executor, data: bytes, sliced: SlicedModel,
                  settings: FusedSettings | None = None, *,
                  progress: Callable[[int, int], None] | None = None, seed: int = 0,
                  clock: Clock = perf_clock, model_name: str = "model",
                  prefix_powers: PrefixPowers | None = None, sysfs_root: Path | None = None,
                  ) -> tuple[FusedResult, FusedEnergy | None]:
    """Build the prefixes of ``data`` cut as ``sliced`` (a `SlicedModel` of it), load them
    on the open ``executor`` and measure (see `FusedProfiler.measure`). Outputs are
    reduced and read back where the processor downloads them
    (`ProcessorKind.downloads_results`).
    ``prefix_powers`` (a counter source: each prefix call's power from a repeat window,
    `profiler.power.session.PowerSession.call_powers`) adds the energies per call (a
    prefix's repeat window calls it back to back, warm whatever the cache state: its
    power is the warm call's). ``sysfs_root``: see `fused_profiler`.

    Memory: every prefix stays loaded, about n/2 copies of the model's weights."""
    s = settings_for(settings or FusedSettings(), executor.proc.kind)
    prof = fused_profiler(executor, data, sliced, s, seed=seed, clock=clock,
                          model_name=model_name, sysfs_root=sysfs_root)
    return prof.measure_energy(s, progress=progress, prefix_powers=prefix_powers)
