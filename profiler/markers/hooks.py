"""What a layer runner calls around every layer and frame: where markers go up and down.

The runner (`profiler.measure.runner`) takes one `LayerHooks`; the power session's
marker hooks (`profiler.power.session.MarkerHooks`) and a sweep's watches subclass it.
It lives below both, so the power path needs nothing from the measuring one.
"""

from __future__ import annotations


class LayerHooks:
    """Called around every layer and frame (warm-up frames included, with warmup=True).

    Subclass and override what you need; the runner skips methods left as these no-ops.
    """

    def before_frame(self, frame: int, warmup: bool) -> None:
        """Before frame `frame` (0-based within warm-up or measured frames)."""

    def after_frame(self, frame: int, warmup: bool) -> None:
        """After the frame's last layer."""

    def before_layer(self, layer: int) -> None:
        """After the layer's inputs were handed over, right before its invoke is timed."""

    def after_layer(self, layer: int) -> None:
        """Right after the layer's invoke was timed."""
