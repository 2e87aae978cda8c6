"""Start one MPI rank per device part through `mpiexec`, and collect how each ended.

`launch(module, args, ranks, ...)` runs ``python -m MODULE ARGS`` as ``ranks`` MPI ranks
(MPMD form: one block per rank, so each rank gets its own host, host cores and
environment). Every rank starts through this module's own ``__main__`` (the *shim*): it
pins itself to its cores before anything is imported (LiteRT's worker threads inherit
the affinity), writes ``STATUS_DIR/rank-R.pid``, runs the module, and writes its exit
code to ``STATUS_DIR/rank-R.exit`` when it ends, so the launcher knows each rank's end; a
rank with no such file died (killed, or `os._exit`). The ranks get a clean environment
(`rank_env`), not the caller's. SIGINT and SIGTERM of the launcher, and SIGTERM at the
timeout, go on to `mpiexec` and straight to the ranks on this host; `STOP_GRACE_S` later
the ranks still running are killed, and the launcher returns only once this host's
ranks have ended.

MPI is an extra (``pip install 'coupprof[devices]'``): `require_mpi` says so in one line
where mpi4py or `mpiexec` is missing. MPICH's Hydra `mpiexec` kills the other ranks
when one dies; what the ranks wrote as they went stays (docs/devices.md).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from profiler.errors import BadInputError

MPI_FIX = "pip install 'coupprof[devices]'"
#: variables a rank keeps from the launcher's environment (the rest is dropped)
KEPT_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR",
            "PYTHONPATH", "VIRTUAL_ENV", "TERM")
KEPT_PREFIXES = ("COUPPROF_", "MPI4PY_")  # mpi4py's own settings: which libmpi, its rc
#: Hydra's own lines about a rank's end (shown only in `LaunchResult.log`)
_HYDRA_NOISE = re.compile(r"^(=+|=\s.*|YOUR APPLICATION TERMINATED.*|This typically refers.*|"
                          r"Please see the FAQ.*|\[mpiexec@.*|\s*)$")
STOP_GRACE_S = 10.0  # after a forwarded signal, how long mpiexec has before its group is killed


@dataclass
class LaunchResult:
    """How an `mpiexec` run ended, rank by rank."""

    ranks: int
    returncode: int  # mpiexec's own (non-zero when any rank failed or was killed)
    exit_codes: list[int | None]  # per rank: its exit code; None: it died without one
    wall_s: float
    signalled: int | None = None  # SIGINT/SIGTERM the launcher got and passed on
    timed_out: bool = False
    log: list[str] = field(default_factory=list)  # mpiexec's last lines (Hydra's included)

    @property
    def dead(self) -> list[int]:
        """Ranks that ended without an exit code (killed, or `os._exit`)."""
        return [r for r, c in enumerate(self.exit_codes) if c is None]

    @property
    def failed(self) -> list[int]:
        """Ranks that died or exited non-zero."""
        return [r for r, c in enumerate(self.exit_codes) if c != 0]

    @property
    def ok(self) -> bool:
        return (self.returncode == 0 and not self.failed and self.signalled is None
                and not self.timed_out)


def _have_mpi4py() -> bool:
    try:  # the package only: MPI itself starts with `from mpi4py import MPI`
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


def mpi_installed() -> bool:
    """mpi4py importable and an `mpiexec` found (MPI is not started)."""
    return _have_mpi4py() and find_mpiexec() is not None


def find_mpiexec() -> Path | None:
    """The `mpiexec` beside this Python (the `mpich` wheel's), else the first on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("mpiexec")
    return Path(found) if found else None


def require_mpi() -> Path:
    """`mpiexec`'s path; one BadInputError line where MPI is not installed."""
    exe = find_mpiexec()
    if not _have_mpi4py() or exe is None:
        raise BadInputError("MPI is not installed", MPI_FIX)
    return exe


def rank_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment for the ranks: the launcher's basics (`KEPT_ENV`, COUPPROF_*)
    and ``extra``; unbuffered output, so a killed rank's last lines are not lost."""
    env = {k: v for k, v in os.environ.items()
           if k in KEPT_ENV or k.startswith(KEPT_PREFIXES)}
    env["PYTHONUNBUFFERED"] = "1"
    if os.geteuid() == 0:  # CI and containers: Open MPI's mpiexec refuses root without these
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update(extra or {})
    return env


def command(module: str, args: Sequence[str], ranks: int, *,
            cores: Sequence[Sequence[int]] | None = None, hosts: Sequence[str] | None = None,
            envs: Sequence[Mapping[str, str]] | None = None,
            status_dir: Path | None = None, mpiexec: Path | None = None) -> list[str]:
    """The `mpiexec` command line `launch` runs (MPMD: one ``-n 1`` block per rank)."""
    exe = mpiexec or require_mpi()
    cmd = [str(exe)]
    for r in range(ranks):
        if r:
            cmd.append(":")
        cmd += ["-n", "1"]
        if hosts and hosts[r] not in ("", "localhost"):
            cmd += ["-host", hosts[r]]
        shim = [sys.executable, "-m", "profiler.devices.launch", "--rank", str(r)]
        if cores and cores[r]:
            shim += ["--pin", ",".join(str(c) for c in cores[r])]
        if status_dir is not None:
            shim += ["--status-dir", str(status_dir)]
        for key, value in (envs[r] if envs else {}).items():
            shim += ["--env", f"{key}={value}"]
        cmd += [*shim, "--", module, *args]
    return cmd


def launch(module: str, args: Sequence[str], ranks: int, *,
           cores: Sequence[Sequence[int]] | None = None, hosts: Sequence[str] | None = None,
           env: Mapping[str, str] | None = None,
           envs: Sequence[Mapping[str, str]] | None = None, timeout_s: float | None = None,
           status_dir: Path | None = None, echo: bool = True) -> LaunchResult:
    """Run ``python -m module *args`` as ``ranks`` MPI ranks and wait for them.

    ``cores[r]``: host cores rank r is pinned to (empty: any); ``hosts[r]``: its host
    (MPI must reach it); ``env``: added to the ranks' clean environment (`rank_env`);
    ``envs[r]``: added to rank r's alone (the shim sets it and starts again, so that the
    dynamic loader sees it too: ``LD_LIBRARY_PATH``, a Vulkan layer's choice of GPU);
    ``timeout_s``: then the ranks are stopped as by SIGTERM, and killed `STOP_GRACE_S`
    later (``timed_out``);
    ``status_dir``: where the ranks' exit codes are written (default: a temporary
    directory); ``echo``: the ranks' output goes on to stderr as it comes (Hydra's
    messages about a rank's end are kept in ``log`` only).
    """
    if ranks < 1:
        raise ValueError(f"need at least one rank, not {ranks}")
    for what, seq in (("cores", cores), ("hosts", hosts), ("envs", envs)):
        if seq is not None and len(seq) != ranks:
            raise ValueError(f"{what} has {len(seq)} entries for {ranks} ranks")
    exe = require_mpi()
    with contextlib.ExitStack() as stack:
        if status_dir is None:
            import tempfile

            status_dir = Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="coupprof-ranks-")))
        status_dir.mkdir(parents=True, exist_ok=True)
        for r in range(ranks):
            (status_dir / f"rank-{r}.exit").unlink(missing_ok=True)
            (status_dir / f"rank-{r}.pid").unlink(missing_ok=True)
        cmd = command(module, args, ranks, cores=cores, hosts=hosts, envs=envs,
                      status_dir=status_dir, mpiexec=exe)
        return _run(cmd, ranks, rank_env(env), timeout_s, status_dir, echo)


def _run(cmd: list[str], ranks: int, env: dict[str, str], timeout_s: float | None,
         status_dir: Path, echo: bool) -> LaunchResult:
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    log: deque[str] = deque(maxlen=200)
    reader = threading.Thread(target=_pump, args=(proc, log, echo), daemon=True)
    reader.start()
    got: list[tuple[int, float]] = []  # (signal, when) passed on to mpiexec

    def forward(signum: int, _frame: FrameType | None) -> None:
        got.append((signum, time.monotonic()))
        _signal_all(proc, status_dir, ranks, signum)

    old = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, forward)
    timed_out = False
    stopped_at: float | None = None  # the timeout's SIGTERM

    def stop_began() -> float | None:
        """When the ranks were first told to stop (a signal from outside, or the timeout)."""
        return got[0][1] if got else stopped_at
    try:
        while proc.poll() is None:
            elapsed = time.monotonic() - t0
            if timeout_s is not None and elapsed > timeout_s and not timed_out:
                # as a signal from outside: each rank puts its levels back and writes
                timed_out, stopped_at = True, time.monotonic()
                _signal_all(proc, status_dir, ranks, signal.SIGTERM)
            first = stop_began()
            if first is not None and time.monotonic() - first > STOP_GRACE_S:
                _kill_all(proc, status_dir, ranks)  # they had their time to restore and write
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.1)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if proc.poll() is None:  # an exception here: leave no rank behind
            _kill_all(proc, status_dir, ranks)
            proc.wait()
        # Hydra has gone; a rank it could not reach is not left running either.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        # Hydra may end before a rank in its own process group has finished restoring its
        # levels: wait for the ranks here, so that what the caller reads (and restores in
        # their place) is not being written at the same time.
        grace_end = (stop_began() or time.monotonic()) + STOP_GRACE_S
        _end_local_ranks(status_dir, ranks, grace_end)
        reader.join(timeout=5)
    codes = [_exit_code(status_dir / f"rank-{r}.exit") for r in range(ranks)]
    return LaunchResult(ranks, proc.returncode, codes, time.monotonic() - t0,
                        got[0][0] if got else None, timed_out, list(log))


def _signal_all(proc: subprocess.Popen[bytes], status_dir: Path, ranks: int,
                signum: int) -> None:
    """``signum`` to mpiexec, and at once to the ranks on this host (not when Hydra gets
    to it)."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signum)
    _send([pid for _, pid in _local_ranks(status_dir, ranks)], signum)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _kill_all(proc: subprocess.Popen[bytes], status_dir: Path, ranks: int) -> None:
    """mpiexec's group, and the ranks on this host that have not ended (Hydra puts each
    rank in a process group of its own)."""
    _send([pid for r, pid in _local_ranks(status_dir, ranks)
           if not (status_dir / f"rank-{r}.exit").exists()], signal.SIGKILL)
    _kill_group(proc)


def _send(pids: list[int], signum: int) -> None:
    """``signum`` to each of ``pids`` that is still there (and ours to signal)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _end_local_ranks(status_dir: Path, ranks: int, grace_end: float) -> None:
    """Wait until this host's ranks have ended: until ``grace_end`` (monotonic) for them to
    end by themselves, then SIGKILL, then a few seconds for the kernel to take them."""
    pids = [pid for _, pid in _local_ranks(status_dir, ranks)]
    killed = False
    hard_end = max(grace_end, time.monotonic()) + 5.0
    while (left := [p for p in pids if _alive(p)]) and time.monotonic() < hard_end:
        if not killed and time.monotonic() >= grace_end:
            killed = True
            _send(left, signal.SIGKILL)
        time.sleep(0.02)


def _pump(proc: subprocess.Popen[bytes], log: deque[str], echo: bool) -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.decode(errors="replace").rstrip("\n")
        log.append(line)
        if echo and not _HYDRA_NOISE.match(line) and "BAD TERMINATION" not in line \
                and "CLEANING UP" not in line and "EXIT CODE:" not in line \
                and "PID " not in line and "YOU CAN IGNORE" not in line:
            print(line, file=sys.stderr, flush=True)


def _local_ranks(status_dir: Path, ranks: int) -> list[tuple[int, int]]:
    """(rank, pid) of the ranks on this host that have started (the shim writes
    ``rank-R.pid``)."""
    here = socket.gethostname()
    out = []
    for r in range(ranks):
        with contextlib.suppress(FileNotFoundError, ValueError):
            host, pid = (status_dir / f"rank-{r}.pid").read_text().split()
            if host == here:
                out.append((r, int(pid)))
    return out


def _exit_code(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


# -- the shim each rank starts through -------------------------------------------------


def _shim(argv: list[str]) -> int:
    """``--rank R [--pin CORES] [--status-dir DIR] [--env K=V ...] -- MODULE ARGS``: set
    the rank's own variables (starting again where they are not yet set), pin, run MODULE
    as ``__main__``, write the exit code."""
    import runpy

    sep = argv.index("--")
    opts, rest = argv[:sep], argv[sep + 1:]
    own = dict(opts[i + 1].split("=", 1) for i, o in enumerate(opts) if o == "--env")
    if any(os.environ.get(k) != v for k, v in own.items()):
        # exec, not os.environ: glibc reads LD_LIBRARY_PATH once, at the process's start
        os.execve(sys.executable, [sys.executable, "-m", "profiler.devices.launch", *argv],
                  {**os.environ, **own})
    rank = int(opts[opts.index("--rank") + 1])
    if "--pin" in opts:
        os.sched_setaffinity(0, {int(c) for c in opts[opts.index("--pin") + 1].split(",")})
    status = Path(opts[opts.index("--status-dir") + 1]) if "--status-dir" in opts else None
    if status is not None:
        (status / f"rank-{rank}.pid").write_text(f"{socket.gethostname()} {os.getpid()}\n")
    code = 1
    try:
        sys.argv = rest
        runpy.run_module(rest[0], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    finally:
        if status is not None:
            tmp = status / f"rank-{rank}.exit.tmp"
            tmp.write_text(f"{code}\n")
            tmp.replace(status / f"rank-{rank}.exit")
    return code


if __name__ == "__main__":
    sys.exit(_shim(sys.argv[1:]))
