"""Fused per-layer times: what each layer costs inside an uninterrupted run of the model.

A sliced layer (`profiler.measure.runner`) pays the processor's fixed per-call cost, which on
an accelerator outweighs most layers. Here the model's cumulative prefixes P(-1)..P(n-1)
(`profiler.slicing.prefix`) are visited in interleaved rounds: layer k = T(P(k)) - T(P(k-1)),
the fixed per-call cost T(P(-1)) is a row of its own, and the rows add up to the whole model.
Options: windows with a lead (deep models on CPU clusters), the cache state, energy from a
counter source's prefix powers, a call factor for disturbed calls, and blocks of prefixes
loaded one at a time where all of them would hold too much memory (``loaded_mb``).

`FusedProfiler(prefixes, executor).measure(settings)` returns a `FusedResult`. The
clock is a parameter (`profiler.clock`), so the maths is checked exactly in tests.

Why this scheme, the measurements behind its defaults and what was tried: docs/fused.md.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from profiler.clock import Clock, perf_clock
from profiler.errors import BadInputError
from profiler.executors.base import app_call, return_freed_memory
from profiler.measure.cpu_cache import (
    PROBE_MIN_BYTES,
    Evictor,
    last_level_cache_bytes,
    measured_cache_bytes,
)
from profiler.measure.method import LOADED_MB_DEFAULT, Method

if TYPE_CHECKING:  # types only: importing profiler.executors loads LiteRT's runtimes
    from profiler.boards.model import ProcessorKind
    from profiler.executors.base import Executor, SubModel
    from profiler.measure.freq_trace import FreqReader
    from profiler.slicing.prefix import Prefixes, PrefixModel, PrefixSpec
    from profiler.slicing.specs import SlicedModel

CACHE_STATES = ("auto", "warm", "cold")
#: An end model's visit times this many calls more than a prefix's: its figure is a
#: difference of two short calls, taken out of two rows, and its calls cost no weights.
END_EXTRA_CALLS = 2
#: Share of rounds cut from each end before averaging a layer's differences.
TRIM = 0.2


@dataclass(frozen=True)
class FusedSettings:
    """How long to measure: rounds adapt between min_rounds and max_rounds until every
    row's 95 % half-width is within max(target_ms, target_rel * |time|), or budget_s
    (wall seconds of measured rounds) is spent. target_ms None: target_share of the mean
    layer (the whole model less the fixed row, over the layers), so a model of small
    layers is held to its own scale (docs/fused.md, "Rows that alternate")."""

    target_ms: float | None = None
    target_rel: float = 0.02
    target_share: float = 0.05
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
    # measure what each prefix's end costs (its outputs reduced, joined, read back) and
    # take it out of the rows, where the prefixes end in one joined output
    # (`profiler.slicing.prefix.end_models`; docs/fused.md, "Rows that alternate")
    end_cost: bool = True
    # the most memory the prefixes loaded at once may hold, in MiB (`held_bytes`; 0: all
    # of them at once); more are measured in blocks (`FusedProfiler`; docs/fused.md,
    # "Memory")
    loaded_mb: float = LOADED_MB_DEFAULT
    # before each visit, keep the processor busy this long (ms, untimed) with the
    # heaviest prefix loaded: a clock that its driver moves with the load then sees a
    # load like a run's back-to-back frames (docs/fused.md, "The accelerator's clock");
    # None: `HOLD_MS_DRIVER_CLOCK` where the driver moves the clock, else 0 (`hold_for`)
    hold_ms: float | None = None

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
        if self.hold_ms is not None and self.hold_ms < 0:
            raise BadInputError(f"--hold-ms {self.hold_ms:g}: give 0 (no hold) or more",
                                "e.g. --hold-ms 5")
        if self.loaded_mb < 0:
            raise BadInputError(f"--loaded-mb {self.loaded_mb:g}: give 0 (every prefix "
                                "loaded at once) or more", "e.g. --loaded-mb 384")
        if self.cache not in CACHE_STATES:
            raise BadInputError(f"--cache {self.cache!r}: give one of "
                                f"{', '.join(CACHE_STATES)}", "e.g. --cache auto")
        if self.budget_s <= 0 or (self.target_ms is not None and self.target_ms < 0) \
                or self.target_rel < 0 or self.target_share < 0:
            raise BadInputError("--budget-s must be positive and the targets not negative",
                                "e.g. --budget-s 60 --target-ms 0.02")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def loaded_bytes(self) -> int | None:
        """``loaded_mb`` in bytes (None: no bound)."""
        return int(self.loaded_mb * 2**20) if self.loaded_mb > 0 else None


@dataclass(frozen=True)
class Estimate:
    """A time from repeated rounds: trimmed mean and the half-width of its 95 % interval."""

    time_ms: float
    ci95_ms: float

    @property
    def below_resolution(self) -> bool:
        """The interval holds zero: the figure is only an upper bound."""
        return self.time_ms - self.ci95_ms <= 0.0 <= self.upper_ms

    @property
    def below_zero(self) -> bool:
        """The whole interval lies below zero: not unresolved but wrong (a cost that
        depends on where calls are cut; `group_layers` merges such a row)."""
        return self.upper_ms < 0.0

    @property
    def upper_ms(self) -> float:
        return self.time_ms + self.ci95_ms


@dataclass(frozen=True)
class FusedLayer:
    """A layer's own difference of prefixes. In a group (``group``: its index in
    `FusedResult.groups`) the figure is only its share as the prefixes split it; the
    group's row is the one to read, and below_resolution, within_target are the group's."""

    index: int
    time_ms: float
    ci95_ms: float
    below_resolution: bool
    within_target: bool
    group: int | None = None
    below_zero: bool = False  # its interval lies below zero and no group could take it


#: Why layers are reported as one row.
GROUP_CAUSES = {
    "kernel": "fused by the runtime into one kernel",
    "below_zero": "merged: a row's interval lay wholly below zero",
}


@dataclass(frozen=True)
class FusedGroup:
    """Consecutive layers reported as one row (docs/fused.md, "Rows that alternate"):
    the runtime compiles them into one kernel (``kernel``), or a row's interval lay wholly
    below zero and merging it with a neighbour made the figure true (``below_zero``).
    Its time is the difference of the prefixes around it, which its layers' own rows
    add up to."""

    first: int
    last: int
    time_ms: float
    ci95_ms: float
    causes: tuple[str, ...]
    within_target: bool = False

    @property
    def label(self) -> str:
        return f"layers {self.first}-{self.last}"

    def describe(self) -> str:
        return f"{self.label}, " + "; ".join(GROUP_CAUSES[c] for c in self.causes)

    @property
    def below_resolution(self) -> bool:
        return Estimate(self.time_ms, self.ci95_ms).below_resolution

    @property
    def below_zero(self) -> bool:
        return Estimate(self.time_ms, self.ci95_ms).below_zero

    def info(self) -> dict[str, Any]:
        return {"first": self.first, "last": self.last, "label": self.label,
                "describe": self.describe(), "time_ms": self.time_ms,
                "ci95_ms": self.ci95_ms, "causes": list(self.causes),
                "below_resolution": self.below_resolution, "within_target": self.within_target}


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
    # Layers reported as one row (their FusedLayer.group); the end cost taken out of each
    # prefix (ms, 95 % half-width; empty: none, the prefixes keep their outputs).
    groups: list[FusedGroup] = field(default_factory=list)
    end_ms: list[float] = field(default_factory=list)
    end_ci95_ms: list[float] = field(default_factory=list)
    target_ms: float | None = None  # the absolute target the rounds ran to
    # Prefixes measured in blocks loaded one at a time (`FusedProfiler`, "Memory"): each
    # block's first and last column ([]: all loaded at once); per round a block made, in
    # time order, the row of round_ns it fills (with hooks; `visit_matrix`); the most
    # model bytes loaded at once.
    blocks: list[list[int]] = field(default_factory=list)
    visit_rows: list[int] = field(default_factory=list)
    loaded_bytes_max: int = 0
    chain: BlockChain | None = None  # how the blocks' rounds were tied (`chain_blocks`)
    column_prefixes: list[int] = field(default_factory=list)  # the prefix each column times

    def positions(self) -> list[int]:
        return self.layer_positions or list(range(1, len(self.layers) + 1))

    def visit_matrix(self, per_visit: np.ndarray) -> np.ndarray:
        """What was read at each visit (rows as the hooks saw the rounds: with blocks, one
        per round of a block, in time order; columns as round_ns's) as (rounds, columns),
        each reading in the row of round_ns that its visit's time is in."""
        if not self.visit_rows:
            return per_visit
        out = np.full((self.rounds, per_visit.shape[1]), np.nan)
        for row, r in zip(per_visit, self.visit_rows, strict=False):
            seen = np.isfinite(row)
            out[r, seen] = row[seen]
        return out

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
        """Each prefix's time per call in the rounds (trimmed mean; 0 = the empty prefix),
        less its end cost where one was measured (`end_ms`)."""
        if self.round_ns is not None:
            rounds = self.round_ns if self.chain is None else self.chain.apply(self.round_ns)
            t = np.asarray(trimmed_estimate(rounds)[0], dtype=np.float64)
            return t - np.asarray(self.end_ms) if self.end_ms else t
        if self.layer_positions:
            raise ValueError("windows' times need the rounds")
        return np.concatenate([[self.fixed.time_ms],
                               self.fixed.time_ms + np.cumsum(self.times_ms())])

    def info(self) -> dict[str, Any]:
        """What the JSON sidecar records of the method."""
        w = self.settings.window
        scheme = (f"prefixes within segments of {w} layers, each from the segment's real "
                  "inputs, and the whole model" if w else "cumulative prefixes") + \
            (f", loaded in {len(self.blocks)} blocks one at a time" if self.blocks else "") + \
            (" (each later block repeating the empty prefix and its predecessor's last"
             " prefix, and scaled onto its successor by them)"
             if self.blocks and not w else "") + \
            ", large outputs reduced on a processor that downloads them (MEAN over H, W)"
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
            "below_zero": [layer.index for layer in self.layers if layer.below_zero],
            "groups": [g.info() for g in self.groups],
            "target_ms": self.target_ms,
            "end_ms": list(self.end_ms),
            "end_ms_ci95": list(self.end_ci95_ms),
            "late_prefixes": [p for p, n in enumerate(self.prefix_late_runs) if n > 0],
            "blocks": [list(b) for b in self.blocks],
            "block_chain": None if self.chain is None else self.chain.info(),
            "loaded_bytes_max": self.loaded_bytes_max,
            # what every row rests on, to check a table or try another model of it: per
            # round, each column's call (us), the prefix each column timed, and (blocks)
            # the row of the rounds each block's visit filled, in time order
            "round_us": None if self.round_ns is None
            else np.rint(np.asarray(self.round_ns) / 1e3).astype(np.int64).tolist(),
            "column_prefixes": list(self.column_prefixes),
            "visit_rows": list(self.visit_rows),
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
                    end_ms: Sequence[float] | np.ndarray | None = None,
                    end_half_ms: Sequence[float] | np.ndarray | None = None,
                    ) -> tuple[Estimate, list[Estimate], Estimate]:
    """(fixed, layers, whole) from per-round prefix times (rounds, prefixes); the whole
    model is the last column, the fixed row the first.

    Layer k's figure is the difference of the trimmed means of the prefix that ends with
    it (column ``positions[k]``, by default k + 1) and the column before, so with
    prefixes the fixed row and the layers add up to the whole model's figure exactly;
    its interval comes from the paired differences of each round, whose spread is free
    of the drift that both calls of a round share. ``end_ms`` (per column, with its
    95 % half-width ``end_half_ms``): what each prefix's end costs, taken out of its
    time first (`end_costs`; the whole model's column keeps its own end)."""
    t = np.asarray(round_ns, dtype=np.int64)
    pos = np.asarray(list(positions) if positions else range(1, t.shape[1]), dtype=np.int64)
    means, halves = trimmed_estimate(t, trim)
    end = np.zeros(t.shape[1]) if end_ms is None or not len(end_ms) else np.asarray(end_ms)
    eh = np.zeros(t.shape[1]) if end_half_ms is None or not len(end_half_ms) \
        else np.asarray(end_half_ms)
    means = means - end
    _, diff_halves = trimmed_estimate(t[:, pos] - t[:, pos - 1], trim)
    layers = [Estimate(float(means[p] - means[p - 1]),
                       float(math.sqrt(diff_halves[k] ** 2 + eh[p] ** 2 + eh[p - 1] ** 2)))
              for k, p in enumerate(pos)]
    return (Estimate(float(means[0]), float(math.hypot(halves[0], eh[0]))), layers,
            Estimate(float(means[-1]), float(math.hypot(halves[-1], eh[-1]))))


def end_costs(end_ns: np.ndarray, trim: float = TRIM) -> tuple[np.ndarray, np.ndarray]:
    """(ms, 95 % half-width) per end: from rounds of (rounds, 2 x ends) fastest calls of
    each end's pair (`profiler.slicing.prefix.end_models`: the end once, then twice), the
    paired difference of the two, round by round."""
    t = np.asarray(end_ns, dtype=np.int64)
    mean, half = trimmed_estimate(t[:, 1::2] - t[:, 0::2], trim)
    return np.asarray(mean, dtype=np.float64), np.asarray(half, dtype=np.float64)


def span_estimate(round_ns: np.ndarray, lo: int, hi: int, trim: float = TRIM,
                  end_ms: np.ndarray | None = None, end_half_ms: np.ndarray | None = None,
                  ) -> Estimate:
    """Columns ``hi`` less ``lo`` of the rounds (less their end costs), with the interval
    of the paired differences: a group's time."""
    t = np.asarray(round_ns, dtype=np.int64)
    means, _ = trimmed_estimate(t[:, [lo, hi]], trim)
    e = np.zeros(t.shape[1]) if end_ms is None or not len(end_ms) else end_ms
    eh = np.zeros(t.shape[1]) if end_half_ms is None or not len(end_half_ms) else end_half_ms
    _, half = trimmed_estimate(t[:, hi] - t[:, lo], trim)
    return Estimate(float(means[1] - e[hi] - means[0] + e[lo]),
                    float(math.sqrt(float(half) ** 2 + eh[hi] ** 2 + eh[lo] ** 2)))


def group_layers(round_ns: np.ndarray, positions: Sequence[int] | None = None,
                 kernels: Sequence[tuple[int, int]] = (), trim: float = TRIM,
                 end_ms: Sequence[float] | np.ndarray | None = None,
                 end_half_ms: Sequence[float] | np.ndarray | None = None,
                 cut_tensors: Sequence[int] | None = None,
                 firsts: Sequence[int] | None = None,
                 ) -> list[tuple[int, int, tuple[str, ...], Estimate]]:
    """Layers reported as one row: (first, last, causes, estimate) of every group.

    ``kernels`` (runs of layers the runtime compiles into one kernel,
    `profiler.slicing.fusion.kernel_groups`) are groups from the start. Then, while a row
    (a layer's, or a group's) has its whole interval below zero, it is merged with its
    neighbours: such a row is not unresolved but carries a cost that depends on where
    the calls are cut, which a neighbour carries with the opposite sign (docs/fused.md,
    "Rows that alternate"). With ``cut_tensors`` (per column of the rounds, the tensors
    its prefix hands out of the call), the fewest neighbours that make the group start
    and end at cuts handing out as many tensors (an end that costs the same at both);
    else, or where none does, the neighbour that leaves the merged row the highest lower
    bound. Only layers whose prefixes start at the same layer can merge (``firsts``: per
    column, the first layer of its prefix; default: the columns follow each other), so
    never across windows; prefixes measured in different blocks can."""
    t = np.asarray(round_ns, dtype=np.int64)
    pos = list(positions) if positions else list(range(1, t.shape[1]))
    end = np.zeros(t.shape[1]) if end_ms is None or not len(end_ms) else np.asarray(end_ms)
    eh = np.zeros(t.shape[1]) if end_half_ms is None or not len(end_half_ms) \
        else np.asarray(end_half_ms)

    def joinable(a: int, b: int) -> bool:  # layer a's prefix extends layer b's
        return firsts[pos[a]] == firsts[pos[b]] if firsts is not None else pos[a] == pos[b] + 1

    def est(a: int, b: int) -> Estimate:
        return span_estimate(t, pos[a] - 1, pos[b], trim, end, eh)

    # rows as [first layer, last layer, causes]; kernels first
    rows: list[list[Any]] = []
    k = 0
    starts = {a: b for a, b in kernels
              if 0 <= a < b < len(pos) and all(joinable(m + 1, m) for m in range(a, b))}
    while k < len(pos):
        b = starts.get(k, k)
        rows.append([k, b, ("kernel",) if b > k else ()])
        k = b + 1

    def reach(i: int) -> tuple[int, int]:
        """The rows before and after row i that it can merge with."""
        lo = hi = i
        while lo > 0 and joinable(rows[lo][0], rows[lo - 1][1]):
            lo -= 1
        while hi + 1 < len(rows) and joinable(rows[hi + 1][0], rows[hi][1]):
            hi += 1
        return lo, hi

    def balanced(i: int) -> tuple[int, int] | None:
        """The fewest rows around row i whose span starts and ends at cuts handing out as
        many tensors (None: none, or no counts)."""
        if cut_tensors is None:
            return None
        lo, hi = reach(i)
        spans = [(a, b) for a in range(lo, i + 1) for b in range(i, hi + 1) if (a, b) != (i, i)
                 and cut_tensors[pos[rows[a][0]] - 1] == cut_tensors[pos[rows[b][1]]]]
        return min(spans, key=lambda ab: (ab[1] - ab[0], -ab[0])) if spans else None

    while True:
        ests = [est(r[0], r[1]) for r in rows]
        bad = [i for i, e in enumerate(ests) if e.below_zero and reach(i) != (i, i)]
        if not bad:
            break
        i = min(bad, key=lambda j: ests[j].upper_ms)
        span = balanced(i)
        if span is None:
            lo_i, hi_i = reach(i)
            options = [o for o in (i - 1, i + 1) if lo_i <= o <= hi_i]
            merged = {o: est(rows[min(i, o)][0], rows[max(i, o)][1]) for o in options}
            j = max(options, key=lambda o: merged[o].time_ms - merged[o].ci95_ms)
            span = (min(i, j), max(i, j))
        lo, hi = span
        causes = tuple(dict.fromkeys([c for r in rows[lo:hi + 1] for c in r[2]] + ["below_zero"]))
        rows[lo:hi + 1] = [[rows[lo][0], rows[hi][1], causes]]
    return [(r[0], r[1], r[2], est(r[0], r[1])) for r in rows if r[1] > r[0]]


def target_floor_ms(settings: FusedSettings, fixed: Estimate, whole: Estimate,
                    layers: int) -> float:
    """The absolute target of a row's half-width: ``target_ms``, or ``target_share`` of
    the mean layer (the whole model less the fixed row, over the layers)."""
    if settings.target_ms is not None:
        return settings.target_ms
    return settings.target_share * max(whole.time_ms - fixed.time_ms, 0.0) / max(layers, 1)


def within_target(est: Estimate, settings: FusedSettings, floor_ms: float | None = None) -> bool:
    """The half-width within max(floor, target_rel x |time|); ``floor_ms`` (default
    ``target_ms``, or 0 where that is left to the rounds, `target_floor_ms`)."""
    floor = floor_ms if floor_ms is not None else (settings.target_ms or 0.0)
    return est.ci95_ms <= max(floor, settings.target_rel * abs(est.time_ms))


@dataclass(frozen=True)
class PrefixEnds:
    """What measures each prefix's end cost: one pair of models per distinct end (the end
    once, the end twice: `profiler.slicing.prefix.end_models`) and, per prefix, its pair's
    index (-1: the prefix keeps its outputs, as the model run whole does), and the
    tensors it hands out of the call (before its end)."""

    pairs: list[tuple[PrefixModel, PrefixModel]]
    of: list[int]
    tensors: list[int]


def prefix_ends(data: bytes, prefixes: Iterable[PrefixModel],
                reduce_above_bytes: int | None) -> PrefixEnds | None:
    """The end models of ``prefixes`` cut from ``data`` (None: none has an end of its
    own), one pair per distinct `PrefixModel.end_spec`."""
    from profiler.slicing.prefix import end_models

    index: dict[tuple[Any, ...], int] = {}
    pairs: list[tuple[PrefixModel, PrefixModel]] = []
    of: list[int] = []
    tensors: list[int] = []
    for p in prefixes:
        tensors.append(len(p.end_tensors) or p.outputs)
        if not p.end_tensors:
            of.append(-1)
            continue
        if p.end_spec not in index:
            index[p.end_spec] = len(pairs)
            pairs.append(end_models(data, p, reduce_above_bytes=reduce_above_bytes))
        of.append(index[p.end_spec])
    return PrefixEnds(pairs, of, tensors) if pairs else None


@dataclass(frozen=True)
class BlockChain:
    """Blocks of prefixes measured at different times, tied onto the last block's rounds.

    Column c of block b reads t' = ref + (t - anchor_b) * scale_b: its block's empty
    prefix (``anchor_b``, its trimmed mean) goes to the last block's (``ref``), and what
    the prefixes add to it is scaled so that the prefix a block shares with its
    successor reads the same in both. A clock that moved between two blocks' rounds
    scales what the layers cost, and not what a call costs with none: so the rows add
    up to the whole model's column again, in the last block's terms. ``rel``: per
    column, the relative 95 % half-width of its scale (from the anchors' paired
    differences, compounded along the chain); ``linked``: per link (block b to b + 1),
    whether its scale was used: not where a shared prefix reads no longer than the empty
    one in either block (nothing to scale by), where the later block's scale is kept.
    A scale known only loosely (a clock that moved within a block's rounds too) is still
    used, so that the rows keep adding up, and widens the rows' intervals instead."""

    scale: np.ndarray  # per column
    anchor_ns: np.ndarray  # per column: its block's empty prefix, trimmed mean
    ref_ns: float
    rel: np.ndarray  # per column
    block_scales: list[float]
    linked: list[bool]
    column_ms: np.ndarray  # per column, its raw trimmed mean (ms)

    def apply(self, round_ns: np.ndarray) -> np.ndarray:
        """``round_ns`` in the last block's terms (ns, rounded)."""
        t = np.asarray(round_ns, dtype=np.float64)
        return np.rint(self.ref_ns + (t - self.anchor_ns) * self.scale).astype(np.int64)

    def widen(self, est: Estimate, lo: int, hi: int) -> Estimate:
        """``est`` (columns ``hi`` less ``lo``) with its scale's uncertainty."""
        rel = max(float(self.rel[lo]), float(self.rel[hi]))
        return Estimate(est.time_ms, math.hypot(est.ci95_ms, abs(est.time_ms) * rel))

    def info(self) -> dict[str, Any]:
        return {"model": "t' = ref + (t - empty prefix of its block) * scale",
                "block_scales": [round(k, 6) for k in self.block_scales],
                "linked": list(self.linked),
                # what the ties rest on: each column's raw trimmed mean, before them
                "column_ms": [round(float(v), 6) for v in self.column_ms]}


def chain_blocks(round_ns: np.ndarray, block_columns: Sequence[range],
                 trim: float = TRIM) -> BlockChain:
    """Each block's scale onto the last block's (`BlockChain`). Block b (columns
    ``block_columns[b]``) starts with the empty prefix; a later block's second column is
    its predecessor's last prefix again. The link from b to b + 1 is the ratio of that
    shared prefix less the empty one, measured in b + 1, to the same in b: the
    differences of two columns of one block, so a block's drift cancels in each."""
    t = np.asarray(round_ns, dtype=np.int64)
    means = trimmed_estimate(t, trim)[0] * 1e6
    nb = len(block_columns)

    def span(a: int, b: int) -> tuple[float, float]:  # (ns, relative half-width)
        d = float(means[b] - means[a])
        half = float(trimmed_estimate(t[:, b] - t[:, a], trim)[1]) * 1e6
        return d, (half / d if d > 0 else math.inf)

    scales, rels, linked = [1.0] * nb, [0.0] * nb, [True] * (nb - 1)
    for b in range(nb - 2, -1, -1):
        here, there = block_columns[b], block_columns[b + 1]
        d_here, r_here = span(here.start, here.stop - 1)
        d_there, r_there = span(there.start, there.start + 1)
        rel = math.hypot(r_here, r_there)
        if math.isfinite(rel):
            scales[b], rels[b] = scales[b + 1] * d_there / d_here, math.hypot(rels[b + 1], rel)
        else:
            scales[b], rels[b], linked[b] = scales[b + 1], rels[b + 1], False
    per = np.empty(t.shape[1], dtype=np.int64)
    for b, cols in enumerate(block_columns):
        per[cols.start:cols.stop] = b
    anchors = np.array([means[cols.start] for cols in block_columns])
    return BlockChain(np.asarray(scales)[per], anchors[per], float(anchors[-1]),
                      np.asarray(rels)[per], scales, linked, means / 1e6)


@dataclass
class RowEstimates:
    """The rows of a fused table from the rounds so far (`estimate_rows`)."""

    fixed: Estimate
    layers: list[Estimate]
    whole: Estimate
    groups: list[tuple[int, int, tuple[str, ...], Estimate]]
    end_ms: np.ndarray  # per prefix column (0 where none)
    end_half_ms: np.ndarray
    floor_ms: float  # the absolute target (`target_floor_ms`)
    chain: BlockChain | None = None  # the ties the rows were estimated through

    def group_of(self) -> dict[int, int]:
        return {k: g for g, (a, b, _, _) in enumerate(self.groups) for k in range(a, b + 1)}

    def rows(self) -> list[Estimate]:
        """What the table reports: the fixed row, every layer in no group, every group."""
        grouped = self.group_of()
        return [self.fixed, *(e for k, e in enumerate(self.layers) if k not in grouped),
                *(g[3] for g in self.groups)]

    def all_within_target(self, settings: FusedSettings) -> bool:
        return all(within_target(e, settings, self.floor_ms) for e in self.rows())

    def fused_groups(self, settings: FusedSettings) -> list[FusedGroup]:
        return [FusedGroup(a, b, e.time_ms, e.ci95_ms, causes,
                           within_target(e, settings, self.floor_ms))
                for a, b, causes, e in self.groups]

    def fused_layers(self, settings: FusedSettings) -> list[FusedLayer]:
        grouped = self.group_of()
        out = []
        for k, e in enumerate(self.layers):
            g = grouped.get(k)
            shown = e if g is None else self.groups[g][3]  # a member reads as its group
            out.append(FusedLayer(k, e.time_ms, e.ci95_ms, shown.below_resolution,
                                  within_target(shown, settings, self.floor_ms), g,
                                  shown.below_zero))
        return out


def estimate_rows(round_ns: np.ndarray, settings: FusedSettings, *,
                  chain: BlockChain | None = None,
                  positions: Sequence[int] | None = None,
                  kernels: Sequence[tuple[int, int]] = (),
                  end_ns: np.ndarray | None = None, end_of: Sequence[int] | None = None,
                  cut_tensors: Sequence[int] | None = None,
                  firsts: Sequence[int] | None = None,
                  trim: float = TRIM) -> RowEstimates:
    """Fixed row, layers and groups from rounds of prefix times (rounds, prefixes), with
    each prefix's end cost taken out where measured: ``end_ns`` (rounds, 2 x ends) from
    `FusedProfiler.run_end_round`, ``end_of`` the end of each prefix column (-1: none);
    ``cut_tensors``, ``firsts``: per column, the tensors its prefix hands out and the
    layer it starts at (`group_layers`). ``chain``: blocks' rounds tied onto the last
    block's (`chain_blocks`), whose scales' uncertainty widens each row's interval."""
    t = np.asarray(round_ns, dtype=np.int64) if chain is None else chain.apply(round_ns)
    end = np.zeros(t.shape[1])
    end_half = np.zeros(t.shape[1])
    if end_ns is not None and end_of is not None and len(end_ns):
        e_ms, e_half = end_costs(end_ns, trim)
        idx = np.asarray(end_of, dtype=np.int64)
        has = idx >= 0
        end[has], end_half[has] = e_ms[idx[has]], e_half[idx[has]]
    fixed, layers, whole = layer_estimates(t, trim, positions, end, end_half)
    groups = group_layers(t, positions, kernels, trim, end, end_half, cut_tensors, firsts)
    if chain is not None:
        pos = list(positions) if positions else list(range(1, t.shape[1]))
        layers = [chain.widen(e, p - 1, p) for e, p in zip(layers, pos, strict=True)]
        groups = [(a, b, c, chain.widen(e, pos[a] - 1, pos[b])) for a, b, c, e in groups]
    floor = target_floor_ms(settings, fixed, whole, len(layers))
    return RowEstimates(fixed, layers, whole, groups, end, end_half, floor, chain)


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
    """Loads the prefixes on an open executor, then measures rounds (`measure`).

    One call of a prefix: set every input (untimed: the hand-over into a call), then,
    timed, run and with ``read_outputs`` read every output into host memory (a GPU's
    download; on a CPU the outputs are already there). ``hooks(position, start)`` is
    called before (start=True) and after the timed calls of each visit of a measured
    round (position 0 = the empty prefix), e.g. to move a marker; its cost falls outside
    the timed window (cold, the evictions before those calls fall inside the bracket).
    ``evict``: called before every timed call of a round, outside its
    window (a cold cache state, `profiler.measure.cpu_cache.Evictor`); its inputs are written
    after it, as the layer before them leaves them in an application's frame.

    Memory: where what the prefixes hold loaded (`held_bytes`: their model bytes, the
    runtime's copy of the weights, its activation buffers) adds up to more than
    ``loaded_bytes``, they are loaded in blocks of consecutive prefixes that fit (`plan_blocks`), one block at a
    time, and measured block by block in passes (`measure`; docs/fused.md, "Memory").
    Each later block of whole prefixes starts with the empty prefix and its predecessor's
    last prefix again, as columns of their own (its anchors); its first layer is
    differenced against the latter, so every difference is of two prefixes measured in
    the same rounds, and the anchors tie the blocks together (`chain_blocks`). The
    rounds' columns (``columns``: the prefix each one times) then hold those repeats,
    and ``positions`` says where each layer's column is. Prefixes given as built models
    (`prefix_models`) stay in memory as bytes whatever the blocks; `LazyPrefixes` builds
    each block's when it is loaded.
    """

    def __init__(self, prefixes: Sequence[PrefixModel] | Prefixes, executor: Executor, *,
                 inputs: Sequence[np.ndarray] | None = None, seed: int = 0,
                 clock: Clock = perf_clock, model_name: str = "model",
                 read_outputs: bool = True, model_data: bytes | None = None,
                 evict: Evictor | None = None, cache_choice: CacheChoice | None = None,
                 kernels: Sequence[tuple[int, int]] = (), ends: PrefixEnds | None = None,
                 loaded_bytes: int | None = None) -> None:
        """``model_data``: the model's bytes, which windows (prefixes starting after layer
        0) need to compute their inputs' values. ``cache_choice``: why ``evict`` is given
        or not (`cache_state`), recorded in the result. ``kernels``: runs of layers the
        runtime compiles into one kernel, reported as one row each
        (`profiler.slicing.fusion.kernel_groups`); ``ends``: the models that measure what
        each prefix's end costs (`prefix_ends`), visited in every round after the
        prefixes. ``loaded_bytes``: the most memory the prefixes loaded at once may hold
        (`held_bytes`; None: every prefix at once)."""
        from profiler.measure.runner import random_input
        from profiler.slicing.prefix import BuiltPrefixes, Prefixes

        self.kernels = list(kernels)
        self.ends = ends
        self.evict = evict
        self.cache_choice = cache_choice
        self.source = prefixes if isinstance(prefixes, Prefixes) else BuiltPrefixes(prefixes)
        specs = self.source.specs
        if not specs or specs[0].last != -1:
            raise ValueError("prefixes must start with the empty prefix (prefix_models)")
        self.specs = specs
        self.executor = executor
        self.model_name = model_name
        self.clock = clock
        self.read_outputs = read_outputs
        # a CPU cluster's calls alone give a call factor; an accelerator's move with its clock
        self.factor_from_alone = not executor.proc.kind.downloads_results
        windowed = any(p.role == "whole" for p in specs)
        if windowed and read_outputs:
            raise ValueError("windows are for processors whose outputs stay in host memory "
                             "(settings_for)")
        self.blocks = plan_blocks(specs, loaded_bytes)
        # the prefix each column of the rounds times, block after block, and each block's
        # columns (consecutive)
        self.columns = [p for block in self.blocks for p in block]
        starts = np.cumsum([0] + [len(b) for b in self.blocks]).tolist()
        self.block_columns = [range(a, b) for a, b in zip(starts, starts[1:], strict=False)]
        # Where each layer's column is ([]: one column per prefix of the whole model, layer
        # k at k + 1): a window's layers, or with blocks every column but a block's first.
        if windowed:
            self.positions = [c for c, p in enumerate(self.columns) if specs[p].role == "layer"]
        elif len(self.blocks) > 1:
            # a block's anchors: the empty prefix, and in a later block the shared prefix
            anchors = {c for b, cols in enumerate(self.block_columns)
                       for c in (cols[:2] if b else cols[:1])}
            self.positions = [c for c in range(len(self.columns)) if c not in anchors]
        else:
            self.positions = []
        # blocks of cumulative prefixes are tied together by their anchors (`chain_blocks`)
        self.chained = not windowed and len(self.blocks) > 1
        # the segment length the prefixes were cut with: the first segment's layers, those
        # between the empty prefix and the next base (later segments may start at 0 too)
        bases = [i for i, p in enumerate(specs) if p.role != "layer"]
        self.window = bases[1] - 1 if windowed else 0
        self._subs: dict[int, SubModel] = {}  # the loaded prefixes, by position
        self._calls: list[Callable[[], int] | None] = [None] * len(self.columns)
        self._resident: int | None = None  # the block loaded now
        self._fresh = False  # loaded and not warmed up yet
        self._read_bytes = [0] * len(specs)
        self._reduced = [0] * len(specs)
        # late runs per column: of blocks loaded before, and where the loaded one started
        self._late_done = [0] * len(self.columns)
        self._late_at_load = [0] * len(self.columns)
        self.loaded_bytes_max = 0  # the most model bytes loaded at once
        self.hold_ns = 0  # `FusedSettings.hold_ms`, of the measurement going on
        self.visit_rows: list[int] = []
        # each end's pair (once, twice), weightless: loaded for the whole measurement, and
        # first (what stays loaded sits below the blocks' memory, which then goes back)
        self.end_subs: list[SubModel] = [
            executor.load(q.model_bytes, name=f"end x{i % 2 + 1} of prefix {q.first}..{q.last}"
                          f" of {model_name}")
            for i, q in enumerate(m for pair in (ends.pairs if ends else []) for m in pair)]
        self._load(0)
        rng = np.random.default_rng(seed)
        if inputs is None:
            inputs = [random_input(io.shape, io.dtype, rng) for io in self._subs[0].inputs]
        self.inputs = [np.ascontiguousarray(x) for x in inputs]
        values = self._window_values(model_data) if windowed else {}
        self.sub_inputs = [values[p.first] if p.first else self.inputs for p in specs]
        self._bind(0)
        self._end_calls = [
            self._timed_call(sub, [random_input(io.shape, io.dtype, rng) for io in sub.inputs])
            for sub in self.end_subs]

    @property
    def subs(self) -> list[SubModel]:
        """The prefixes loaded now (all of them where one block holds them)."""
        return [self._subs[p] for p in sorted(self._subs)]

    def _load(self, block: int) -> None:
        """Load ``block``'s prefixes, after releasing the block loaded before."""
        self.unload()
        loaded = 0
        for p in self.blocks[block]:
            # one at a time: a build's transients (the parsed model, the serializer's
            # buffer) are gone before the next, and a runtime that keeps the bytes holds
            # the only copy
            (m,) = self.source.build([p])
            self._subs[p] = self.executor.load(
                m.model_bytes, name=f"prefix {m.first}..{m.last} of {self.model_name}")
            self._read_bytes[p], self._reduced[p] = m.read_bytes, m.reduced
            loaded += len(m.model_bytes)
            del m
        return_freed_memory()  # the builds' and loads' transients
        self.loaded_bytes_max = max(self.loaded_bytes_max, loaded)
        self._resident, self._fresh = block, True
        for c in self.block_columns[block]:
            self._late_at_load[c] = self._subs[self.columns[c]].late_runs

    def _bind(self, block: int) -> None:
        for c in self.block_columns[block]:
            p = self.columns[c]
            sub, xs = self._subs[p], self.sub_inputs[p]
            if [tuple(io.shape) for io in sub.inputs] != [x.shape for x in xs]:
                raise ValueError(f"{sub.name}: inputs differ from its empty prefix's")
            self._calls[c] = self._timed_call(sub, xs)

    def _ensure(self, block: int) -> bool:
        """``block`` loaded (and bound); True where it was loaded now."""
        if self._resident == block:
            return False
        self._load(block)
        self._bind(block)
        return True

    def unload(self) -> None:
        """Release the prefixes loaded now (the next call or round loads them again)."""
        if self._resident is None:
            return
        for c in self.block_columns[self._resident]:
            self._late_done[c] += self._subs[self.columns[c]].late_runs - self._late_at_load[c]
            self._calls[c] = None
        for sub in self._subs.values():
            self.executor.unload(sub)
        self._subs.clear()
        self._resident = None
        gc.collect()
        return_freed_memory()

    def _late_runs(self) -> list[int]:
        """Per column, its prefix's late runs so far."""
        out = list(self._late_done)
        if self._resident is not None:
            for c in self.block_columns[self._resident]:
                out[c] += self._subs[self.columns[c]].late_runs - self._late_at_load[c]
        return out

    def _block_of(self, column: int) -> int:
        return next(b for b, cols in enumerate(self.block_columns) if column in cols)

    def _window_values(self, model_data: bytes | None) -> dict[int, list[np.ndarray]]:
        """Per window start, its inputs' values from one run of the model on ``inputs``."""
        from profiler.slicing.prefix import tensor_values

        if model_data is None:
            raise ValueError("windows need the model's bytes for their inputs")
        starts = {p.first: list(p.input_tensors) for p in self.specs if p.first > 0}
        wanted = sorted({t for ts in starts.values() for t in ts})
        got = dict(zip(wanted, tensor_values(model_data, self.inputs, wanted), strict=True))
        return {first: [np.ascontiguousarray(got[t]) for t in ts] for first, ts in starts.items()}

    def _timed_call(self, sub: SubModel, inputs: list[np.ndarray]) -> Callable[[], int]:
        return app_call(sub, inputs, self.clock, self.read_outputs)

    def call(self, position: int) -> Callable[[], int]:
        """The timed call of column ``position`` (0 = the empty prefix), e.g. to repeat it
        for a counter's energy; returns its duration in ns. With blocks, a call loads its
        block first where another is loaded."""
        if len(self.blocks) == 1:
            call = self._calls[position]
            assert call is not None
            return call
        block = self._block_of(position)
        calls = self._calls

        def loading_call() -> int:
            self._ensure(block)
            return calls[position]()  # type: ignore[misc]  # bound by _ensure

        return loading_call

    @property
    def calls(self) -> list[Callable[[], int]]:
        """Every column's call, the empty prefix first."""
        return [self.call(c) for c in range(len(self.columns))]

    def run_round(self, backward: bool, hooks: Callable[[int, bool], None] | None = None,
                  calls: int = 3, warm: int = 1) -> np.ndarray:
        """One visit of every prefix (``calls`` calls, the first ``warm`` untimed); returns
        each prefix's fastest timed call (ns) in prefix order. ``hooks`` bracket the timed
        calls of each visit. Prefixes in one block only (`measure` visits blocks)."""
        if len(self.blocks) > 1:
            raise ValueError("the prefixes are loaded in blocks: measure() visits them")
        return self._visit(self.block_columns[0], backward, hooks, calls, warm)

    def _visit(self, columns: range, backward: bool,
               hooks: Callable[[int, bool], None] | None, calls: int, warm: int) -> np.ndarray:
        """One visit of each of ``columns`` (loaded); their fastest timed calls (ns)."""
        out = np.empty(len(columns), dtype=np.int64)
        order = range(len(columns) - 1, -1, -1) if backward else range(len(columns))
        timed = calls - warm
        evict = self.evict
        for i in order:
            p = columns[i]
            call = self._calls[p]
            assert call is not None
            if self.hold_ns > 0:
                heaviest = self._calls[columns[-1]]
                assert heaviest is not None
                self._busy(heaviest, self.hold_ns)
                # then the prefix itself, as back-to-back frames precede a frame (on
                # the H200 it narrowed the blocks' ties: docs/fused.md, "Memory")
                self._busy(call, HOLD_SELF_NS)
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
            out[i] = min(times_ns)
        return out

    def _busy(self, call: Callable[[], int], ns: int) -> None:
        """Call ``call`` back to back (untimed) for ``ns`` on the clock: the hold before a
        visit (`FusedSettings.hold_ms`)."""
        clock = self.clock
        t0 = clock()
        while clock() - t0 < ns:
            call()

    def run_end_round(self, backward: bool, calls: int = 3, warm: int = 1) -> np.ndarray:
        """One visit of every end model (`prefix_ends`), each end's pair back to back, with
        `END_EXTRA_CALLS` more timed calls than a prefix's visit; returns each one's
        fastest timed call (ns), in the pairs' order."""
        n = len(self._end_calls)
        out = np.empty(n, dtype=np.int64)
        pairs = range(n // 2 - 1, -1, -1) if backward else range(n // 2)
        for e in pairs:
            for i in ((2 * e + 1, 2 * e) if backward else (2 * e, 2 * e + 1)):
                call = self._end_calls[i]
                for _ in range(warm):
                    call()
                out[i] = min(call() for _ in range(calls - warm + END_EXTRA_CALLS))
        return out

    def chain(self, round_ns: np.ndarray) -> BlockChain | None:
        """What ties the blocks' rounds together (`chain_blocks`; None: one block, or
        windows, whose rows need no tie)."""
        return chain_blocks(round_ns, self.block_columns) if self.chained else None

    def estimate(self, round_ns: np.ndarray, end_ns: np.ndarray | None,
                 settings: FusedSettings) -> RowEstimates:
        """The rows from the rounds so far (`estimate_rows`)."""
        return estimate_rows(round_ns, settings, chain=self.chain(round_ns),
                             positions=self.positions,
                             kernels=self.kernels, end_ns=end_ns,
                             end_of=[self.ends.of[p] for p in self.columns] if self.ends else None,
                             cut_tensors=[self.ends.tensors[p] for p in self.columns]
                             if self.ends else None,
                             firsts=[self.specs[p].first for p in self.columns])

    def measure(self, settings: FusedSettings | None = None,
                progress: Callable[[int, int], None] | None = None,
                hooks: Callable[[int, bool], None] | None = None,
                wall: Callable[[], float] = time.monotonic) -> FusedResult:
        """Warm-up rounds, then measured rounds until every layer is within its target
        (checked every ``check_every`` rounds after ``min_rounds``), the budget is spent
        or ``max_rounds`` is reached. ``progress(done, expected)``: rounds so far and an
        estimate of the rounds the budget allows. With blocks (`_measure_blocks`), each
        block's measured round starts with ``hooks(-1, True)``: rounds of different
        blocks are made at different times, and `FusedResult.visit_rows` says which
        round of the result each block's round is."""
        s = settings or FusedSettings()
        self.hold_ns = int((s.hold_ms or 0.0) * 1e6)
        late0 = self._late_runs()
        self.visit_rows = []
        if len(self.blocks) == 1:
            rows, ends, elapsed, converged = self._measure_together(s, progress, hooks, wall)
        else:
            rows, ends, elapsed, converged = self._measure_blocks(s, progress, hooks, wall)
        res = self.result(rows, s, elapsed, converged, self.alone(s), ends)
        res.prefix_late_runs = [a - b for a, b in zip(self._late_runs(), late0, strict=True)]
        return res

    def _measure_together(self, s: FusedSettings, progress: Callable[[int, int], None] | None,
                          hooks: Callable[[int, bool], None] | None, wall: Callable[[], float],
                          ) -> tuple[np.ndarray, np.ndarray | None, float, bool]:
        """Every prefix loaded: rounds of all of them (rounds, end rounds, elapsed s,
        converged)."""
        for r in range(s.warmup_rounds):
            self.run_round(backward=bool(r % 2), calls=s.visit_calls, warm=s.visit_warm)
        self._fresh = False
        rows: list[np.ndarray] = []
        ends: list[np.ndarray] = []
        start = wall()
        converged = False
        while True:
            rows.append(self.run_round(backward=bool(len(rows) % 2), hooks=hooks,
                                       calls=s.visit_calls, warm=s.visit_warm))
            if self._end_calls:
                ends.append(self.run_end_round(backward=bool(len(ends) % 2),
                                               calls=s.visit_calls, warm=s.visit_warm))
            done = len(rows)
            spent = wall() - start
            if progress:
                per_round = spent / done
                progress(done, max(done, min(s.max_rounds, int(s.budget_s / max(per_round, 1e-9)))))
            if done >= s.min_rounds and (done - s.min_rounds) % s.check_every == 0 and \
                    self.estimate(np.array(rows), np.array(ends) if ends else None,
                                  s).all_within_target(s):
                converged = True
                break
            if done >= s.max_rounds or (spent >= s.budget_s and done >= s.min_rounds):
                break
        return np.array(rows), np.array(ends) if ends else None, wall() - start, converged

    def _measure_blocks(self, s: FusedSettings, progress: Callable[[int, int], None] | None,
                        hooks: Callable[[int, bool], None] | None,
                        wall: Callable[[], float],
                        ) -> tuple[np.ndarray, np.ndarray | None, float, bool]:
        """Prefixes in blocks: passes over the blocks, in turn forward and backward (the
        block at the turn stays loaded), each block loaded (then warmed up by
        ``warmup_rounds``) and measured for the pass's rounds. The first pass makes
        ``min_rounds``; each later one as many as the intervals need to reach their target
        (from how they narrowed so far), at least ``check_every`` and at most what the
        budget leaves after the loads. Round r of every block is row r of the result.
        The end models (loaded throughout) make one round per row, after the pass's first
        block's. Returns (rounds, end rounds, elapsed s, converged); the budget counts the
        loads between the measured rounds too."""
        nb = len(self.blocks)
        parts: list[list[np.ndarray]] = [[] for _ in range(nb)]
        ends: list[np.ndarray] = []
        load_s, round_s = [0.0] * nb, [0.0] * nb
        done, todo, forward = 0, s.min_rounds, True
        start = math.nan  # the first measured round's
        converged = False
        while True:
            order = list(range(nb)) if forward else list(range(nb - 1, -1, -1))
            for i, b in enumerate(order):
                t0 = wall()
                if self._ensure(b) or self._fresh:
                    for r in range(s.warmup_rounds):
                        self._visit(self.block_columns[b], bool(r % 2), None,
                                    s.visit_calls, s.visit_warm)
                    self._fresh = False
                t1 = wall()
                start = t1 if math.isnan(start) else start
                load_s[b] = t1 - t0
                for r in range(done, done + todo):
                    if hooks:
                        hooks(-1, True)  # a round of this block starts (VisitClocks' rows)
                        self.visit_rows.append(r)
                    parts[b].append(self._visit(self.block_columns[b], bool(r % 2), hooks,
                                                s.visit_calls, s.visit_warm))
                    if self._end_calls and i == 0:
                        ends.append(self.run_end_round(bool(r % 2), s.visit_calls,
                                                       s.visit_warm))
                round_s[b] = (wall() - t1) / todo
                if progress:
                    now = done + todo * (i + 1) // nb
                    per_round = (wall() - start) / max(now, 1)
                    progress(now, max(now, min(s.max_rounds,
                                               int(s.budget_s / max(per_round, 1e-9)))))
            done += todo
            forward = not forward
            rows = np.hstack([np.array(p) for p in parts])
            spent = wall() - start
            est = self.estimate(rows, np.array(ends) if ends else None, s)
            if est.all_within_target(s):
                converged = True
                break
            if done >= s.max_rounds or spent >= s.budget_s:
                break
            # the intervals narrow as 1 / sqrt(rounds): the rounds the widest one needs
            worst = max(e.ci95_ms / max(est.floor_ms, s.target_rel * abs(e.time_ms), 1e-12)
                        for e in est.rows())
            need = math.ceil(done * (worst ** 2 - 1)) if math.isfinite(worst) else s.check_every
            # the block at the turn stays loaded: the others are loaded and warmed again
            reload = sum(load_s) - load_s[order[-1]]
            fit = int((s.budget_s - spent - reload) / max(sum(round_s), 1e-9))
            todo = min(max(s.check_every, need), fit, s.max_rounds - done)
            if todo < 1:
                break
        return rows, np.array(ends) if ends else None, wall() - start, converged

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
        return result, energy_by_prefix(result, self.column_powers(prefix_powers))

    def column_powers(self, prefix_powers: PrefixPowers) -> list[float]:
        """Per column of the rounds, its prefix's power from ``prefix_powers``, asked once
        per prefix: a prefix that two blocks share (the anchors) gets one window, so the
        energies telescope as the times do."""
        first = {p: c for c, p in reversed(list(enumerate(self.columns)))}
        order = sorted(first.values())
        got = dict(zip(order, prefix_powers([self.call(c) for c in order]), strict=True))
        return [got[first[p]] for p in self.columns]

    def alone(self, settings: FusedSettings) -> np.ndarray | None:
        """The whole model called alone, back to back: (groups, calls a group) ns."""
        if settings.alone_calls == 0:
            return None
        call = self.call(len(self.columns) - 1)
        for _ in range(settings.alone_warm):
            call()
        timed = settings.visit_calls - settings.visit_warm
        return np.array([[call() for _ in range(timed)] for _ in range(settings.alone_calls)],
                        dtype=np.int64)

    def result(self, round_ns: np.ndarray, settings: FusedSettings, elapsed_s: float,
               converged: bool, alone_ns: np.ndarray | None = None,
               end_ns: np.ndarray | None = None) -> FusedResult:
        est = self.estimate(round_ns, end_ns, settings)
        fixed, whole = est.fixed, est.whole
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
            layers=est.fused_layers(settings), groups=est.fused_groups(settings),
            end_ms=list(est.end_ms), end_ci95_ms=list(est.end_half_ms), target_ms=est.floor_ms,
            fixed=fixed, whole=whole, rounds=int(round_ns.shape[0]), elapsed_s=elapsed_s,
            converged=converged, settings=settings,
            prefix_read_bytes=[self._read_bytes[p] for p in self.columns],
            prefix_reduced=[self._reduced[p] for p in self.columns],
            round_ns=round_ns, alone_ns=alone_ns, whole_alone=alone,
            whole_alone_mean_ms=alone_mean, call_factor=factor,
            layer_positions=list(self.positions),
            evict_bytes=self.evict.nbytes if self.evict is not None else 0,
            cache_choice=self.cache_choice,
            blocks=[[c.start, c.stop - 1] for c in self.block_columns]
            if len(self.blocks) > 1 else [],
            visit_rows=list(self.visit_rows), loaded_bytes_max=self.loaded_bytes_max,
            chain=est.chain, column_prefixes=list(self.columns),
        )


#: What a loaded prefix holds in memory, per byte of its weights (the model's bytes and
#: the runtime's own copy: XNNPACK packs them) and per byte of its largest activation
#: (the runtime's buffers: 12-16 MB for ResNet50 224's 3.2 MB; docs/fused.md, "Memory").
HELD_PER_WEIGHT_BYTE = 2
HELD_PER_ACTIVATION_BYTE = 5


def held_bytes(spec: PrefixSpec) -> int:
    """About what loading the prefix ``spec`` holds in memory."""
    return HELD_PER_WEIGHT_BYTE * spec.weight_bytes + HELD_PER_ACTIVATION_BYTE * spec.act_bytes


def plan_blocks(specs: Sequence[PrefixSpec], loaded_bytes: int | None) -> list[list[int]]:
    """The prefixes (positions in ``specs``) loaded together, block by block: all in one
    where what they hold (`held_bytes`) adds up to ``loaded_bytes`` at most (or it is
    None). Otherwise prefixes of the whole model in blocks of consecutive ones that fit,
    each later block starting with the empty prefix and the last prefix of the one before
    (the anchors that tie its rounds to its predecessor's, `chain_blocks`) and holding
    two at least (a layer's two prefixes are always loaded together); windows (a
    "whole" prefix among them) in blocks of whole segments (a base and its layers; the
    whole model alone)."""
    n = len(specs)
    size = [held_bytes(p) for p in specs]
    if loaded_bytes is None or sum(size) <= loaded_bytes or n < 3:
        return [list(range(n))]
    if not any(p.role == "whole" for p in specs):
        blocks, a = [], 0
        while a < n - 1:
            e, total = a + 1, size[a] + size[a + 1] + (size[0] if a else 0)
            while e + 1 < n and total + size[e + 1] <= loaded_bytes:
                e += 1
                total += size[e]
            blocks.append(([0] if a else []) + list(range(a, e + 1)))
            a = e
        return blocks
    units: list[list[int]] = []
    for p, spec in enumerate(specs):
        if spec.role != "layer" or not units:
            units.append([])
        units[-1].append(p)
    packed: list[list[int]] = [[]]
    for unit in units:
        if packed[-1] and sum(size[p] for p in packed[-1] + unit) > loaded_bytes:
            packed.append([])
        packed[-1] += unit
    return packed


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


#: After the hold, a visit calls its own prefix this long (untimed) before its calls.
HOLD_SELF_NS = 2_000_000
#: The hold before each visit where a processor's driver moves its clock with the load:
#: on the H200, MobileNetV1 224's rounds ran at 345 MHz (median) with none, 810 with 5 ms
#: and 1980 (1860-1980) with 20 ms, the clock of its back-to-back frames
#: (`data/validation/h200-hold/`; docs/fused.md, "The accelerator's clock").
HOLD_MS_DRIVER_CLOCK = 20.0


def hold_for(settings: FusedSettings, reader: FreqReader | None) -> FusedSettings:
    """``settings`` with its hold decided: where left to the tool (None), a hold of
    `HOLD_MS_DRIVER_CLOCK` where ``reader`` (the processor's clock) is its driver's to
    move, else none."""
    if settings.hold_ms is not None:
        return settings
    driver = reader is not None and reader.driver_clock
    return replace(settings, hold_ms=HOLD_MS_DRIVER_CLOCK if driver else 0.0)


PrefixPowers = Callable[[Sequence[Callable[[], int]]], Sequence[float]]

#: A cold call reads this many times the last-level cache's size first: enough to
#: displace every line of an LRU-like cache, and of the smaller levels below it.
EVICT_FACTOR = 2


@dataclass(frozen=True)
class CacheChoice:
    """The cache state a fused measurement's timed calls find, and why."""

    state: str  # "warm" | "cold"
    # the cluster's last-level cache as its core uses it (None: sysfs does not say): what
    # sysfs lists, or less where less was measured (`usable_cache_bytes`)
    llc_bytes: int | None
    weight_bytes: int  # the model's constant tensors
    reason: str
    listed_bytes: int | None = None  # what sysfs lists, where it was measured


#: `cache_state` measures the usable cache only for weights above this: every last-level
#: cache seen listing more keeps at least this much (this project's VM: 32 MiB)
MEASURE_ABOVE_BYTES = 16 << 20


def cache_state(settings: FusedSettings, executor: Executor, weight_bytes: int,
                sysfs_root: Path,
                usable: Callable[[int, int], int | None] | None = None) -> CacheChoice:
    """``settings.cache`` resolved for this executor and model (docs/fused.md, "Cache
    state"): "auto" is cold on a real CPU cluster whose last-level cache (that of its
    first core, from ``sysfs_root``, as much of it as that core re-reads faster than
    memory: ``usable(core, listed_bytes)``, default `measured_cache_bytes`) is smaller
    than the model's weights, warm otherwise: an accelerator's weights live in its own
    memory, and a simulated processor's time is modelled."""
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
    # measured only where it can turn warm into cold: weights the listed cache holds, and
    # more than any core keeps (the probe reads twice the listed size, a second of memory
    # traffic that other work on the machine feels)
    got = (usable or measured_cache_bytes)(executor.cores[0], llc) \
        if MEASURE_ABOVE_BYTES < weight_bytes <= llc else None
    used, of = llc, ""
    if got is not None and got < llc:
        # a virtual machine lists its host's cache; a core gets a share of it
        used = max(got, PROBE_MIN_BYTES)
        of = f" ({used / 2**20:.0f} MiB of the {llc / 2**20:.0f} MiB sysfs lists, as measured)"
    if weight_bytes > used:
        return CacheChoice("cold", used, weight_bytes,
                           "the weights outgrow the last-level cache" + of, llc)
    return CacheChoice("warm", used, weight_bytes,
                       "the weights fit in the last-level cache" + of, llc)


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
    from profiler.slicing.fusion import kernel_groups
    from profiler.slicing.graph import ModelView
    from profiler.slicing.prefix import REDUCE_ABOVE_BYTES, LazyPrefixes
    from profiler.tflite.model_io import parse_model

    down = executor.proc.kind.downloads_results
    s = settings_for(settings, executor.proc.kind)
    reduce = REDUCE_ABOVE_BYTES if down else None
    end = prefix_end(s, executor)
    # built when loaded: all together n/2 copies of the weights (docs/fused.md, "Memory")
    prefixes = LazyPrefixes(data, sliced, reduce_above_bytes=reduce, window=s.window,
                            lead=s.lead, end=end)
    choice = cache_state(s, executor, sum(layer.param_bytes for layer in sliced.layers),
                         sysfs_root if sysfs_root is not None else sysfs_root_from_env())
    evict = Evictor(EVICT_FACTOR * choice.llc_bytes) \
        if choice.state == "cold" and choice.llc_bytes else None
    # a GPU's or NPU's runtime compiles linked operators into one kernel; a CPU's does not
    kernels = kernel_groups(ModelView.of(parse_model(data, model_name)),
                            [layer.op_indices for layer in sliced.layers]) if down else []
    ends = prefix_ends(data, prefixes.each(serialize=False), reduce) if end != "keep" and s.end_cost \
        else None
    gc.collect()  # what building every prefix once left (a model's worth, parsed)
    return_freed_memory()
    return FusedProfiler(prefixes, executor, seed=seed, clock=clock, model_name=model_name,
                         read_outputs=down, model_data=data, evict=evict, cache_choice=choice,
                         kernels=kernels, ends=ends, loaded_bytes=s.loaded_bytes)


def prefix_end(settings: FusedSettings, executor: Executor) -> Literal["keep", "one", "corner"]:
    """How the prefixes hand their outputs out of a call (`prefix_models`' ``end``),
    where what a call's end costs depends on where it is cut (docs/fused.md, "Rows that
    alternate"): on a processor that downloads its outputs, joined into one (each
    output a read-back of its own: on an H100 about 0.7 ms per output, the rows
    alternating with the number of outputs); on a CPU cluster on several threads, one
    output of their corners (its workers' writes reach the caller at the join); on one
    thread they are kept as they are (nothing reads them, nothing depends on the cut).
    ``end_cost`` False keeps them as they are."""
    if not settings.end_cost:
        return "keep"
    if executor.proc.kind.downloads_results:
        return "one"
    return "corner" if executor.threads > 1 else "keep"


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

    Memory: the prefixes hold about n/2 copies of the model's weights together; at most
    ``settings.loaded_mb`` of them are built and loaded at once, in blocks
    (`FusedProfiler`)."""
    s = settings_for(settings or FusedSettings(), executor.proc.kind)
    prof = fused_profiler(executor, data, sliced, s, seed=seed, clock=clock,
                          model_name=model_name, sysfs_root=sysfs_root)
    return prof.measure_energy(s, progress=progress, prefix_powers=prefix_powers)
