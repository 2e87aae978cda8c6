"""The notebooks execute top to bottom (nbclient, a python3 kernel of this interpreter) on
CSVs from real short runs, and show their figures and tables.

The kernel is registered in a temporary JUPYTER_PATH with this interpreter's path, so the
test works in a fresh venv whatever kernels the machine has. The runs' paths replace the
notebook's parameters cell (tagged `parameters`, cell 1) the way papermill does: a cell
with the new values is inserted right after it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from shared_runs import SharedRuns, copy_run, copy_sweep
from test_sweep_fakehost import build_fake_host

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"  # in the checkout, not the wheel
COUPPROF = str(Path(sys.executable).with_name("coupprof"))
KERNEL = "coupprof-test-python3"


def cli(*args: str, cwd: Path) -> None:
    env = {**os.environ, "COUPPROF_CACHE": str(cwd / "cache")}
    r = subprocess.run([COUPPROF, *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def kernel_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kernelspec whose argv is this very interpreter (ipykernel from the test extra)."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "coupprof tests (python3)", "language": "python",
    }))
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, sim_runs: SharedRuns) -> dict[str, Path]:
    """Short runs on the simulated board (energy from its virtual logger; the session's,
    tests/shared_runs.py), plus a sweep on a fake host without a power source for the
    notebooks' no-energy branches."""
    d = tmp_path_factory.mktemp("nb-runs")
    copy_run(sim_runs.layers_l, d)  # layers-L.csv
    copy_run(sim_runs.layers_g, d)  # layers-G.csv, 20 frames, G's fused rounds capped at 5
    copy_sweep(sim_runs.sweep_lbg, d / "sweep")
    tm = copy_run(sim_runs.transfers_lbg, d)
    fake = build_fake_host(d / "fake")
    cli("sweep", "--board", "host", "--sysfs-root", str(fake.sys), "--processors", "B",
        "--freqs", "1,2", "--frames", "2", "--warmup", "0", "-o", "host-sweep", cwd=d)
    return {"dir": d, "L": d / "layers-L.csv", "G": d / "layers-G.csv", "sweep": d / "sweep",
            "tm": tm, "host-sweep": d / "host-sweep"}


def execute(name: str, params: str, kernel_path: Path, monkeypatch: pytest.MonkeyPatch,
            workdir: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "code" and "parameters" in first.metadata.get("tags", [])
    injected = nbformat.v4.new_code_cell(params)
    injected.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(1, injected)
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_path))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    NotebookClient(nb, kernel_name=KERNEL, timeout=300,
                   resources={"metadata": {"path": str(workdir)}}).execute()
    return nb


def outputs(nb: nbformat.NotebookNode) -> tuple[int, str]:
    """(number of PNG images, all text and HTML output joined)."""
    images, text = 0, []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            images += "image/png" in data
            text.append(out.get("text", ""))
            text.append(data.get("text/plain", ""))
            text.append(data.get("text/html", ""))
            assert out.get("output_type") != "error", out
    return images, "\n".join(text)


def test_notebooks_have_a_parameters_cell_and_no_stored_outputs() -> None:
    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert names == ["01_layer_profiles.ipynb", "02_dvfs_sweep.ipynb", "03_transfer_matrix.ipynb",
                     "04_real_rk3399pro.ipynb",  # 04 runs in tests/test_import_notebook.py
                     "05_explore.ipynb",  # 05 runs in tests/test_explore_notebook.py
                     "06_several_boards.ipynb"]  # 06 in tests/test_devices_notebook.py
    for name in names:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        nbformat.validate(nb)
        assert "parameters" in nb.cells[0].metadata.get("tags", [])
        assert nb.cells[1].cell_type == "markdown"  # then it explains what it shows
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_01_layer_profiles(runs: dict[str, Path], kernel_path: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    nb = execute("01_layer_profiles.ipynb", f"LAYER_CSVS = [{str(runs['L'])!r}, {str(runs['G'])!r}]",
                 kernel_path, monkeypatch, runs["dir"])
    images, text = outputs(nb)
    assert images >= 3  # Fig. 17 (with energy), GMAC/s, latency histogram
    assert "on board sim, processor L" in text and "processor G" in text and "[SIMULAT" in text
    assert "layers-G" in text and "50%" in text  # the --raw run's latency percentiles
    # One frame: G's (fused) as its sidecar gives it, and the same again from its rows.
    tot = json.loads(runs["G"].with_suffix(".json").read_text())["totals"]
    # (a column per run, L's then G's)
    g = {" ".join(line.split()[:-2]): line.split()[-1] for line in text.splitlines()
         if line.startswith(("method ", "ms/frame", "mJ/frame"))}
    assert g["method"] == "fused"
    # (as numbers: pandas prints 8.630 as '8.63' when the column's other cells allow it)
    ms, mj = tot["latency_ms_mean"], tot["energy_mj"]
    shown = {k: float(v) for k, v in g.items() if k != "method"}
    assert [shown["ms/frame"], shown["ms/frame from rows"]] == pytest.approx([ms, ms], abs=6e-4), g
    assert [shown["mJ/frame"], shown["mJ/frame from rows"]] == pytest.approx([mj, mj], abs=6e-4), g


def test_02_dvfs_sweep_with_energy(runs: dict[str, Path], kernel_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    nb = execute("02_dvfs_sweep.ipynb", f"SWEEP_DIR = {str(runs['sweep'])!r}", kernel_path,
                 monkeypatch, runs["dir"])
    images, text = outputs(nb)
    assert images >= 2  # frame time / speed-up, and the efficiency figure (Fig. 16)
    assert "board sim" in text and "6 pairs" in text
    assert "no power columns" not in text and "gain_vs_top_pct" in text


def test_02_dvfs_sweep_without_energy(runs: dict[str, Path], kernel_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    nb = execute("02_dvfs_sweep.ipynb", f"SWEEP_DIR = {str(runs['host-sweep'])!r}", kernel_path,
                 monkeypatch, runs["dir"])
    images, text = outputs(nb)
    assert images >= 1 and "board host" in text and "2 pairs" in text
    # No power source: the efficiency sections say what to run instead.
    assert "no power columns" in text and "coupprof sweep --board sim" in text


def test_03_transfer_matrix(runs: dict[str, Path], kernel_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    nb = execute("03_transfer_matrix.ipynb", f"TRANSFER_CSV = {str(runs['tm'])!r}", kernel_path,
                 monkeypatch, runs["dir"])
    images, text = outputs(nb)
    assert images >= 2  # Fig. 18 and time vs bytes
    assert "14 boundaries" in text and "B->G" in text and "bandwidth_MB_per_s" in text
