"""`coupprof report RUN_DIR` on a directory filled by real short runs (layers on two
processors, one with --raw, a sweep, a transfer matrix, a power trace recorded while
the raw run ran): tables carry the CSVs' numbers, every linked figure exists and is a
PNG, figures that cannot be drawn say why, and bad directories exit 2."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image as mpimg
import pandas as pd
import pytest
from cli_runs import layers_while_collecting, run_coupprof
from matplotlib.container import BarContainer
from shared_runs import SharedRuns, copy_run, copy_sweep
from test_sweep_fakehost import B_FREQS_KHZ, L_FREQS_KHZ, build_fake_host

from profiler.plots import layers_figure, read_csv
from profiler.report import build_report, to_markdown


def cli(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_coupprof(args, cwd, cwd.parent / "cache", check)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, sim_runs: SharedRuns) -> Path:
    base = tmp_path_factory.mktemp("report")
    fake = build_fake_host(base / "fake")
    d = base / "run"
    d.mkdir()
    board = ["--board", "host", "--sysfs-root", str(fake.sys)]
    cli("layers", *board, "--processor", "L", "--frames", "5", "--warmup", "1", "--csv",
        "layers-L.csv", cwd=d)
    cli("sweep", *board, "--frames", "2", "--warmup", "0", "-o", "sweep", cwd=d)
    cli("transfer-matrix", *board, "--processors", "L,B", "--frames", "3", "--warmup", "0",
        "--csv", "transfers.csv", cwd=d)
    layers_while_collecting(cli, d, base / "cache", board, "B", frames=1200, seconds=2,
                            pause_s=0.4, csv="layers-B.csv")
    # Simulated board, with energy: a raw layer run (its trace kept, layers-G.csv) and a
    # small sweep of G at levels 1 and 5, the session's (tests/shared_runs.py).
    copy_run(sim_runs.layers_g, d)
    copy_sweep(sim_runs.sweep_g, d / "simsweep")
    return d


def md_table_after(text: str, marker: str) -> list[list[str]]:
    """The rows (cells) of the first Markdown table after `marker`."""
    rest = text[text.index(marker):]
    lines = rest.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| "))
    rows = []
    for ln in lines[start:]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip("|").split(" | ")])
    return [rows[0]] + rows[2:]  # header, then body (separator dropped)


def test_markdown_report_has_the_runs_tables_and_figures(run_dir: Path) -> None:
    r = cli("report", str(run_dir), cwd=run_dir.parent)
    assert f"wrote {run_dir / 'report.md'}" in r.stdout and "7 result files" in r.stdout
    text = (run_dir / "report.md").read_text()
    for heading in ("## Layer runs", "## Sweeps", "## Transfer matrices", "## Power traces"):
        assert heading in text

    # The layer table of the L run holds the CSV's numbers.
    csv = pd.read_csv(run_dir / "layers-L.csv")
    rows = md_table_after(text[text.index("From `layers-L.csv`"):], "| layer |")
    assert rows[0][:3] == ["layer", "operators", "mean ms"]
    assert len(rows) - 1 == len(csv)
    for row, want in zip(rows[1:], csv.itertuples(), strict=True):
        assert row[0] == str(want.layer) and row[2] == f"{want.time_ms_mean:.3f}"

    # One sweep row per (processor, level), in L, B order, with the table's frequencies.
    sweep = md_table_after(text, "From `sweep/sweep.csv`")
    assert sweep[0][:4] == ["processor", "level", "MHz", "read back MHz"]
    want = [("L", f / 1000) for f in L_FREQS_KHZ] + [("B", f / 1000) for f in B_FREQS_KHZ]
    assert [(r[0], float(r[2])) for r in sweep[1:]] == want
    assert all(r[2] == r[3] for r in sweep[1:])  # read back as set (fake kernel)
    # No power columns on this host: the efficiency figure says why it is missing.
    assert "Figure sweep-efficiency skipped" in text and "fps_per_w" in text

    # The transfer summary is the CSV's mean per (src, dst).
    tm = pd.read_csv(run_dir / "transfers.csv")
    piv = tm.pivot_table(index="src", columns="dst", values="time_ms_mean", aggfunc="mean")
    table = md_table_after(text, "### Transfer matrix")
    cols = table[0][1:]
    for row in table[1:]:
        for dst, cell in zip(cols, row[1:], strict=True):
            assert cell == f"{piv.loc[row[0], dst]:.3f}"

    # Every linked figure exists and is a real image; the timeline was drawn from the trace.
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert {Path(x).name for x in links} == {
        "layers.png", "sweep-layers.png", "transfers-transfers.png", "trace-timeline.png",
        "layers-G-timeline.png", "simsweep-efficiency.png", "simsweep-layers.png"}
    # The simulated sweep has energy: its pairs table gives each pair's frame as the sweep
    # printed it (its sidecar's totals: a fused pair's one call), W x ms = mJ.
    pairs = json.loads((run_dir / "simsweep" / "sweep.json").read_text())["pairs"]
    table = md_table_after(text, "From `simsweep/sweep.csv`")
    assert table[0][-5:] == ["method", "ms/frame", "energy mJ", "W", "FPS/W"]
    for row in table[1:]:
        tot = pairs[f"{row[0]}@{row[1]}"]["totals"]
        assert row[-5] == ("fused" if "fixed_ms" in tot else "sliced")
        assert row[-4:] == [f"{tot['latency_ms_mean']:.3f}", f"{tot['energy_mj']:.3f}",
                            f"{tot['power_w']:.3f}", f"{tot['fps_per_w']:.2f}"]
        assert tot["power_w"] * tot["latency_ms_mean"] == pytest.approx(tot["energy_mj"])
        assert tot["fps_per_w"] == pytest.approx(1000 / tot["energy_mj"])
    for link in links:
        img = mpimg.imread(run_dir / link)
        assert img.shape[0] > 300 and img[..., :3].std() > 0.05


def test_html_report_written_elsewhere_links_back_to_the_figures(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "elsewhere" / "r.html"
    out.parent.mkdir()
    cli("report", str(run_dir), "--format", "html", "-o", str(out), cwd=run_dir.parent)
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("<table>") >= 6
    srcs = re.findall(r'<img src="([^"]+)"', html)
    assert len(srcs) == 7
    for src in srcs:
        assert (out.parent / src).resolve().is_file()


def test_runs_of_one_processor_are_compared_as_runs(tmp_path: Path, run_dir: Path) -> None:
    d = tmp_path / "two"
    d.mkdir()
    for stem in ("first", "second"):  # the same processor twice, under two names
        shutil.copy(run_dir / "layers-B.csv", d / f"{stem}.csv")
        shutil.copy(run_dir / "layers-B.json", d / f"{stem}.json")
    report = build_report(d)
    assert to_markdown(report).count("### Layer run:") == 2
    assert report.figures == [d / "figures" / "layers.png"]
    # The figure's series are the runs (not one merged processor B).
    both = pd.concat([read_csv(d / "first.csv").assign(run="first"),
                      read_csv(d / "second.csv").assign(run="second")])
    ax = layers_figure(both).axes[0]
    labels = [c.get_label() for c in ax.containers if isinstance(c, BarContainer)]
    assert [label.splitlines()[0] for label in labels] == ["first: B (big CPU)",
                                                            "second: B (big CPU)"]


def test_bad_run_directories_exit_2(tmp_path: Path) -> None:
    r = cli("report", str(tmp_path / "nope"), cwd=tmp_path, check=False)
    assert r.returncode == 2 and "run directory not found" in r.stderr
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.csv").write_text("a,b\n1,2\n")
    r = cli("report", str(tmp_path / "empty"), cwd=tmp_path, check=False)
    assert r.returncode == 2 and "no coupprof results in" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
