"""CPU clusters through cpufreq: the userspace governor's `scaling_setspeed`, or min = max clamping.

Layout (Documentation/admin-guide/pm/cpufreq.rst), one directory per policy,
e.g. /sys/devices/system/cpu/cpufreq/policy4, all values in kHz:

    scaling_governor             current governor name (writable)
    scaling_available_governors  e.g. "userspace performance schedutil"
    scaling_min_freq / scaling_max_freq   policy limits (writable)
    scaling_setspeed             target under `userspace`; "<unsupported>" otherwise
    scaling_cur_freq             last frequency the driver set
    cpuinfo_cur_freq             frequency read from hardware (root only, not on all drivers)
"""

from __future__ import annotations

from governors.base import Governor, LimitFiles, SavedState, parse_int, restore_errors
from profiler.errors import GovernorError, ProfilerError

USERSPACE = "userspace"


class CpufreqGovernor(Governor):
    kind = "cpufreq"

    def __init__(self, *args, method: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._forced = method
        self.limits = LimitFiles(self, "scaling_min_freq", "scaling_max_freq")

    def state_files(self) -> list[str]:
        return ["scaling_governor", "scaling_min_freq", "scaling_max_freq", "scaling_setspeed"]

    def pick_method(self) -> str:
        if self._forced:
            return self._forced
        avail = self.read("scaling_available_governors").split() \
            if self.has("scaling_available_governors") else []
        return "userspace" if USERSPACE in avail and self.has("scaling_setspeed") else "clamp"

    def _begin(self) -> None:
        self.method = self.pick_method()
        self.limits.read()
        if self.method == "userspace" and self.read("scaling_governor") != USERSPACE:
            self.write("scaling_governor", USERSPACE)

    def _write_khz(self, freq_khz: int) -> None:
        if self.method == "userspace":
            # setspeed is clamped to the policy limits: widen them only when needed.
            lim = self.limits
            if not lim.lo <= freq_khz <= lim.hi:
                lim.set(min(lim.lo, freq_khz), max(lim.hi, freq_khz))
            self.write("scaling_setspeed", freq_khz)
        else:
            self.limits.set(freq_khz, freq_khz)

    def read_khz(self) -> int | None:
        for name in ("cpuinfo_cur_freq", "scaling_cur_freq"):
            if self.has(name):
                try:
                    return self.read_int(name)
                except ProfilerError:
                    continue  # cpuinfo_cur_freq is root-only; fall back
        return None

    def _readback_name(self) -> str:
        return "cpuinfo_cur_freq" if self.has("cpuinfo_cur_freq") else "scaling_cur_freq"

    def _restore(self, saved: SavedState) -> None:
        errors: list[ProfilerError] = []
        want_gov = saved.text("scaling_governor")
        self.limits.restore(saved, errors)
        try:
            if want_gov and self.read("scaling_governor") != want_gov:
                self.write("scaling_governor", want_gov)
        except ProfilerError as err:
            errors.append(err)
        # setspeed only means something under userspace; "<unsupported>" is not writable.
        speed = parse_int(saved.text("scaling_setspeed"))
        if want_gov == USERSPACE and speed is not None:
            try:
                if parse_int(self.read("scaling_setspeed")) != speed:
                    self.write("scaling_setspeed", speed)
            except ProfilerError as err:
                errors.append(err)
        restore_errors(errors, f"cpufreq policy {self.io.path(self.dir)}")

    def available_khz(self) -> list[int]:
        if self.has("scaling_available_frequencies"):
            return sorted(self.io.read_ints(self.rel("scaling_available_frequencies")))
        return []

    def check_table(self) -> None:
        """Every profile frequency must be one the driver offers (when it lists them)."""
        have = self.available_khz()
        missing = [f for f in self.proc.freqs_khz if have and f not in have]
        if missing:
            raise GovernorError(
                f"processor {self.letter}: {', '.join(f'{f / 1000:g}' for f in missing)} MHz"
                f" not in {self.io.path(self.rel('scaling_available_frequencies'))}",
                "fix the board profile's freqs_khz, or use --board host to read this machine's table",
            )
