"""The `Marker` base class: GPIO lines that mark layer boundaries for the power logger.

A marker drives 1 to 4 output lines. ``set(level)`` drives line k to bit k of
``level``. The runner calls it at every layer boundary, so it is the hot path:
every back end resolves paths, file descriptors and value tables in ``open()``
and then binds ``set`` to a closure that does one call (one ioctl for gpiod, one
``pwrite`` per line for sysfs, one method call for sim, nothing for none).

Lines are driven low and released on ``close()``, which the context manager
calls on every exit, exceptions included.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType

from profiler.errors import MarkerError

#: The logger reads at most this many marker inputs (firmware/PROTOCOL.md, EDGE).
MAX_LINES = 4


class Marker(ABC):
    """GPIO marker lines; use as ``with marker: marker.set(1) ... marker.set(0)``."""

    #: Back-end name, the part of the spec string before the first colon.
    kind: str = ""

    def __init__(self, spec: str, width: int) -> None:
        if not 1 <= width <= MAX_LINES:
            raise MarkerError(f"marker {spec!r} has {width} lines; the logger reads 1 to "
                              f"{MAX_LINES}", fix="name at most 4 lines in --marker")
        self.spec = spec
        self.width = width
        self._open = False

    # The hot path. Subclasses replace it per instance in _open_lines(); this
    # class-level version only runs while the marker is closed.
    def set(self, level: int) -> None:  # noqa: A003 - the natural name
        """Drive line k to bit k of ``level`` (so ``set(1)``/``set(0)`` for one line).

        Bits above the marker's width are ignored (masked, not checked: hot path)."""
        raise MarkerError(f"marker {self.spec!r} is not open",
                          fix="use it inside `with marker:` or call open() first")

    def _bind(self, set_level: Callable[[int], None]) -> None:
        """Make ``set_level`` this instance's ``set`` until close() (for _open_lines)."""
        self.__dict__["set"] = set_level

    @property
    def is_open(self) -> bool:
        return self._open

    def open(self) -> Marker:
        """Request the lines as outputs, driven low. Idempotent."""
        if not self._open:
            self._open_lines()
            self._open = True
        return self

    def close(self) -> None:
        """Drive the lines low and release them. Idempotent; raises MarkerError on failure
        after trying every line."""
        if not self._open:
            return
        self._open = False
        # Drop the bound hot path so a late set() says "not open" instead of
        # writing to a released line.
        self.__dict__.pop("set", None)
        self._close_lines()

    def __enter__(self) -> Marker:
        return self.open()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.close()
            return
        # An error is already on its way out: release what we can, and do not
        # let a release failure hide the original error.
        try:
            self.close()
        except MarkerError as err:
            warnings.warn(f"while handling {exc_type.__name__ if exc_type else 'an error'}: "
                          f"{err}", RuntimeWarning, stacklevel=2)

    def __repr__(self) -> str:
        state = "open" if self._open else "closed"
        return f"{type(self).__name__}({self.spec!r}, {state})"

    @abstractmethod
    def _open_lines(self) -> None:
        """Acquire the lines, drive them low, and bind ``self.set`` to the fast path."""

    @abstractmethod
    def _close_lines(self) -> None:
        """Drive the lines low and release them."""

