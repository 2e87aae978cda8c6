"""The windows a run is expected to have marked, in order, without any clock.

A run steps through settings (one DVFS level each). Per setting it runs
``warmup + frames`` frames; each frame marks, per layer, a gap (marker idle: the
frame's input for layer 0, the hand-over and sleep otherwise) and then the layer
(marker active). After the last frame, ``trailing`` segments close the setting
(ARM-CO-UP: a ~17 ms idle-level blip, then ~11 s at the active level while the
program waits for the next setting). So a setting is ``2 * layers * (warmup + frames)
+ trailing`` segments of alternating marker level, starting at the idle level. (With
one setting, ``trailing`` may be odd: a run recorded live ends with one idle segment.)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from profiler.errors import BadInputError

GAP, LAYER, TRAILING = "gap", "layer", "trailing"


@dataclass(frozen=True)
class Setting:
    """One setting: the 1-based DVFS level of the processor the levels step (the host
    cluster for N), and its kHz where a board profile gives it."""

    level: int
    khz: int | None = None


@dataclass(frozen=True, slots=True)  # slots: an hour's run expects ~10^5 of them
class Window:
    """One expected segment. ``role`` indexes the segment within a frame (0..2L-1:
    gap k = 2k, layer k = 2k + 1) or, for trailing ones, 2L + t."""

    index: int
    setting: int
    frame: int | None  # None for trailing segments
    kind: str  # GAP, LAYER or TRAILING
    layer: int | None
    role: int
    active: bool


@dataclass(frozen=True)
class RunLayout:
    order: str  # processor letter per layer, e.g. BBBB... or NBNB...
    frames: int  # measured frames per setting
    warmup: int  # warm-up frames before them
    settings: tuple[Setting, ...]
    trailing: int = 2

    def __post_init__(self) -> None:
        if not self.order or not self.order.isalpha():
            raise BadInputError(f"layout order {self.order!r} is not processor letters",
                                "pass --order like BBBBBBBBBBBBBB")
        if self.frames < 1 or self.warmup < 0:
            raise BadInputError(f"layout needs --frames >= 1 and --warmup >= 0 "
                                f"(got {self.frames}, {self.warmup})")
        if not self.settings:
            raise BadInputError("layout has no settings", "pass --levels")
        if self.trailing < 0 or (self.trailing % 2 and len(self.settings) > 1):
            raise BadInputError(f"--trailing {self.trailing} must be even: marker levels "
                                "alternate and every setting starts at the idle level")

    @property
    def layers(self) -> int:
        return len(self.order)

    @property
    def runs(self) -> int:
        return self.frames + self.warmup

    @property
    def per_frame(self) -> int:
        return 2 * self.layers

    @property
    def per_setting(self) -> int:
        return self.per_frame * self.runs + self.trailing

    @property
    def total(self) -> int:
        return self.per_setting * len(self.settings)

    def window(self, i: int) -> Window:
        s, r = divmod(i, self.per_setting)
        if r >= self.per_frame * self.runs:
            t = r - self.per_frame * self.runs
            return Window(i, s, None, TRAILING, None, self.per_frame + t, active=bool(t % 2))
        frame, q = divmod(r, self.per_frame)
        layer, odd = divmod(q, 2)
        return Window(i, s, frame, LAYER if odd else GAP, layer, q, active=bool(odd))

    def windows(self) -> list[Window]:
        return list(_windows(self))

    def describe(self) -> str:
        return (f"{len(self.settings)} settings x ({self.warmup} warm-up + {self.frames} frames)"
                f" x {self.layers} layers ({self.order}), {self.trailing} trailing segments "
                f"per setting: {self.total} segments expected")


@functools.lru_cache(maxsize=16)
def _windows(layout: RunLayout) -> tuple[Window, ...]:
    """Every expected window, built once per layout (attribution asks for them per layer)."""
    return tuple(layout.window(i) for i in range(layout.total))
