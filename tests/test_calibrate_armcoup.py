"""`coupprof calibrate` on ARM-CO-UP's RK3399Pro measurements (../shared/armcoup/Layers.csv),
and the simulated board it writes running a model the fit never saw.

The data are not part of the project: they are read from ../shared/armcoup beside the
checkout, or $COUPPROF_ARMCOUP_DIR, and these tests skip when neither exists.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.boards.profiles import load_board
from profiler.zoo import armcoup
from profiler.zoo.registry import model_path

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("COUPPROF_ARMCOUP_DIR") or REPO.parent / "shared" / "armcoup")
LAYERS = DATA / "Layers.csv"
COUPPROF = str(Path(sys.executable).with_name("coupprof"))

pytestmark = pytest.mark.skipif(
    not LAYERS.is_file(),
    reason=f"ARM-CO-UP's Layers.csv is not at {DATA} (set COUPPROF_ARMCOUP_DIR)")


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([COUPPROF, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def test_calibrate_validates_and_writes_a_board(tmp_path: Path) -> None:
    r = cli("calibrate", str(LAYERS), "--processors", "B", "-o", "b.toml",
            "--lomo-csv", "lomo.csv", cwd=tmp_path)
    assert "leave-one-model-out" in r.stdout and "wrote b.toml" in r.stdout
    table = pd.read_csv(tmp_path / "lomo.csv")
    assert list(table["held_out"]) == ["Alex", "Google", "MobileV1", "ResV1_50", "SqueezeV1",
                                       "pooled"]
    pooled = table.iloc[-1]
    assert pooled["layers"] == 488  # B: 61 layers x 8 levels
    # The pooled targets for B (the per-model figures are in the closing note).
    assert pooled["layer_time_err_median_pct"] <= 15
    assert pooled["whole_time_err_median_pct"] <= 10
    assert pooled["power_err_median_pct"] <= 4 and pooled["power_err_p90_pct"] <= 10.5
    # The table's sidecar makes it a section of the report, not an unknown CSV.
    side = json.loads((tmp_path / "lomo.json").read_text())
    assert side["format"] == "coupprof-lomo/1" and side["targets_missed"] == []
    cli("report", ".", "-o", "report.md", cwd=tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "Leave-one-model-out validation: board sim" in md and "Targets met." in md
    assert "no coupprof sidecar" not in md
    assert f"{pooled['layer_time_err_median_pct']:.1f}" in md
    board = load_board(str(tmp_path / "b.toml"))
    assert board.simulated and board.name == "sim"
    cal = board.extra["sim"]["calibration"]
    assert cal["source_kind"] == "ARM-CO-UP Layers.csv" and cal["processors"] == ["B"]
    assert cal["models"] == ["Alex", "Google", "MobileV1", "ResV1_50", "SqueezeV1"]
    assert len(cal["source_sha256"]) == 64 and "coupprof calibrate" in cal["command"]
    # The fit is deterministic: B's tables are the shipped sim board's, which `coupprof
    # calibrate` wrote from this file ([board.sim.calibration] says so); the processors
    # not fitted keep the base profile's. Parameters the data do not bound are written as
    # 0 (profiler/calibrate/fit.py, _ZERO_REL), so they compare exactly; the others to 1e-5,
    # since the profile keeps 6 significant digits and a value on a rounding boundary
    # flips its last one with the optimiser's last step (conv3x3s1 9.70519 / 9.7052 under
    # two NumPy/SciPy stacks).
    base = load_board("sim")
    assert base.extra["sim"]["calibration"]["source_sha256"] == cal["source_sha256"]
    for letter in "LBGN":
        assert _close(board.processor(letter).extra["sim"], base.processor(letter).extra["sim"]), \
            letter


def _close(a: object, b: object) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=0.0)
    return a == b


def test_sim_fitted_without_mobilenet_times_its_layers(tmp_path: Path) -> None:
    """Fit L, B and G on the four other CNNs, then run MobileNetV1 (zoo, 1001 classes, cut
    at ARM-CO-UP's 14 layers) on that simulated board at a low, a middle and the top level:
    per-layer times against ARM-CO-UP's MobileV1 rows within the issue's target for a
    held-out model (median error <= 20 % per processor over its levels)."""
    cli("calibrate", str(LAYERS), "--models", "Alex,Google,ResV1_50,SqueezeV1",
        "--processors", "L,B,G", "--no-validate", "-o", "nomobile.toml", cwd=tmp_path)
    spec = armcoup.model_for("MobileV1")
    model = model_path(spec.zoo_name, **spec.params)
    cuts = ",".join(map(str, armcoup.cuts(spec)))
    real = pd.read_csv(LAYERS)
    real = real[(real["Graph"] == "MobileV1") & (real["Metric"] == "task")]
    board = load_board("sim")
    errors: dict[str, list[float]] = {}
    for letter in "LBG":
        n = len(board.processor(letter).freqs_khz)
        for level in sorted({1, (n + 1) // 2, n}):
            csv = tmp_path / f"{letter}{level}.csv"
            host = ["--host-freq", "max"] if letter == "G" else []
            cli("layers", "--board", "nomobile.toml", "--model", str(model), "--cuts", cuts,
                "--processor", letter, "--freq", str(level), *host, "--method", "sliced",
                "--frames", "3", "--warmup", "1", "--power", "none", "--csv", str(csv),
                cwd=tmp_path)
            got = pd.read_csv(csv).set_index("layer")["time_ms_median"]
            want = real[(real["Component"] == letter) & (real["Freq"] == level - 1)
                        & (real["Freq_Host"].isin([-1, 7]))].set_index("Layer")["Time"]
            assert len(got) == len(want) == 14
            errors.setdefault(letter, []).extend(
                np.abs(got.to_numpy() / want.sort_index().to_numpy() - 1))
    for letter, err in errors.items():
        assert np.median(err) <= 0.20, (letter, np.round(err, 3))


def test_sim_layer_power_moves_with_the_layer_as_on_the_real_board() -> None:
    """GoogLeNet on the shipped sim's B at its top level: each layer's modelled power
    (what the sim draws while it runs) against ARM-CO-UP's measured power per layer. Their
    readings lag the marker (short layers read low), the sim's do not, so the spread is
    smaller on sim, but the layers rank alike."""
    from profiler.calibrate.board import armcoup_measurements
    from profiler.sim.executor import Pricer
    from profiler.sim.model import idle_power_w

    board = load_board("sim")
    b = board.processor("B")
    rows = armcoup_measurements(LAYERS, board, ["Google"])["B"]
    top = rows.rows[np.isclose(rows.rows["f_ghz"], b.freqs_khz[-1] / 1e6)].sort_values("layer")
    sim_w = np.array([idle_power_w(board) + Pricer(board, b, rows.works[("Google", int(k))])
                      .price((b.freqs_khz[-1], None))[1] for k in top["layer"]])
    real_w = top["power_w"].to_numpy()
    assert len(sim_w) == 11
    assert np.corrcoef(sim_w, real_w)[0, 1] > 0.75
    assert sim_w.std() / sim_w.mean() > 0.03  # not one number for every layer
    # Above their readings, which a lagging sensor pulls towards the idle gaps between
    # layers (the fit's lag model says by how much; profiler/calibrate/fit.py).
    assert (sim_w > real_w).all() and np.median(sim_w / real_w) < 1.2
