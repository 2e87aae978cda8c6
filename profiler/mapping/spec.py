"""Mappings of layers to processors, their stages and boundaries, and frequency SPECs.

Order strings (``GGBBBBNN``, ``G2B4N2``) map one processor letter to each layer; a stage is
a maximal run of same-letter layers; boundary ``b`` lies between layers ``b`` and ``b + 1``
and carries every tensor produced at or before it and read after it. A ``--freq`` SPEC
sets levels per processor, per stage or per layer, as ARM-CO-UP's DVFS modes do. `calls`
says how a stage's layers run: fused (one call per stage, cut where a per-layer SPEC
changes the level) or sliced (one call per layer); `profiler.mapping.pipeline` runs these
calls and `profiler.mapping.predict` prices the same ones.

The forms and what each means: docs/mapping.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from profiler.boards.model import PROCESSOR_LETTERS, Board, resolve_level
from profiler.errors import BadInputError, BoardError
from profiler.measure.method import METHODS, Method

if TYPE_CHECKING:
    from profiler.slicing.specs import SlicedModel, TensorSpec

ORDER_FIX = "write one processor letter per layer, e.g. --order GGBBBBNN (or G2B4N2)"
FREQ_FIX = ("use --freq 4 (all), --freq G=4,B=8 (per processor), --freq 4/8/3 (per stage) "
            "or one level per layer (--freq 4,4,6,...); see docs/mapping.md")


@dataclass(frozen=True)
class Stage:
    """A maximal run of consecutive layers (positions) on one processor."""

    index: int
    processor: str
    layers: tuple[int, ...]

    @property
    def first(self) -> int:
        return self.layers[0]

    @property
    def last(self) -> int:
        return self.layers[-1]


@dataclass(frozen=True)
class Mapping:
    """Processor letter per layer position."""

    order: str

    @property
    def n_layers(self) -> int:
        return len(self.order)

    @property
    def processors(self) -> list[str]:
        """Letters used, in order of first use."""
        return list(dict.fromkeys(self.order))

    @property
    def stages(self) -> list[Stage]:
        out: list[Stage] = []
        start = 0
        for i in range(1, len(self.order) + 1):
            if i == len(self.order) or self.order[i] != self.order[start]:
                out.append(Stage(len(out), self.order[start], tuple(range(start, i))))
                start = i
        return out

    def stage_of(self, pos: int) -> int:
        for st in self.stages:
            if st.first <= pos <= st.last:
                return st.index
        raise IndexError(pos)

    @property
    def changes(self) -> list[int]:
        """Boundaries where the processor changes (b: between layer b and b + 1)."""
        return [b for b in range(len(self.order) - 1) if self.order[b] != self.order[b + 1]]

    @property
    def compact(self) -> str:
        """'G2B4N2'."""
        return "".join(f"{s.processor}{len(s.layers)}" for s in self.stages)


@dataclass(frozen=True)
class Call:
    """Consecutive layers of one stage run as one sub-model call."""

    index: int
    stage: int
    processor: str
    layers: tuple[int, ...]

    @property
    def first(self) -> int:
        return self.layers[0]

    @property
    def last(self) -> int:
        return self.layers[-1]


def calls(mapping: Mapping, freq: FreqPlan | None = None,
          method: Method = Method.FUSED) -> list[Call]:
    """The calls that run `mapping` (docs/mapping.md): fused, each stage cut only
    where a per-layer level changes (a '-' level continues the call); sliced, one call
    per layer."""
    if method not in METHODS:
        raise BadInputError(f"--method {method!r} is not one of {', '.join(METHODS)}")
    out: list[Call] = []
    for st in mapping.stages:
        groups: list[list[int]] = []
        level: int | None = None
        for pos in st.layers:
            khz = freq.khz[pos] if freq is not None and freq.mode == "per-layer" else None
            if method == Method.SLICED or not groups or (khz is not None and level is not None
                                                    and khz != level):
                groups.append([pos])
            else:
                groups[-1].append(pos)
            if khz is not None:
                level = khz
        out += [Call(len(out) + k, st.index, st.processor, tuple(g))
                for k, g in enumerate(groups)]
    return out


def parse_order(text: str, n_layers: int, board: Board | None = None) -> Mapping:
    """Expand and check an order string against the layer count and the board."""
    raw = (text or "").strip()
    cleaned = re.sub(r"[\s,_\-]+", "", raw).upper()
    if not cleaned:
        raise BadInputError(f"--order is empty but the model has {n_layers} layers", ORDER_FIX)
    if not re.fullmatch(r"(?:[A-Z]\d*)+", cleaned):
        raise BadInputError(f"--order {raw!r} is not a string of processor letters", ORDER_FIX)
    letters: list[str] = []
    for letter, count in re.findall(r"([A-Z])(\d*)", cleaned):
        if letter not in PROCESSOR_LETTERS:
            raise BadInputError(f"--order {raw!r}: '{letter}' is not a processor letter "
                                f"(use {', '.join(PROCESSOR_LETTERS)})", ORDER_FIX)
        n = int(count) if count else 1
        if n < 1:
            raise BadInputError(f"--order {raw!r}: count {count} after '{letter}' must be >= 1",
                                ORDER_FIX)
        letters += [letter] * n
    if len(letters) != n_layers:
        raise BadInputError(
            f"--order {raw!r} maps {len(letters)} layers but the model has {n_layers} layers",
            f"give exactly {n_layers} letters (`coupprof slice MODEL` lists the layers)")
    if board is not None:
        for letter in dict.fromkeys(letters):
            if letter in board.unavailable:
                board.processor(letter)  # says why this runtime cannot drive it
            if letter not in board.processors:
                raise BoardError(
                    f"--order uses processor {letter}, which board '{board.name}' does not have "
                    f"(it has: {', '.join(board.processors)})",
                    "use the board's processors, or another board with --board")
    return Mapping("".join(letters))


# ---- liveness: which tensors cross each boundary ------------------------------------

def boundary_tensors(sliced: SlicedModel) -> list[list[TensorSpec]]:
    """For each boundary b (0 .. n_layers - 2), the TensorSpecs that cross it."""
    layers = list(sliced.layers)
    produced_at: dict[int, int] = {int(t.index): -1 for t in sliced.model_inputs}
    spec_of: dict[int, TensorSpec] = {int(t.index): t for t in sliced.model_inputs}
    for pos, layer in enumerate(layers):
        for t in layer.outputs:
            produced_at[int(t.index)] = pos
            spec_of[int(t.index)] = t
    last_use: dict[int, int] = {}
    for pos, layer in enumerate(layers):
        for t in layer.inputs:
            last_use[int(t.index)] = pos
            spec_of.setdefault(int(t.index), t)
    out: list[list[TensorSpec]] = []
    for b in range(len(layers) - 1):
        live = [spec_of[t] for t, p in produced_at.items()
                if p <= b and last_use.get(t, -2) > b]
        out.append(sorted(live, key=lambda s: int(s.index)))
    return out


# ---- frequency SPECs ----------------------------------------------------------------

@dataclass(frozen=True)
class FreqPlan:
    """Which DVFS level each layer runs at, and how it is applied.

    mode: "none" (leave frequencies alone), "per-processor" (set once at setup, with
    read-back) or "per-layer" (requested before each layer at run time).
    domain[i]: letter of the processor whose governor layer i's level goes to (N -> its
    host). level[i] / khz[i]: None = leave alone.
    setup: per-processor mode's {domain letter: (level, kHz)}.
    """

    text: str
    mode: str
    domain: tuple[str, ...]
    level: tuple[int | None, ...]
    khz: tuple[int | None, ...]
    setup: dict[str, tuple[int, int]] = field(default_factory=dict)

    def describe(self) -> str:
        if self.mode == "none":
            return "frequencies left alone"
        if self.mode == "per-processor":
            return "per processor: " + ", ".join(f"{k}={lv} ({f / 1000:g} MHz)"
                                                 for k, (lv, f) in self.setup.items())
        return "per layer: " + ",".join("-" if lv is None else str(lv) for lv in self.level)


def _level(board: Board, letter: str, token: str, what: str) -> tuple[int, int]:
    dom = board.dvfs_domain(letter)
    if not dom.has_dvfs:
        raise BoardError(f"--freq {what}: processor {letter} on board '{board.name}' has no "
                         "DVFS levels", "leave that processor out of --freq")
    level = resolve_level(dom, token, board.name)
    assert level is not None
    return level


def parse_freq(spec: str | None, mapping: Mapping, board: Board) -> FreqPlan:
    """Turn a --freq SPEC into a per-layer plan (see docs/mapping.md)."""
    n = mapping.n_layers
    domains = tuple(board.dvfs_domain(p).letter for p in mapping.order)
    none: tuple[None, ...] = (None,) * n
    text = (spec or "").strip()
    if not text:
        return FreqPlan("", "none", domains, none, none)
    if "=" in text or ":" in text:
        return _per_processor(text, mapping, board, domains)
    if "/" in text:
        parts = [p.strip() for p in text.split("/")]
        stages = mapping.stages
        if len(parts) != len(stages):
            raise BadInputError(
                f"--freq {text!r} gives {len(parts)} per-stage levels but the mapping "
                f"{mapping.compact} has {len(stages)} stages", FREQ_FIX)
        tokens: list[str] = [""] * n
        for st, tok in zip(stages, parts, strict=True):
            for pos in st.layers:
                tokens[pos] = tok
        return _per_layer(text, tokens, mapping, board, domains)
    if "," in text:
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != n:
            raise BadInputError(
                f"--freq {text!r} gives {len(parts)} per-layer levels but the model has "
                f"{n} layers", FREQ_FIX)
        return _per_layer(text, parts, mapping, board, domains)
    # One level for every processor of the mapping.
    setup: dict[str, tuple[int, int]] = {}
    for letter in mapping.processors:
        dom = board.dvfs_domain(letter).letter
        setup[dom] = _level(board, letter, text, text)
    return FreqPlan(text, "per-processor", domains,
                    tuple(setup[d][0] for d in domains), tuple(setup[d][1] for d in domains),
                    setup)


def _per_processor(text: str, mapping: Mapping, board: Board,
                   domains: tuple[str, ...]) -> FreqPlan:
    setup: dict[str, tuple[int, int]] = {}
    source: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"([A-Za-z])\s*[=:]\s*(\S+)", part)
        if not m:
            raise BadInputError(f"--freq {text!r}: {part!r} is not LETTER=LEVEL", FREQ_FIX)
        letter, tok = m.group(1).upper(), m.group(2)
        board.processor(letter)  # unknown letters: BoardError listing the board's
        dom = board.dvfs_domain(letter).letter
        level = _level(board, letter, tok, part)
        if dom in setup and setup[dom] != level:
            raise BadInputError(
                f"--freq {text!r}: {source[dom]} and {part} both set the frequency of "
                f"{dom} ({letter} has no DVFS of its own and runs at its host's)", FREQ_FIX)
        setup[dom] = level
        source[dom] = part
    return FreqPlan(text, "per-processor", domains,
                    tuple(setup[d][0] if d in setup else None for d in domains),
                    tuple(setup[d][1] if d in setup else None for d in domains), setup)


def _per_layer(text: str, tokens: list[str], mapping: Mapping, board: Board,
               domains: tuple[str, ...]) -> FreqPlan:
    levels: list[int | None] = []
    khz: list[int | None] = []
    for pos, tok in enumerate(tokens):
        if tok in ("", "-"):
            levels.append(None)
            khz.append(None)
            continue
        lv, f = _level(board, mapping.order[pos], tok, f"{tok} (layer {pos})")
        levels.append(lv)
        khz.append(f)
    return FreqPlan(text, "per-layer", domains, tuple(levels), tuple(khz))


def pipeline_conflicts(plan: FreqPlan, mapping: Mapping) -> str | None:
    """In pipeline mode stages run at once: two stages sharing a DVFS domain must ask for
    the same level. Returns a message naming the clash, or None."""
    if plan.mode != "per-layer":
        return None
    want: dict[str, tuple[int, int]] = {}  # domain -> (stage, khz)
    for st in mapping.stages:
        for pos in st.layers:
            f, dom = plan.khz[pos], plan.domain[pos]
            if f is None:
                continue
            if dom in want and want[dom][0] != st.index and want[dom][1] != f:
                return (f"stages {want[dom][0]} and {st.index} both drive the frequency of "
                        f"{dom} and run at the same time in pipeline mode, but ask for "
                        f"{want[dom][1] / 1000:g} and {f / 1000:g} MHz")
            want.setdefault(dom, (st.index, f))
    return None
