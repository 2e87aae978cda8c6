"""The `none` marker: no lines at all, for runs without a logger (time-only profiling)."""

from __future__ import annotations

from profiler.markers.base import Marker


def _ignore(level: int) -> None:
    return None


class NoneMarker(Marker):
    """Accepts every ``set()`` and drives nothing."""

    kind = "none"

    def __init__(self, spec: str = "none", width: int = 1) -> None:
        super().__init__(spec, width)

    def _open_lines(self) -> None:
        self._bind(_ignore)

    def _close_lines(self) -> None:
        return None
