"""Save every governor's state and put it back on success, error, Ctrl-C and SIGTERM.

    with RestoreGuard([gov]) as guard:
        gov.set_level(3)
        ...                       # any exception, SIGINT or SIGTERM ends here
    # every file the governors may write holds its original bytes again

Signals: while the guard is active, SIGINT raises KeyboardInterrupt and SIGTERM /
SIGHUP raise `Terminated` (a SystemExit with code 128 + signal), so the `with`
block unwinds through `__exit__` and restores. A caller that must keep running
when signalled (e.g. `coupprof pin`, which forwards the signal to its child and
waits for it) passes `on_signal` instead; the guard then only records the signal.
Signals are blocked while restoring, so a second Ctrl-C cannot cut a restore short.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType, TracebackType

from governors.base import Governor, SavedState
from profiler.errors import GovernorError, ProfilerError

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Processors whose governors a guard put back while an exception (Ctrl-C) unwound it, in
# this process: what an interrupted command says it restored.
_UNWOUND: list[str] = []


def restored_on_unwind() -> list[str]:
    """The letters of the processors whose saved governor settings were written back while
    an exception unwound their guard (each once, in order)."""
    return list(dict.fromkeys(_UNWOUND))


class Terminated(SystemExit):
    """Raised inside a guard when SIGTERM or SIGHUP arrives."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


class RestoreGuard:
    def __init__(self, governors: Sequence[Governor],
                 on_signal: Callable[[int], None] | None = None) -> None:
        self.governors = _unique(governors)
        self.on_signal = on_signal
        self.saved: list[tuple[Governor, SavedState]] = []
        self.signalled: int | None = None
        self._old_handlers: dict[int, object] = {}
        self.restored = False
        self._exiting = False

    # ---- context manager ---------------------------------------------------------
    def __enter__(self) -> RestoreGuard:
        self._install()
        try:
            for gov in self.governors:
                self.saved.append((gov, gov.save()))
        except BaseException:
            self._uninstall()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._exiting = True  # from here a signal is only recorded (see _handler)
        errors = self.restore()
        if exc is not None and not errors:
            _UNWOUND.extend(gov.letter for gov, _ in self.saved)
        if errors and exc is None:
            raise GovernorError(
                "could not restore: " + " | ".join(str(e) for e in errors),
                "the files named keep coupprof's values; write them back by hand or reboot",
            )
        if errors:  # do not hide the exception already in flight
            for err in errors:
                print(f"coupprof: warning: {err}", file=sys.stderr)

    def restore(self) -> list[ProfilerError]:
        """Restore every governor (last saved first). Idempotent."""
        if self.restored:
            return []
        errors: list[ProfilerError] = []
        blocked = _block_signals()
        try:
            for gov, state in reversed(self.saved):
                try:
                    gov.restore(state)
                except ProfilerError as err:
                    errors.append(err)
            self.restored = True
        finally:
            self._uninstall()
            _unblock_signals(blocked)
        return errors

    # ---- signals -------------------------------------------------------------------
    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.signalled = signum
        if self._exiting:
            return  # already restoring; raising now could cut the restore short
        if self.on_signal is not None:
            self.on_signal(signum)
            return
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set handlers; callers there restore via `with`
        for sig in HANDLED_SIGNALS:
            self._old_handlers[sig] = signal.signal(sig, self._handler)

    def _uninstall(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)  # type: ignore[arg-type]
        self._old_handlers.clear()


def _unique(governors: Sequence[Governor]) -> list[Governor]:
    """One governor per directory: N borrows its host cluster's policy."""
    seen: set[tuple[str, str]] = set()
    out = []
    for gov in governors:
        key = (gov.kind, str(gov.io.path(gov.dir)))
        if key not in seen:
            seen.add(key)
            out.append(gov)
    return out


def _block_signals() -> set[int | signal.Signals] | None:
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)


def _unblock_signals(previous: set[int | signal.Signals] | None) -> None:
    if previous is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
