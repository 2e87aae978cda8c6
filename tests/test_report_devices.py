"""`coupprof report` on the outputs of the devices commands (run, transfer-matrix, predict
--json and explore, each with --devices): a section for each, its figures those of the
files. On runs committed in data/validation (two H200s, VGG-19 on 1-4 simulated boards),
copied into an empty folder, so no MPI is needed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from tests.cli_runs import run_coupprof

DATA = Path(__file__).resolve().parents[1] / "data" / "validation"
SCALING = DATA / "devices-scaling" / "vgg19-h200x2-host"
GPUS = DATA / "h200x2-devices" / "call2"


def _copy(src: Path, dst: Path) -> None:
    shutil.copy(src, dst / src.name)
    if src.with_suffix(".json").is_file() and src.suffix == ".csv":
        shutil.copy(src.with_suffix(".json"), dst / src.with_suffix(".json").name)


def test_report_has_a_section_for_each_devices_output_with_its_figures(tmp_path: Path) -> None:
    for f in (SCALING / "vgg19-4dev.csv", SCALING / "explore-4dev.csv", GPUS / "links.csv",
              GPUS / "pred-d0-G27_d1-G27-pipeline.json"):
        _copy(f, tmp_path)
    r = run_coupprof(("report", str(tmp_path), "-o", str(tmp_path / "report.md")), cwd=tmp_path,
                     cache=tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "report.md").read_text()
    for heading in ("## Runs across devices", "## Links between devices",
                    "## Predictions across devices", "## Searches across devices"):
        assert heading in md, heading
    assert "| `vgg19-4dev.csv` | run-devices | coupprof run --devices |" in md
    # the run: each device's energy and memory, and the throughput, as the CSV has them
    run = pd.read_csv(SCALING / "vgg19-4dev.csv")
    for _, d in run[run["kind"] == "device"].iterrows():
        row = next(line for line in md.splitlines() if line.startswith(f"| {d['device']} | "
                                                                       f"{int(d['first_layer'])}-"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[3]) == round(d["energy_mj"], 3)
        assert float(cells[4].replace(",", "")) == round(d["peak_rss_mb"], 3)
    tot = run[run["kind"] == "total"].iloc[0]
    assert f"Throughput {tot['throughput_fps']:.2f} FPS" in md
    # the links: the fit of the sidecar
    fit = json.loads((GPUS / "links.json").read_text())["links"][0]
    assert f"| d0-d1 | {fit['latency_ms']:.3f} |" in md
    # the prediction and the search's best split
    pred = json.loads((GPUS / "pred-d0-G27_d1-G27-pipeline.json").read_text())
    assert f"throughput {pred['throughput_fps']:.2f} FPS" in md
    best = pd.read_csv(SCALING / "explore-4dev.csv").iloc[0]
    assert f"| 1 | front | {best['order']} | {best['throughput_fps']:.2f} |" in md
