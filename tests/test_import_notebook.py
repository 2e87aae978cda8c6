"""notebooks/04_real_rk3399pro.ipynb runs top to bottom on ARM-CO-UP's recordings
(../shared/armcoup or $COUPPROF_ARMCOUP_DIR; skipped when absent) and shows its figures."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("COUPPROF_ARMCOUP_DIR") or REPO.parent / "shared" / "armcoup")
NOTEBOOK = REPO / "notebooks" / "04_real_rk3399pro.ipynb"
KERNEL = "coupprof-import-test-python3"


def test_notebook_is_stored_without_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert "parameters" in nb.cells[0].metadata.get("tags", [])
    assert nb.cells[1].cell_type == "markdown"
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "Layers.csv").is_file(),
                    reason=f"ARM-CO-UP's recordings are not at {DATA} (set COUPPROF_ARMCOUP_DIR)")
def test_notebook_runs_on_the_real_traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "coupprof import test", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    monkeypatch.setenv("COUPPROF_ARMCOUP_DIR", str(DATA))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, kernel_name=KERNEL, timeout=300,
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    images, text = 0, []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", out
            data = out.get("data", {})
            images += "image/png" in data
            text += [out.get("text", ""), data.get("text/plain", "")]
    joined = "\n".join(text)
    assert images == 4  # power difference vs layer time, Fig. 16, the lag, the truth check
    assert "max relative error" in joined and "e-15" in joined
    assert "estimated lag: B 2.5 ms" in joined
    # against the simulated logger's truth, layers of 10 ms or more: coupprof within 2 %
    line = next(x for x in joined.splitlines() if x.startswith("layers >= 10 ms, max |error|"))
    ours = float(line.split("coupprof ")[1].split(" %")[0])
    theirs = float(line.split("armcoup ")[1].split(" %")[0])
    assert ours < 2.0 < theirs, line
