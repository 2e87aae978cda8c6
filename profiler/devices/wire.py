"""Boundary tensors between ranks: non-blocking MPI sends and receives, and the simulated link.

A frame crossing a device cut goes as a header (frame id, send time, bytes) and one
message per tensor, each on its own tag, so MPI's order per (source, tag) keeps frames in
order. `TensorSender.send` posts `Isend`s and returns at once: the stage goes on with the
next frame while the last one is still on its way. `TensorReceiver` keeps ``ahead``
frames' `Irecv`s posted from a thread of its own, waits by polling (MPICH's blocking wait
spins a core, which a simulated board on one host core cannot spare), then holds each
frame until the link's model says it arrives: the real local transfer plus the link's
latency + bytes / bandwidth, the wire taking one frame at a time. Every time is read on
the project's clock (``perf_counter_ns``: one monotonic clock for all ranks on one
host).

`Credits` carry "frame F done" from the last rank back to the first, which feeds a frame
only while fewer than a window of frames are in flight.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from profiler.clock import Clock, perf_clock
from profiler.devices.spec import Link

HEADER_TAG = 1
CREDIT_TAG = 2
READY_TAG = 3
TENSOR_TAG0 = 16  # tensor k of a frame goes on tag TENSOR_TAG0 + k
POLL_S = 100e-6  # between tests of a pending receive


@dataclass(frozen=True)
class Arrival:
    """One frame received: its tensors and when they came."""

    frame: int
    tensors: dict[int, np.ndarray]
    sent_ns: int  # the sender posted its sends
    got_ns: int  # the real transfer was done here
    ready_ns: int  # ... and the link's model let it through
    nbytes: int

    @property
    def added_ns(self) -> int:
        """What the simulated link added to the real transfer."""
        return self.ready_ns - self.got_ns


def wait(req: Any, stop: threading.Event | None = None) -> bool:
    """Wait for an MPI request by polling (no spinning core); False if `stop` was set."""
    while not req.Test():
        if stop is not None and stop.is_set():
            return False
        time.sleep(POLL_S)
    return True


def sleep_until(t_ns: int, clock: Clock = perf_clock) -> None:
    """Sleep until the clock reads `t_ns` (a sleep's grain, tens of microseconds)."""
    while True:
        left = t_ns - clock()
        if left <= 0:
            return
        time.sleep(left / 1e9)


class TensorSender:
    """Non-blocking sends of each frame's boundary tensors to one rank. A thread of its own
    tests the pending sends until they have gone: MPI moves a large message only while
    the sender's side makes progress, and the stage thread must not wait for that."""

    def __init__(self, comm: Any, dest: int, order: Sequence[int], clock: Clock = perf_clock):
        self.comm, self.dest, self.order, self.clock = comm, dest, list(order), clock
        self._pending: list[tuple[Any, Any]] = []  # (request, the buffer it reads)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None  # while sends are pending
        self.stop = threading.Event()

    def _progress(self) -> None:
        while not self.stop.is_set():
            with self._lock:
                self._prune()
                if not self._pending:
                    self._thread = None  # the next send starts another
                    return
            time.sleep(POLL_S)

    def send(self, frame: int, tensors: dict[int, np.ndarray]) -> int:
        """Post the sends of `frame` and return its bytes; does not wait for them."""
        bufs = [np.ascontiguousarray(tensors[idx]) for idx in self.order]
        nbytes = sum(int(b.nbytes) for b in bufs)
        head = np.array([frame, self.clock(), nbytes], dtype=np.int64)
        with self._lock:
            self._prune()
            self._pending.append((self.comm.Isend(head, dest=self.dest, tag=HEADER_TAG), head))
            for k, b in enumerate(bufs):
                self._pending.append(
                    (self.comm.Isend(b, dest=self.dest, tag=TENSOR_TAG0 + k), b))
            if self._thread is None:
                self._thread = threading.Thread(target=self._progress, daemon=True,
                                                name=f"coupprof-send-to-{self.dest}")
                self._thread.start()
        return nbytes

    def _prune(self) -> None:
        self._pending = [(r, b) for r, b in self._pending if not r.Test()]

    def flush(self, stop: threading.Event | None = None) -> None:
        """Wait until every send posted has gone."""
        with self._lock:
            pending, self._pending = self._pending, []
        for req, _ in pending:
            if not wait(req, stop):
                return


class TensorReceiver(threading.Thread):
    """Receives `frames` frames from one rank, ``ahead`` posted at a time, through `link`."""

    def __init__(self, comm: Any, source: int, specs: Sequence[tuple[int, tuple[int, ...], str]],
                 frames: int, link: Link, ahead: int = 2, clock: Clock = perf_clock):
        super().__init__(name=f"coupprof-recv-from-{source}", daemon=True)
        self.comm, self.source, self.specs = comm, source, list(specs)
        self.frames, self.link, self.ahead, self.clock = frames, link, max(1, ahead), clock
        self.arrivals: queue.Queue[Arrival | BaseException] = queue.Queue()
        self.stop = threading.Event()

    def _post(self) -> tuple[Any, list[tuple[Any, Any]]]:
        head = np.empty(3, dtype=np.int64)
        reqs = [(self.comm.Irecv(head, source=self.source, tag=HEADER_TAG), head)]
        for k, (_idx, shape, dtype) in enumerate(self.specs):
            buf = np.empty(shape, dtype=np.dtype(dtype))
            reqs.append((self.comm.Irecv(buf, source=self.source, tag=TENSOR_TAG0 + k), buf))
        return head, reqs

    def run(self) -> None:
        try:
            posted = [self._post() for _ in range(min(self.ahead, self.frames))]
            wire_free_ns = 0
            for n in range(self.frames):
                head, reqs = posted.pop(0)
                for req, _ in reqs:
                    if not wait(req, self.stop):
                        return
                got = self.clock()
                if n + self.ahead < self.frames:
                    posted.append(self._post())
                frame, sent, nbytes = (int(v) for v in head)
                ready = got
                if self.link.simulated:
                    # latency overlaps frames on the wire; the bytes take it one at a time
                    wire_ns = 0 if self.link.bandwidth_mb_s is None else \
                        int(nbytes / (self.link.bandwidth_mb_s * 1e3) * 1e6)
                    ready = max(got + int(self.link.modelled_ms(nbytes) * 1e6),
                                wire_free_ns + wire_ns)
                    wire_free_ns = ready
                    sleep_until(ready, self.clock)
                tensors = {idx: buf for (idx, _, _), (_, buf) in zip(self.specs, reqs[1:],
                                                                       strict=True)}
                self.arrivals.put(Arrival(frame, tensors, sent, got, ready, nbytes))
        except BaseException as err:  # handed to the consumer
            self.arrivals.put(err)

    def take(self) -> Arrival:
        got = self.arrivals.get()
        if isinstance(got, BaseException):
            raise got
        return got


class Credits(threading.Thread):
    """The first rank's count of frames the last rank has finished (``done_ns`` each)."""

    def __init__(self, comm: Any, source: int, frames: int):
        super().__init__(name="coupprof-credits", daemon=True)
        self.comm, self.source, self.frames = comm, source, frames
        self.done_ns: dict[int, int] = {}
        self._cond = threading.Condition()
        self.stop = threading.Event()

    def run(self) -> None:
        for _ in range(self.frames):
            buf = np.empty(2, dtype=np.int64)
            if not wait(self.comm.Irecv(buf, source=self.source, tag=CREDIT_TAG), self.stop):
                return
            with self._cond:
                self.done_ns[int(buf[0])] = int(buf[1])
                self._cond.notify_all()

    def wait_for(self, frame: int) -> None:
        """Block until `frame` is done (frames below 0 are)."""
        if frame < 0:
            return
        with self._cond:
            while frame not in self.done_ns:
                self._cond.wait(timeout=0.5)


def ready(comm: Any, rank: int, size: int, stop: threading.Event | None = None) -> None:
    """Every rank has started measuring: the others tell the first, which waits for all
    (so no rank is still starting its power capture when the first measured frame comes)."""
    buf = np.zeros(1, dtype=np.int64)
    if rank != 0:
        wait(comm.Isend(buf, dest=0, tag=READY_TAG), stop)
        return
    for r in range(1, size):
        wait(comm.Irecv(np.empty(1, dtype=np.int64), source=r, tag=READY_TAG), stop)


def send_credit(comm: Any, dest: int, frame: int, done_ns: int,
                keep: list[tuple[Any, Any]]) -> None:
    """The last rank tells the first that `frame` is done (non-blocking; `keep` holds the
    request and its buffer until it has gone)."""
    buf = np.array([frame, done_ns], dtype=np.int64)
    keep[:] = [(r, b) for r, b in keep if not r.Test()]
    keep.append((comm.Isend(buf, dest=dest, tag=CREDIT_TAG), buf))
