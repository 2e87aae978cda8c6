"""How well `coupprof calibrate` gives back a simulated twin's known parameters.

Writes the rpi5 twin with known timing and power tables (tests/twin_truth.py), its
ARM-CO-UP-style Layers.csv as the simulated board prices each layer, calibrates the twin
of `rpi5` on it (`coupprof calibrate ... --board rpi5`), and prints each parameter beside
the truth with what calibrate says of it (fitted, loosely, kept the prior, unbound), the
leave-one-model-out figures, and the fitted twin's errors on every layer of the five CNNs
at every level (the unmeasured ones included). Two cases: the five CNNs at levels
1, 4, 7 and 10, and MobileNetV1, ResNet50 and SqueezeNet at the top level only.

    python benchmarks/twin_recovery.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the truth's helpers live beside the tests

from twin_truth import (  # noqa: E402
    TRUTH_IDLE_MW,
    TRUTH_POWER,
    TRUTH_TIMING,
    price_errors,
    truth_board,
    write_layers_csv,
)

from profiler.platform import choose_board  # noqa: E402
from profiler.sim import model as sim_model  # noqa: E402
from profiler.sim.perf import PowerParams, TimingParams  # noqa: E402
from profiler.zoo import armcoup  # noqa: E402

COUPPROF = str(Path(sys.executable).with_name("coupprof"))
CASES = {"five CNNs at levels 1, 4, 7, 10": (list(armcoup.MODELS), [1, 4, 7, 10]),
         "three CNNs at level 10 only": (["MobileV1", "ResV1_50", "SqueezeV1"], [10])}


def value(t: TimingParams, p: PowerParams, name: str) -> float:
    what, rest = name.split(".", 1)
    if what == "power":
        return float(getattr(p, rest))
    if rest.startswith("macs_per_cycle."):
        return t.macs_per_cycle[rest.split(".", 1)[1]]
    return float(getattr(t, rest))


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="twin-recovery-") as tmp:
        work = Path(tmp)
        truth = truth_board(work / "truth.toml")
        for case, (graphs, levels) in CASES.items():
            rows = write_layers_csv(truth, graphs, levels, work / "Layers.csv")
            r = subprocess.run([COUPPROF, "calibrate", "Layers.csv", "--board", "rpi5", "-o",
                                "fit.toml", "--lomo-csv", "lomo.csv"], cwd=work,
                               capture_output=True, text=True, check=True)
            board = choose_board(str(work / "fit.toml"), letters=())
            cal = board.extra["sim"]["calibration"]
            got = sim_model.constants(board.processor("B"))
            status: dict[str, str] = {}
            for key, label in (("fitted", "fitted"), ("fitted_loosely", "loosely"),
                               ("kept_prior", "prior"), ("unbound", "unbound")):
                status.update({n.split(".", 1)[1]: label for n in cal.get(key, [])})
            table = pd.DataFrame([
                {"parameter": n, "truth": value(TRUTH_TIMING, TRUTH_POWER, n),
                 "fitted": value(got.timing, got.power, n), "calibrate says": s}
                for n, s in status.items()])
            table["error %"] = (table["fitted"] / table["truth"] - 1) * 100
            idle = sim_model.idle_power_w(board) * 1000
            print(f"\n== {case}: {rows} rows ({len(graphs)} CNNs x {len(levels)} levels)")
            print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
            print(f"idle power: truth {TRUTH_IDLE_MW:g} mW, fitted {idle:.1f} mW "
                  f"({'fitted' if 'board.sim.idle_power_mw' not in cal['kept_prior'] else 'prior'})")
            lomo = pd.read_csv(work / "lomo.csv")
            print(lomo.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
            t_err, p_err = (np.abs(e) * 100 for e in price_errors(truth, board))
            print(f"every layer of the five CNNs at all 10 levels: time error median "
                  f"{np.median(t_err):.2f} %, max {t_err.max():.2f} %; board power median "
                  f"{np.median(p_err):.3f} %, max {p_err.max():.3f} %")
            print("\n".join(line for line in r.stdout.splitlines()
                            if line.startswith(("B (", "  fitted", "  kept", "  unbound"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
