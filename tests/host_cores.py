"""The host's two cores shared between the suite's two workers (pyproject.toml: `-n 2`).

A test that times the host against a model with both cores in use (two MPI ranks, a
pipeline run against its prediction, the paced simavr rig) runs while the other worker
waits: it holds the run's lock exclusively, every other test holds it shared. A worker
that wants it alone first leaves a flag, which keeps the other worker from starting new
tests, so a stream of shared holders cannot starve it. Without xdist it does nothing.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def cores(tmp_path_factory: pytest.TempPathFactory, alone: bool) -> Iterator[None]:
    """Hold the host's cores: alone, or shared with the other worker's shared holders."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        yield
        return
    base = tmp_path_factory.getbasetemp().parent  # the run's folder, the workers' parent
    flag = base / f"alone-{worker}"
    fd = os.open(base / "cores.lock", os.O_CREAT | os.O_RDWR)
    try:
        if alone:
            flag.touch()
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            while any(f != flag for f in base.glob("alone-*")):
                time.sleep(0.05)
            fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        flag.unlink(missing_ok=True)
