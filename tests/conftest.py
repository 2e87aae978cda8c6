"""Every test sees the simulated board plugged into the role factories, as commands do
through `profiler.platform.choose_board`: many tests load it with
`profiler.boards.profiles.load_board("sim")` and hand it to the factories directly."""

import fcntl
import os
import time
from collections.abc import Iterator

import pytest
import shared_runs

import profiler.sim.platform  # noqa: F401 - registers the sim's governor, executor, sources

# pytest-xdist's workers set COLUMNS=80 and LINES=24; the commands tests start read COLUMNS
# as "a terminal this wide" (profiler/cli/common/options.py), where a pipe gets full rows.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


# Runs on the simulated board several modules use, made once per session (shared_runs.py);
# a test copies what it uses into its own folder, never writes into these.
@pytest.fixture(scope="session")
def sim_runs(tmp_path_factory: pytest.TempPathFactory) -> shared_runs.SharedRuns:
    return shared_runs.make_all(tmp_path_factory.mktemp("sim-runs"))


# The suite runs on two workers (pyproject.toml). A test marked `alone` times the host
# against a model with both cores in use (two MPI ranks, a pipeline's stage threads), so
# it runs while the other worker waits: it holds this run's lock exclusively, every other
# test holds it shared. A worker that wants it alone first leaves a flag, which keeps the
# other worker from starting new tests, so a stream of shared holders cannot starve it.
# Fixtures of module or session scope are made before it is taken, so they run unlocked.
@pytest.fixture(autouse=True)
def _host_cores(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        yield
        return
    base = tmp_path_factory.getbasetemp().parent  # the run's folder, the workers' parent
    alone = request.node.get_closest_marker("alone") is not None
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
