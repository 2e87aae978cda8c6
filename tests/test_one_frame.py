"""One frame, everywhere a user reads it (issue 26, item 0): the README's main command
(`coupprof layers --processor G --freq 4`, fused on G) run as a subprocess with --csv,
then `coupprof report` and `coupprof plot layers` on its CSV. The terminal's footer and
total row, the sidecar's totals, the CSV's rows (layers plus the fixed row), the report
and the plot give the same time, energy, power and FPS/W per frame, with W x ms = mJ.

Before, the CSV's time_ms_mean was each layer's sliced time (with its own per-call cost)
and the sidecar's frame the sliced one: the report gave ~55 ms per frame for an 8.6 ms
call, and FPS/W beside an energy it was not the inverse of."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_runs import run_coupprof

README = Path(__file__).resolve().parents[1] / "README.md"
# The main command, with few frames and rounds (the figures' agreement, not their size).
SMALL = ("--frames", "3", "--warmup", "1", "--min-rounds", "5", "--max-rounds", "5")


def main_command() -> list[str]:
    """The README's main job, as its set-up section gives it (after `./setup.sh &&`)."""
    line = next(ln for ln in README.read_text().splitlines() if "# the main job" in ln)
    cmd = shlex.split(line.split("&&", 1)[1].split("#", 1)[0])
    assert Path(cmd[0]).name == "coupprof" and cmd[1] == "layers", cmd
    return cmd[1:]


def joined(text: str) -> str:
    return " ".join(text.split())


def test_terminal_sidecar_csv_report_and_plot_give_one_frame(tmp_path: Path) -> None:
    cmd = main_command()
    assert cmd == ["layers", "--processor", "G", "--freq", "4"]  # fused: G's default
    r = run_coupprof((*cmd, *SMALL, "--wide", "--csv", "g.csv"), tmp_path, tmp_path / "cache",
                     COLUMNS="200")
    side = json.loads((tmp_path / "g.json").read_text())
    assert side["method"] == "fused" and side["format"] == "coupprof-layers/2"
    tot = side["totals"]
    ms, mj, w, fps_w = tot["time_ms_mean"], tot["energy_mj"], tot["power_w"], tot["fps_per_w"]

    # The sidecar: one call of the whole model, W x ms = mJ, FPS/W = 1 / J.
    assert tot["latency_ms_mean"] == ms and tot["fps"] == pytest.approx(1000 / ms)
    assert ms == pytest.approx(tot["fixed_ms"] + tot["fused_layer_sum_ms"])
    assert ms == pytest.approx(tot["whole_ms"])  # prefixes: the rows add up to it
    assert w * ms == pytest.approx(mj) and fps_w == pytest.approx(1000 / mj)

    # The CSV's rows: the layers plus the fixed row are that frame, each row W x ms = mJ.
    df = pd.read_csv(tmp_path / "g.csv")
    rows = df[df["kind"].isin(["layer", "fixed"])]
    assert set(rows["kind"]) == {"layer", "fixed"}
    assert rows["time_ms_mean"].sum() == pytest.approx(ms)
    assert rows["energy_mj"].sum() == pytest.approx(mj)
    pos = rows["time_ms_mean"] > 0
    np.testing.assert_allclose(rows["power_w"][pos] * rows["time_ms_mean"][pos],
                               rows["energy_mj"][pos])
    # the sliced figures are kept, named for what they are: each call pays the fixed cost
    layers = df[df["kind"] == "layer"]
    assert (layers["time_ms_sliced_mean"] > layers["time_ms_mean"] + 0.5 * tot["fixed_ms"]).all()
    assert tot["time_ms_sliced_mean"] > 3 * ms

    # The terminal: the caption and the total row.
    out = joined(r.stdout)
    frame = (f"per frame, one call of the whole model: {ms:.3f} ± {tot['time_ms_ci95']:.3f} ms"
             f" = {1000 / ms:.1f} FPS, {mj:.3f} mJ = {w:.3f} W, {fps_w:.2f} FPS/W")
    assert frame in out, out
    total = next(ln.split() for ln in r.stdout.splitlines() if ln.split()[:1] == ["total"])
    assert total[5] == f"{ms:.3f}"  # "total 15 layers + fixed <ms>"
    assert {f"{w:.3f}", f"{mj:.3f}", f"{fps_w:.3f}"} <= set(total), total

    # The report on the run's folder.
    run_coupprof(("report", "."), tmp_path, tmp_path / "cache")
    report = joined((tmp_path / "report.md").read_text())
    assert (f"Per frame, one call of the whole model: {ms:.3f} ± {tot['time_ms_ci95']:.3f} ms "
            f"({1000 / ms:.1f} FPS)") in report
    assert f"energy {mj:.3f} mJ = {w:.3f} W, {fps_w:.2f} FPS/W" in report

    # The plot, which says in words the frame its legend gives.
    p = run_coupprof(("plot", "layers", "g.csv", "-o", "g.png"), tmp_path, tmp_path / "cache")
    said = re.search(r"per frame, G \(GPU\) @ 600 MHz: (\S+) ms \((\S+) FPS\), (\S+) mJ = "
                     r"(\S+) W, (\S+) FPS/W", p.stdout)
    assert said is not None, p.stdout
    assert said.groups() == (f"{ms:.3f}", f"{1000 / ms:.1f}", f"{mj:.3f}", f"{w:.3f}",
                             f"{fps_w:.2f}")
    assert (tmp_path / "g.png").stat().st_size > 10_000
