"""`coupprof calibrate` on coupprof's own sweep: the simulated board swept, its model fitted
back from the sweep, and the fitted board timing those layers as the sweep measured them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.boards.profiles import load_board
from profiler.calibrate import fit
from profiler.calibrate.board import sweep_measurements
from profiler.sim import model as sim_model

COUPPROF = str(Path(sys.executable).with_name("coupprof"))


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([COUPPROF, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def test_a_sweep_calibrates_a_board_that_reproduces_it(tmp_path: Path) -> None:
    cli("sweep", "--board", "sim", "--processors", "B", "--freqs", "1,4,8", "--frames", "4",
        "--warmup", "1", "--method", "sliced", "-o", "sw", cwd=tmp_path)
    r = cli("calibrate", "sw", "--board", "sim", "-o", "fit.toml", cwd=tmp_path)
    assert "not validated (one model only): B" in r.stdout
    board = load_board(str(tmp_path / "fit.toml"))
    cal = board.extra["sim"]["calibration"]
    assert cal["source_kind"] == "coupprof sweep" and cal["rows"] == 45
    # The sweep's rows priced by the fitted board give the layers' measured medians back,
    # closely but not exactly: one model's 15 layers (10 distinct) at 3 levels cannot pin
    # the model's 19 parameters, and the fit is regularised towards kinds it saw little of
    # (profiler/calibrate/fit.py's priors), so it is a fit, not an interpolation.
    ms = sweep_measurements(tmp_path / "sw", board)
    fitted = fit.ProcessorFit("B", sim_model.constants(board.processor("B")).timing, None,
                              ("mobilenet_v1_0.25_128",), 45)
    held = fit.evaluate(fitted, ms["B"])
    assert np.median(held.layer_time_err) < 0.08 and held.whole_time_err.max() < 0.06
    df = pd.read_csv(tmp_path / "sw" / "sweep.csv")
    assert len(df) == 45
