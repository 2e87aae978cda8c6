"""A thread that owns one processor: pinned to its cores, it opens the executor, loads
the sub-models and runs whatever it is asked to, so every runtime object is created and
used on the thread (and cores) it belongs to.

    with ProcessorWorker(lambda: make_executor(board, "G")) as gpu:
        subs = gpu.call(lambda ex: [ex.load(l.model_bytes, f"layer {l.index}") for l in layers])
        fut = gpu.submit(lambda ex: ...)     # concurrent.futures.Future
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar

from profiler.executors.base import Executor

T = TypeVar("T")
_STOP = object()


class ProcessorWorker:
    def __init__(self, make: Callable[[], Executor], name: str = "processor") -> None:
        self._make = make
        self.name = name
        self.executor: Executor | None = None
        self._jobs: queue.Queue[Any] = queue.Queue()
        self._ready: Future[Executor] = Future()
        self._thread = threading.Thread(target=self._main, name=f"coupprof-{name}", daemon=True)

    def __enter__(self) -> ProcessorWorker:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> Executor:
        """Start the thread; returns once the executor is open (or raises its error)."""
        self._thread.start()
        self.executor = self._ready.result()
        return self.executor

    def _main(self) -> None:
        try:
            ex = self._make()
            ex.open()
        except BaseException as err:  # reported to start()
            self._ready.set_exception(err)
            return
        self._ready.set_result(ex)
        try:
            while True:
                job = self._jobs.get()
                if job is _STOP:
                    return
                fn, fut = job
                if not fut.set_running_or_notify_cancel():
                    continue
                try:
                    fut.set_result(fn(ex))
                except BaseException as err:
                    fut.set_exception(err)
        finally:
            ex.close()

    def submit(self, fn: Callable[[Executor], T]) -> Future[T]:
        fut: Future[T] = Future()
        self._jobs.put((fn, fut))
        return fut

    def call(self, fn: Callable[[Executor], T]) -> T:
        return self.submit(fn).result()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._jobs.put(_STOP)
            self._thread.join()
