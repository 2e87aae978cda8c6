"""The `sim` governor: real cpufreq/devfreq code writing a temporary sysfs tree.

On the simulated board every software path is the real one: `SimTree` lays out
cpufreq policies and devfreq devices in a temporary directory, the ordinary
`CpufreqGovernor` / `DevfreqGovernor` write them, and `SimKernel` plays the
kernel's part after each write (current frequency follows the governor and the
limits; devfreq's userspace/ directory comes and goes with the userspace
governor). The kernel also keeps the time of each change so the frequency that
is *in effect* lags the write by the modelled transition delay (ARM-CO-UP
Table 10), which is what the simulated executor and `dvfs-latency` read.

A processor whose profile names the ``sim-driver`` governor has no tree: its clock is
picked by `SimDriver` from its own recent load, as an NVIDIA GPU's driver picks its SM
clock, and coupprof may read it but not set it (`SimDriverGovernor`).
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from governors.base import Check, Governor, SavedState
from governors.cpufreq import CpufreqGovernor
from governors.devfreq import DevfreqGovernor
from governors.sysfs_io import SysfsIO
from profiler.boards.model import Board, ProcessorSpec
from profiler.errors import BoardError
from profiler.sim import model as sim_model

#: The governor kind of a simulated processor whose clock its driver picks (read only).
DRIVER_KIND = "sim-driver"
CPU_GOVERNORS = "userspace performance powersave ondemand schedutil"
DEV_GOVERNORS = "userspace powersave performance simple_ondemand"


def emulated_kind(path: str) -> str:
    """Which real layout a sim governor path stands for."""
    if "cpufreq" in path:
        return "cpufreq"
    if "devfreq" in path:
        return "devfreq"
    raise BoardError(f"sim governor path '{path}' is neither a cpufreq policy nor a devfreq device",
                     "use devices/system/cpu/cpufreq/policyN or class/devfreq/NAME in the profile")


def _put(path: Path, text: str) -> None:
    """Write a file the simulated kernel owns whole, as sysfs shows it: a reader in another
    process (a launcher restoring a rank's levels) never sees it empty or half written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)


@dataclass
class _Transition:
    from_khz: int
    to_khz: int
    at_ns: int
    delay_ns: int


class SimKernel:
    """Applies the kernel's side of each write to the simulated tree."""

    def __init__(self, root: Path, board: Board, clock_ns: Callable[[], int] = time.perf_counter_ns):
        self.root = root
        self.board = board
        self.clock_ns = clock_ns
        self._boot_khz: dict[Path, int] = {}
        self._owner: dict[Path, ProcessorSpec] = {}
        self._last: dict[Path, _Transition] = {}
        self._lock = threading.Lock()

    def register(self, directory: Path, proc: ProcessorSpec, boot_khz: int) -> None:
        self._boot_khz[directory] = boot_khz
        self._owner[directory] = proc
        self._last[directory] = _Transition(boot_khz, boot_khz, 0, 0)

    def on_write(self, path: Path, value: str) -> None:
        directory = path.parent.parent if path.parent.name == "userspace" else path.parent
        if directory not in self._owner:
            return
        with self._lock:
            if (directory / "scaling_governor").exists():
                new_khz = self._settle_cpufreq(directory)
            else:
                new_khz = self._settle_devfreq(directory)
            self._note(directory, new_khz)

    def _settle_cpufreq(self, d: Path) -> int:
        gov = (d / "scaling_governor").read_text().strip()
        lo = int((d / "scaling_min_freq").read_text())
        hi = int((d / "scaling_max_freq").read_text())
        if gov == "userspace":
            text = (d / "scaling_setspeed").read_text().strip()
            want = int(text) if text.isdigit() else self._last[d].to_khz
            _put(d / "scaling_setspeed", str(want))
        else:
            _put(d / "scaling_setspeed", "<unsupported>")
            want = {"performance": hi, "powersave": lo}.get(gov, self._boot_khz[d])
        cur = min(max(want, lo), hi)
        _put(d / "scaling_cur_freq", str(cur))
        _put(d / "cpuinfo_cur_freq", str(cur))
        return cur

    def _settle_devfreq(self, d: Path) -> int:
        gov = (d / "governor").read_text().strip()
        lo = int((d / "min_freq").read_text())
        hi = int((d / "max_freq").read_text())
        user = d / "userspace"
        if gov == "userspace":
            if not user.exists():
                _put(user / "set_freq", (d / "cur_freq").read_text().strip())
            want = int((user / "set_freq").read_text())
        else:
            if user.exists():
                shutil.rmtree(user)
            want = {"performance": hi, "powersave": lo}.get(gov, self._boot_khz[d] * 1000)
        cur = min(max(want, lo), hi)
        _put(d / "cur_freq", str(cur))
        _put(d / "target_freq", str(cur))
        return cur // 1000

    def _note(self, d: Path, new_khz: int) -> None:
        prev = self._last[d]
        now = self.clock_ns()
        in_effect = self._effective(prev, now)
        if new_khz == prev.to_khz:
            return
        proc = self._owner[d]
        delay_us = 0.0
        if in_effect in proc.freqs_khz and new_khz in proc.freqs_khz:
            delay_us = sim_model.transition_delay_us(proc, in_effect, new_khz)
        self._last[d] = _Transition(in_effect, new_khz, now, int(delay_us * 1000))

    @staticmethod
    def _effective(t: _Transition, now_ns: int) -> int:
        return t.to_khz if now_ns - t.at_ns >= t.delay_ns else t.from_khz

    def effective_khz(self, directory: Path, now_ns: int | None = None) -> int:
        """Frequency in effect at `now_ns` (the last request once its delay has passed)."""
        with self._lock:
            t = self._last[directory]
        return self._effective(t, self.clock_ns() if now_ns is None else now_ns)


class SimTree:
    """A temporary sysfs tree for a simulated board, plus the kernel that drives it."""

    _shared: dict[str, SimTree] = {}

    def __init__(self, board: Board, root: Path | None = None,
                 clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        self.board = board
        self._own_dir = root is None
        self.root = Path(tempfile.mkdtemp(prefix=f"coupprof-sim-{board.name}-")) if root is None \
            else Path(root)
        self.kernel = SimKernel(self.root, board, clock_ns)
        self.io = SysfsIO(self.root, on_write=self.kernel.on_write)
        for proc in board.processors.values():
            if proc.governor is not None and proc.governor.kind == "sim":
                self._build(proc)

    @classmethod
    def shared(cls, board: Board) -> SimTree:
        """One tree per board per process, removed when the process exits."""
        tree = cls._shared.get(board.name)
        if tree is None:
            tree = cls._shared[board.name] = cls(board)
            atexit.register(tree.remove)
        return tree

    @classmethod
    def share_at(cls, board: Board, root: Path) -> SimTree:
        """Make this process's tree for `board` (what `shared` returns) live at `root`, kept
        after the process ends: a simulated board that is one of several devices, whose
        levels are checked (and restored, if its process died) from outside it."""
        tree = cls._shared[board.name] = cls(board, root)
        return tree

    def remove(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.root, ignore_errors=True)

    def _build(self, proc: ProcessorSpec) -> None:
        assert proc.governor is not None
        d = self.root / proc.governor.path
        if d.exists():  # a kept tree, opened again (`share_at`): as its files say now
            cpu = (d / "scaling_cur_freq").exists()
            cur_file = d / ("scaling_cur_freq" if cpu else "cur_freq")
            text = cur_file.read_text().strip()
            if not text.isdigit():
                raise BoardError(f"the simulated board's file {cur_file} holds {text!r}, "
                                 "not a frequency",
                                 "remove the folder to lay the simulated board out anew")
            cur = int(text)
            self.kernel.register(d, proc, cur if cpu else cur // 1000)
            return
        freqs = list(proc.freqs_khz)
        if not freqs:
            raise BoardError(f"simulated processor {proc.letter} has a sim governor but no freqs_khz")
        boot = freqs[len(freqs) // 2]  # an ondemand-ish resting point, inside the limits
        if emulated_kind(proc.governor.path) == "cpufreq":
            cores = " ".join(str(c) for c in proc.cores)
            for name, text in {
                "affected_cpus": cores, "related_cpus": cores,
                "cpuinfo_min_freq": str(freqs[0]), "cpuinfo_max_freq": str(freqs[-1]),
                "cpuinfo_transition_latency": "40000",
                "scaling_available_frequencies": " ".join(map(str, freqs)),
                "scaling_available_governors": CPU_GOVERNORS,
                "scaling_driver": "cpufreq-dt", "scaling_governor": "schedutil",
                "scaling_min_freq": str(freqs[0]), "scaling_max_freq": str(freqs[-1]),
                "scaling_setspeed": "<unsupported>",
                "scaling_cur_freq": str(boot), "cpuinfo_cur_freq": str(boot),
            }.items():
                _put(d / name, text)
        else:
            hz = [f * 1000 for f in freqs]
            for name, text in {
                "available_frequencies": " ".join(map(str, hz)),
                "available_governors": DEV_GOVERNORS, "governor": "simple_ondemand",
                "min_freq": str(hz[0]), "max_freq": str(hz[-1]),
                "cur_freq": str(boot * 1000), "target_freq": str(boot * 1000),
                "polling_interval": "50", "name": d.name,
            }.items():
                _put(d / name, text)
        self.kernel.register(d, proc, boot)


class SimGovernor(Governor):
    """A real cpufreq or devfreq governor pointed at the simulated board's tree."""

    kind = "sim"

    def __init__(self, proc: ProcessorSpec, tree: SimTree) -> None:
        assert proc.governor is not None
        super().__init__(proc, tree.io, proc.governor.path, clock_ns=tree.kernel.clock_ns)
        self.tree = tree
        inner_cls = CpufreqGovernor if emulated_kind(proc.governor.path) == "cpufreq" \
            else DevfreqGovernor
        self.inner: Governor = inner_cls(proc, tree.io, proc.governor.path,
                                         clock_ns=tree.kernel.clock_ns)

    def state_files(self) -> list[str]:
        return self.inner.state_files()

    def _begin(self) -> None:
        self.inner.begin()
        self.method = f"sim-{self.inner.kind}-{self.inner.method}"

    def _write_khz(self, freq_khz: int) -> None:
        self.inner._write_khz(freq_khz)

    def read_khz(self) -> int | None:
        return self.inner.read_khz()

    def _restore(self, saved: SavedState) -> None:
        self.inner.restore(saved)

    def effective_khz(self, now_ns: int | None = None) -> int:
        """Frequency in effect now, lagging writes by the modelled transition delay."""
        return self.tree.kernel.effective_khz(self.tree.root / self.dir, now_ns)

    def wait_in_effect(self, freq_khz: int, timeout_s: float) -> None:
        """The read-back changes at once; the modelled speed only after the transition
        delay (ARM-CO-UP Table 10: up to ~4.5 ms)."""
        deadline = time.monotonic() + timeout_s
        while self.effective_khz() != freq_khz and time.monotonic() < deadline:
            time.sleep(0.0002)

    def describe(self) -> str:
        return f"sim ({self.inner.kind} layout in {self.tree.root})"


#: (kHz of the processor or None = its top level/nominal point, kHz of its host or None)
Levels = tuple[int | None, int | None]


def level_reader(board: Board, proc: ProcessorSpec) -> Callable[[], Levels]:
    """The frequencies in effect now for `proc` and its host, from their sim governors
    (a ``sim-driver`` processor's: its driver's pick)."""
    def reader(p: ProcessorSpec | None) -> Callable[[], int | None]:
        if p is not None and p.governor is not None and p.governor.kind == DRIVER_KIND:
            return SimDriver.shared(board, p).effective_khz
        if p is None or not p.has_dvfs or p.governor is None or p.governor.kind != "sim":
            return lambda: None
        gov = SimGovernor(p, SimTree.shared(board))
        table = set(p.freqs_khz)
        return lambda: (khz if (khz := gov.effective_khz()) in table else None)

    own = reader(proc)
    host = reader(board.processors.get(proc.host)) if proc.host else (lambda: None)
    return lambda: (own(), host())


def busy_sink(board: Board, proc: ProcessorSpec) -> Callable[[int, int, int], None] | None:
    """Where a call on `proc` reports what it does (start, work and whole time in ns): its
    driver's (`SimDriver.busy`) for a ``sim-driver`` processor, else None."""
    if proc.governor is None or proc.governor.kind != DRIVER_KIND:
        return None
    return SimDriver.shared(board, proc).busy


# -- a clock the driver picks -----------------------------------------------------------


@dataclass(frozen=True)
class DriverPolicy:
    """How `SimDriver` picks the level. Every ``poll_s`` it looks at the calls that began
    in the last ``window_s``: where they kept the processor occupied for ``occupied`` of
    that time or more and it worked for ``sustained`` of their time or more, the top
    level; otherwise the clock wanders one level up or down per poll among the levels
    under the top (a seeded draw: a lightly loaded GPU's clock is its power manager's
    business; on an H100 it spread over 345-885 MHz within one table, docs/fused.md).

    A call's work is its modelled time less its fixed costs (dispatch and
    synchronisation, while the processor waits on the host). On the simulated board's G
    the default model's whole calls work 0.61-0.62 of their time at every level, a fused
    table's rounds 0.46-0.53 over any 1.5 s (docs/fused.md, "The accelerator's clock"),
    so the frames of a run go to the top and the rounds wander below it. The share is of
    the calls' modelled time, so a slow or busy host does not move it."""

    poll_s: float = 0.1
    window_s: float = 1.5
    sustained: float = 0.57
    occupied: float = 0.5
    seed: int = 0


class SimDriver:
    """The clock of a ``sim-driver`` processor, picked from its load (`DriverPolicy`).

    The executor reports each call (`busy`: when it began, its work and its whole
    modelled time); `effective_khz` makes the decisions due since the last one, in
    order, and gives the level in effect. One per board and processor in a process
    (`shared`), as one driver owns a device."""

    _shared: dict[tuple[str, str], SimDriver] = {}

    def __init__(self, proc: ProcessorSpec, policy: DriverPolicy | None = None,
                 clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        if not proc.freqs_khz:
            raise BoardError(f"simulated processor {proc.letter} has governor "
                             f"'{DRIVER_KIND}' but no freqs_khz for its driver to pick from")
        self.proc = proc
        self.policy = policy or DriverPolicy()
        self.clock_ns = clock_ns
        self.levels = tuple(proc.freqs_khz)
        self._level = len(self.levels) // 2  # where it boots, as SimTree's
        self._tick_ns: int | None = None
        self._calls: deque[tuple[int, int, int]] = deque()  # (t0, work, whole) ns
        self._rng = random.Random(self.policy.seed)
        self._lock = threading.Lock()

    @classmethod
    def shared(cls, board: Board, proc: ProcessorSpec) -> SimDriver:
        key = (board.name, proc.letter)
        got = cls._shared.get(key)
        if got is None:
            got = cls._shared[key] = cls(proc)
        return got

    def busy(self, t0_ns: int, work_ns: int, call_ns: int) -> None:
        """A call began at ``t0_ns``: it works ``work_ns`` of its ``call_ns``."""
        with self._lock:
            self._calls.append((t0_ns, max(work_ns, 0), max(call_ns, 0)))

    def load(self, now_ns: int) -> tuple[float, float]:
        """(occupied, work share) of the calls that began in the window before
        ``now_ns``: their time over the window's, their work over their time."""
        with self._lock:
            return self._load(now_ns)

    def effective_khz(self, now_ns: int | None = None) -> int:
        """The clock in effect at ``now_ns`` (default: now)."""
        now = self.clock_ns() if now_ns is None else now_ns
        with self._lock:
            self._decide_until(now)
            return self.levels[self._level]

    def _load(self, now_ns: int) -> tuple[float, float]:
        w = int(self.policy.window_s * 1e9)
        while self._calls and self._calls[0][0] < now_ns - w:
            self._calls.popleft()
        mine = [c for c in self._calls if c[0] <= now_ns]
        whole = sum(c[2] for c in mine)
        return min(whole / w, 1.0), (sum(c[1] for c in mine) / whole if whole else 0.0)

    def _decide_until(self, now_ns: int) -> None:
        poll = int(self.policy.poll_s * 1e9)
        if self._tick_ns is None:
            self._tick_ns = now_ns
            return
        due = (now_ns - self._tick_ns) // poll
        if due > 1000:  # idle for minutes: only the last decisions can matter
            self._tick_ns += (due - 1000) * poll
            due = 1000
        top = len(self.levels) - 1
        for _ in range(max(due, 0)):
            self._tick_ns += poll
            occupied, share = self._load(self._tick_ns)
            if occupied >= self.policy.occupied and share >= self.policy.sustained:
                self._level = top
            else:
                step = self._rng.choice((-1, 1))
                self._level = min(max(self._level + step, 0), max(top - 1, 0))


class SimDriverGovernor(Governor):
    """The ``sim-driver`` governor: reads the clock `SimDriver` picks, and cannot set it
    (`settable` is False: `governors.writable_governor` refuses ``--freq``, as for an
    NVIDIA GPU's)."""

    kind = DRIVER_KIND
    settable = False

    def __init__(self, proc: ProcessorSpec, driver: SimDriver) -> None:
        super().__init__(proc, SysfsIO(Path(".")), "", clock_ns=driver.clock_ns)
        self.driver = driver
        self.method = "driver"

    def state_files(self) -> list[str]:
        return []

    def save(self) -> SavedState:
        return SavedState(self.kind, Path(), {})

    def _begin(self) -> None:
        raise BoardError(f"cannot set frequencies: processor {self.letter}'s clock is "
                         "picked by its (simulated) driver from its load", "drop --freq")

    def _write_khz(self, freq_khz: int) -> None:
        self._begin()

    def read_khz(self) -> int | None:
        return self.driver.effective_khz()

    def effective_khz(self, now_ns: int | None = None) -> int:
        return self.driver.effective_khz(now_ns)

    def _restore(self, saved: SavedState) -> None:
        pass

    def checks(self) -> list[Check]:
        return [Check(f"{self.letter}: clock picked by the simulated driver from its load "
                      "(read only)", True)]

    def describe(self) -> str:
        return f"{DRIVER_KIND} (clock picked by the simulated driver from the load; read only)"
