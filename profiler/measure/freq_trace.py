"""What an accelerator's clock did while it was measured: sampled, read only.

A per-layer table holds at one clock, and where nobody sets an accelerator's level its
clock moves on its own. So `layers` samples the processor's clock while its table is
measured, `run` while the mapping runs; `run` prices a stage at the clock it measured
where the table's rows were fitted against the clock (`profiler.measure.clock_fit`), and
otherwise says when it ran at another clock than its table (`clock_mismatch`). Back
ends, in `freq_reader_for`'s order (accelerators only: on a CPU cluster a sampling thread
would cost the layers it measures): ``nvml`` (SM clock of NVIDIA GPU 0), ``governor``
(the profile's governor's read-back), none.

Why, with the measurements: docs/fused.md ("The accelerator's clock").
"""

from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from profiler.errors import ProfilerError

if TYPE_CHECKING:
    from governors.base import Governor
    from profiler.boards.model import Board, ProcessorSpec

#: Seconds between samples: a clock that settles over tenths of a second, read at little
#: cost to the thread that measures (one ctypes or sysfs read every 50 ms).
INTERVAL_S = 0.05
#: Medians further apart than this share of the table's are a different clock state.
MISMATCH_REL = 0.15


class FreqReader(ABC):
    """Reads one processor's clock now (kHz), read only. Open before reading."""

    source: str = ""
    #: the clock is its driver's to move with the load (nobody here sets it): the fused
    #: rounds hold the processor busy before each visit (`FusedSettings.hold_ms`)
    driver_clock: bool = False

    def open(self) -> None:  # noqa: B027 (most readers need nothing opened)
        pass

    def close(self) -> None:  # noqa: B027
        pass

    @abstractmethod
    def read_khz(self) -> int | None:
        """The clock now, or None when it cannot be read this time."""

    def __enter__(self) -> FreqReader:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NvmlFreqReader(FreqReader):
    """The SM clock of an NVIDIA GPU, through NVML (errors translated by the nvml source)."""

    driver_clock = True

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self.source = f"nvml:{index} SM clock"
        self._nvml: Any = None
        self._handle: Any = None

    def open(self) -> None:
        from profiler.power.sources.nvml import init_nvml, translate_nvml_error

        if self._nvml is not None:  # already open (`freq_reader_for` opens to probe)
            return
        pynvml = init_nvml()
        self._nvml = pynvml
        try:
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
        except pynvml.NVMLError as err:
            self.close()
            raise translate_nvml_error(pynvml, err, f"opening GPU {self.index}",
                                       setup=True) from err

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(self._nvml.NVMLError):  # nothing left to release
                self._nvml.nvmlShutdown()
        self._nvml = self._handle = None

    def read_khz(self) -> int | None:
        from profiler.power.sources.nvml import translate_nvml_error

        try:
            return int(self._nvml.nvmlDeviceGetClockInfo(self._handle,
                                                         self._nvml.NVML_CLOCK_SM)) * 1000
        except self._nvml.NVMLError as err:
            raise translate_nvml_error(self._nvml, err, f"reading GPU {self.index}'s clock",
                                       setup=False) from err


class GovernorFreqReader(FreqReader):
    """A governor's read-back of the effective frequency (never writes)."""

    def __init__(self, governor: Governor) -> None:
        self.governor = governor
        self.source = f"{governor.kind} governor of {governor.letter}"
        self.driver_clock = not governor.settable  # e.g. the simulated driver's

    def read_khz(self) -> int | None:
        return self.governor.read_khz()


def _open_nvml_reader(index: int) -> NvmlFreqReader | None:
    """An open reader of GPU ``index``'s clock, or None without the bindings, a driver,
    that GPU or a readable clock."""
    reader = NvmlFreqReader(index)
    try:
        reader.open()
        if reader.read_khz() is not None:
            return reader
    except ProfilerError:
        pass
    reader.close()
    return None


def nvml_present(index: int = 0) -> bool:
    """Whether NVML's bindings and a driver with GPU ``index`` are here."""
    reader = _open_nvml_reader(index)
    if reader is None:
        return False
    reader.close()
    return True


def freq_reader_for(board: Board, proc: ProcessorSpec,
                    sysfs_root: Path | None = None) -> FreqReader | None:
    """The reader of ``proc``'s clock, by the order in the module docstring; None for a
    CPU cluster or where nothing can be read. An NVML reader comes back open (opening it
    is how NVML's presence is known; opening it again costs nothing): close it, or enter
    it on a stack."""
    if proc.kind.is_cpu:
        return None
    if proc.governor is None or proc.governor.kind == "none":
        if proc.accelerator == "gpu" and not board.simulated:
            return _open_nvml_reader(0)
        return None
    from governors.factory import make_governor

    return GovernorFreqReader(make_governor(board, proc, sysfs_root))


def open_freq_reader(stack: contextlib.ExitStack, board: Board, proc: ProcessorSpec,
                     sysfs_root: Path | None, note: Callable[[str], None]) -> FreqReader | None:
    """`freq_reader_for`'s reader of ``proc``, opened on ``stack``; None where there is
    none, or where it cannot open (``note`` says why: the measurement goes on)."""
    reader = freq_reader_for(board, proc, sysfs_root)
    if reader is None:
        return None
    try:
        stack.enter_context(reader)
    except ProfilerError as err:
        note(f"{proc.letter}'s clock is not sampled: {err}")
        return None
    return reader


@dataclass(frozen=True)
class FreqTrace:
    """A clock over a measurement: its median and 10th-90th percentiles (kHz), and the
    harmonic mean of its samples, the clock at which work that scales with 1 / f takes
    its mean time over the measurement (None: not recorded)."""

    source: str
    samples: int
    median_khz: int
    p10_khz: int
    p90_khz: int
    hmean_khz: int | None = None

    @classmethod
    def from_samples(cls, source: str, khz: Sequence[int]) -> FreqTrace | None:
        if not khz:
            return None
        a = np.asarray(khz, dtype=np.float64)
        p10, med, p90 = np.percentile(a, [10, 50, 90])
        hmean = len(a) / float(np.sum(1.0 / a)) if (a > 0).all() else None
        return cls(source, len(khz), int(round(med)), int(round(p10)), int(round(p90)),
                   None if hmean is None else int(round(hmean)))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FreqTrace:
        hmean = d.get("hmean_khz")
        return cls(str(d["source"]), int(d["samples"]), int(d["median_khz"]),
                   int(d["p10_khz"]), int(d["p90_khz"]), None if hmean is None else int(hmean))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        return (f"{self.median_khz / 1000:.0f} MHz median ({self.p10_khz / 1000:.0f}-"
                f"{self.p90_khz / 1000:.0f} MHz, {self.samples} samples of the {self.source})")


class FreqSampler:
    """Samples a reader on a thread of its own between ``start`` and ``stop`` (or as a
    context manager); `trace` summarises what was read. A read that fails ends the
    sampling and is kept in ``error``: the measurement itself goes on."""

    def __init__(self, reader: FreqReader, interval_s: float = INTERVAL_S,
                 wait: Callable[[threading.Event, float], bool] | None = None) -> None:
        self.reader = reader
        self.interval_s = interval_s
        self._wait = wait or (lambda ev, s: ev.wait(s))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples_khz: list[int] = []
        self.error: str | None = None

    def _loop(self) -> None:
        while True:
            try:
                khz = self.reader.read_khz()
            except ProfilerError as err:
                self.error = str(err)
                return
            if khz is not None:
                self.samples_khz.append(khz)
            if self._wait(self._stop, self.interval_s):
                return

    def start(self) -> FreqSampler:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="coupprof-freq", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> FreqTrace | None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return self.trace()

    def trace(self) -> FreqTrace | None:
        return FreqTrace.from_samples(self.reader.source, list(self.samples_khz))

    def __enter__(self) -> FreqSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def clock_while(sampler: FreqSampler | None
                ) -> contextlib.AbstractContextManager[FreqSampler | None]:
    """Sample with ``sampler`` for the ``with`` block (nothing when None); samples from
    several blocks add up."""
    return sampler if sampler is not None else contextlib.nullcontext()


def clock_mismatch(letter: str, table: FreqTrace | None, run: FreqTrace | None,
                   rel: float = MISMATCH_REL) -> str | None:
    """A note when ``letter`` ran at another clock than its table was measured at (the
    medians differ by more than ``rel`` of the table's), else None."""
    if table is None or run is None or table.median_khz <= 0:
        return None
    if abs(run.median_khz - table.median_khz) <= rel * table.median_khz:
        return None
    return (f"{letter} ran at {run.text()}; its table was measured at {table.text()}. "
            f"{letter}'s times move with its clock, so its prediction may not hold for "
            "this run (measure its table at the run's level with --freq where a governor "
            "sets it; where none can, as on an NVIDIA GPU, the driver picks the clock)")
