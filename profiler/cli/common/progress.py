"""Progress bars on stderr for long commands, one style for all of them.

Bars have no auto-refresh thread: a Python thread drawing the bar would hold the GIL
when an invoke returns and delay a layer's end timestamp. They are redrawn from the
measuring thread instead, at most ten times a second (`Throttle`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.progress import Progress, ProgressColumn

#: update(what, done, total): one bar per distinct `what`.
TaskProgress = Callable[[str, int, int], None]

REDRAW_S = 0.1


class Throttle:
    """True at most once per REDRAW_S, and always when forced (a task's last step)."""

    def __init__(self) -> None:
        self.last = 0.0

    def due(self, force: bool = False) -> bool:
        now = time.monotonic()
        if force or now - self.last >= REDRAW_S:
            self.last = now
            return True
        return False


def new_bar(*columns: ProgressColumn | str, counts: bool = True) -> Progress:
    """A transient rich bar on stderr: description, bar, done/total (unless not
    ``counts``), then ``columns``."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    head = [TextColumn("{task.description}"), BarColumn()]
    if counts:
        head.append(MofNCompleteColumn())
    return Progress(*head, *columns, console=Console(stderr=True), transient=True,
                    auto_refresh=False)


@contextmanager
def task_progress(enabled: bool) -> Iterator[TaskProgress | None]:
    """A bar per task (slicing, frames, energy per layer, ...) on a terminal; None when
    not ``enabled`` (pipes, CI), so callers pass ``progress=None`` to the library."""
    if not enabled:
        yield None
        return
    tasks: dict[str, Any] = {}
    throttle = Throttle()
    with new_bar() as bar:

        def update(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total)
            bar.update(tasks[what], completed=done, total=total)
            if throttle.due(force=done == total):
                bar.refresh()

        yield update


def step(bar: TaskProgress | None, what: str) -> Callable[[int, int], None] | None:
    """The library's ``progress(done, total)`` callback for one task of ``bar``."""
    return (lambda done, total: bar(what, done, total)) if bar else None


@contextmanager
def timed_progress(enabled: bool, what: str, total_s: float,
                   ) -> Iterator[Callable[[float, str], None] | None]:
    """One bar over ``total_s`` seconds with a status text and the time left (captures);
    None when not ``enabled``. The returned update(elapsed_s, status) redraws it."""
    if not enabled:
        yield None
        return
    from rich.progress import TextColumn, TimeRemainingColumn

    throttle = Throttle()
    with new_bar(TextColumn("{task.fields[status]}"), TimeRemainingColumn(),
                 counts=False) as bar:
        task = bar.add_task(what, total=total_s, status="")

        def update(elapsed_s: float, status: str) -> None:
            bar.update(task, completed=elapsed_s, status=status)
            if throttle.due(force=elapsed_s >= total_s):
                bar.refresh()

        yield update
