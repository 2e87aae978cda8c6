"""What coupprof says around the work (issue 28, item 9), as a user sees it: real commands
in subprocesses on the simulated board or a fake `host` sysfs tree.

- the "using the simulated board" notice is short, said at most once, and never in front
  of an error (a missing model is then the only line on stderr);
- Ctrl-C during `layers` says that the frequencies were restored (the governor files hold
  their original bytes again) and what was kept (the power trace so far);
- Ctrl-C during `sweep` says how many pairs were kept and the `--resume` command;
- on the simulated board the table's title names the board's cores and this machine's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from cli_runs import COUPPROF
from test_sweep_fakehost import build_fake_host

from profiler.boards.host import format_cpu_list
from profiler.platform import choose_board
from profiler.sim.executor import sim_cores


def _env(tmp: Path) -> dict[str, str]:
    # wide, so rich does not wrap the titles the tests read
    return {**os.environ, "COUPPROF_CACHE": str(tmp / "cache"), "COLUMNS": "200"}


def _run(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COUPPROF, *args], cwd=tmp, env=_env(tmp), capture_output=True,
                          text=True, timeout=300)


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def _until(check: Callable[[], bool], timeout_s: float = 120.0) -> None:
    end = time.monotonic() + timeout_s
    while not _holds(check):
        assert time.monotonic() < end, "timed out waiting for the command to get going"
        time.sleep(0.05)


def _holds(check: Callable[[], bool]) -> bool:
    try:
        return check()
    except ValueError:  # a file read while the command writes it
        return False


def _interrupt(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    return out, err


def test_a_missing_model_is_the_only_line(tmp_path: Path) -> None:
    r = _run(tmp_path, "layers", "--model", "nope.tflite", "--frames", "1")
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert len(lines) == 1, lines  # no board notice in front of it
    assert lines[0].startswith("coupprof layers: error: model file not found: nope.tflite")


def test_the_board_notice_is_short_and_said_once_and_the_title_names_both_cores(
        tmp_path: Path) -> None:
    r = _run(tmp_path, "layers", "-p", "B", "--frames", "1", "--warmup", "0",
             "--power", "none", "--csv", "b.csv")
    assert r.returncode == 0, r.stderr
    notices = [ln for ln in r.stderr.splitlines() if "simulated board" in ln]
    assert len(notices) == 1 and len(notices[0]) < 100, notices
    # B is on cores 4-5 of the simulated board; this machine's cores stand in for them
    board = choose_board("sim")
    b = board.processor("B")
    here = format_cpu_list(list(sim_cores(b)))
    assert list(b.cores) == [4, 5]
    title = " ".join(r.stdout.split())  # as one line, however rich wrapped it
    assert f"processor B (board cores 4-5, run on this machine's cores {here}, 1 thread)" \
        in title
    extra = json.loads((tmp_path / "b.json").read_text())["extra"]
    assert extra["board_cores"] == [4, 5] and extra["cores_text"] == here


def test_ctrl_c_in_layers_restores_the_governor_files(tmp_path: Path) -> None:
    fake = build_fake_host(tmp_path / "fake")
    before = _files(fake.sys)
    proc = subprocess.Popen(
        [COUPPROF, "layers", "--board", "host", "--sysfs-root", str(fake.sys), "-p", "B",
         "--freq", "1", "--frames", "100000", "--warmup", "0", "--csv", "b.csv"],
        cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    _until(lambda: fake.setspeed_khz("B") == 600_000)  # level 1 is set: measuring
    time.sleep(1.0)
    _, err = _interrupt(proc)
    last = err.strip().splitlines()[-1]
    assert last.startswith("coupprof layers: interrupted; no results written")
    assert "frequencies restored (B as before the run)" in last
    assert _files(fake.sys) == before  # every governor file holds its original bytes
    assert not (tmp_path / "b.csv").exists()


def test_ctrl_c_in_layers_names_the_power_trace_it_kept(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [COUPPROF, "layers", "-p", "B", "--frames", "100000", "--warmup", "0", "--method",
         "sliced", "--csv", "b.csv"], cwd=tmp_path, env=_env(tmp_path),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    trace = tmp_path / "b.trace"
    _until(lambda: (trace / "samples.bin").is_file())
    time.sleep(1.5)
    _, err = _interrupt(proc)
    last = err.strip().splitlines()[-1]
    assert last.startswith("coupprof layers: interrupted; no results written"), err
    assert last.endswith(f"kept the power trace so far: {trace.relative_to(tmp_path)}")
    assert trace.is_dir() and not (tmp_path / "b.csv").exists()


def test_ctrl_c_in_sweep_says_what_was_kept_and_how_to_resume(tmp_path: Path) -> None:
    fake = build_fake_host(tmp_path / "fake")
    before = _files(fake.sys)
    args = ["sweep", "--board", "host", "--sysfs-root", str(fake.sys), "--processors", "B",
            "--freqs", "1,2,3", "--frames", "1500", "--warmup", "0", "-o", "sw"]
    proc = subprocess.Popen([COUPPROF, *args], cwd=tmp_path, env=_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    csv = tmp_path / "sw" / "sweep.csv"
    _until(lambda: csv.is_file() and len(pd.read_csv(csv)) > 0)  # the first pair is in
    _, err = _interrupt(proc)
    lines = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert len(lines) == 1, err  # one line, not two
    kept = pd.read_csv(csv).groupby(["processor", "freq_level"]).ngroups
    assert kept in (1, 2)
    plural = "s" if kept > 1 else ""
    assert lines[0].startswith(f"coupprof sweep: interrupted; {kept} of 3 pairs measured; "
                               f"{kept} pair{plural} kept in sw/sweep.csv; to measure the rest: "
                               f"coupprof {' '.join(args)} --resume; ")
    assert lines[0].endswith("frequencies restored (B as before the run)")
    assert _files(fake.sys) == before
