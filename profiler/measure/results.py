"""What a run measured, as dataclasses: per-layer facts, raw timestamps, run metadata.

Measuring fills these; `profiler.measure.tables` turns them into DataFrames, CSV, JSON and
rich tables. Raw timestamps are kept whole (int64 ns from the run's clock) so any
aggregate can be recomputed later and power samples can be attributed to windows.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import platform
import shlex
import socket
import sys
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from profiler import __version__
from profiler.measure.method import Method

if TYPE_CHECKING:
    from profiler.slicing.specs import Layer

# Column order of the raw timestamp array's last axis.
TRANSFER_START, TRANSFER_END, LAYER_START, LAYER_END = range(4)


@dataclass(frozen=True)
class LayerInfo:
    """Static facts about one layer (from the slicer)."""

    index: int
    op_types: tuple[str, ...]
    macs: int
    param_bytes: int
    bytes_in: int
    bytes_out: int

    @classmethod
    def from_layer(cls, layer: Layer) -> LayerInfo:
        """From a `profiler.slicing` Layer (index, op_types, macs, param_bytes, inputs, outputs)."""
        return cls(
            index=int(layer.index),
            op_types=tuple(layer.op_types),
            macs=int(layer.macs),
            param_bytes=int(layer.param_bytes),
            bytes_in=sum(int(t.nbytes) for t in layer.inputs),
            bytes_out=sum(int(t.nbytes) for t in layer.outputs),
        )


@dataclass
class LayerTimings:
    """Raw host timestamps, shape (frames, layers, 4): transfer start/end, layer start/end.

    A layer's transfer is the hand-over of its inputs (copying producer outputs, or
    the frame's input for the first layer) into its sub-model; its time is the
    sub-model's invoke. Warm-up frames are not kept.
    """

    ts_ns: np.ndarray  # int64, (frames, layers, 4)
    #: (frames, layers): how far a simulated processor's invoke overran its modelled end
    #: because the host woke its thread late (`profiler.executors.base.overrun_ns`); not
    #: the board's time, so `time_ns` leaves it out. Zero on real processors.
    overrun_ns: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.ts_ns = np.asarray(self.ts_ns, dtype=np.int64)
        if self.ts_ns.ndim != 3 or self.ts_ns.shape[2] != 4:
            raise ValueError(f"timestamps must be (frames, layers, 4), got {self.ts_ns.shape}")
        if self.overrun_ns is not None:
            self.overrun_ns = np.asarray(self.overrun_ns, dtype=np.int64)
            if self.overrun_ns.shape != self.ts_ns.shape[:2]:
                raise ValueError(f"overruns must be (frames, layers), got {self.overrun_ns.shape}")

    @property
    def frames(self) -> int:
        return int(self.ts_ns.shape[0])

    @property
    def layers(self) -> int:
        return int(self.ts_ns.shape[1])

    @property
    def transfer_start_ns(self) -> np.ndarray:
        return self.ts_ns[:, :, TRANSFER_START]

    @property
    def transfer_end_ns(self) -> np.ndarray:
        return self.ts_ns[:, :, TRANSFER_END]

    @property
    def start_ns(self) -> np.ndarray:
        return self.ts_ns[:, :, LAYER_START]

    @property
    def end_ns(self) -> np.ndarray:
        return self.ts_ns[:, :, LAYER_END]

    @property
    def time_ns(self) -> np.ndarray:
        """Invoke time per frame and layer, (frames, layers)."""
        t = self.end_ns - self.start_ns
        return t if self.overrun_ns is None else t - self.overrun_ns

    @property
    def transfer_ns(self) -> np.ndarray:
        """Hand-over time per frame and layer, (frames, layers)."""
        return self.transfer_end_ns - self.transfer_start_ns


@dataclass(frozen=True)
class RunInfo:
    """Metadata of one run; becomes the JSON sidecar (with totals and column units)."""

    board: str
    simulated: bool
    model_path: str
    model_sha256: str
    processor: str
    processor_name: str
    cores: tuple[int, ...]
    threads: int
    frames: int
    warmup: int
    granularity: str = "layer"
    cuts: tuple[int, ...] | None = None
    freq_level: int | None = None
    freq_khz: int | None = None
    power_source: str = "none"
    method: Method = Method.SLICED  # how layer times were measured (profiler.measure.fused)
    runtime: str = ""
    runtime_version: str = ""
    python: str = ""
    numpy: str = ""
    host: str = ""
    kernel: str = ""
    coupprof_version: str = __version__
    timestamp: str = ""
    command: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cores"] = list(self.cores)
        d["cuts"] = list(self.cuts) if self.cuts is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunInfo:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known["cores"] = tuple(known.get("cores") or ())
        if known.get("cuts") is not None:
            known["cuts"] = tuple(known["cuts"])
        return cls(**known)


def environment(argv: list[str] | None = None) -> dict[str, str]:
    """Versions and host facts for RunInfo: runtime, python, numpy, host, kernel, time, command."""
    from profiler.runtime import runtime  # late: importing LiteRT is slow

    try:
        rt = runtime()
        rt_name, rt_version = rt.name, rt.version
    except Exception:  # the sidecar must still be written without a runtime
        rt_name, rt_version = "unavailable", ""
    uname = platform.uname()
    args = sys.argv if argv is None else argv
    return {
        "runtime": rt_name,
        "runtime_version": rt_version,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "host": socket.gethostname(),
        "kernel": f"{uname.system} {uname.release} {uname.machine}",
        "coupprof_version": _version(),
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["coupprof", *args[1:]] if args else []),
    }


def _version() -> str:
    try:
        return importlib.metadata.version("coupprof")
    except importlib.metadata.PackageNotFoundError:
        return __version__


@dataclass
class LayerRun:
    """One measured run: metadata, the layers, their raw timestamps and optional extras.

    `layer_extras` holds per-layer columns from other sources (e.g. a power source:
    power_w, energy_mj, dynamic_energy_mj, fps_per_w, samples) and `total_extras`
    their per-frame totals (e.g. lost_frames). Without a power source both stay
    empty and those columns are absent from every table, never zero.
    """

    info: RunInfo
    layers: list[LayerInfo]
    timings: LayerTimings
    layer_extras: dict[str, np.ndarray] = field(default_factory=dict)
    total_extras: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.timings.layers != len(self.layers):
            raise ValueError(f"{len(self.layers)} layers but timestamps for {self.timings.layers}")
        for name, values in self.layer_extras.items():
            if len(values) != len(self.layers):
                raise ValueError(f"extra column {name} has {len(values)} values, "
                                 f"expected {len(self.layers)}")
