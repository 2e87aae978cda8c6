"""A sweep's files: their names, format, crash-safe appends, and reading them back.

- ``sweep.csv``: the layer rows of every finished pair, `profiler.measure.tables` layer
  columns (ID columns first: board, simulated, model, processor, freq_level,
  freq_khz), one row per (processor, level, layer). Each pair is appended in one
  write followed by flush + fsync, so a crash loses at most the pair being measured.
- ``sweep.json``: the settings, the environment and per pair (keyed by
  `sidecar_key`) the requested and read-back frequency, warnings and per-frame
  totals; rewritten atomically after each pair. The CSV is the record of which pairs
  are done (``--resume``, `profiler.sweep.plan`).

Who writes them: `profiler.sweep.run`; who reads them back: `read_sweep` (reports,
notebooks).
"""

from __future__ import annotations

import io
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler.boards.model import PROCESSOR_LETTERS
from profiler.errors import BadInputError
from profiler.measure.freq_trace import FreqTrace
from profiler.measure.tables import (
    ID_COLUMNS,
    NULLABLE_INT_COLUMNS,
    upgrade_v1_columns,
    upgrade_v1_totals,
)

SWEEP_FORMAT = "coupprof-sweep/2"
# /1 (before issue 26): a fused pair's time_ms_mean held the sliced figure, time_ms_fused
# the fused one; `read_sweep` maps such a sweep to /2, `--resume` does not continue it.
OLD_SWEEP_FORMAT = "coupprof-sweep/1"
CSV_NAME = "sweep.csv"
JSON_NAME = "sweep.json"

PairKey = tuple[str, int | None]  # (processor letter, 1-based level; None: current frequency)


def read_sweep_csv(path: str | Path | io.BytesIO) -> pd.DataFrame:
    """A sweep CSV as a DataFrame with the ID columns typed (nullable integer levels)."""
    dtypes = {c: "Int64" for c in NULLABLE_INT_COLUMNS}
    return pd.read_csv(path, dtype=dtypes)


class SweepCSV:
    """Appends each pair's rows in one write, then flush + fsync."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.columns: list[str] | None = None
        self._loaded: tuple[pd.DataFrame, list[PairKey]] | None = None

    def load(self) -> list[PairKey]:
        """Read an existing sweep, dropping a torn last line: the pair of every row."""
        raw = self.path.read_bytes()
        if raw and not raw.endswith(b"\n"):  # a write cut short by a crash
            raw = raw[: raw.rfind(b"\n") + 1]
            self._replace(raw)
        if not raw.strip():
            return []
        try:
            df = read_sweep_csv(io.BytesIO(raw))
        except (ValueError, pd.errors.ParserError) as err:
            raise BadInputError(f"cannot read {self.path}: {err}",
                                "pass another -o DIR, or delete the file to start over") from None
        missing = [c for c in ("processor", "freq_level", "layer") if c not in df.columns]
        if missing:
            raise BadInputError(f"{self.path} is not a coupprof sweep CSV (no {', '.join(missing)})",
                                "pass another -o DIR")
        self.columns = list(df.columns)
        keys = list(zip(df["processor"].astype(str), _levels(df["freq_level"]), strict=True))
        self._loaded = (df, keys)
        return keys

    def keep(self, done: set[PairKey]) -> None:
        """Rewrite the loaded file with only the rows of the pairs in `done`."""
        if self._loaded is None:
            return
        df, keys = self._loaded
        if all(k in done for k in keys):
            return
        buf = io.StringIO()
        df[np.array([k in done for k in keys])].to_csv(buf, index=False)
        self._replace(buf.getvalue().encode())

    def append(self, df: pd.DataFrame) -> None:
        if self.columns is None:
            self.columns = list(df.columns)
            header = True
        else:
            extra = [c for c in df.columns if c not in self.columns]
            if extra:
                raise BadInputError(
                    f"{self.path} has no columns {', '.join(extra)} that this run produces "
                    "(it was started with other settings or another power source)",
                    "pass another -o DIR, or drop --resume after deleting the file")
            df = df.reindex(columns=self.columns)
            header = False
        text = df.to_csv(index=False, header=header)
        try:
            with open(self.path, "a", encoding="utf-8", newline="") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            raise BadInputError(f"cannot write {self.path}: {err.strerror}",
                                "choose a writable directory with -o") from None

    def _replace(self, data: bytes) -> None:
        tmp = self.path.with_suffix(".csv.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)


def _levels(col: pd.Series) -> list[int | None]:
    return [None if pd.isna(v) else int(v) for v in col]


# -- the sidecar -----------------------------------------------------------------------


def make_output_dir(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BadInputError(f"cannot create {out_dir}: {err.strerror}",
                            "choose a writable directory with -o") from None


def new_sidecar(settings: dict[str, Any]) -> dict[str, Any]:
    return {"format": SWEEP_FORMAT, "csv": CSV_NAME, "settings": settings, "pairs": {}}


def sidecar_key(processor: str, level: int | None) -> str:
    """A pair's key in the sidecar's ``pairs``, e.g. ``B@3`` or ``G@current``."""
    return f"{processor}@{level or 'current'}"


def read_sidecar(path: Path) -> dict[str, Any] | None:
    """An existing sweep.json (None when there is none); refuses another format."""
    if not path.exists():
        return None
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise BadInputError(f"cannot read {path}: {err}",
                            "delete it (the CSV alone is enough to resume) or use another -o DIR"
                            ) from None
    if meta.get("format") == OLD_SWEEP_FORMAT:
        raise BadInputError(f"{path} was written by an older coupprof ({OLD_SWEEP_FORMAT}: "
                            "a fused pair's time_ms_mean was its sliced time), so this sweep "
                            "cannot be resumed into it",
                            "use another -o DIR (report, plot, predict and explore still read it)")
    if meta.get("format") != SWEEP_FORMAT:
        raise BadInputError(f"{path} is not a coupprof sweep sidecar", "use another -o DIR")
    return meta


# -- reading a sweep back ----------------------------------------------------------------


#: What a sweep calls a pair's frame time, wherever it is shown (the terminal, notebooks).
FRAME_MS_MEANING = ("ms/frame: a fused pair's one call of the whole model (its layers and "
                    "the fixed row); a sliced pair's layers plus the hand-overs between them")


def frame_ms(totals: dict[str, Any]) -> float:
    """A pair's time per frame from its totals (`FRAME_MS_MEANING`): latency_ms_mean, which
    for a fused pair is its fixed row plus its layers (`profiler.measure.tables`)."""
    return float(totals["latency_ms_mean"])


@dataclass
class SweepData:
    """A sweep directory loaded: layer rows and the sidecar."""

    layers: pd.DataFrame
    meta: dict[str, Any]

    def pairs(self) -> list[PairKey]:
        df = self.layers
        order = {k: i for i, k in enumerate(PROCESSOR_LETTERS)}
        return sorted(set(zip(df["processor"].astype(str), _levels(df["freq_level"]), strict=True)),
                      key=lambda k: (order.get(k[0], 99), k[0], -1 if k[1] is None else k[1]))

    def layer_rows(self, where: str, fix: str) -> pd.DataFrame:
        """The per-layer rows (a fused pair's fixed row aside); none at all is bad input
        (`where` names the sweep, `fix` says what to pass instead)."""
        df = self.layers
        if "kind" in df.columns:
            df = df[df["kind"] == "layer"]
        if df.empty:
            raise BadInputError(f"{where} holds no layer rows", fix)
        return df

    def _pair_totals(self, key: str) -> dict[tuple[str, int | None], float]:
        """{(processor, level): the pair's fused figure (or total) named `key`}; level None
        for a pair measured at the current frequency (a processor without levels)."""
        out: dict[tuple[str, int | None], float] = {}
        for p in self.meta.get("pairs", {}).values():
            v = (p.get("fused") or {}).get(key, p.get("totals", {}).get(key))
            if v is not None and not math.isnan(float(v)):
                out[_pair_key(p)] = float(v)
        return out

    def frame_ms(self) -> pd.DataFrame:
        """Per pair: processor, freq_level, freq_khz, method and frame_ms, the same
        figure the sweep printed (`FRAME_MS_MEANING`)."""
        rows = []
        for p in self.meta.get("pairs", {}).values():
            totals = p.get("totals", {})
            if "latency_ms_mean" not in totals:
                continue
            rows.append({"processor": p["processor"], "freq_level": p.get("level"),
                         "freq_khz": p.get("effective_khz") or p.get("freq_khz"),
                         "method": "fused" if "whole_ms" in totals else "sliced",
                         "frame_ms": frame_ms(totals)})
        return pd.DataFrame(rows, columns=["processor", "freq_level", "freq_khz", "method",
                                           "frame_ms"])

    def fixed_ms(self) -> dict[tuple[str, int | None], float]:
        """{(processor, level): fixed per-call ms} of the sweep's fused pairs."""
        return self._pair_totals("fixed_ms")

    def fixed_energy_mj(self) -> dict[tuple[str, int | None], float]:
        """{(processor, level): the fixed row's energy} of fused pairs with a power source."""
        return self._pair_totals("fixed_energy_mj")

    def call_factor(self) -> dict[tuple[str, int | None], float]:
        """{(processor, level): a fused CPU pair's factor for disturbed calls}
        (`profiler.measure.fused`, "Disturbed calls")."""
        return self._pair_totals("call_factor")

    def whole_ms(self) -> dict[tuple[str, int | None], float]:
        """{(processor, level): a fused pair's whole model in its rounds (ms)}."""
        return self._pair_totals("whole_ms")

    def whole_ms_ci95(self) -> dict[tuple[str, int | None], float]:
        """{(processor, level): the 95 % half-width of that figure (ms)}."""
        return self._pair_totals("whole_ms_ci95")

    def freq_traces(self) -> dict[tuple[str, int | None], FreqTrace]:
        """{(processor, level): the clock while the pair was measured}, where it was read."""
        return {_pair_key(p): FreqTrace.from_dict(p["freq_trace"])
                for p in self.meta.get("pairs", {}).values() if p.get("freq_trace")}

    def baseline_power_w(self) -> dict[tuple[str, int | None], float]:
        """{(processor, level): the idle power its power session measured}."""
        return self._pair_totals("baseline_power_w")


def read_sweep(path: str | Path) -> SweepData:
    """Load DIR (or DIR/sweep.csv) written by `coupprof sweep`."""
    p = Path(path)
    csv_p = p / CSV_NAME if p.is_dir() else p
    json_p = csv_p.with_suffix(".json")
    if not csv_p.is_file():
        raise BadInputError(f"sweep results not found: {csv_p}",
                            "pass the directory written by `coupprof sweep -o DIR`")
    meta = json.loads(json_p.read_text()) if json_p.is_file() else {}
    df = read_sweep_csv(csv_p)
    if not set(ID_COLUMNS) <= set(df.columns):
        raise BadInputError(f"{csv_p} lacks the columns {', '.join(sorted(set(ID_COLUMNS) - set(df.columns)))}",
                            "pass a CSV written by `coupprof sweep`")
    if meta.get("format") == OLD_SWEEP_FORMAT or "time_ms_fused" in df.columns:
        df = upgrade_v1_columns(df)
        for pair in meta.get("pairs", {}).values():
            if "totals" in pair:
                level = pair.get("level")
                rows = df[(df["processor"].astype(str) == str(pair["processor"]))
                          & (df["freq_level"].isna() if level is None
                             else df["freq_level"] == int(level))]
                if "kind" in rows.columns:
                    rows = rows[rows["kind"] == "layer"]
                pair["totals"] = upgrade_v1_totals(pair["totals"], rows, pair)
    return SweepData(df, meta)


__all__ = [
    "CSV_NAME", "JSON_NAME", "OLD_SWEEP_FORMAT", "SWEEP_FORMAT", "PairKey", "SweepCSV", "SweepData",
    "make_output_dir", "new_sidecar", "read_sidecar", "read_sweep", "read_sweep_csv",
    "sidecar_key",
]


def _pair_key(pair: dict[str, Any]) -> tuple[str, int | None]:
    """A sidecar pair's (processor, level); level None for a pair measured at the current
    frequency (a processor without levels)."""
    level = pair.get("level")
    return str(pair["processor"]), None if level is None else int(level)
