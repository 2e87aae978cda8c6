"""The simulated board against ARM-CO-UP's real one on a model it was not fitted on.

Fits L, B and G on ARM-CO-UP's Layers.csv without one CNN (`coupprof calibrate --models`),
runs that CNN (the zoo graph ARM-CO-UP ran, cut at their layers) on the board it wrote
with `coupprof layers` at the lowest, a middle and the top level of each processor (G
with its host at the top), and prints per-layer time errors against their rows, and the
whole model's (signed as everywhere: (sim - real) / real, `profiler.mapping.accuracy`). Also prints, for the shipped `sim` board, the ranking of L, B and G by
whole-model time at their top levels for the five CNNs beside the real one.

    python benchmarks/sim_heldout.py [--model MobileV1] [--armcoup ../shared/armcoup]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.calibrate.board import armcoup_measurements
from profiler.mapping.accuracy import error_pct
from profiler.platform import choose_board
from profiler.sim.executor import Pricer
from profiler.zoo import armcoup
from profiler.zoo.registry import model_path

COUPPROF = str(Path(sys.executable).with_name("coupprof"))
REPO = Path(__file__).resolve().parent.parent


def cli(*args: str, cwd: Path) -> None:
    r = subprocess.run([COUPPROF, *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{' '.join(args[:2])} failed: {r.stderr.strip().splitlines()[-1]}")


def held_out(graph: str, layers_csv: Path, work: Path) -> None:
    others = [g for g in armcoup.MODELS if g != graph]
    cli("calibrate", str(layers_csv), "--models", ",".join(others), "--processors", "L,B,G",
        "--no-validate", "-o", "fit.toml", cwd=work)
    spec = armcoup.model_for(graph)
    model = model_path(spec.zoo_name, **spec.params)
    cuts = ",".join(map(str, armcoup.cuts(spec)))
    real = pd.read_csv(layers_csv)
    real = real[(real["Graph"] == graph) & (real["Metric"] == "task")]
    board = choose_board("sim")
    print(f"{graph} on a sim fitted on {', '.join(others)} only (per-layer time error, "
          "median / largest; whole model)")
    for letter in "LBG":
        n = len(board.processor(letter).freqs_khz)
        errs, wholes = [], []
        for level in sorted({1, (n + 1) // 2, n}):
            csv = work / f"{letter}{level}.csv"
            host = ["--host-freq", "max"] if letter == "G" else []
            cli("layers", "--board", "fit.toml", "--model", str(model), "--cuts", cuts,
                "--processor", letter, "--freq", str(level), *host, "--method", "sliced",
                "--frames", "3", "--warmup", "1", "--power", "none", "--csv", str(csv),
                cwd=work)
            got = pd.read_csv(csv).set_index("layer")["time_ms_median"].sort_index()
            want = real[(real["Component"] == letter) & (real["Freq"] == level - 1)
                        & (real["Freq_Host"].isin([-1, 7]))].set_index("Layer")["Time"].sort_index()
            err = np.abs(got.to_numpy() / want.to_numpy() - 1)
            errs.append(err)
            wholes.append(error_pct(got.sum(), want.sum()) / 100)  # sim predicts, real measured
            print(f"  {letter} level {level}: median {np.median(err) * 100:5.1f} %, largest "
                  f"{err.max() * 100:5.1f} %; whole {got.sum():7.1f} ms against "
                  f"{want.sum():7.1f} ({wholes[-1] * 100:+.1f} %)")
        e = np.concatenate(errs)
        print(f"  {letter} over the three levels: median {np.median(e) * 100:.1f} %")


def ranking(layers_csv: Path) -> None:
    board = choose_board("sim")
    ms = armcoup_measurements(layers_csv, board)
    top = {p: board.processor(p).freqs_khz[-1] for p in "LBG"}
    print("ranking by whole-model time at the top levels (G's host at its top): real | sim")
    for graph in armcoup.MODELS:
        real, sim = {}, {}
        for p in "LBG":
            r = ms[p].rows
            sel = (r["model"] == graph) & np.isclose(r["f_ghz"], top[p] / 1e6)
            if p == "G":
                sel &= np.isclose(r["fh_ghz"], board.processor("B").freqs_khz[-1] / 1e6)
            rows = r[sel]
            real[p] = float(rows["time_ms"].sum())
            sim[p] = sum(Pricer(board, board.processor(p), ms[p].works[(graph, int(k))]).price(
                (top[p], board.processor("B").freqs_khz[-1] if p == "G" else None))[0]
                for k in rows["layer"]) / 1e6
        order = "".join(sorted(real, key=real.get))
        sim_order = "".join(sorted(sim, key=sim.get))
        print(f"  {graph:10s} {order} ({', '.join(f'{p} {real[p]:.1f}' for p in 'LBG')}) | "
              f"{sim_order} ({', '.join(f'{p} {sim[p]:.1f}' for p in 'LBG')})"
              f"{'' if order == sim_order else '  <- differs'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="MobileV1", choices=list(armcoup.MODELS))
    ap.add_argument("--armcoup", type=Path, default=REPO.parent / "shared" / "armcoup")
    args = ap.parse_args()
    layers_csv = (args.armcoup / "Layers.csv").resolve()
    if not layers_csv.is_file():
        sys.exit(f"ARM-CO-UP's Layers.csv is not at {layers_csv} (pass --armcoup DIR)")
    ranking(layers_csv)
    with tempfile.TemporaryDirectory() as d:
        held_out(args.model, layers_csv, Path(d))


if __name__ == "__main__":
    main()
