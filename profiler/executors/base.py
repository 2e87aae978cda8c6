"""What every executor offers: a processor that loads sub-models and runs them.

An `Executor` stands for one processor of a board. It is opened *on the thread that will
drive it*: `open()` pins that thread to the processor's host cores before any sub-model is
created, because LiteRT's worker threads inherit the creator's affinity. `load()` then
gives a `SubModel` per layer: ``set_input``, ``run`` (returns once outputs are readable on
the host, so "a layer's time" is always `run()`), ``output``. `modelled` turns an executor
into a simulated processor; `SubModelInterpreter` lets the layer runner drive a `SubModel`.

The three steps and the modelled calls in full: docs/measure.md.
"""

from __future__ import annotations

import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from profiler.boards.host import format_cpu_list
from profiler.boards.model import Board, ProcessorSpec
from profiler.clock import Clock, perf_clock
from profiler.errors import BadInputError, BoardError, HardwareError

if TYPE_CHECKING:
    from ai_edge_litert.interpreter import Interpreter

#: A sub-model's bytes (and name) -> the model of its calls on a simulated processor.
Modelled = Callable[[bytes, str], "ModelledCall"]

# Below this much remaining time a paced run spins instead of sleeping. With the
# thread's timer slack cut to 1 us a sleep on a quiet host overshoots by tens of us; on
# a busy one (a 2-core VM running other work) by 35 us typically, 200 us in one wait of
# ten. So the spin starts earlier by how late this thread's recent sleeps woke (a moving
# average of 1.5 x the lateness, between _SPIN_NS and _SPIN_MAX_NS), which spends a little
# CPU to keep waits on time where wake-ups are late, and almost none where they are not.
_SPIN_NS = 30_000
_SPIN_MAX_NS = 400_000
_PR_SET_TIMERSLACK = 29
_thread_state = threading.local()


@dataclass(frozen=True)
class TensorIO:
    """One input or output of a sub-model, in the sub-model's order."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


class SubModel(ABC):
    """One layer's sub-model loaded on a processor."""

    name: str
    inputs: list[TensorIO]
    outputs: list[TensorIO]
    #: True when some of its ops run on the CPU instead of the accelerator; None = not
    #: applicable (a CPU processor) or unknown.
    fallback: bool | None = None
    #: Why (the runtime's words), when fallback is True.
    fallback_detail: str = ""
    #: Simulated processors: runs so far, and those whose host time exceeded the
    #: modelled time (the host was slower than the processor it stands for).
    runs: int = 0
    late_runs: int = 0

    @abstractmethod
    def set_input(self, i: int, value: np.ndarray) -> None:
        """Copy `value` into input buffer i (host -> processor)."""

    @abstractmethod
    def run(self) -> None:
        """Execute; return once every output is readable on the host."""

    @abstractmethod
    def output(self, i: int) -> np.ndarray:
        """Output i as a host array. It may alias the sub-model's buffer: copy it
        before the next run() if it must outlive it, and never write to it."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release runtime objects (buffers, compiled models)."""


class ModelledCall(ABC):
    """A simulated processor's model of one sub-model's calls (`profiler.sim.executor`)."""

    @abstractmethod
    def begin(self, t0_ns: int) -> float:
        """A call starts at `t0_ns` (host clock): its modelled duration in ns at the
        frequencies in effect now. The processor draws the call's power from now on."""

    @abstractmethod
    def end(self, t1_ns: int) -> None:
        """The call ended at `t1_ns`: the processor stops drawing its power."""


class PacedSubModel(SubModel):
    """A sub-model whose every run lasts its modelled time (the simulated board).

    The run computes for real (outputs stay real), then waits until the modelled
    duration has passed since it began. If the host's own time was longer, the run
    lasts that long and counts in `late_runs`: the layer's row says the host was slower
    than the modelled processor. basis "cpu" measures the host's time as the driving
    thread's CPU time (`time.thread_time_ns`), so a host core shared with other stages
    (pipeline mode on a small machine) does not count as the host being slow; it is
    exact when the runtime computes on the calling thread (one interpreter thread).
    basis "wall" uses wall time. The wait sleeps (freeing the core, as an idle
    processor would) and spins only for the last stretch (`wait_until`)."""

    def __init__(self, inner: SubModel, modelled: ModelledCall, clock: Clock = perf_clock,
                 basis: str = "wall") -> None:
        if basis not in ("wall", "cpu"):
            raise ValueError(f"pacing basis must be 'wall' or 'cpu', not {basis!r}")
        self.inner = inner
        self.modelled = modelled
        self.clock = clock
        self.basis = basis
        self.name = inner.name
        self.inputs = inner.inputs
        self.outputs = inner.outputs
        self.fallback = inner.fallback
        self.fallback_detail = inner.fallback_detail
        self.runs = 0
        self.late_runs = 0
        self.late_ns_max = 0

    def set_input(self, i: int, value: np.ndarray) -> None:
        self.inner.set_input(i, value)

    def run(self) -> None:
        t0 = self.clock()
        duration = int(self.modelled.begin(t0))
        c0 = time.thread_time_ns()
        self.inner.run()
        elapsed = time.thread_time_ns() - c0 if self.basis == "cpu" else self.clock() - t0
        self.runs += 1
        if elapsed > duration:
            self.late_runs += 1
            self.late_ns_max = max(self.late_ns_max, elapsed - duration)
        deadline = t0 + max(elapsed, duration)
        end = wait_until(deadline, self.clock)
        if end > deadline:  # the host woke this thread late: its time, not the board's
            _thread_state.overrun_ns = overrun_ns() + (end - deadline)
        self.modelled.end(end)

    def output(self, i: int) -> np.ndarray:
        return self.inner.output(i)

    def close(self) -> None:
        self.inner.close()


def return_freed_memory() -> None:
    """Hand the C heap's freed pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). A runtime's freed buffers otherwise stay in the process's resident set,
    as free chunks of its heap, until it reuses them."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def overrun_ns() -> int:
    """How far this thread's paced runs have overrun their modelled ends so far, in
    total: time a busy host kept the thread from running when its wait was over."""
    return int(getattr(_thread_state, "overrun_ns", 0))


def excluding_overruns(clock: Clock) -> Clock:
    """`clock` less this thread's overruns: a simulated processor's timestamps, whose
    differences are the modelled times however late a loaded host wakes the thread
    (tens of us at p90, ms at p99 with one of two cores busy: docs/measure.md). Only
    for differences taken on one thread, as the layer runner and fused rounds take them."""

    def modelled_clock() -> int:
        return clock() - overrun_ns()

    return modelled_clock


def app_call(sub: SubModel, inputs: Sequence[np.ndarray], clock: Clock = perf_clock,
             read_outputs: bool = True) -> Callable[[], int]:
    """One call of ``sub`` as an application makes it: every input set (untimed: the
    hand-over into the call), then, timed, the run and (``read_outputs``) every output
    copied into host memory (a GPU's download). The returned callable makes one call and
    gives its ns on ``clock``, less any late wake-up of a paced run (the host's, not
    the processor's)."""
    set_input, run, output = sub.set_input, sub.run, sub.output
    n_out = len(sub.outputs) if read_outputs else 0

    def call() -> int:
        for i, x in enumerate(inputs):
            set_input(i, x)
        o0 = overrun_ns()
        t0 = clock()
        run()
        for i in range(n_out):
            np.array(output(i), copy=True)
        return clock() - t0 - (overrun_ns() - o0)

    return call


def _tight_timer_slack() -> None:
    """Cut this thread's timer slack (Linux default 50 us) so sleeps end on time."""
    if getattr(_thread_state, "slack", False):
        return
    _thread_state.slack = True
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_TIMERSLACK, 1000, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def wait_until(deadline_ns: int, clock: Clock = perf_clock) -> int:
    """Sleep, then spin, until `clock()` reaches `deadline_ns`; returns the time reached."""
    _tight_timer_slack()
    lead = getattr(_thread_state, "lead_ns", _SPIN_NS)
    while True:
        now = clock()
        left = deadline_ns - now
        if left <= 0:
            return now
        if left > lead:
            want = now + left - lead
            time.sleep((left - lead) / 1e9)
            late = clock() - want
            lead = min(_SPIN_MAX_NS, max(_SPIN_NS, int(0.9 * lead + 0.1 * 1.5 * late)))
            _thread_state.lead_ns = lead


def pin_thread(cores: Sequence[int], what: str) -> None:
    """Pin the calling thread to `cores`; a one-line HardwareError if the OS refuses."""
    try:
        os.sched_setaffinity(0, cores)
    except OSError as err:
        allowed = format_cpu_list(sorted(os.sched_getaffinity(0)))
        raise HardwareError(
            f"cannot pin {what} to cores {format_cpu_list(list(cores))}: {err.strerror} "
            f"(this thread may use cores {allowed})",
            "check the board profile's cores, or run outside a restricted cpuset",
        ) from None


class Executor(ABC):
    """One processor of a board: pins its driving thread and loads sub-models.

        with make_executor(board, "G") as ex:        # pins this thread to G's host cores
            sub = ex.load(layer.model_bytes, name="layer 3")
            sub.set_input(0, x); sub.run(); y = sub.output(0)
    """

    #: "cpu", "accelerator", "delegate"
    kind: str = ""
    #: Whether a sub-model's run keeps Python's GIL while the processor works (then a
    #: Pipeline stage of it runs in its own process: `profiler.mapping.stage_process`).
    holds_gil: ClassVar[bool] = False

    def __init__(self, proc: ProcessorSpec, *, cores: Sequence[int] | None = None,
                 threads: int | None = None, clock: Clock = perf_clock,
                 modelled: Modelled | None = None, pacing_basis: str = "wall") -> None:
        host_cores = tuple(cores) if cores is not None else tuple(proc.cores)
        if not host_cores:
            raise BoardError(f"processor {proc.letter} lists no CPU cores to drive it from",
                             "fix the board profile's `cores` (or the host cluster's)")
        if threads is not None and threads < 1:
            raise BadInputError(f"--threads {threads} must be at least 1",
                                f"use --threads 1..{len(host_cores)}")
        self.proc = proc
        self.cores: tuple[int, ...] = host_cores
        self.threads: int = threads if threads is not None else self.default_threads()
        self.modelled = modelled
        self.pacing_basis = pacing_basis
        self.clock = clock
        self._saved: set[int] | None = None
        self._thread: int | None = None
        self._subs: list[SubModel] = []

    # -- life cycle ------------------------------------------------------------------

    def default_threads(self) -> int:
        return len(self.cores)

    def __enter__(self) -> Executor:
        self.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def open(self) -> None:
        """Pin the calling thread to the host cores (remembering its old set), then
        prepare the runtime (e.g. an accelerator's environment)."""
        if self._saved is not None:
            return
        saved = os.sched_getaffinity(0)
        pin_thread(self.cores, f"processor {self.proc.letter}")
        self._saved = saved
        self._thread = threading.get_ident()
        try:
            self._open_runtime()
        except BaseException:
            self.close()
            raise

    def pin(self) -> None:
        """Re-pin the calling thread to this processor's cores (no state kept)."""
        pin_thread(self.cores, f"processor {self.proc.letter}")

    def close(self) -> None:
        """Release every sub-model and the runtime, then restore the thread's affinity."""
        subs, self._subs = self._subs, []
        try:
            self._close_runtime(subs)
        finally:
            if self._saved is not None:
                if self._thread == threading.get_ident():
                    os.sched_setaffinity(0, self._saved)
                self._saved = None

    @property
    def is_open(self) -> bool:
        return self._saved is not None

    def _open_runtime(self) -> None:  # noqa: B027 - optional hook
        """Back ends prepare shared runtime state here (called pinned)."""

    def _close_runtime(self, subs: list[SubModel]) -> None:
        for sub in subs:
            sub.close()

    # -- loading -------------------------------------------------------------------

    def load(self, model_bytes: bytes, name: str = "model") -> SubModel:
        """A sub-model on this processor (paced to its modelled time on a simulated one)."""
        if not self.is_open:
            # Creating it unpinned would leave its worker threads on any core.
            raise RuntimeError(f"{type(self).__name__}.load() called before open()")
        sub = self._load(model_bytes, name)
        if self.modelled is not None:
            sub = PacedSubModel(sub, self.modelled(model_bytes, name), self.clock,
                                self.pacing_basis)
        self._subs.append(sub)
        return sub

    def unload(self, sub: SubModel) -> None:
        """Close ``sub`` (one this executor loaded) and forget it, so that its memory is
        released now rather than when the executor closes."""
        self._subs = [s for s in self._subs if s is not sub]
        sub.close()

    @abstractmethod
    def _load(self, model_bytes: bytes, name: str) -> SubModel: ...

    def interpreter(self, model_bytes: bytes, name: str = "model"
                    ) -> Interpreter | SubModelInterpreter:
        """An object with LiteRT's interpreter API, for `LayerRunner`."""
        return SubModelInterpreter(self.load(model_bytes, name))

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"processor": self.proc.letter, "kind": self.proc.kind,
                             "executor": self.kind, "cores": list(self.cores),
                             "threads": self.threads}
        if self.modelled is not None:
            d["modelled"] = f"per-layer model, paced on {self.pacing_basis} time"
        return d


#: Builds the executor of one processor of a board (default:
#: `profiler.executors.factory.make_executor`); tests pass their own.
MakeExecutor = Callable[[Board, str], Executor]


class SubModelInterpreter:
    """The subset of LiteRT's `Interpreter` API that `LayerRunner` uses, over a SubModel.

    Tensor "indices" are positions: inputs 0..n-1, outputs n..n+m-1. Inputs arrive by
    `set_tensor` (the runner hands over through it, so an upload counts as transfer);
    arrays written through `tensor(i)()` views are staged and uploaded by `invoke`.
    """

    def __init__(self, sub: SubModel) -> None:
        self.sub = sub
        self._n_in = len(sub.inputs)
        self._staged: dict[int, np.ndarray] = {}

    def _details(self, ios: list[TensorIO], base: int) -> list[dict[str, Any]]:
        return [{"name": t.name, "index": base + k, "shape": np.array(t.shape, dtype=np.int32),
                 "dtype": t.dtype.type, "quantization": (0.0, 0)} for k, t in enumerate(ios)]

    def get_input_details(self) -> list[dict[str, Any]]:
        return self._details(self.sub.inputs, 0)

    def get_output_details(self) -> list[dict[str, Any]]:
        return self._details(self.sub.outputs, self._n_in)

    def allocate_tensors(self) -> None:
        pass

    def set_tensor(self, index: int, value: np.ndarray) -> None:
        if not 0 <= index < self._n_in:
            raise ValueError(f"{self.sub.name}: tensor {index} is not an input")
        self._staged.pop(index, None)
        self.sub.set_input(index, value)

    def tensor(self, index: int) -> Callable[[], np.ndarray]:
        if index < self._n_in:
            spec = self.sub.inputs[index]

            def staged() -> np.ndarray:
                buf = self._staged.get(index)
                if buf is None:
                    buf = self._staged[index] = np.zeros(spec.shape, spec.dtype)
                return buf

            return staged
        return lambda: self.sub.output(index - self._n_in)

    def invoke(self) -> None:
        for index, value in self._staged.items():
            self.sub.set_input(index, value)
        self.sub.run()

    def get_tensor(self, index: int) -> np.ndarray:
        if index < self._n_in:
            return self.tensor(index)().copy()
        return np.array(self.sub.output(index - self._n_in), copy=True)


def late_runs(interpreters: Sequence[Any]) -> list[tuple[int, int]]:
    """Per layer of a `LayerRunner`: (runs, runs the host was slower than the modelled
    processor) of its sub-model; (0, 0) where it is not paced (a real processor)."""
    subs = [getattr(i, "sub", None) for i in interpreters]
    return [(s.runs, s.late_runs) if isinstance(s, SubModel) else (0, 0) for s in subs]


def fallback_flags(interpreters: Sequence[Any]) -> list[bool | None]:
    """Per layer of a `LayerRunner` (its `.interpreters`): True where an accelerator ran
    some ops on the CPU, False where it ran them all, None for plain CPU interpreters.
    The layer table's ``fallback`` column."""
    return [getattr(getattr(i, "sub", None), "fallback", None) for i in interpreters]
