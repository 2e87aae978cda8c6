"""Nanosecond clocks: the real host clock and a deterministic one for tests.

Everything that timestamps (runner, markers, attribution) takes a ``clock``
argument, a callable returning integer nanoseconds, so timing maths can be
checked exactly. The default is ``time.perf_counter_ns``, the clock the logger's
edges are later mapped onto.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

Clock = Callable[[], int]

#: The host clock every measurement uses unless told otherwise.
perf_clock: Clock = time.perf_counter_ns


class StepClock:
    """A clock that advances by a fixed step (or by the next value of a
    sequence of steps) each time it is read; ``reads`` counts the reads.

    With it, a run's timestamps are a known function of the order in which the
    code reads the clock, so durations can be asserted exactly.
    """

    def __init__(self, start_ns: int = 0, step_ns: int | Iterable[int] = 1000) -> None:
        self.now_ns = start_ns
        self.reads = 0
        self._steps = None if isinstance(step_ns, int) else iter(step_ns)
        self._step = step_ns if isinstance(step_ns, int) else 0

    def __call__(self) -> int:
        value = self.now_ns
        self.reads += 1
        self.now_ns += self._step if self._steps is None else next(self._steps)
        return value

    def advance(self, ns: int) -> None:
        """Move time forward without a read (e.g. from a hook that 'takes' ns)."""
        self.now_ns += ns
