"""A pipeline stage's calls run in a process of their own.

LiteRT's accelerator call keeps Python's GIL while the GPU works, so a G stage on a thread
would stop every other stage's Python for the length of its call. A stage whose executor
says so (`Executor.holds_gil`) runs in a spawned child process; the stage thread in the
parent only proxies frames to it, tensors cross through shared memory, and both sides
time on the same monotonic clock.

How, and what stays on a thread: docs/mapping.md ("Switch and Pipeline runs").
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from time import thread_time_ns
from typing import TYPE_CHECKING, Any

import numpy as np

from profiler.boards.model import Board
from profiler.clock import Clock, perf_clock
from profiler.errors import ProfilerError
from profiler.executors.base import SubModel

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess

# Slot of a tensor: (shared memory block name, shape, dtype string)
Layout = dict[int, tuple[str, tuple[int, ...], str]]


@dataclass(frozen=True)
class StageSpec:
    """What the child needs to build and run one stage (all picklable)."""

    board: Board
    letter: str
    threads: int | None
    models: list[tuple[bytes, str]]  # per call: (sub-model bytes, name for messages)
    # per call, per input slot: ("msg", tensor) or ("local", call pos, output slot)
    feeds: list[list[tuple[Any, ...]]]
    forwards: list[int]  # tensors sent on that this stage produces, in order
    local_out: dict[int, tuple[int, int]]  # tensor -> (call pos, output slot)


@dataclass
class StageReady:
    """The child's answer once its sub-models are loaded."""

    fallback: list[bool | None]
    executor: dict[str, Any]


@dataclass
class FrameDone:
    frame: int
    rows: list[tuple[int, int, int, int]]  # per call: transfer start/end, call start/end
    busy: tuple[int, int, int]  # start, read-out start, read-out end
    cpu_ns: int
    out_layout: Layout | None = None  # on the first frame (or when a shape changes)
    got_ns: int = -1  # when the child had the frame's message


@dataclass
class _Failed:
    error: BaseException | None
    text: str


class StageProcessError(ProfilerError):
    """The stage's process failed (its traceback is in the message)."""


def _attach(layout: Layout, blocks: dict[str, SharedMemory]) -> dict[int, np.ndarray]:
    views = {}
    for idx, (name, shape, dtype) in layout.items():
        if name not in blocks:
            blocks[name] = SharedMemory(name=name)
        views[idx] = np.ndarray(shape, dtype=np.dtype(dtype), buffer=blocks[name].buf)
    return views


def _new_blocks(arrays: dict[int, np.ndarray], blocks: dict[str, SharedMemory]
                ) -> tuple[Layout, dict[int, np.ndarray]]:
    layout: Layout = {}
    views = {}
    for idx, a in arrays.items():
        shm = SharedMemory(create=True, size=max(a.nbytes, 1))
        blocks[shm.name] = shm
        layout[idx] = (shm.name, tuple(a.shape), a.dtype.str)
        views[idx] = np.ndarray(a.shape, dtype=a.dtype, buffer=shm.buf)
    return layout, views


def _place(arrays: dict[int, np.ndarray], views: dict[int, np.ndarray],
           blocks: dict[str, SharedMemory]) -> tuple[Layout | None, dict[int, np.ndarray]]:
    """Copy `arrays` into their shared blocks (`views`), first allocating new ones where
    the tensors or a shape changed (the first frame): (the new layout or None, views)."""
    layout = None
    if set(arrays) != set(views) or any(views[i].shape != a.shape or views[i].dtype != a.dtype
                                        for i, a in arrays.items()):
        layout, views = _new_blocks(arrays, blocks)
    for i, a in arrays.items():
        np.copyto(views[i], a)
    return layout, views


def _needed(spec: StageSpec) -> set[int]:
    """The tensors a stage takes from its message."""
    return {int(src[1]) for row in spec.feeds for src in row if src[0] == "msg"}


def _child(conn: Connection, spec: StageSpec) -> None:
    """The child process: open the executor, load the calls, serve frames until told."""
    from profiler.executors.factory import make_executor

    blocks: dict[str, SharedMemory] = {}
    ex = None
    try:
        ex = make_executor(spec.board, spec.letter, threads=spec.threads)
        ex.open()
        subs = [ex.load(b, name) for b, name in spec.models]
        conn.send(StageReady([s.fallback for s in subs], ex.describe()))
        _serve(conn, spec, subs, blocks, perf_clock)
    except BaseException as err:  # noqa: BLE001 - reported to the parent, whatever it is
        try:
            conn.send(_Failed(err, traceback.format_exc()))
        except Exception:  # noqa: BLE001 - the error itself would not pickle
            conn.send(_Failed(None, traceback.format_exc()))
    finally:
        if ex is not None:
            ex.close()
        for shm in blocks.values():
            shm.close()
        conn.close()


def _serve(conn: Connection, spec: StageSpec, subs: Sequence[SubModel],
           blocks: dict[str, SharedMemory], clock: Clock) -> None:
    """Serve frames until told to stop (a None message); `clock` is passed in so that
    the stage's timings can be checked on a scripted clock."""
    ins: dict[int, np.ndarray] = {}
    outs: dict[int, np.ndarray] = {}
    free_ns = clock()
    while True:
        msg = conn.recv()
        if msg is None:
            return
        frame, ready_ns, in_layout = msg
        cpu0 = thread_time_ns()
        got_ns = clock()
        if in_layout is not None:
            ins = _attach(in_layout, blocks)
        start = got_ns if ready_ns < 0 else max(ready_ns, free_ns)
        rows = []
        for k, sub in enumerate(subs):
            t0 = start if k == 0 else clock()
            for slot, src in enumerate(spec.feeds[k]):
                if src[0] == "local":
                    sub.set_input(slot, subs[src[1]].output(src[2]))
                else:
                    sub.set_input(slot, ins[src[1]])
            t1 = clock()
            sub.run()
            t2 = clock()
            rows.append((t0, t1, t1, t2))
        t_out0 = clock()
        produced = {}
        for idx in spec.forwards:
            k, slot = spec.local_out[idx]
            produced[idx] = subs[k].output(slot)
        out_layout, outs = _place(produced, outs, blocks)
        # an executor's output may be a view into its interpreter, which LiteRT
        # refuses to run again while one is held
        del produced
        t_out1 = clock()
        conn.send(FrameDone(frame, rows, (start, t_out0, t_out1),
                            thread_time_ns() - cpu0, out_layout, got_ns))
        # Free once the results are placed: a clock read after the send, on a busy
        # host, can come after the parent took the next frame, and that frame's stage
        # time would then start after its own hand-over began.
        free_ns = t_out1


class StageProcess:
    """The parent's handle on one stage running in a child process."""

    def __init__(self, spec: StageSpec) -> None:
        self.spec = spec
        self._needed = _needed(spec)
        self._proc: SpawnProcess | None = None
        self._conn: Connection | None = None
        self._blocks: dict[str, SharedMemory] = {}
        self._ins: dict[int, np.ndarray] = {}
        self._outs: dict[int, np.ndarray] = {}

    def start(self) -> StageReady:
        """Spawn the child; returns once its sub-models are loaded (or raises why not)."""
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_child, args=(child, self.spec), daemon=True,
                                 name=f"coupprof-stage-{self.spec.letter}")
        self._proc.start()
        child.close()
        self._conn = parent
        got = self._recv()
        assert isinstance(got, StageReady)
        return got

    def _recv(self) -> object:
        assert self._conn is not None
        try:
            got = self._conn.recv()
        except EOFError:
            code = self._proc.exitcode if self._proc is not None else None
            raise StageProcessError(
                f"the process running processor {self.spec.letter}'s stage ended "
                f"(exit code {code})") from None
        if isinstance(got, _Failed):
            if isinstance(got.error, ProfilerError):
                raise got.error
            raise StageProcessError(f"processor {self.spec.letter}'s stage failed in its "
                                    f"process:\n{got.text}")
        return got

    def run_frame(self, frame: int, tensors: dict[int, np.ndarray], ready_ns: int
                  ) -> tuple[dict[int, np.ndarray], FrameDone]:
        """Run one frame: `tensors` holds (at least) the stage's message inputs; returns
        the tensors it produces for later stages (copies) and the child's timings."""
        assert self._conn is not None
        layout, self._ins = _place({i: np.asarray(tensors[i]) for i in self._needed},
                                   self._ins, self._blocks)
        self._conn.send((frame, ready_ns, layout))
        done = self._recv()
        assert isinstance(done, FrameDone) and done.frame == frame
        if done.out_layout is not None:
            self._outs = _attach(done.out_layout, self._blocks)
        return {i: np.array(v, copy=True) for i, v in self._outs.items()}, done

    def stop(self) -> None:
        """Tell the child to finish, wait for it, and free the shared memory."""
        try:
            if self._conn is not None:
                with contextlib.suppress(BrokenPipeError, OSError):  # the child is gone
                    self._conn.send(None)
                self._conn.close()
            if self._proc is not None:
                self._proc.join(timeout=30)
                if self._proc.is_alive():
                    self._proc.kill()
                    self._proc.join(timeout=5)
        finally:
            self._conn = None
            for shm in self._blocks.values():
                shm.close()
                # the parent unlinks every block, the child's output blocks too (the child
                # only closes them), so none outlives the run
                with contextlib.suppress(FileNotFoundError):
                    shm.unlink()
            self._blocks.clear()


