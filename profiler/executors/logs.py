"""Keep LiteRT's native log lines out of the user's terminal, and keep them for diagnosis.

LiteRT writes INFO/WARNING lines (accelerator registration, plugin loading, WebGPU
adapter errors) straight to file descriptor 2 from C++; no environment variable turns
them off. `native_stderr()` points fd 2 at a temporary file while sub-models are
created or destroyed and hands the text back, so executors can tell *why* an
accelerator is missing (e.g. "libvulkan.so.1: cannot open shared object file") or
that ops fell back to the CPU, and the CLI prints only its own lines.

Redirecting a process-wide descriptor is not thread-local, so every capture holds one
lock: pipeline stages that create their sub-models concurrently take turns.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

_LOCK = threading.RLock()

#: Set COUPPROF_LITERT_LOG=1 to let LiteRT's own lines through (debugging).
PASS_THROUGH_ENV = "COUPPROF_LITERT_LOG"


@dataclass
class NativeLog:
    """What LiteRT wrote to stderr inside a `native_stderr()` block (filled on exit)."""

    text: str = ""
    lines: list[str] = field(default_factory=list)

    def matching(self, *needles: str) -> list[str]:
        low = [n.lower() for n in needles]
        return [line for line in self.lines if any(n in line.lower() for n in low)]


@contextmanager
def native_stderr() -> Iterator[NativeLog]:
    """Capture everything written to fd 2 (C++ and Python alike) inside the block."""
    log = NativeLog()
    if os.environ.get(PASS_THROUGH_ENV):
        yield log
        return
    with _LOCK:
        with suppress(AttributeError, ValueError):
            sys.stderr.flush()
        saved = os.dup(2)
        with tempfile.TemporaryFile() as tmp:
            os.dup2(tmp.fileno(), 2)
            try:
                yield log
            finally:
                with suppress(AttributeError, ValueError):
                    sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                tmp.seek(0)
                log.text = tmp.read().decode(errors="replace")
                log.lines = [line.strip() for line in log.text.splitlines() if line.strip()]


def quiet_native_exit() -> None:
    """Keep LiteRT's destructor log lines (printed after Python has finished, when the
    process-wide environment is torn down) off the terminal. For the CLI only: it
    silences fd 2 from the last atexit handler on, after every message of ours."""
    import atexit

    if os.environ.get(PASS_THROUGH_ENV) or getattr(quiet_native_exit, "_done", False):
        return

    def _silence() -> None:
        try:
            sys.stderr.flush()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
        except OSError:
            pass

    atexit.register(_silence)
    quiet_native_exit._done = True  # type: ignore[attr-defined]
