"""Shared by the CLI tests that run coupprof as a subprocess: `run_coupprof` (exit 0
checked, a cache of their own), `at_once` (independent runs side by side), and
`coupprof layers --raw` while `coupprof collect` records the virtual logger."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

COUPPROF = str(Path(sys.executable).with_name("coupprof"))


def run_coupprof(args: tuple[str, ...], cwd: Path, cache: Path, check: bool = True,
                 timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """`coupprof ARGS` in ``cwd`` with its slice cache in ``cache`` (and ``env`` added);
    ``check``: exit 0, else its stderr is the failure."""
    r = subprocess.run([COUPPROF, *args], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout,
                       env={**os.environ, "COUPPROF_CACHE": str(cache), **env})
    if check:
        assert r.returncode == 0, r.stderr
    return r


def at_once(*runs: Callable[[], Any]) -> list[Any]:
    """Each of ``runs`` called in a thread of its own, all at once; their results, in
    order, once every one has ended (the first one's exception, if any raised). For
    chains of coupprof subprocesses that do not depend on each other and whose figures no
    test compares with a model's: on the simulated board a run mostly waits out the
    modelled time, so runs side by side take about as long as the longest alone."""
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = [pool.submit(run) for run in runs]
    return [f.result() for f in futures]


def layers_while_collecting(cli: Callable[..., Any], cwd: Path, cache: Path, board: list[str],
                            processor: str, frames: int, seconds: float, pause_s: float,
                            csv: str, trace: str = "trace.csv") -> None:
    """Start a `seconds`-long capture into `trace`, wait `pause_s`, run the layers (raw
    rows into `csv`), and check that the capture finished cleanly."""
    env = {**os.environ, "COUPPROF_CACHE": str(cache)}
    collect = subprocess.Popen([COUPPROF, "collect", "--port", "virtual", "--seconds",
                                f"{seconds:g}", "-o", trace], cwd=cwd, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(pause_s)
    cli("layers", *board, "--processor", processor, "--frames", str(frames), "--warmup", "1",
        "--raw", "--csv", csv, cwd=cwd)
    _, err = collect.communicate(timeout=60)
    assert collect.returncode == 0, err
