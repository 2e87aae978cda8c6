"""Every command's output, read back as a newcomer would (issue 28, items 3, 4 and 5).

One folder is filled the way a user fills it, by real commands in subprocesses on the
simulated board with small settings: `layers` on B and G into ./coupprof-out (its default),
`transfer-matrix`, `run` and `predict --json` on those tables, a small `sweep`, `explore`
(and `explore --measure`), `dvfs-latency`, `calibrate`, `collect`, and `import` of
ARM-CO-UP's tables where they are. Then:

- `predict --layers coupprof-out` takes the folder `layers` wrote: the tables of the
  processors the mapping names, said in one line, with the same prediction as the files
  named one by one; a folder with two models' tables needs --model (one line, exit 2);
- `report` gives every output its section, lists none as "no coupprof sidecar", and shows
  G's whole-model time (fused: one call of the whole model);
- errors are (predicted - measured) / measured everywhere: `run`'s table says so in its
  header, its CSV and the report carry that sign.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from cli_runs import at_once, run_coupprof

from profiler.mapping.accuracy import error_pct

REPO = Path(__file__).resolve().parent.parent
ARMCOUP = Path(os.environ.get("COUPPROF_ARMCOUP_DIR") or REPO.parent / "shared" / "armcoup")
MODEL = "mobilenet_v1_0.25_128"
FAST_FUSED = ("--min-rounds", "3", "--max-rounds", "3", "--budget-s", "0.5")


def cli(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_coupprof(args, cwd, cwd.parent / "cache", check, timeout=600, COLUMNS="200")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(the working directory, stdout of some commands); the outputs in ./coupprof-out."""
    d = tmp_path_factory.mktemp("newcomer") / "work"
    d.mkdir()
    small = ("--frames", "2", "--warmup", "0")
    out = {}

    def others() -> None:  # what needs no layer table, one after the other
        cli(d, "sweep", "--processors", "B", "--freqs", "1,2", *small, "--method", "sliced",
            "-o", "coupprof-out/sweep")
        cli(d, "explore", "--sweep", "coupprof-out/sweep", "--top", "1", "--measure", "1",
            "--frames", "2")
        cli(d, "dvfs-latency", "-p", "B", "--levels", "min,max", "--repeats", "1")
        cli(d, "calibrate", "coupprof-out/sweep", "--no-validate")
        cli(d, "collect", "--port", "virtual", "--seconds", "0.3", "-o",
            "coupprof-out/trace.csv")
        if (ARMCOUP / "Layers.csv").is_file():
            cli(d, "import", str(ARMCOUP / "Layers.csv"), str(ARMCOUP / "Transfers.csv"), "-o",
                "coupprof-out/imported")

    # Three chains side by side (cli_runs.at_once): G's fused layers (the longest), B's
    # layers and the transfer matrix, and the rest; then run and predict on the tables.
    at_once(lambda: cli(d, "layers", "-p", "G", *small, *FAST_FUSED),
            lambda: (cli(d, "layers", "-p", "B", *small, "--method", "sliced"),
                     cli(d, "transfer-matrix", "--processors", "B,G", *small)),
            others)
    transfers = f"coupprof-out/transfers-{MODEL}.csv"
    out["run"] = cli(d, "run", "--order", "B8G7", "--mode", "switch", *small, "--layers",
                     "coupprof-out", "--transfers", transfers).stdout
    cli(d, "predict", "--layers", "coupprof-out", "--order", "B8G7", "--mode", "pipeline",
        "--transfers", transfers, "--json", "coupprof-out/predict.json")
    return d, out


# -- item 3: predict takes the folder `layers` wrote ------------------------------------


def test_predict_takes_the_folder_layers_wrote(work: tuple[Path, dict[str, str]]) -> None:
    d, _ = work
    files = [f"coupprof-out/layers-{MODEL}-{p}.csv" for p in "BG"]
    order = ("--order", "B8G7", "--mode", "pipeline")
    by_folder = cli(d, "predict", "--layers", "coupprof-out", *order)
    by_files = cli(d, "predict", "--layers", ",".join(files), *order)
    assert by_folder.stdout == by_files.stdout  # the same tables, the same prediction
    said = [ln for ln in by_folder.stderr.splitlines() if "predict: using" in ln]
    names = [Path(f).name for f in files]
    assert said == [f"coupprof: predict: using {names[0]} (B), {names[1]} (G) in coupprof-out"]
    # B alone: only B's table is taken
    only_b = cli(d, "predict", "--layers", "coupprof-out", "--order", "B15", "--mode", "switch")
    assert f"using {names[0]} (B) in coupprof-out" in only_b.stderr
    assert names[1] not in only_b.stderr


def test_predict_on_a_folder_of_two_models_needs_model(work: tuple[Path, dict[str, str]],
                                                       tmp_path: Path) -> None:
    d, _ = work
    two = tmp_path / "two"
    two.mkdir()
    for p in "BG":
        for ext in ("csv", "json"):
            shutil.copy(d / f"coupprof-out/layers-{MODEL}-{p}.{ext}", two)
    # another model's B table (its sidecar names another model file)
    shutil.copy(two / f"layers-{MODEL}-B.csv", two / "layers-other-B.csv")
    meta = json.loads((two / f"layers-{MODEL}-B.json").read_text())
    meta["model_path"] = "/models/other.tflite"
    (two / "layers-other-B.json").write_text(json.dumps(meta))
    order = ("--order", "B8G7", "--mode", "pipeline")
    r = cli(d, "predict", "--layers", str(two), *order, check=False)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert f"holds layer tables of 2 models: {MODEL} (B, G); other (B)" in r.stderr
    assert "--model" in r.stderr
    ok = cli(d, "predict", "--layers", str(two), *order, "--model", MODEL)
    assert "latency" in ok.stdout
    r = cli(d, "predict", "--layers", str(two), *order, "--model", "other", check=False)
    assert r.returncode == 2 and "no layer table of other for processor(s) G" in r.stderr
    assert "coupprof layers -p G --model /models/other.tflite" in r.stderr


# -- item 4: the report shows everything -----------------------------------------------


def test_the_report_gives_every_output_its_section(work: tuple[Path, dict[str, str]]) -> None:
    d, _ = work
    out = d / "coupprof-out"
    r = cli(d, "report", "coupprof-out")
    text = (out / "report.md").read_text()
    assert "no coupprof sidecar" not in text
    for heading in ("## Layer runs", "## Mapped runs", "## Predictions", "## Sweeps",
                    "## Transfer matrices", "## Searches", "## Searches, measured",
                    "## DVFS transition delays", "## Calibrated board profiles",
                    "## Power traces", "## Binary power traces kept"):
        assert f"\n{heading}\n" in text, heading
    if (out / "imported").is_dir():
        assert "\n## Imported tables\n" in text
    # every CSV (and the prediction, the profile) is listed with the command that wrote it
    listing = text[: text.index("## Layer runs")]
    written = [p for p in out.rglob("*.csv") if not p.name.endswith(".edges.csv")]
    written += [out / "predict.json", out / "calibrated-sim.toml"]
    for p in written:
        row = next((ln for ln in listing.splitlines()
                    if ln.startswith(f"| `{p.relative_to(out)}` |")), None)
        assert row is not None and "| coupprof " in row, (p, row)
    assert f"wrote coupprof-out/report.md ({len(written)} result files" in r.stdout

    # G's frame, one call of the whole model, as its sidecar has it
    tot = json.loads((out / f"layers-{MODEL}-G.json").read_text())["totals"]
    g = text[text.index("processor G"):]
    assert (f"Per frame, one call of the whole model: {tot['time_ms_mean']:.3f} ± "
            f"{tot['time_ms_ci95']:.3f} ms ({1000 / tot['time_ms_mean']:.1f} FPS) = fixed "
            f"{tot['fixed_ms']:.3f} ms") in g
    assert f"| fixed | per call | {tot['fixed_ms']:.3f} |" in g

    # the run's summary: measured, predicted and the error with its definition
    run = pd.read_csv(out / f"run-{MODEL}-B8G7-switch.csv")
    summ = run[run["kind"] == "summary"].set_index("metric")
    part = text[text.index("### Mapped run"):]
    assert "| metric | measured | predicted | err % (pred-meas)/meas |" in part
    lat = summ.loc["latency_ms_mean"]
    want = (lat["predicted"] - lat["measured"]) / lat["measured"] * 100
    assert (f"| latency_ms_mean | {lat['measured']:.3f} | {lat['predicted']:.3f} | "
            f"{want:.1f} |") in part


# -- item 5: one sign for errors ---------------------------------------------------------


def test_the_error_is_predicted_minus_measured_over_measured() -> None:
    # the pair: run measured 17.992 ms against a predicted 14.954 ms
    assert round(error_pct(14.954, 17.992), 1) == -16.9
    assert error_pct(25.28, 24.67) > 0  # predicted FPS above the measured: positive
    assert math.isnan(error_pct(1.0, 0.0)) and math.isnan(error_pct(None, 2.0))


def test_the_run_table_names_the_definition_and_its_sign(
        work: tuple[Path, dict[str, str]]) -> None:
    d, out = work
    stdout = out["run"]
    assert stdout.count("(pred-meas)/meas") == 2  # both tables' error column
    run = pd.read_csv(d / f"coupprof-out/run-{MODEL}-B8G7-switch.csv")
    summ = run[run["kind"] == "summary"].set_index("metric")
    for metric in ("latency_ms_mean", "throughput_fps"):
        m, p = summ.loc[metric, "measured"], summ.loc[metric, "predicted"]
        assert summ.loc[metric, "error_pct"] == pytest.approx((p - m) / m * 100)
        row = next(ln for ln in stdout.splitlines() if ln.strip().startswith(metric))
        assert row.split()[-1] == f"{(p - m) / m * 100:.1f}"
    measured = pd.read_csv(d / f"coupprof-out/explore-{MODEL}-switch-measured.csv")
    for col, err in (("latency_ms", "latency_error_pct"),
                     ("throughput_fps", "throughput_error_pct"), ("energy_mj", "energy_error_pct")):
        want = [(p - m) / m * 100 for p, m in zip(measured[f"predicted_{col}"], measured[col],
                                                  strict=True)]
        assert measured[err].tolist() == pytest.approx(want)
