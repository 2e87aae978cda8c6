"""Executors: how a processor of a board runs sub-models.

A CPU processor is a set of cores. Its executor pins the calling thread to those
cores *before* creating interpreters, because LiteRT (XNNPACK) creates its worker
threads when the interpreter is built and they inherit the creator's affinity.
The original affinity is restored when the executor closes. Threads default to
the processor's core count.

GPU and NPU executors (LiteRT accelerators / delegates) plug in beside
`CpuExecutor` through `make_executor`.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any

from profiler.boards.host import format_cpu_list
from profiler.boards.model import ProcessorSpec
from profiler.errors import BadInputError, BoardError, HardwareError
from profiler.runtime import make_interpreter


class CpuExecutor:
    """Runs sub-models on a CPU core set. Use as a context manager:

        with CpuExecutor(proc, threads=2) as ex:
            interp = ex.interpreter(model_bytes, name="layer 3")
    """

    def __init__(self, proc: ProcessorSpec, threads: int | None = None) -> None:
        if not proc.cores:
            raise BoardError(f"processor {proc.letter} lists no CPU cores",
                             "fix the board profile's `cores`")
        if threads is not None and threads < 1:
            raise BadInputError(f"--threads {threads} must be at least 1",
                                f"use --threads 1..{len(proc.cores)}")
        self.proc = proc
        self.cores: tuple[int, ...] = tuple(proc.cores)
        self.threads: int = threads if threads is not None else len(self.cores)
        self._saved: set[int] | None = None

    def __enter__(self) -> CpuExecutor:
        self.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def open(self) -> None:
        """Pin this thread to the processor's cores (remembering the old set)."""
        if self._saved is not None:
            return
        saved = os.sched_getaffinity(0)
        try:
            os.sched_setaffinity(0, self.cores)
        except OSError as err:
            raise HardwareError(
                f"cannot pin to cores {format_cpu_list(self.cores)} of processor "
                f"{self.proc.letter}: {err.strerror} (this process may use cores "
                f"{format_cpu_list(sorted(saved))})",
                "check the board profile's cores, or run outside a restricted cpuset",
            ) from None
        self._saved = saved

    def close(self) -> None:
        """Restore the affinity the thread had before `open`."""
        if self._saved is not None:
            os.sched_setaffinity(0, self._saved)
            self._saved = None

    @property
    def is_open(self) -> bool:
        return self._saved is not None

    def interpreter(self, model_bytes: bytes, name: str = "model") -> Any:
        """A LiteRT interpreter whose worker threads run on this processor's cores."""
        if not self.is_open:
            # Creating it unpinned would leave its worker threads on any core.
            raise RuntimeError("CpuExecutor.interpreter() called before open()")
        return make_interpreter(model_bytes, num_threads=self.threads, name=name)

    def describe(self) -> dict[str, Any]:
        return {"processor": self.proc.letter, "kind": self.proc.kind,
                "cores": list(self.cores), "threads": self.threads}


def make_executor(proc: ProcessorSpec, threads: int | None = None) -> CpuExecutor:
    """The executor for a processor; only CPU core sets are served so far."""
    if proc.kind == "cpu":
        return CpuExecutor(proc, threads)
    raise BoardError(
        f"processor {proc.letter} ({proc.kind}) cannot be run yet: only CPU processors "
        "have an executor",
        "pick a CPU processor (L or B) with --processor",
    )
