"""GPUs and NPUs through devfreq: the userspace governor's `set_freq`, or min/max clamping.

Layout (Documentation/ABI/testing/sysfs-class-devfreq), e.g.
/sys/class/devfreq/ff9a0000.gpu, all values in Hz:

    governor, available_governors
    min_freq / max_freq          limits (writable)
    available_frequencies        the OPP table
    cur_freq                     current frequency
    userspace/set_freq           exists only while the userspace governor runs
"""

from __future__ import annotations

import os
import time

from governors.base import Governor, LimitFiles, SavedState, parse_int, restore_errors
from profiler.errors import ProfilerError

USERSPACE = "userspace"
SET_FREQ = "userspace/set_freq"


class DevfreqGovernor(Governor):
    kind = "devfreq"

    def __init__(self, *args, method: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._forced = method
        self.limits = LimitFiles(self, "min_freq", "max_freq")  # Hz

    def state_files(self) -> list[str]:
        return ["governor", "min_freq", "max_freq", SET_FREQ]

    def pick_method(self) -> str:
        if self._forced:
            return self._forced
        avail = self.read("available_governors").split() if self.has("available_governors") else []
        return "userspace" if USERSPACE in avail else "clamp"

    def _begin(self) -> None:
        self.method = self.pick_method()
        self.limits.read()
        if self.method == "userspace":
            before = self.read("governor")
            if before != USERSPACE:
                self.write("governor", USERSPACE)
            # The kernel adds userspace/ while handling the governor write; allow a
            # short grace period for trees that are updated asynchronously.
            deadline = time.monotonic() + 0.05
            while not self.has(SET_FREQ) and time.monotonic() < deadline:
                time.sleep(0.002)
            set_freq = self.io.path(self.rel(SET_FREQ))
            why = None
            if not self.has(SET_FREQ):
                why = "did not appear after selecting the userspace governor"
            elif not os.access(set_freq, os.W_OK,
                               effective_ids=os.access in os.supports_effective_ids):
                # The kernel makes it root-only as the governor starts, with no udev
                # event, so a group granted the devfreq files (coupprof doctor --udev)
                # still cannot write it; min = max needs only the granted files.
                why = "is not writable by this user (the kernel creates it root-only)"
            if why:
                self.notes.append(f"{set_freq} {why}; clamping min/max instead")
                self.method = "clamp"
                if before != USERSPACE:
                    self.write("governor", before)  # min = max pins any governor

    def _write_khz(self, freq_khz: int) -> None:
        hz = freq_khz * 1000
        if self.method == "userspace":
            lim = self.limits
            if not lim.lo <= hz <= lim.hi:
                lim.set(min(lim.lo, hz), max(lim.hi, hz))
            self.write(SET_FREQ, hz)
        else:
            self.limits.set(hz, hz)

    def read_khz(self) -> int | None:
        return self.read_freq_khz("cur_freq", 1)  # Hz

    def _readback_name(self) -> str:
        return "cur_freq"

    def _restore(self, saved: SavedState) -> None:
        errors: list[ProfilerError] = []
        want_gov = saved.text("governor")
        self.limits.restore(saved, errors)
        try:
            if want_gov and self.read("governor") != want_gov:
                self.write("governor", want_gov)
        except ProfilerError as err:
            errors.append(err)
        speed = parse_int(saved.text(SET_FREQ))
        if want_gov == USERSPACE and speed is not None:
            try:
                deadline = time.monotonic() + 0.05
                while not self.has(SET_FREQ) and time.monotonic() < deadline:
                    time.sleep(0.002)
                if parse_int(self.read(SET_FREQ)) != speed:
                    self.write(SET_FREQ, speed)
            except ProfilerError as err:
                errors.append(err)
        restore_errors(errors, f"devfreq device {self.io.path(self.dir)}")

    def available_khz(self) -> list[int]:
        if self.has("available_frequencies"):
            return sorted(f // 1000 for f in self.io.read_ints(self.rel("available_frequencies")))
        return []
