"""Output a newcomer and a script can read (issue 28, items 1 and 6).

Tables fit 80 and 100 columns with no cell cut short: the layer ids and the figures a
user came for show in full, the lesser columns are left out whole, a line under the
table names them, and --wide keeps them all. `--csv -` writes the CSV alone to standard
output (messages on stderr) and leaves no file named `-`, `-.json` or `-.trace` behind;
`--json -` does the same for the sidecar; --quiet prints nothing but errors.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console
from rich.table import Table

from profiler.measure.results import LayerInfo, LayerRun, LayerTimings, RunInfo
from profiler.measure.tables import RunTables, read_tables, render, run_tables
from profiler.slicing.slicer import slice_model
from profiler.zoo import default_model_path

ROOT = Path(__file__).resolve().parents[1]  # the tree under test, whatever is installed
N_LAYERS = len(slice_model(default_model_path(), cache_dir=False).layers)
OPS = [("CONV_2D",)] + [("DEPTHWISE_CONV_2D", "CONV_2D")] * 12 + [
    ("DEPTHWISE_CONV_2D", "CONV_2D", "AVERAGE_POOL_2D"), ("CONV_2D", "RESHAPE", "SOFTMAX")]


# -- tables that fit ---------------------------------------------------------------


def sliced_tables() -> RunTables:
    """15 layers of 20 frames with every power column: layer k takes 16.9 + 0.137 k ms
    plus f microseconds in frame f, so each mean has all of its digits."""
    frames, n = 20, len(OPS)
    ts = np.zeros((frames, n, 4), dtype=np.int64)
    now = 10**12
    for f in range(frames):
        for k in range(n):
            xfer, busy = 40_000 + 1_000 * k, 16_900_000 + 137_000 * k + 1_000 * f
            ts[f, k] = (now, now + xfer, now + xfer + 10, now + xfer + 10 + busy)
            now = int(ts[f, k, 3]) + 7
    layers = [LayerInfo(k, ops, 800_000 + 10_000 * k, 1_000 * k, 65_536, 32_768)
              for k, ops in enumerate(OPS)]
    energy = 70.0 + np.arange(n) * 1.25
    extras = {"power_w": 4.1 + np.arange(n) / 100, "energy_mj": energy,
              "dynamic_energy_mj": energy / 3, "fps_per_w": 1000.0 / energy,
              "samples": np.full(n, 338)}
    info = RunInfo(board="sim", simulated=True, model_path="/m/mobilenet_v1_0.25_128.tflite",
                   model_sha256="ab" * 32, processor="B", processor_name="CPU x2", cores=(4, 5),
                   threads=2, frames=frames, warmup=5, runtime="ai-edge-litert",
                   runtime_version="2.3.0", command="coupprof layers")
    run = LayerRun(info, layers, LayerTimings(ts), extras,
                   {"power_w": 4.2, "energy_mj": float(energy.sum()), "lost_frames": 0})
    return run_tables(run, raw=False)


def shown(table: Table, width: int, wide: bool = False) -> str:
    """What a command prints for ``table`` on a terminal ``width`` columns wide."""
    from profiler.cli.common.output import Output
    from profiler.measure.tables import LESSER_COLUMNS

    buf = io.StringIO()
    console = Console(width=width, file=buf, color_system=None, force_terminal=False)
    Output(command="layers", wide=wide).table(table, drop=LESSER_COLUMNS, console=console)
    return buf.getvalue()


def layer_rows(text: str) -> list[list[str]]:
    """The layer rows' cells (split on blanks): the lines after the header's rule, up to
    the section's blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("─")) + 1
    rows = []
    for line in lines[start:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def wanted(tables: RunTables) -> list[list[str]]:
    """Per layer, the cells a user came for as render writes them: the layer id, its time
    (sliced: the mean; fused: the fused time or its bound, and the interval) and its
    energy, from the table's own numbers."""
    out = []
    for r in tables.layers.itertuples(index=False):
        if "time_ms_ci95" in tables.layers.columns:
            t, h = float(r.time_ms_mean), float(r.time_ms_ci95)
            low = bool(r.below_resolution)
            cells = [str(r.layer), f"<{t + h:.3f}" if low else f"{t:.3f}", f"{h:.3f}"]
            cells += [] if low else [f"{r.energy_mj:.3f}"]
        else:
            cells = [str(r.layer), f"{r.time_ms_mean:.3f}", f"{r.energy_mj:.3f}"]
        out.append(cells)
    return out


def check_fits(tables: RunTables, width: int, essential: tuple[str, ...]) -> None:
    from profiler.cli.common.fit import fit, header, natural_width
    from profiler.measure.tables import LESSER_COLUMNS

    table = render(tables)
    every = [header(c) for c in table.columns]
    assert natural_width(table, Console(width=width)) > width  # as it is, it cannot fit
    text = shown(table, width)

    assert "…" not in text, text  # no cell (nor title, caption) cut short
    assert max(len(line) for line in text.splitlines()) <= width, text
    rows = layer_rows(text)
    assert len(rows) == len(tables.layers)
    for cells, want in zip(rows, wanted(tables), strict=True):
        assert cells[0] == want[0]  # the layer id, first
        assert set(want) <= set(cells), (want, cells)

    fitted = fit(table, Console(width=width), width, LESSER_COLUMNS)
    kept = [header(c) for c in fitted.table.columns]
    assert set(essential) <= set(kept)
    assert fitted.dropped and set(fitted.dropped) <= set(LESSER_COLUMNS)
    assert sorted(kept + list(fitted.dropped)) == sorted(every)  # left out whole, all named
    note = re.search(r"left out to fit (\d+) columns: (.*?) \(--wide shows",
                     " ".join(text.split()))
    assert note is not None, text
    assert int(note.group(1)) == width and note.group(2).split(", ") == list(fitted.dropped)


@pytest.mark.parametrize("width", [80, 100])
def test_sliced_layer_table_fits_with_its_figures_whole(width: int) -> None:
    check_fits(sliced_tables(), width, ("layer", "mean ms", "mJ"))


@pytest.mark.parametrize("width", [80, 100])
def test_fused_layer_table_fits_with_its_figures_whole(fused_tables: RunTables,
                                                       width: int) -> None:
    check_fits(fused_tables, width, ("layer", "fused ms", "±95%", "mJ"))


def test_wide_keeps_every_column() -> None:
    from profiler.cli.common.fit import header

    tables = sliced_tables()
    table = render(tables)
    text = shown(table, 80, wide=True)
    head = next(line for line in text.splitlines() if line.split()[:1] == ["layer"])
    assert all(header(c) in head for c in table.columns), head
    assert "…" not in text and "left out" not in text
    for cells, want in zip(layer_rows(text), wanted(tables), strict=True):
        assert set(want) <= set(cells)


# -- output a script can read ------------------------------------------------------


def coupprof(cwd: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(COUPPROF_CACHE=str(cache), PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "profiler", "layers", "--frames", "2",
                           "--warmup", "0", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def fused_run(tmp_path_factory: pytest.TempPathFactory,
              cache: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """`--method fused --csv - --json side.json --quiet` on the sim board's B."""
    cwd = tmp_path_factory.mktemp("fused")
    return cwd, coupprof(cwd, cache, "--method", "fused", "--budget-s", "1", "--csv", "-",
                         "--json", "side.json", "--quiet")


@pytest.fixture(scope="module")
def fused_tables(tmp_path_factory: pytest.TempPathFactory,
                 fused_run: tuple[Path, subprocess.CompletedProcess[str]]) -> RunTables:
    cwd, r = fused_run
    assert r.returncode == 0, r.stderr
    csv = tmp_path_factory.mktemp("fused-csv") / "fused.csv"
    csv.write_text(r.stdout)
    return read_tables(csv, cwd / "side.json")


def layer_ids(csv_text: str) -> list[int]:
    df = pd.read_csv(io.StringIO(csv_text))
    return [int(v) for v in df.loc[df["kind"] == "layer", "layer"]]


def test_csv_to_stdout_alone_messages_on_stderr(tmp_path: Path, cache: Path) -> None:
    r = coupprof(tmp_path, cache, "--method", "sliced", "--csv", "-")
    assert r.returncode == 0, r.stderr
    assert layer_ids(r.stdout) == list(range(N_LAYERS))
    err = " ".join(r.stderr.split())
    assert "mobilenet_v1_0.25_128.tflite on board sim" in err  # the table
    assert f"wrote the CSV to standard output ({N_LAYERS} layer rows)" in err
    assert os.listdir(tmp_path) == []  # no '-', '-.json', '-.trace', nor coupprof-out


def test_quiet_with_csv_to_stdout_prints_the_csv_alone(
        fused_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    cwd, r = fused_run
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    df = pd.read_csv(io.StringIO(r.stdout))
    assert layer_ids(r.stdout) == list(range(N_LAYERS))
    assert list(df["kind"]).count("fixed") == 1  # fused: the fixed row too
    assert sorted(os.listdir(cwd)) == ["side.json"]  # the power trace stayed in memory
    meta = json.loads((cwd / "side.json").read_text())
    assert meta["format"] == "coupprof-layers/2" and meta["csv"] is None


def test_json_to_stdout_names_the_trace_folder_and_quiet_prints_nothing(
        tmp_path: Path, cache: Path) -> None:
    r = coupprof(tmp_path, cache, "--method", "sliced", "--csv", "out.csv", "--json", "-")
    assert r.returncode == 0, r.stderr
    meta = json.loads(r.stdout)  # the sidecar alone
    assert meta["format"] == "coupprof-layers/2" and meta["csv"] == "out.csv"
    assert layer_ids((tmp_path / "out.csv").read_text()) == list(range(N_LAYERS))
    assert sorted(os.listdir(tmp_path)) == ["out.csv", "out.trace"]
    # The "wrote" line (on stderr here) names the trace folder and what it holds.
    wrote = next(line for line in r.stderr.splitlines() if line.startswith("wrote "))
    assert wrote.startswith(f"wrote out.csv ({N_LAYERS} layer rows) and the JSON sidecar to "
                            "standard output; kept out.trace/ (the power logger's raw samples")
    assert (tmp_path / "out.trace" / "meta.json").is_file()

    r = coupprof(tmp_path, cache, "--method", "sliced", "--csv", "again.csv", "--quiet")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    assert (tmp_path / "again.csv").is_file() and (tmp_path / "again.json").is_file()


def test_both_to_stdout_is_refused_on_one_line(tmp_path: Path, cache: Path) -> None:
    r = coupprof(tmp_path, cache, "--csv", "-", "--json", "-")
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "standard output" in r.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("width", [80, 100])
def test_calibrate_validation_table_fits_with_model_names_whole(width: int) -> None:
    """`coupprof calibrate`'s leave-one-model-out table cut 'MobileV1' to 'Mobile…' and its
    headers to 'whole-…' at 80 columns."""
    import pandas as pd

    from profiler.cli.calibrate import LOMO_LESSER, render_lomo
    from profiler.cli.common.output import Output

    models = ["Alex", "Google", "MobileV1", "ResV1_50", "SqueezeV1", "pooled"]
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"processor": "B", "held_out": models, "layers": [64, 88, 112, 144, 80, 488],
                       **{c: rng.uniform(1, 40, len(models)).round(1) for c in (
                           "layer_time_err_median_pct", "layer_time_err_p90_pct",
                           "whole_time_err_median_pct", "whole_time_err_max_pct",
                           "power_err_median_pct", "power_err_p90_pct")}})
    buf = io.StringIO()
    console = Console(width=width, file=buf, color_system=None, force_terminal=False)
    Output(command="calibrate", writes_csv=False).table(render_lomo(df), drop=LOMO_LESSER,
                                                         console=console)
    text = buf.getvalue()
    assert "…" not in text and max(map(len, text.splitlines())) <= width
    for model, time_med, whole_med in zip(models, df["layer_time_err_median_pct"],
                                          df["whole_time_err_median_pct"], strict=True):
        row = next(line.split() for line in text.splitlines() if model in line.split())
        assert f"{time_med:.1f}" in row and f"{whole_med:.1f}" in row, row
