"""Whether each device of a devices file can be used, and what it is: its host reached,
its board profile found, its power source and marker valid, its host cores present, and
MPI installed (`coupprof doctor --devices`; `coupprof boards --devices` shows the boards).

A local device is reachable. A remote one must resolve and answer on TCP port 22 within a
short timeout, since `mpiexec` starts its rank over ssh; whether ssh lets us in is MPI's
to find (`coupprof run --devices` tries one rank there before it starts). Nothing is
opened: a local device's power source and marker are built as its rank builds them, a
remote device's are checked for their form only (its hardware is not on this machine).
A failed check carries the exit code it gives: 2 for bad input (a board that does not
exist, a malformed spec) and, as issue 27 and `run --devices` have it, for a host that
cannot be reached; 3 is kept for permission problems (profiler/errors.py).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from profiler.devices.spec import Device, DeviceSet
from profiler.errors import BadInputError, ProfilerError

if TYPE_CHECKING:
    from profiler.boards.model import Board

SSH_PORT = 22
REACH_TIMEOUT_S = 2.0
BAD_INPUT = UNREACHABLE = 2
REACH_FIX = ("check the host name in the devices file, that the host is up and runs sshd, "
             "and that `ssh HOST true` works from here without a password")


@dataclass(frozen=True)
class Check:
    """One thing checked about a device. `ok` None: information only."""

    what: str  # "host" | "board" | "power" | "marker" | "cores"
    ok: bool | None
    detail: str
    fix: str = ""
    exit_code: int = 0  # the command's exit code when this check fails

    @classmethod
    def failed(cls, what: str, err: ProfilerError) -> Check:
        return cls(what, False, err.message, err.fix or "",
                   BAD_INPUT if isinstance(err, BadInputError) else err.exit_code)


@dataclass(frozen=True)
class DeviceReport:
    device: Device
    checks: tuple[Check, ...]
    board: Board | None  # its profile, where it loaded

    @property
    def problems(self) -> list[Check]:
        return [c for c in self.checks if c.ok is False]


@dataclass(frozen=True)
class DevicesReport:
    devices: DeviceSet
    mpi: Check
    reports: tuple[DeviceReport, ...]

    @property
    def problems(self) -> list[tuple[Device | None, Check]]:
        """(device, check) per failed check; device None for MPI itself."""
        out: list[tuple[Device | None, Check]] = [(None, self.mpi)] if self.mpi.ok is False else []
        return out + [(r.device, c) for r in self.reports for c in r.problems]

    @property
    def exit_code(self) -> int:
        """0: every device usable; else the highest code of its problems (2, or 3 for a
        permission problem)."""
        codes = {c.exit_code for _, c in self.problems}
        if not codes:
            return 0
        return max(codes)


def reach(host: str, port: int = SSH_PORT, timeout_s: float = REACH_TIMEOUT_S) -> Check:
    """Resolve `host` and open (then close) a TCP connection to its `port`."""
    try:
        addrs = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        why = getattr(err, "strerror", None) or str(err)
        return Check("host", False, f"host {host} does not resolve ({why})", REACH_FIX,
                     UNREACHABLE)
    address = addrs[0][4][0]
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except TimeoutError:
        return Check("host", False, f"host {host} ({address}): TCP port {port} (ssh) did not "
                     f"answer within {timeout_s:g} s", REACH_FIX, UNREACHABLE)
    except OSError as err:
        return Check("host", False, f"host {host} ({address}): TCP port {port} (ssh): "
                     f"{err.strerror or err}", REACH_FIX, UNREACHABLE)
    return Check("host", True, f"{host} ({address}): TCP port {port} (ssh) answers")


def reach_all(hosts: Iterable[str], port: int = SSH_PORT,
              timeout_s: float = REACH_TIMEOUT_S) -> dict[str, Check]:
    """`reach` each host at once, each in a daemon thread: a name lookup has no timeout
    of its own, so one that hangs is reported after the timeout and left behind."""
    results: dict[str, Check] = {}
    threads = []

    def probe(host: str) -> None:
        results[host] = reach(host, port, timeout_s)

    for host in dict.fromkeys(hosts):
        t = threading.Thread(target=probe, args=(host,), daemon=True, name=f"reach {host}")
        t.start()
        threads.append((host, t))
    wait_s = 2 * timeout_s + 1.0  # the lookup, then the connect
    deadline = time.monotonic() + wait_s
    for _, t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return {host: results.get(host) or Check(
        "host", False, f"host {host}: no answer (name lookup and connect) within "
        f"{wait_s:g} s", REACH_FIX, UNREACHABLE) for host, _ in threads}


def load_device_board(device: Device) -> Board:
    """The device's board profile, as its rank loads it (no accelerator probing)."""
    from profiler.platform import choose_board

    return choose_board(device.board, device.sysfs_root, letters=())


def _board(device: Device) -> tuple[Check, Board | None]:
    if device.board == "host" and not device.local:
        return Check("board", None, "host: read from the device's own /sys when its rank "
                     "starts (not checkable from here)"), None
    try:
        board = load_device_board(device)
    except ProfilerError as err:
        return Check.failed("board", err), None
    where = "" if device.local else " (the profile found here; the host needs the same)"
    return Check("board", True, f"{board.name}: {' '.join(board.processors)}"
                 + (" (simulated)" if board.simulated else "") + where), board


def default_specs(device: Device, simulated: bool) -> tuple[str, str]:
    """The power source and marker a device's rank uses: its own, else the defaults
    (`profiler.measure.hardware.open_power`: sim on a simulated board, else none; a sim
    source is marked by its virtual logger's own input)."""
    power = device.power or ("sim" if simulated else "none")
    marker = device.marker or ("sim" if power.split(":")[0].strip().lower() == "sim" else "none")
    return power, marker


def _no_logger(level: int) -> None:
    """A sim marker's sink for a marker that is built to check its spec, never driven."""


def _specs(device: Device, board: Board | None) -> list[Check]:
    """The marker and power source: built (not opened) where the device is local and its
    board loaded, as its rank builds them; else checked for their form."""
    from profiler.markers import open_marker, parse_marker_spec
    from profiler.power.sources import kinds, spec_fix

    power, marker = default_specs(device, board is not None and board.simulated)
    local = device.local and board is not None
    try:
        # built, never opened: a sim marker's sink (its virtual logger) is the rank's
        open_marker(marker, sim_sink=_no_logger) if local else parse_marker_spec(marker)
        marker_check = Check("marker", True, marker + ("" if local else " (form only)"))
    except ProfilerError as err:
        marker_check = Check.failed("marker", err)
    if device.local and board is not None and marker_check.ok:
        from profiler.measure.hardware import open_power

        try:
            session, _ = open_power(board, device.power, device.marker)
        except ProfilerError as err:
            return [Check.failed("power", err), marker_check]
        if session is not None and not session.streaming:
            return [Check("power", True, f"{power} (a counter: energy over the measured "
                          "frames, so give enough of them for many counter updates)"),
                    marker_check]
        return [Check("power", True, power), marker_check]
    why = (f"its hardware is on {device.host}" if not device.local else
           "no board to build it for" if board is None else "its marker is invalid")
    kind = power.split(":")[0].strip().lower()
    if kind in (*kinds(), "auto"):
        power_check = Check("power", True, f"{power} (form only: {why})")
    else:
        power_check = Check("power", False, f"unknown power source {power!r}", spec_fix(),
                            BAD_INPUT)
    return [power_check, marker_check]


def _cores(device: Device) -> Check | None:
    if not device.cores:
        return None
    if not device.local:
        return Check("cores", None, f"{list(device.cores)} (on {device.host}, not checked)")
    have = os.sched_getaffinity(0)
    missing = sorted(set(device.cores) - have)
    if missing:
        return Check("cores", False, f"cores {missing} are not on this host (it has "
                     f"{sorted(have)})", "give each local device cores this machine has",
                     BAD_INPUT)
    return Check("cores", True, str(list(device.cores)))


def mpi_check() -> Check:
    from profiler.devices.launch import MPI_FIX, find_mpiexec, mpi_installed

    if mpi_installed():
        return Check("mpi", True, f"mpi4py and {find_mpiexec()}")
    return Check("mpi", False, "MPI is not installed (mpi4py and mpiexec)", MPI_FIX, BAD_INPUT)


def check_devices(devices: DeviceSet, timeout_s: float = REACH_TIMEOUT_S) -> DevicesReport:
    """Every device's checks, remote hosts probed at once."""
    reached = reach_all((d.host for d in devices.devices if not d.local), timeout_s=timeout_s)
    reports = []
    for d in devices.devices:
        host = reached[d.host] if not d.local else Check("host", True, f"{d.host} (local)")
        board_check, board = _board(d)
        checks = [host, board_check, *_specs(d, board)]
        cores = _cores(d)
        if cores is not None:
            checks.append(cores)
        reports.append(DeviceReport(d, tuple(checks), board))
    return DevicesReport(devices, mpi_check(), tuple(reports))
