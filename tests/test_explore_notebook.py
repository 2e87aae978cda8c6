"""notebooks/05_explore.ipynb executes top to bottom on tables from short real runs on the
simulated board (a sweep, a transfer matrix, DVFS delays), with tests/test_notebooks.py's
kernel and parameter injection."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from shared_runs import SharedRuns
from test_notebooks import execute, kernel_path, outputs  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def explore_runs(tmp_path_factory: pytest.TempPathFactory, sim_runs: SharedRuns) -> Path:
    """The session's explore tables (tests/shared_runs.py: the model in 3 layers, quick
    runs, the same code paths): a sweep of B, G and N (sw/), their transfer matrix (tm.csv)
    and DVFS delays (dv-B.csv), copied into the notebook's folder."""
    d = tmp_path_factory.mktemp("nb-explore")
    shutil.copytree(sim_runs.explore, d, dirs_exist_ok=True)
    return d


def test_05_explore(explore_runs: Path, kernel_path: Path,  # noqa: F811
                    monkeypatch: pytest.MonkeyPatch) -> None:
    d = explore_runs
    params = (f"SWEEP_DIR = {str(d / 'sw')!r}\nTRANSFER_CSV = {str(d / 'tm.csv')!r}\n"
              f"DELAY_CSVS = [{str(d / 'dv-B.csv')!r}]")
    nb = execute("05_explore.ipynb", params, kernel_path, monkeypatch, d)
    images, text = outputs(nb)
    assert images >= 2
    assert "optimal" in text and "exact: all" in text
    assert "coupprof run --order" in text and "--mode switch" in text and "--mode pipeline" in text
