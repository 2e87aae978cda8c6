"""Vendor GPU frequency files that are not plain devfreq: Qualcomm kgsl and Amlogic mpgpu.

kgsl (Adreno, /sys/class/kgsl/kgsl-3d0; msm kgsl_pwrctrl.c):
    gpu_available_frequencies  Hz, one per power level, level 0 = FASTEST
    num_pwrlevels
    max_pwrlevel               fastest level allowed (smallest index)
    min_pwrlevel               slowest level allowed (largest index)
    gpuclk                     current GPU clock in Hz
    devfreq/                   link to the devfreq device (governor msm-adreno-tz)
  The driver silently clamps max_pwrlevel to <= min_pwrlevel and min_pwrlevel to
  >= max_pwrlevel, so writing them in the wrong order loses the request instead of
  failing. Pinning level k = writing both to k, widening side first.

mpgpu (Amlogic Mali vendor driver, /sys/class/mpgpu; meson mpgpu.c):
    scale_mode   0 PP scaling, 1 PP+frequency scaling, 2 scaling off, 3 turbo
    min_freq     lowest clock INDEX allowed (into the DT dvfs table, slowest first)
    max_freq     highest clock INDEX allowed (writes above the configured max are EINVAL)
    cur_freq     reads the current clock in MHz; a write takes an index
  Pinning level k = min_freq = max_freq = k (the driver's DVFS stays within them).
"""

from __future__ import annotations

from governors.base import (
    Governor,
    LimitFiles,
    SavedState,
    freq_matches,
    parse_int,
    restore_errors,
)
from profiler.errors import GovernorError, ProfilerError


class KgslGovernor(Governor):
    kind = "kgsl"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.method = "pwrlevel"
        self._levels_hz: list[int] = []  # index = kgsl power level (0 fastest)
        # In frequency terms the slow limit is min_pwrlevel; a larger level number is
        # slower, hence sign -1 for the min <= max ordering rule.
        self.levels = LimitFiles(self, "min_pwrlevel", "max_pwrlevel", sign=-1)

    def state_files(self) -> list[str]:
        return ["max_pwrlevel", "min_pwrlevel"]

    def levels_hz(self) -> list[int]:
        if not self._levels_hz:
            self._levels_hz = self.io.read_ints(self.rel("gpu_available_frequencies"))
        return self._levels_hz

    def pwrlevel_of(self, freq_khz: int) -> int:
        for lvl, hz in enumerate(self.levels_hz()):
            if freq_matches(freq_khz, hz // 1000):
                return lvl
        raise GovernorError(
            f"{freq_khz / 1000:g} MHz is not a power level in"
            f" {self.io.path(self.rel('gpu_available_frequencies'))}"
            f" ({', '.join(f'{h / 1e6:g}' for h in self.levels_hz())} MHz)",
            "fix the board profile's GPU freqs_khz to the levels this kernel offers",
        )

    def _begin(self) -> None:
        self.levels.read()

    def _write_khz(self, freq_khz: int) -> None:
        lvl = self.pwrlevel_of(freq_khz)
        self.levels.set(lvl, lvl)

    def read_khz(self) -> int | None:
        return self.read_freq_khz("gpuclk", 1)  # Hz

    def _readback_name(self) -> str:
        return "gpuclk"

    def _restore(self, saved: SavedState) -> None:
        errors: list[ProfilerError] = []
        self.levels.restore(saved, errors)
        restore_errors(errors, f"kgsl power levels in {self.io.path(self.dir)}")


class MpgpuGovernor(Governor):
    kind = "mpgpu"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.method = "clamp-index"
        self.limits = LimitFiles(self, "min_freq", "max_freq")  # dvfs table indices

    def state_files(self) -> list[str]:
        return ["scale_mode", "min_freq", "max_freq"]

    def index_of(self, freq_khz: int) -> int:
        # The profile's table is the driver's dvfs table, slowest first, index 0 = level 1.
        try:
            return self.proc.freqs_khz.index(freq_khz)
        except ValueError:
            raise GovernorError(f"{freq_khz / 1000:g} MHz is not in processor {self.letter}'s table",
                                f"valid levels: {self.proc.levels_text()}") from None

    def _begin(self) -> None:
        self.limits.read()

    def _write_khz(self, freq_khz: int) -> None:
        idx = self.index_of(freq_khz)
        self.limits.set(idx, idx)

    def read_khz(self) -> int | None:
        return self.read_freq_khz("cur_freq", 1_000_000)  # the driver reports whole MHz

    def _readback_name(self) -> str:
        return "cur_freq"

    def _restore(self, saved: SavedState) -> None:
        errors: list[ProfilerError] = []
        self.limits.restore(saved, errors)
        mode = parse_int(saved.text("scale_mode"))
        try:
            if mode is not None and parse_int(self.read("scale_mode")) != mode:
                self.write("scale_mode", mode)
        except ProfilerError as err:
            errors.append(err)
        restore_errors(errors, f"mpgpu limits in {self.io.path(self.dir)}")
