"""notebooks/06_several_boards.ipynb executes top to bottom on real `coupprof run --devices`
runs (one device, two devices, and one device without a power source) on the bundled sim2
boards, with tests/test_notebooks.py's kernel and parameter injection, and its tables show
the runs' CSV figures."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
from test_notebooks import cli, execute, kernel_path, outputs  # noqa: F401 (fixture)

from profiler.devices.launch import mpi_installed

pytestmark = [
    pytest.mark.skipif(not mpi_installed(), reason="MPI not installed (the devices extra)"),
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two host cores"),
    pytest.mark.alone,  # two ranks, a core each
]

SHORT = ["--mode", "pipeline", "--frames", "5", "--warmup", "1"]
NO_POWER = """
[[device]]
name = "d0"
cores = [0]
power = "none"
"""


@pytest.fixture(scope="module")
def device_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("nb-devices")
    (d / "one").mkdir()  # given to the notebook as a folder, the others as CSVs
    cli("run", "--devices", "sim2", "--order", "d0:B15", *SHORT, "--csv", "one/run.csv", cwd=d)
    cli("run", "--devices", "sim2", "--order", "d0:B7 d1:B8", *SHORT, "--csv", "two.csv", cwd=d)
    (d / "nopower.toml").write_text(NO_POWER)
    cli("run", "--devices", "nopower.toml", "--order", "d0:B15", "--mode", "pipeline",
        "--frames", "3", "--warmup", "0", "--csv", "nopower.csv", cwd=d)
    return d


def _table(text: str, names: set[str]) -> dict[str, dict[str, str]]:
    """The first DataFrame printed in `text` (`to_string`, indexed by run): per row (its
    first cell, one of `names`) its cells by column."""
    lines = [line.split() for line in text.splitlines()]
    start = next(i for i, cells in enumerate(lines) if cells[:1] == ["devices"])
    rows: dict[str, dict[str, str]] = {}
    for cells in lines[start + 1:]:
        if cells[:1] == ["run"]:  # the index's name
            continue
        if not cells or cells[0] not in names:
            break
        rows[cells[0]] = dict(zip(lines[start], cells[1:], strict=True))
    return rows


def test_06_several_boards(device_runs: Path, kernel_path: Path,  # noqa: F811
                           monkeypatch: pytest.MonkeyPatch) -> None:
    d = device_runs
    params = (f"RUNS = [{str(d / 'two.csv')!r}, {str(d / 'one')!r}, "
              f"{str(d / 'nopower.csv')!r}]")
    nb = execute("06_several_boards.ipynb", params, kernel_path, monkeypatch, d)
    images, text = outputs(nb)
    assert images >= 2  # AutoDiCE's Fig. 7, and the figures themselves
    # Each run's set-up from its sidecar, fewest devices first (one before two).
    assert "one: mobilenet_v1_0.25_128.tflite on 1 device(s) of sim2.toml: " \
           "--order 'd0:B15' --mode pipeline, 5 frames after 1 warm-up" in text
    assert "two: mobilenet_v1_0.25_128.tflite on 2 device(s) of sim2.toml: " \
           "--order 'd0:B7 d1:B8' --mode pipeline" in text
    assert text.index("one: mobilenet") < text.index("two: mobilenet")
    assert "no energy in nopower" in text

    csvs = {"one": d / "one" / "run.csv", "two": d / "two.csv", "nopower": d / "nopower.csv"}
    shown = _table(text, set(csvs))  # the per-run table
    assert list(shown) == ["one", "nopower", "two"], shown  # by devices, else as given
    for name, csv in csvs.items():
        df = pd.read_csv(csv)
        dev, tot = df[df["kind"] == "device"], df[df["kind"] == "total"].iloc[0]
        want = {"devices": len(dev), "frames_out": tot["frames_done"],
                "throughput_fps": tot["throughput_fps"],
                "latency_ms_mean": tot["latency_ms_mean"],
                "latency_ms_p95": tot["latency_ms_p95"],
                "energy_mj_max": dev["energy_mj"].max(skipna=False),
                "energy_mj_total": tot["energy_mj"],
                "peak_rss_mb_max": dev["peak_rss_mb"].max(),
                "tensor_mb_max": dev["tensor_mb"].max(),
                "peak_rss_mb_total": tot["peak_rss_mb"], "tensor_mb_total": tot["tensor_mb"]}
        got = {k: float(v) for k, v in shown[name].items()}
        assert got == pytest.approx(want, abs=6e-4, nan_ok=True), (name, got, want)
    # Two devices' totals are their devices' sums: energy and memory (as the CSV has them).
    two = pd.read_csv(csvs["two"])
    assert float(shown["two"]["energy_mj_total"]) == pytest.approx(
        two.loc[two["kind"] == "device", "energy_mj"].sum(), abs=1e-3)
    assert float(shown["one"]["energy_mj_max"]) > 0 and shown["nopower"]["energy_mj_max"] == "NaN"

    # Relative to the one-device run (AutoDiCE's Fig. 7's normalisation).
    rel = _table(text[text.index("relative to one (1 device(s))"):], set(csvs))
    s = {k: {c: float(v) for c, v in row.items()} for k, row in shown.items()}
    assert float(rel["two"]["throughput"]) == pytest.approx(
        s["two"]["throughput_fps"] / s["one"]["throughput_fps"], abs=2e-3)
    assert float(rel["two"]["tensor_max"]) == pytest.approx(
        s["two"]["tensor_mb_max"] / s["one"]["tensor_mb_max"], abs=2e-3)
    assert float(rel["two"]["tensor_max"]) < 1  # each device holds half the model's tensors
    assert float(rel["one"]["energy_max"]) == 1

    # The per-device table: every device's energy and memory as its CSV row has them.
    per = [line.split() for line in text.splitlines()
           if line.split()[:1] and line.split()[0] in csvs and len(line.split()) == 15]
    assert [(p[0], p[2]) for p in per] == [("one", "d0"), ("nopower", "d0"), ("two", "d0"),
                                           ("two", "d1")]
    for p in per:
        df = pd.read_csv(csvs[p[0]])
        row = df[(df["kind"] == "device") & (df["device"] == p[2])].iloc[0]
        assert [float(v) for v in (p[7], p[9], p[10])] == pytest.approx(
            [row["energy_mj"], row["peak_rss_mb"], row["tensor_mb"]], abs=6e-4, nan_ok=True)
        assert [int(v) for v in (p[3], p[4], p[11], p[12])] == [
            row["first_layer"], row["last_layer"], row["bytes_in"], row["bytes_out"]]


def test_06_runs_on_its_defaults_the_committed_vgg19_scaling_runs(
        kernel_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """With nothing injected it reads the VGG-19 runs on 1, 2 and 4 devices that
    data/validation/devices-scaling/vgg19-h200x2-host holds, and shows their figures."""
    notebooks = Path(__file__).resolve().parents[1] / "notebooks"
    runs = notebooks.parent / "data/validation/devices-scaling/vgg19-h200x2-host"
    nb = execute("06_several_boards.ipynb", "# the defaults", kernel_path, monkeypatch,
                 notebooks)
    _, text = outputs(nb)
    names = {f"vgg19-{n}dev" for n in (1, 2, 4)}
    shown = _table(text, names)
    assert list(shown) == ["vgg19-1dev", "vgg19-2dev", "vgg19-4dev"], shown
    for name in names:
        df = pd.read_csv(runs / f"{name}.csv")
        tot = df[df["kind"] == "total"].iloc[0]
        assert float(shown[name]["devices"]) == (df["kind"] == "device").sum()
        assert float(shown[name]["throughput_fps"]) == pytest.approx(tot["throughput_fps"],
                                                                     abs=6e-4)
        assert float(shown[name]["energy_mj_total"]) == pytest.approx(tot["energy_mj"],
                                                                      abs=6e-4)
    # the scaling the README there reports: 1.96x and 3.62x the one device's throughput
    assert float(shown["vgg19-4dev"]["throughput_fps"]) / float(
        shown["vgg19-1dev"]["throughput_fps"]) == pytest.approx(3.62, abs=0.01)
