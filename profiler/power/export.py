"""Writing a captured trace to files, chunk by chunk: CSV or Parquet.

``export(trace, path)`` picks the format from the name: ``.parquet`` (or
``.pq``) writes Parquet through pyarrow (the optional ``parquet`` extra),
anything else CSV. Beside the samples file go the marker edges
(``<stem>.edges.csv`` / ``<stem>.edges.parquet``) and a JSON sidecar
(``<stem>.json``: logger identity, counters, lost-frame gaps, clock map).

Sample columns: ``t_us`` (device µs), ``host_ns`` (empty/null without a clock
map), ``current_a``, ``bus_v``, ``power_w``, ``markers``. Edge columns:
``t_us``, ``host_ns``, ``markers``, ``changed``.

Peak memory does not grow with the capture's length: records are read
``chunk_rows`` at a time and each chunk is scaled, formatted and written before
the next is read. A trace loaded from its directory is memory-mapped; its
records are read from the ``.bin`` file with plain reads instead of through the
mapping, because every page touched through a mapping stays in the process's
resident set until it is unmapped (an hour at 20 kS/s is 940 MB of samples).
Parquet gets one row group per chunk. CSV values are printed with ``%.9g``;
Parquet keeps the float64 values exactly.
"""

from __future__ import annotations

import csv
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from profiler.errors import BadInputError
from profiler.jsonfile import write_json_atomic

if TYPE_CHECKING:
    import pyarrow as pa

    from profiler.power.trace import DeviceTrace

#: Rows per chunk: ~2.6 MB of records, ~10 MB once scaled into columns.
DEFAULT_CHUNK_ROWS = 200_000
SAMPLE_COLUMNS = ("t_us", "host_ns", "current_a", "bus_v", "power_w", "markers")
EDGE_COLUMNS = ("t_us", "host_ns", "markers", "changed")
PARQUET_SUFFIXES = (".parquet", ".pq")
PYARROW_FIX = "pip install 'coupprof[parquet]' (or write CSV: -o trace.csv)"


@dataclass(frozen=True)
class ExportFiles:
    """The three files one export writes."""

    format: str  # "csv" or "parquet"
    samples: Path
    edges: Path
    sidecar: Path

    def paths(self) -> list[Path]:
        return [self.samples, self.edges, self.sidecar]


def export_files(path: str | os.PathLike[str], fmt: str | None = None) -> ExportFiles:
    """The format (``fmt``, else from the suffix) and file names an export to ``path`` uses."""
    p = Path(path)
    if fmt is None:
        fmt = "parquet" if p.suffix.lower() in PARQUET_SUFFIXES else "csv"
    ext = ".parquet" if fmt == "parquet" else ".csv"
    # trace.csv -> trace.edges.csv, trace.json; another name keeps its suffix in the stem
    stem = p.with_suffix("") if p.suffix == ext or (
        fmt == "parquet" and p.suffix.lower() in PARQUET_SUFFIXES) else p
    return ExportFiles(fmt, p, stem.with_name(stem.name + ".edges" + ext),
                       stem.with_name(stem.name + ".json"))


def require_pyarrow() -> None:
    """Raise a one-line BadInputError (exit 2) when pyarrow cannot be imported."""
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise BadInputError("writing Parquet needs pyarrow, which is not installed",
                            fix=PYARROW_FIX) from None


def record_chunks(arr: np.ndarray, rows: int) -> Iterator[np.ndarray]:
    """Consecutive runs of at most ``rows`` records of ``arr``, in order.

    A memory-mapped array (as ``DeviceTrace.load`` makes) is read from its file with
    plain reads, so its pages never become resident in this process.
    """
    if rows < 1:
        raise ValueError(f"chunk rows must be 1 or more, not {rows}")
    # Only a root memmap (its base is the mmap) knows its true file offset;
    # numpy copies the parent's offset into slices.
    if isinstance(arr, np.memmap) and isinstance(arr.base, mmap.mmap) and arr.filename:
        with open(arr.filename, "rb") as f:
            f.seek(arr.offset)
            left = arr.size
            while left > 0:
                got = np.fromfile(f, dtype=arr.dtype, count=min(rows, left))
                if got.size == 0:  # the file shrank under us: nothing more to read
                    return
                left -= got.size
                yield got
        return
    for i in range(0, arr.size, rows):
        yield arr[i : i + rows]


def sample_columns(trace: DeviceTrace, s: np.ndarray) -> dict[str, np.ndarray | None]:
    """Physical values of SAMPLE_DTYPE records ``s``; ``host_ns`` is None without a clock."""
    info = trace._info()
    cur = info.current_a(s["current"])
    bus = info.bus_v(s["bus"])
    return {
        "t_us": s["t_us"],
        "host_ns": None if trace.clock is None else trace.clock.to_host_ns(s["t_us"]),
        "current_a": cur,
        "bus_v": bus,
        "power_w": cur * bus,
        "markers": s["markers"],
    }


def edge_columns(trace: DeviceTrace, e: np.ndarray) -> dict[str, np.ndarray | None]:
    return {
        "t_us": e["t_us"],
        "host_ns": None if trace.clock is None else trace.clock.to_host_ns(e["t_us"]),
        "markers": e["markers"],
        "changed": e["changed"],
    }


def write_csv(trace: DeviceTrace, files: ExportFiles, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> None:
    import pandas as pd  # only here: pandas (with the pyarrow it loads) adds ~100 MB of RSS

    trace._info()  # no IDENT: fail before creating any file
    with open(files.samples, "w", newline="") as f:
        first = True
        for s in _chunks_or_one_empty(trace.samples, chunk_rows):
            cols = sample_columns(trace, s)
            if cols["host_ns"] is None:
                cols["host_ns"] = pd.array([pd.NA] * s.size, dtype="Int64")
            pd.DataFrame(cols).to_csv(f, header=first, index=False, float_format="%.9g",
                                      na_rep="")
            first = False
    with open(files.edges, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(EDGE_COLUMNS)
        for e in record_chunks(trace.edges, chunk_rows):
            host = None if trace.clock is None else trace.clock.to_host_ns(e["t_us"]).tolist()
            for i, (t, markers, changed) in enumerate(e.tolist()):
                w.writerow([t, "" if host is None else host[i], markers, changed])


def _chunks_or_one_empty(arr: np.ndarray, rows: int) -> Iterator[np.ndarray]:
    """record_chunks, or one empty chunk when there are no records (the header is still written)."""
    any_chunk = False
    for c in record_chunks(arr, rows):
        any_chunk = True
        yield c
    if not any_chunk:
        yield arr[:0]


def _parquet_schemas() -> tuple[pa.Schema, pa.Schema]:
    import pyarrow as pa

    samples = pa.schema([("t_us", pa.int64()), ("host_ns", pa.int64()),
                         ("current_a", pa.float64()), ("bus_v", pa.float64()),
                         ("power_w", pa.float64()), ("markers", pa.uint8())])
    edges = pa.schema([("t_us", pa.int64()), ("host_ns", pa.int64()),
                       ("markers", pa.uint8()), ("changed", pa.uint8())])
    return samples, edges


def write_parquet(trace: DeviceTrace, files: ExportFiles, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> None:
    """Samples and edges as Parquet, one row group per chunk (zstd-compressed)."""
    require_pyarrow()
    import pyarrow as pa
    import pyarrow.parquet as pq

    trace._info()
    schemas = dict(zip(("samples", "edges"), _parquet_schemas(), strict=True))
    for name, columns in (("samples", sample_columns), ("edges", edge_columns)):
        schema = schemas[name]
        # Times rise steadily: delta encoding stores them in a few bits each.
        with pq.ParquetWriter(getattr(files, name), schema, compression="zstd",
                              use_dictionary=["current_a", "bus_v", "power_w", "markers",
                                              "changed"],
                              column_encoding={"t_us": "DELTA_BINARY_PACKED",
                                               "host_ns": "DELTA_BINARY_PACKED"}) as w:
            for chunk in record_chunks(getattr(trace, name), chunk_rows):
                cols = columns(trace, chunk)
                arrays = [pa.nulls(chunk.size, pa.int64()) if cols[f.name] is None
                          else pa.array(np.ascontiguousarray(cols[f.name]), type=f.type) for f in schema]
                w.write_table(pa.Table.from_arrays(arrays, schema=schema))


def write_sidecar(trace: DeviceTrace, files: ExportFiles) -> None:
    sidecar = {
        **{k: v for k, v in trace.meta().items() if k != "dtypes"},
        "samples": int(trace.samples.size),
        "edges": int(trace.edges.size),
        "duration_s": trace.duration_s,
        "rate_hz": trace.rate_hz,
        "gaps": [
            {"t_before_us": int(g[0]), "t_after_us": int(g[1]), "missing": int(g[2])}
            for g in trace.gaps.tolist()
        ],
        "files": {"samples": files.samples.name, "edges": files.edges.name},
    }
    if trace.info is not None:
        sidecar["power_source"] = "arduino"
        sidecar["front_end"] = trace.info.front_end_name
    write_json_atomic(files.sidecar, sidecar)


def export(trace: DeviceTrace, path: str | os.PathLike[str], chunk_rows: int = DEFAULT_CHUNK_ROWS,
           fmt: str | None = None) -> list[Path]:
    """Write samples, edges and sidecar as ``fmt`` (default: from ``path``'s suffix).

    Returns the three paths.
    """
    files = export_files(path, fmt)
    if files.format == "parquet":
        write_parquet(trace, files, chunk_rows)
    else:
        write_csv(trace, files, chunk_rows)
    write_sidecar(trace, files)
    return files.paths()
