"""The governor interface every DVFS back end implements, and its result types.

A governor owns one frequency domain (a cpufreq policy, a devfreq device, a
vendor GPU directory). Its life cycle, driven by `governors.restore.RestoreGuard`:

    saved = gov.save()            # snapshot every file it may write
    gov.set_khz(816_000)          # per-run mode: write, then read back and compare
    gov.request_khz(600_000)      # per-layer mode: only the write (non-blocking, as ARM-CO-UP)
    gov.restore(saved)            # put every file back, in an order the kernel accepts

Frequencies are kHz in this interface whatever unit the files use (devfreq and
kgsl use Hz, mpgpu uses MHz and level indices).
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from governors.sysfs_io import SysfsIO
from profiler.boards.model import ProcessorSpec
from profiler.errors import GovernorError, ProfilerError


@dataclass(frozen=True)
class SetResult:
    """What happened when a frequency was set."""

    processor: str
    requested_khz: int
    effective_khz: int | None  # read back after the write; None = not read (per-layer) or unreadable
    level: int | None = None  # 1-based level in the board profile, when known
    warning: str | None = None  # set when the effective frequency differs or could not be read

    @property
    def ok(self) -> bool:
        return self.warning is None


@dataclass(frozen=True)
class SavedState:
    """Raw contents of every file a governor may write, as read before the first write."""

    kind: str
    directory: Path
    files: dict[str, bytes]  # path relative to `directory` -> bytes read

    def text(self, name: str) -> str | None:
        raw = self.files.get(name)
        return None if raw is None else raw.decode(errors="replace").strip()


@dataclass(frozen=True)
class Check:
    """One line of `coupprof doctor` about a governor: ok or a problem with its fix."""

    what: str
    ok: bool
    fix: str = ""


def freq_matches(target_khz: int, effective_khz: int) -> bool:
    """Within 1 % (at least 1 MHz): drivers round (1416 -> 1417 MHz on RK3399, MHz-only files)."""
    return abs(target_khz - effective_khz) <= max(1000, target_khz // 100)


class Governor(ABC):
    """One DVFS domain. Subclasses implement the file layout; this class the protocol."""

    kind: str = ""
    #: whether coupprof may set this domain's level (False: its driver picks the clock,
    #: and it is only read, as a simulated ``sim-driver`` processor's)
    settable: bool = True

    def __init__(self, proc: ProcessorSpec, io: SysfsIO, path: str,
                 clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        self.proc = proc
        self.io = io
        self.dir = Path(path)
        self.clock_ns = clock_ns
        self.method = ""  # e.g. "userspace" or "clamp", set by subclasses
        self.notes: list[str] = []  # things worth telling the user (fallbacks taken)
        self._begun = False
        self._last_khz: int | None = None

    # ---- what subclasses provide -------------------------------------------------
    @abstractmethod
    def state_files(self) -> list[str]:
        """Files (relative to the governor directory) that `save` snapshots."""

    @abstractmethod
    def _begin(self) -> None:
        """Prepare for setting (e.g. switch to the userspace governor). Runs once."""

    @abstractmethod
    def _write_khz(self, freq_khz: int) -> None:
        """Write the files that request `freq_khz`. Must not wait for the hardware."""

    @abstractmethod
    def read_khz(self) -> int | None:
        """The effective frequency the kernel reports now, or None if unreadable."""

    @abstractmethod
    def _restore(self, saved: SavedState) -> None:
        """Put back what `save` read, in an order the kernel accepts."""

    # ---- the protocol ------------------------------------------------------------
    @property
    def letter(self) -> str:
        return self.proc.letter

    def rel(self, name: str) -> Path:
        return self.dir / name

    def has(self, name: str) -> bool:
        return self.io.exists(self.rel(name))

    def read(self, name: str) -> str:
        return self.io.read(self.rel(name))

    def read_int(self, name: str) -> int:
        return self.io.read_int(self.rel(name))

    def read_freq_khz(self, name: str, hz_per_unit: int) -> int | None:
        """A frequency file in kHz (its unit: ``hz_per_unit`` Hz), None if unreadable."""
        try:
            return self.read_int(name) * hz_per_unit // 1000
        except ProfilerError:
            return None

    def write(self, name: str, value: str | int) -> None:
        self.io.write(self.rel(name), value)

    def save(self) -> SavedState:
        if not self.io.exists(self.dir):
            raise GovernorError(
                f"governor directory {self.io.path(self.dir)} does not exist"
                f" (processor {self.letter}, {self.kind})",
                "pick the board that matches this machine with --board (`coupprof boards`),"
                " or set COUPPROF_SYSFS_ROOT if sysfs is mounted elsewhere",
            )
        files = {}
        for name in self.state_files():
            if self.has(name):
                files[name] = self.io.read_raw(self.rel(name))
        return SavedState(self.kind, self.io.path(self.dir), files)

    def begin(self) -> None:
        if not self._begun:
            self._begin()
            self._begun = True

    def request_khz(self, freq_khz: int) -> None:
        """Per-layer mode: issue the write and return at once (skipped if unchanged)."""
        self.begin()
        if freq_khz != self._last_khz:
            self._write_khz(freq_khz)
            self._last_khz = freq_khz

    def set_khz(self, freq_khz: int, settle_s: float = 0.05, level: int | None = None) -> SetResult:
        """Per-run mode: write, then poll the effective frequency for up to `settle_s`.

        A mismatch is reported in the result's `warning`, never silently accepted.
        """
        self.begin()
        self._write_khz(freq_khz)
        self._last_khz = freq_khz
        deadline = time.monotonic() + settle_s
        effective = self.read_khz()
        while (effective is None or not freq_matches(freq_khz, effective)) \
                and time.monotonic() < deadline:
            time.sleep(0.001)
            effective = self.read_khz()
        warning = None
        if effective is None:
            warning = (f"processor {self.letter}: could not read back the effective frequency"
                       f" after requesting {freq_khz / 1000:g} MHz")
        elif not freq_matches(freq_khz, effective):
            warning = (f"processor {self.letter}: requested {freq_khz / 1000:g} MHz but"
                       f" {self._readback_name()} reads {effective / 1000:g} MHz after"
                       f" {settle_s * 1000:g} ms (thermal limit, another governor, or a"
                       " frequency the hardware does not offer)")
        return SetResult(self.letter, freq_khz, effective, level, warning)

    def available_khz(self) -> list[int]:
        """The frequencies the kernel offers (kHz, ascending); [] where it does not say."""
        return []

    def wait_in_effect(self, freq_khz: int, timeout_s: float) -> None:
        """Wait until ``freq_khz`` is the speed the processor runs at. A real kernel's
        read-back (`set_khz`) is all there is to wait for; a governor that models the
        transition delay behind the read-back overrides this."""
        return None

    def set_level(self, level: int, settle_s: float = 0.05) -> SetResult:
        """Set the 1-based level of the profile's frequency table."""
        if not 1 <= level <= len(self.proc.freqs_khz):
            raise GovernorError(f"level {level} is outside processor {self.letter}'s table",
                                f"valid levels: {self.proc.levels_text()}")
        return self.set_khz(self.proc.freqs_khz[level - 1], settle_s, level)

    def restore(self, saved: SavedState) -> None:
        self._restore(saved)
        self._begun = False
        self._last_khz = None

    def checks(self) -> list[Check]:
        """Doctor lines: do the files exist and can this process write them?"""
        out: list[Check] = []
        if not self.io.exists(self.dir):
            return [Check(f"{self.letter}: {self.io.path(self.dir)} missing", False,
                          "choose the right board with --board, or load the driver")]
        for name in self.state_files():
            if not self.has(name):
                continue
            p = self.io.path(self.rel(name))
            # effective ids: what a write by this process will be checked against
            writable = os.access(p, os.W_OK, effective_ids=os.access in os.supports_effective_ids)
            out.append(Check(f"{self.letter}: {p}", writable,
                             "" if writable else "grant write access to a group of yours with"
                             " the udev rule `coupprof doctor --board NAME --udev` prints, or"
                             " run as root"))
        return out

    def _readback_name(self) -> str:
        return "the kernel"

    def pick_method(self) -> str:
        """The method `begin` will use (subclasses that choose one override this)."""
        return self.method

    def describe(self) -> str:
        method = self.method
        if not method:
            try:
                method = self.pick_method()
            except Exception:  # describing must never fail; the files may be missing
                method = "?"
        return f"{self.kind}/{method} at {self.io.path(self.dir)}"


# ---- helpers shared by the back ends ---------------------------------------------

def write_limits(write_lo: Callable[[int], None], write_hi: Callable[[int], None],
                 cur_lo: int, cur_hi: int, new_lo: int, new_hi: int) -> None:
    """Move a (min, max) pair so that min <= max holds after every single write.

    The trap: going up from a pinned 600 MHz to 816 MHz by writing min first would
    briefly ask for min 816 > max 600, which older kernels refuse (EINVAL) and newer
    ones silently resolve. Writing the limit that widens the range first never does.
    Values are in whatever unit the caller's files use, as long as order is kept.
    """
    if new_lo > new_hi:
        raise GovernorError(f"internal: min {new_lo} above max {new_hi}")
    if new_lo > cur_hi:
        if new_hi != cur_hi:
            write_hi(new_hi)
        if new_lo != cur_lo:
            write_lo(new_lo)
    else:
        if new_lo != cur_lo:
            write_lo(new_lo)
        if new_hi != cur_hi:
            write_hi(new_hi)


class LimitFiles:
    """A governor's (slow, fast) pair of limit files and the values last read or written
    there, moved with `write_limits`. ``sign=-1`` where a larger number is slower (kgsl
    power levels); values are always the files' own numbers."""

    def __init__(self, gov: Governor, lo_file: str, hi_file: str, sign: int = 1) -> None:
        self.gov, self.lo_file, self.hi_file, self.sign = gov, lo_file, hi_file, sign
        self.lo = 0
        self.hi = 0

    def read(self) -> None:
        self.lo = self.gov.read_int(self.lo_file)
        self.hi = self.gov.read_int(self.hi_file)

    def set(self, lo: int, hi: int) -> None:
        s = self.sign

        def w_lo(v: int) -> None:
            self.gov.write(self.lo_file, s * v)
            self.lo = s * v

        def w_hi(v: int) -> None:
            self.gov.write(self.hi_file, s * v)
            self.hi = s * v

        write_limits(w_lo, w_hi, s * self.lo, s * self.hi, s * lo, s * hi)

    def restore(self, saved: SavedState, errors: list[ProfilerError]) -> None:
        """Back to the saved pair (re-read first: the files may have moved since)."""
        want_lo = parse_int(saved.text(self.lo_file))
        want_hi = parse_int(saved.text(self.hi_file))
        try:
            self.read()
            if want_lo is not None and want_hi is not None:
                self.set(want_lo, want_hi)
        except ProfilerError as err:
            errors.append(err)


def parse_int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def restore_errors(errors: list[ProfilerError], what: str) -> None:
    """Raise one GovernorError naming every file that could not be put back."""
    if errors:
        raise GovernorError(
            f"could not restore {what}: " + " | ".join(str(e) for e in errors),
            "the listed files keep coupprof's values; reboot or write them back by hand",
        )

