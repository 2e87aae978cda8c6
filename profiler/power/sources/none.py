"""The `none` power source: time-only runs; no power columns are produced."""

from __future__ import annotations

from profiler.power.sources.base import PowerSource, SourceInfo


class NoneSource(PowerSource):
    """Measures nothing. ``mode == "none"`` tells the caller to skip attribution."""

    kind = "none"
    mode = "none"

    def __init__(self, spec: str = "none") -> None:
        super().__init__(spec)

    def info(self) -> SourceInfo:
        return SourceInfo(spec=self.spec, kind=self.kind, mode=self.mode, device="")

    def _open_device(self) -> None:
        return None

    def _close_device(self) -> None:
        return None
