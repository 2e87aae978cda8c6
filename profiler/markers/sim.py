"""The `sim` marker: drives the marker inputs of a simulated logger.

The sink is whatever plays the logger's pins: the Python virtual logger
(`profiler.sim.virtual_logger`, method ``set_markers(bits)``) or the simavr rig
running the real firmware (`profiler.power.rig`, which exposes the same method).
Any object with ``set_markers(int)``, or a plain callable taking the bits, works.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from profiler.errors import MarkerError
from profiler.markers.base import Marker


@runtime_checkable
class MarkerSink(Protocol):
    """Something that sets simulated marker pins: bit k = level of input k."""

    def set_markers(self, bits: int) -> None: ...


class SimMarker(Marker):
    """Forwards each level to the sink's ``set_markers``; closing drives it to 0."""

    kind = "sim"

    def __init__(self, sink: MarkerSink | Callable[[int], None] | None, spec: str = "sim",
                 width: int = 1) -> None:
        super().__init__(spec, width)
        if sink is None:
            raise MarkerError("the sim marker needs a simulated logger to drive",
                              fix="use --marker sim only with --power sim (or pass the "
                                  "virtual logger / rig as the sink)")
        if isinstance(sink, MarkerSink):
            self._send: Callable[[int], None] = sink.set_markers
        elif callable(sink):
            self._send = sink
        else:
            raise MarkerError(f"sim marker sink {sink!r} has no set_markers(bits)",
                              fix="pass the virtual logger, the rig, or a callable")
        self._mask = (1 << width) - 1

    def _open_lines(self) -> None:
        send, mask = self._send, self._mask
        send(0)

        def set_level(level: int) -> None:
            send(level & mask)

        self._bind(set_level)

    def _close_lines(self) -> None:
        try:
            self._send(0)
        except Exception as err:  # the sink may already be shut down
            raise MarkerError(f"could not drive the simulated marker low on close: {err}",
                              fix="close the marker before stopping the simulated logger") from err
