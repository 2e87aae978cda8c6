"""Which of a folder's `coupprof layers` tables a prediction takes.

`coupprof layers` writes coupprof-out/layers-MODEL-P.csv with a .json sidecar, one per
processor, so the folder is what a newcomer has after measuring: `predict --layers
coupprof-out` (and `run --layers`) take it. The tables are told by their sidecars (format
coupprof-layers/*), not by their names, so tables saved under other names count too. The
choice is strict rather than clever: one model (several there need ``model``, and the
error names them), the processors the mapping names, and one table per processor and level
(two would make the prediction depend on which was read first).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from profiler.errors import BadInputError

LAYERS_FORMAT_PREFIX = "coupprof-layers/"


@dataclass(frozen=True)
class FolderTable:
    """One `coupprof layers` table found in a folder."""

    csv: Path
    processor: str
    level: int | None
    model: str  # the model file's name without .tflite, as in layers-MODEL-P.csv
    model_path: str = ""  # as the sidecar has it


@dataclass
class FolderChoice:
    """The tables taken from ``folder`` for one model."""

    folder: Path
    model: str
    tables: list[FolderTable] = field(default_factory=list)

    @property
    def paths(self) -> list[Path]:
        return [t.csv for t in self.tables]

    def describe(self) -> str:
        """One line: which files, for which processors, of which model."""
        files = ", ".join(f"{t.csv.name} ({t.processor}"
                          f"{'' if t.level is None else f' at level {t.level}'})"
                          for t in self.tables)
        named = all(self.model in t.csv.name for t in self.tables)  # layers-MODEL-P.csv
        return f"using {files} in {self.folder}" + ("" if named else f" (model {self.model})")


def _model_name(model_path: str) -> str:
    name = Path(model_path).name
    return name[: -len(".tflite")] if name.endswith(".tflite") else name


def layer_tables_in(folder: Path) -> list[FolderTable]:
    """Every CSV directly in ``folder`` whose .json sidecar says `coupprof layers` wrote
    it, sorted by model, processor (L, B, G, N) and level."""
    found = []
    for csv in sorted(folder.glob("*.csv")):
        try:
            meta = json.loads(csv.with_suffix(".json").read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(meta, dict) or not str(meta.get("format", "")).startswith(
                LAYERS_FORMAT_PREFIX):
            continue
        level = meta.get("freq_level")
        found.append(FolderTable(csv, str(meta.get("processor", "")).upper(),
                                 None if level is None else int(level),
                                 _model_name(str(meta.get("model_path") or csv.stem)),
                                 str(meta.get("model_path") or "")))
    return sorted(found, key=lambda t: (t.model, "LBGN".find(t.processor), t.level or 0))


def _model_option(table: FolderTable) -> str:
    """' --model PATH' for `coupprof layers` to measure the table's model again ('' for
    the bundled default, which it measures without one)."""
    from profiler.zoo.registry import DEFAULT_MODEL_FILE

    if not table.model_path or Path(table.model_path) == DEFAULT_MODEL_FILE:
        return ""
    return f" --model {table.model_path}"


def _by_model(tables: Sequence[FolderTable]) -> dict[str, list[FolderTable]]:
    out: dict[str, list[FolderTable]] = {}
    for t in tables:
        out.setdefault(t.model, []).append(t)
    return out


def _listing(models: dict[str, list[FolderTable]]) -> str:
    return "; ".join(f"{m} ({', '.join(dict.fromkeys(t.processor for t in ts))})"
                     for m, ts in models.items())


def choose_tables(folder: Path, processors: Sequence[str] | None = None,
                  model: str | None = None) -> FolderChoice:
    """The tables in ``folder`` for ``processors`` (letters; None: every one there) of
    ``model`` (a model file's name or path, with or without .tflite; None: the folder's
    only model). Bad input, in one line, when the folder holds no layer table, several
    models and no ``model``, no table for a wanted processor, or two tables of one
    processor at one level."""
    tables = layer_tables_in(folder)
    if not tables:
        raise BadInputError(
            f"{folder} holds no layer table (a CSV with the .json sidecar `coupprof layers` "
            "writes) and no sweep.csv",
            "measure one per processor: coupprof layers -p B (writes coupprof-out/"
            "layers-MODEL-B.csv), or pass the CSV files")
    models = _by_model(tables)
    if model is not None:
        want = _model_name(str(model))
        if want not in models:
            raise BadInputError(f"{folder} has no layer table of model {want} (it has: "
                                f"{_listing(models)})", f"--model {next(iter(models))}")
    elif len(models) > 1:
        raise BadInputError(f"{folder} holds layer tables of {len(models)} models: "
                            f"{_listing(models)}",
                            f"say which with --model, e.g. --model {next(iter(models))}")
    else:
        want = next(iter(models))
    mine = models[want]
    if processors is not None:
        letters = list(dict.fromkeys(p.strip().upper() for p in processors))
        missing = [p for p in letters if not any(t.processor == p for t in mine)]
        if missing:
            have = ", ".join(dict.fromkeys(t.processor for t in mine))
            raise BadInputError(
                f"{folder} has no layer table of {want} for processor(s) "
                f"{', '.join(missing)} (it has {have})",
                f"measure it: coupprof layers -p {missing[0]}{_model_option(mine[0])}")
        mine = [t for t in mine if t.processor in letters]
    seen: dict[tuple[str, int | None], FolderTable] = {}
    for t in mine:
        other = seen.setdefault((t.processor, t.level), t)
        if other is not t:
            at = "" if t.level is None else f" at level {t.level}"
            raise BadInputError(
                f"{folder} holds two layer tables of {want} for {t.processor}{at}: "
                f"{other.csv.name} and {t.csv.name}",
                "pass the one you want as a file: --layers FILE.csv[,...]")
    return FolderChoice(folder, want, mine)
