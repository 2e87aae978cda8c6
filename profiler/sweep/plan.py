"""Sweep planning: which (processor, DVFS level) pairs a sweep measures, and on
``--resume`` which of them are still to do.

    pairs = plan_pairs(board, parse_processors("L,B,G", board), parse_freqs("all"))
    state = resume_state(csv_path, json_path, settings, resume=True)
    todo = state.todo(pairs)

A sweep may add to an existing output only with the same settings (`RESUME_KEYS`);
a pair counts as done when all its layer rows are in the CSV, and one cut short is
measured again. Running the pairs is `profiler.sweep.run`; the files, `profiler.sweep.schema`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler.boards.model import PROCESSOR_LETTERS, Board
from profiler.errors import BadInputError, BoardError
from profiler.sweep.schema import PairKey, SweepCSV, new_sidecar, read_sidecar

# Settings that must match for --resume to add rows to an existing sweep.
RESUME_KEYS = ("board", "model_sha256", "granularity", "cuts", "frames", "warmup", "threads", "seed",
               "power_source")


@dataclass(frozen=True, order=True)
class Pair:
    """One point of the sweep. `level` None: the frequency is left as it is."""

    processor: str
    level: int | None = None
    freq_khz: int | None = None

    @property
    def key(self) -> PairKey:
        return (self.processor, self.level)

    def label(self) -> str:
        if self.level is None:
            return f"{self.processor} at the current frequency"
        return f"{self.processor} level {self.level} ({(self.freq_khz or 0) / 1000:g} MHz)"


# -- processors x levels ---------------------------------------------------------------

FreqSpec = str | list[int]  # "all", "max", "current" or explicit 1-based levels


def parse_freqs(text: str) -> FreqSpec:
    """`all`, `max` (each processor's top level), `current` (leave the frequency alone)
    or `1,3,5` (levels, 1-based)."""
    t = text.strip().lower()
    if t in ("all", "max", "current"):
        return t
    try:
        levels = sorted({int(tok) for tok in t.split(",") if tok.strip()})
    except ValueError:
        raise BadInputError(f"--freqs '{text}' is not 'all', 'max', 'current' or a list of "
                            "levels", "e.g. --freqs all, or --freqs 1,3,5") from None
    if not levels or levels[0] < 1:
        raise BadInputError(f"--freqs '{text}': levels are 1-based whole numbers",
                            "e.g. --freqs 1,3,5 (`coupprof boards show BOARD` lists the levels)")
    return levels


def parse_processors(text: str | None, board: Board) -> list[str]:
    """'L,B,G' -> ['L', 'B', 'G'] (default: every processor of the board)."""
    if not text:
        return [k for k in PROCESSOR_LETTERS if k in board.processors]
    letters = [tok.strip().upper() for tok in text.split(",") if tok.strip()]
    if not letters:
        raise BadInputError(f"--processors '{text}' names no processor", "e.g. --processors L,B,G")
    for letter in letters:
        board.processor(letter)  # unknown letters: BoardError listing the board's processors
    return list(dict.fromkeys(letters))


def plan_pairs(board: Board, processors: Sequence[str], freqs: FreqSpec) -> list[Pair]:
    """Every (processor, level) pair, processors in the given order, levels ascending.
    A level indexes the table of the processor's DVFS domain (N: its host cluster's)."""
    pairs: list[Pair] = []
    for letter in processors:
        proc = board.processor(letter)
        if freqs == "current":
            pairs.append(Pair(proc.letter))
            continue
        target = board.dvfs_domain(letter)
        if not target.freqs_khz:
            raise BoardError(
                f"cannot set frequencies: processor {proc.letter} on board '{board.name}' has no "
                "DVFS levels (no frequency table"
                + (" in this machine's cpufreq files" if board.name == "host" else "") + ")",
                "use --freqs current to sweep at the current frequency, or --board sim for the "
                "simulated board (`coupprof boards` lists boards)",
            )
        n = len(target.freqs_khz)
        if freqs == "all":
            levels = list(range(1, n + 1))
        elif freqs == "max":
            levels = [n]
        elif isinstance(freqs, str):
            raise ValueError(f"unknown freqs {freqs!r}")  # parse_freqs makes no other word
        else:
            levels = list(freqs)
        bad = [k for k in levels if k > n]
        if bad:
            raise BoardError(
                f"--freqs: level {bad[0]} is out of range for processor {proc.letter} on board "
                f"'{board.name}'" + (f" (it uses {target.letter}'s table)" if target is not proc else ""),
                f"valid levels: {target.levels_text()}",
            )
        pairs += [Pair(proc.letter, k, target.freqs_khz[k - 1]) for k in levels]
    return pairs


# -- resuming --------------------------------------------------------------------------


@dataclass
class ResumeState:
    """What the output already holds for this sweep, and so what is left to measure."""

    csv: SweepCSV  # appended to after each pair
    meta: dict[str, Any]  # the sidecar, rewritten after each pair
    done: set[PairKey]  # pairs with all their rows in the CSV

    def todo(self, pairs: Sequence[Pair]) -> list[Pair]:
        return [p for p in pairs if p.key not in self.done]

    def skipped(self, pairs: Sequence[Pair]) -> list[Pair]:
        return [p for p in pairs if p.key in self.done]


def resume_state(csv_path: Path, json_path: Path, settings: dict[str, Any],
                 resume: bool) -> ResumeState:
    """A new output, or with `resume` the existing one checked against `settings` and
    cut back to its complete pairs (`settings["layers"]` rows each)."""
    csv = SweepCSV(csv_path)
    meta = new_sidecar(settings)
    if not csv_path.exists():
        return ResumeState(csv, meta, set())
    if not resume:
        raise BadInputError(f"{csv_path} already exists",
                            "pass --resume to add the missing pairs to it, or another -o DIR")
    old = read_sidecar(json_path)
    if old is not None:
        _check_same_settings(old.get("settings", {}), settings, csv_path)
        meta["pairs"] = old.get("pairs", {})
        meta["environment"] = old.get("environment", {})
    done = complete_pairs(csv.load(), settings["layers"])
    csv.keep(done)
    meta["pairs"] = {k: v for k, v in meta["pairs"].items()
                     if (v.get("processor"), v.get("level")) in done}
    return ResumeState(csv, meta, done)


def complete_pairs(keys: Sequence[PairKey], layers_per_pair: int) -> set[PairKey]:
    """The pairs of the CSV's rows that have all their layers."""
    counts: dict[PairKey, int] = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    return {k for k, n in counts.items() if n == layers_per_pair}


def _check_same_settings(theirs: dict[str, Any], ours: dict[str, Any], csv_path: Path) -> None:
    diff = [k for k in RESUME_KEYS if theirs.get(k) != ours.get(k)]
    if diff:
        what = ", ".join(f"{k} {theirs.get(k)!r} there, {ours.get(k)!r} now" for k in diff)
        raise BadInputError(f"cannot resume {csv_path}: it was measured with other settings "
                            f"({what})", "repeat the original options, or use another -o DIR")


__all__ = [
    "RESUME_KEYS", "FreqSpec", "Pair", "ResumeState", "complete_pairs", "parse_freqs",
    "parse_processors", "plan_pairs", "resume_state",
]
