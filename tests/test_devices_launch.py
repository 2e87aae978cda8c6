"""The launcher waits for this host's ranks after `mpiexec` has gone: a rank still putting
its levels back (in a process group of its own, which Hydra's end does not take) is given
until the stop's grace runs out, then killed, and the launcher reads the rank's files only
after that. Checked on real processes, started in sessions of their own as Hydra starts
ranks, with the pid files the shim writes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler.devices import launch as launch_mod


def _rank(status: Path, rank: int, code: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    (status / f"rank-{rank}.pid").write_text(f"{socket.gethostname()} {proc.pid}\n")
    return proc


def _reaper(procs: list[subprocess.Popen[bytes]]) -> None:
    # Our children stay zombies until waited for; Hydra's ranks are reaped by their proxy.
    for p in procs:
        p.poll()


def test_a_rank_still_restoring_is_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done = tmp_path / "restored"
    proc = _rank(tmp_path, 0, "import time, pathlib; time.sleep(0.5); "
                              f"pathlib.Path({str(done)!r}).write_text('yes')")
    alive = launch_mod._alive
    monkeypatch.setattr(launch_mod, "_alive", lambda pid: (proc.poll(), alive(pid))[1])
    launch_mod._end_local_ranks(tmp_path, 1, time.monotonic() + 10.0)
    # it ended by itself (its last write is there), well before the grace ran out
    assert done.read_text() == "yes"
    assert proc.wait(timeout=1) == 0


def test_a_rank_past_the_grace_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    procs = [_rank(tmp_path, r, "import signal, time; "
                                "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)")
             for r in range(2)]
    alive = launch_mod._alive
    monkeypatch.setattr(launch_mod, "_alive", lambda pid: (_reaper(procs), alive(pid))[1])
    t0 = time.monotonic()
    launch_mod._end_local_ranks(tmp_path, 2, t0 + 0.3)
    assert time.monotonic() - t0 < 5.0
    assert [p.wait(timeout=1) for p in procs] == [-signal.SIGKILL] * 2


def test_a_zombie_is_not_alive() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    while Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
        time.sleep(0.01)  # ended, not reaped
    assert not launch_mod._alive(proc.pid)
    proc.wait()
    assert not launch_mod._alive(proc.pid)
    assert launch_mod._alive(os.getpid())
