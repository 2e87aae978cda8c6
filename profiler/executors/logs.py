"""Keep LiteRT's native log lines out of the user's terminal, and keep them for diagnosis.

LiteRT writes INFO/WARNING lines (accelerator registration, plugin loading, WebGPU
adapter errors) straight to file descriptor 2 from C++, and a few to fd 1: its GPU
code logs through TFLite's tools logger, which sends INFO and WARN to std::cout
("INFO: Loaded OpenCL library with dlopen." when the GPU environment is created,
also on WebGPU runs). No environment variable turns either off. `native_stderr()`
points fds 1 and 2 at one temporary file while sub-models are created or destroyed
and hands the text back, so executors can tell *why* an accelerator is missing (e.g.
"libvulkan.so.1: cannot open shared object file") or that ops fell back to the CPU,
and the CLI prints only its own lines.

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


#: The descriptors LiteRT logs to: stdout (TFLite's tools logger) and stderr.
CAPTURED_FDS = (1, 2)


def _flush_python() -> None:
    # Python's own buffers go out first, to where they were meant to go.
    for stream in (sys.stdout, sys.stderr):
        with suppress(AttributeError, ValueError):
            stream.flush()


@contextmanager
def native_stderr() -> Iterator[NativeLog]:
    """Capture everything written to fds 1 and 2 (C++ and Python alike) inside the block.

    Only LiteRT calls belong inside: coupprof's own output is printed outside these blocks.
    """
    log = NativeLog()
    if os.environ.get(PASS_THROUGH_ENV):
        yield log
        return
    with _LOCK:
        _flush_python()
        saved = {fd: os.dup(fd) for fd in CAPTURED_FDS}
        with tempfile.TemporaryFile() as tmp:
            for fd in CAPTURED_FDS:
                os.dup2(tmp.fileno(), fd)
            try:
                yield log
            finally:
                _flush_python()
                for fd, copy in saved.items():
                    os.dup2(copy, fd)
                    os.close(copy)
                tmp.seek(0)
                log.text = tmp.read().decode(errors="replace")
                log.lines = [line.strip() for line in log.text.splitlines() if line.strip()]


_exit_silenced = False  # quiet_native_exit has registered its handler


def quiet_native_exit() -> None:
    """Keep LiteRT's destructor log lines (printed after Python has finished, when the
    process-wide environment is torn down) off the terminal. For the CLI only: it
    silences fd 2 from the last atexit handler on, after every message of ours."""
    import atexit

    global _exit_silenced
    if os.environ.get(PASS_THROUGH_ENV) or _exit_silenced:
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
    _exit_silenced = True
