"""notebooks/05_explore.ipynb executes top to bottom on tables from short real runs on the
simulated board (a sweep, a transfer matrix, DVFS delays), with tests/test_notebooks.py's
kernel and parameter injection."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_notebooks import cli, execute, kernel_path, outputs  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def explore_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("nb-explore")
    sim = ["--board", "sim", "--baseline-s", "0.05"]
    cuts = ["--cuts", "5,15"]  # 3 layers: quick runs, the same code paths
    cli("sweep", *sim, *cuts, "--processors", "B,G,N", "--freqs", "1,5", "--frames", "3",
        "--warmup", "1", "-o", "sweep", cwd=d)
    cli("transfer-matrix", *sim, *cuts, "--processors", "B,G,N", "--frames", "3", "--warmup", "0",
        "--csv", "transfers.csv", cwd=d)
    cli("dvfs-latency", "--board", "sim", "-p", "B", "--levels", "1,5", "--repeats", "1",
        "--csv", "dv-B.csv", cwd=d)
    return d


def test_05_explore(explore_runs: Path, kernel_path: Path,  # noqa: F811
                    monkeypatch: pytest.MonkeyPatch) -> None:
    d = explore_runs
    params = (f"SWEEP_DIR = {str(d / 'sweep')!r}\nTRANSFER_CSV = {str(d / 'transfers.csv')!r}\n"
              f"DELAY_CSVS = [{str(d / 'dv-B.csv')!r}]")
    nb = execute("05_explore.ipynb", params, kernel_path, monkeypatch, d)
    images, text = outputs(nb)
    assert images >= 2
    assert "optimal" in text and "exact: all" in text
    assert "coupprof run --order" in text and "--mode switch" in text and "--mode pipeline" in text
