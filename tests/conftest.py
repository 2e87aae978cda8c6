"""Every test sees the simulated board plugged into the role factories, as commands do
through `profiler.platform.choose_board`: many tests load it with
`profiler.boards.profiles.load_board("sim")` and hand it to the factories directly."""

import os

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
