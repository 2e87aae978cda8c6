"""The `none` governor: leaves the frequency alone (for runs that must not touch DVFS).

Every set returns a result whose warning says the frequency was not set, so the
tables never claim a frequency that nobody requested.
"""

from __future__ import annotations

from pathlib import Path

from governors.base import Governor, SavedState


class NoneGovernor(Governor):
    kind = "none"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.method = "leave"

    def state_files(self) -> list[str]:
        return []

    def save(self) -> SavedState:
        return SavedState(self.kind, Path(), {})

    def _begin(self) -> None:
        pass

    def _write_khz(self, freq_khz: int) -> None:
        pass

    def read_khz(self) -> int | None:
        return None

    def set_khz(self, freq_khz: int, settle_s: float = 0.05, level: int | None = None):
        from governors.base import SetResult

        return SetResult(self.letter, freq_khz, None, level,
                         f"processor {self.letter}: governor 'none' leaves the frequency as it is;"
                         f" {freq_khz / 1000:g} MHz was not set")

    def _restore(self, saved: SavedState) -> None:
        pass

    def checks(self):
        return []

    def describe(self) -> str:
        return "none (frequency left alone)"
