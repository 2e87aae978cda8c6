"""A captured logger trace on the logger's own clock: samples, edges and gaps, on disk
and in memory.

``DeviceTrace`` is what the collector returns (samples, edges, gaps, counters, an
optional clock map); a streaming source maps it onto the host clock as a
`profiler.power.host_trace.HostTrace`. On disk a trace is a directory, written
incrementally by ``TraceWriter``; ``DeviceTrace.load`` memory-maps its .bin files.

The fields and the files: docs/power.md ("The trace on the logger's clock").
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from profiler.jsonfile import write_json_atomic
from profiler.power.clockmap import ClockMap
from profiler.power.protocol import (
    EDGE_DTYPE,
    GAP_DTYPE,
    SAMPLE_DTYPE,
    DecodedChunk,
    DecoderCounters,
    LoggerInfo,
)

TRACE_FORMAT = "coupprof-trace"
TRACE_VERSION = 1
_FILES = {"samples": SAMPLE_DTYPE, "edges": EDGE_DTYPE, "gaps": GAP_DTYPE}

__all__ = [
    "EDGE_DTYPE",
    "GAP_DTYPE",
    "SAMPLE_DTYPE",
    "CaptureCounters",
    "DeviceTrace",
    "TraceWriter",
]


@dataclass
class CaptureCounters:
    """Host decoder counts plus the device's own STATUS totals."""

    bytes_in: int = 0
    frames_ok: int = 0
    corrupt_frames: int = 0
    lost_frames: int = 0
    garbage_bytes: int = 0
    skipped_bytes: int = 0
    seq_restarts: int = 0
    unknown_frames: int = 0
    samples: int = 0
    edges: int = 0
    # From the latest STATUS frame (device counts since START).
    status_frames: int = 0
    device_samples_total: int = 0
    device_samples_dropped: int = 0
    device_edges_total: int = 0

    def update_from(self, dec: DecoderCounters) -> None:
        for k, v in asdict(dec).items():
            setattr(self, k, v)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CaptureCounters:
        return cls(**{k: int(d[k]) for k in cls.__dataclass_fields__ if k in d})


def _empty(dtype: np.dtype) -> np.ndarray:
    return np.zeros(0, dtype)


@dataclass
class DeviceTrace:
    """One capture. Arrays may be memory-mapped (see ``DeviceTrace.load``)."""

    info: LoggerInfo | None
    samples: np.ndarray = field(default_factory=lambda: _empty(SAMPLE_DTYPE))
    edges: np.ndarray = field(default_factory=lambda: _empty(EDGE_DTYPE))
    gaps: np.ndarray = field(default_factory=lambda: _empty(GAP_DTYPE))
    counters: CaptureCounters = field(default_factory=CaptureCounters)
    port: str = ""
    host_start_ns: int | None = None  # host clock when START was acknowledged
    host_stop_ns: int | None = None
    clock: ClockMap | None = None
    error: str | None = None  # why the capture ended early (partial trace)
    path: Path | None = None

    # ----------------------------------------------------------------- values
    @property
    def t_us(self) -> np.ndarray:
        return self.samples["t_us"]

    @property
    def markers(self) -> np.ndarray:
        return self.samples["markers"]

    def _info(self) -> LoggerInfo:
        if self.info is None:
            raise ValueError("trace has no logger IDENT: raw counts cannot be scaled")
        return self.info

    @property
    def current_a(self) -> np.ndarray:
        return self._info().current_a(self.samples["current"])

    @property
    def bus_v(self) -> np.ndarray:
        return self._info().bus_v(self.samples["bus"])

    @property
    def power_w(self) -> np.ndarray:
        return self._info().power_w(self.samples["current"], self.samples["bus"])

    @property
    def host_ns(self) -> np.ndarray:
        """Sample times on the host clock (needs ``clock``)."""
        if self.clock is None:
            raise ValueError("trace has no clock map: fit one with fit_clock_map() first")
        return self.clock.to_host_ns(self.samples["t_us"])

    @property
    def edge_host_ns(self) -> np.ndarray:
        if self.clock is None:
            raise ValueError("trace has no clock map: fit one with fit_clock_map() first")
        return self.clock.to_host_ns(self.edges["t_us"])

    @property
    def duration_s(self) -> float:
        if self.samples.size < 2:
            return 0.0
        return float(self.samples["t_us"][-1] - self.samples["t_us"][0]) * 1e-6

    @property
    def rate_hz(self) -> float:
        """Achieved sample rate over the trace (received samples / device time)."""
        d = self.duration_s
        return (self.samples.size - 1) / d if d > 0 else 0.0

    @property
    def lost_frames(self) -> int:
        return self.counters.lost_frames

    def lost_in(self, t0_us: int, t1_us: int) -> int:
        """Frames lost in gaps that overlap the device-time window [t0_us, t1_us]."""
        g = self.gaps
        hit = (g["t_before_us"] < t1_us) & (g["t_after_us"] > t0_us)
        return int(g["missing"][hit].sum())

    def host_fields(self, clock: ClockMap | None = None) -> dict[str, Any]:
        """The trace on the host clock, as keyword arguments for
        ``profiler.power.host_trace.HostTrace``: sample and edge times in host ns,
        power, marker bits, and lost-frame spans (from the device times around
        each seq gap)."""
        cm = clock or self.clock
        if cm is None:
            raise ValueError("no clock map: pass one, or fit one with fit_clock_map() first")
        g = self.gaps
        return {
            "t_ns": cm.to_host_ns(self.samples["t_us"]),
            "power_w": self.power_w,
            "markers": np.asarray(self.samples["markers"]),
            "edge_t_ns": cm.to_host_ns(self.edges["t_us"]),
            "edge_markers": np.asarray(self.edges["markers"]),
            "edge_changed": np.asarray(self.edges["changed"]),
            "lost_start_ns": cm.to_host_ns(g["t_before_us"]),
            "lost_end_ns": cm.to_host_ns(g["t_after_us"]),
            "lost_frames": np.asarray(g["missing"], dtype=np.int64),
            "corrupt_frames": self.counters.corrupt_frames,
            "source": f"arduino:{self.port}",
        }

    def with_clock(self, clock: ClockMap | None) -> DeviceTrace:
        return replace(self, clock=clock)

    # ----------------------------------------------------------------- persistence
    def meta(self) -> dict[str, Any]:
        return {
            "format": TRACE_FORMAT,
            "version": TRACE_VERSION,
            "logger": None if self.info is None else self.info.to_dict(),
            "counters": self.counters.to_dict(),
            "port": self.port,
            "host_start_ns": self.host_start_ns,
            "host_stop_ns": self.host_stop_ns,
            "clock": None if self.clock is None else self.clock.to_dict(),
            "error": self.error,
            "dtypes": {k: np.lib.format.dtype_to_descr(v) for k, v in _FILES.items()},
        }

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write the trace directory (meta.json + .bin files)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        for name, dtype in _FILES.items():
            np.ascontiguousarray(getattr(self, name), dtype=dtype).tofile(d / f"{name}.bin")
        write_json_atomic(d / "meta.json", {**self.meta(), "complete": True})
        return d

    def save_meta(self) -> None:
        """Rewrite meta.json of the directory this trace was loaded from (clock, error)."""
        if self.path is None:
            raise ValueError("trace has no directory: use save()")
        write_json_atomic(self.path / "meta.json", {**self.meta(), "complete": True})

    @classmethod
    def load(cls, directory: str | os.PathLike[str], mmap: bool = True) -> DeviceTrace:
        d = Path(directory)
        try:
            meta = json.loads((d / "meta.json").read_text())
        except (OSError, ValueError) as err:
            from profiler.errors import BadInputError

            raise BadInputError(
                f"{d} is not a coupprof trace directory ({err})",
                fix="pass the directory written by `coupprof collect --trace-dir`",
            ) from None
        if meta.get("format") != TRACE_FORMAT:
            from profiler.errors import BadInputError

            raise BadInputError(f"{d}/meta.json is not a {TRACE_FORMAT} file")
        arrays = {name: _read_records(d / f"{name}.bin", dtype, mmap) for name, dtype in _FILES.items()}
        return cls(
            info=None if meta.get("logger") is None else LoggerInfo.from_dict(meta["logger"]),
            counters=CaptureCounters.from_dict(meta.get("counters", {})),
            port=meta.get("port", ""),
            host_start_ns=meta.get("host_start_ns"),
            host_stop_ns=meta.get("host_stop_ns"),
            clock=None if meta.get("clock") is None else ClockMap.from_dict(meta["clock"]),
            error=meta.get("error"),
            path=d,
            **arrays,
        )


def _read_records(path: Path, dtype: np.dtype, mmap: bool) -> np.ndarray:
    if not path.exists():
        return _empty(dtype)
    n = path.stat().st_size // dtype.itemsize
    if n == 0:
        return _empty(dtype)
    if mmap:
        return np.memmap(path, dtype=dtype, mode="r", shape=(n,))
    return np.fromfile(path, dtype=dtype, count=n)


class TraceWriter:
    """Appends decoded chunks to a trace directory as they arrive.

    Memory stays bounded: each chunk goes straight to the .bin files.
    ``finish`` writes the final meta.json and returns the memory-mapped DeviceTrace.
    """

    def __init__(self, directory: str | os.PathLike[str], keep_raw: bool = False) -> None:
        self.path = Path(directory)
        self.path.mkdir(parents=True, exist_ok=True)
        # Kept open for the whole capture; closed by close()/finish().
        self._files = {name: open(self.path / f"{name}.bin", "wb") for name in _FILES}  # noqa: SIM115
        self._raw = open(self.path / "raw.bin", "wb") if keep_raw else None  # noqa: SIM115
        self.counts = {name: 0 for name in _FILES}
        self.write_meta(DeviceTrace(info=None), complete=False)

    def write_raw(self, data: bytes) -> None:
        if self._raw is not None:
            self._raw.write(data)

    def append(self, chunk: DecodedChunk) -> None:
        for name in _FILES:
            arr = getattr(chunk, name)
            if arr.size:
                self._files[name].write(np.ascontiguousarray(arr).tobytes())
                self.counts[name] += arr.size

    def flush(self) -> None:
        for f in self._files.values():
            f.flush()
        if self._raw is not None:
            self._raw.flush()

    def write_meta(self, trace: DeviceTrace, complete: bool) -> None:
        write_json_atomic(self.path / "meta.json", {**trace.meta(), "complete": complete})

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        if self._raw is not None:
            self._raw.close()

    def finish(self, trace: DeviceTrace) -> DeviceTrace:
        """Close the files, write meta.json for ``trace`` and load it back (mmap)."""
        self.close()
        self.write_meta(trace, complete=True)
        return DeviceTrace.load(self.path)
