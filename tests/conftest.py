"""Every test sees the simulated board plugged into the role factories, as commands do
through `profiler.platform.choose_board`: many tests load it with
`profiler.boards.profiles.load_board("sim")` and hand it to the factories directly."""

import os
from collections.abc import Iterator

import host_cores
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


# Each test holds the host's cores shared, or alone where marked `alone` (host_cores.py).
# Fixtures of module or session scope are made before it is taken, so they run unlocked;
# one that times the host takes `host_cores.cores(..., alone=True)` itself.
@pytest.fixture(autouse=True)
def _host_cores(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with host_cores.cores(tmp_path_factory, request.node.get_closest_marker("alone") is not None):
        yield
