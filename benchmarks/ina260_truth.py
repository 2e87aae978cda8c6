"""How close per-layer power comes to the truth through ARM-CO-UP's kind of logger.

Two sources of known truth:

- **live** (``--runs``, default 5): ``coupprof layers --board sim --power sim:ina260`` on
  five 3x3 convs (tests/models/topologies.py ``long_layers``; 3.6 to 20 ms modelled per layer on
  the simulated B at its top level, where a layer draws ~90 % more than the idle board),
  ``--frames`` measured frames (default 30; ARM-CO-UP measured 10). The truth is the
  board's model of each layer's power while it runs (tests/sim_truth.py). Per run and layer: coupprof's
  method as the run attributed it (host windows through the fitted clock), ARM-CO-UP's
  method on the same readings, and coupprof's method on the same recording imported
  offline (``coupprof import``, no host clock).
- **offline** (``--seeds``, default 10): `profiler.sim.ina260.simulate_run`, ARM-CO-UP's
  layout (3 settings x (3 warm-up + 10 frames) x 8 layers of 8 to 72 ms, 10-35 % over
  the idle power), the layout tests/test_import_synthetic.py uses.

Printed: per-layer relative errors (%), and per method the largest |error| over layers
of 10 ms or more. Run: ``.venv/bin/python benchmarks/ina260_truth.py [--runs 5]
[--frames 30] [--level max] [--seeds 10] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from sim_truth import layer_truth  # noqa: E402

from profiler.platform import choose_board  # noqa: E402
from profiler.recordings.align import align  # noqa: E402
from profiler.recordings.attribute import armcoup_method, coupprof_method  # noqa: E402
from profiler.recordings.layout import RunLayout, Setting  # noqa: E402
from profiler.recordings.traces import read_armcoup_log  # noqa: E402
from profiler.sim import model as sim_model  # noqa: E402
from profiler.sim.ina260 import simulate_run  # noqa: E402
from profiler.slicing.slicer import slice_model  # noqa: E402
from tests.models.topologies import long_layers  # noqa: E402

COUPPROF = str(Path(sys.executable).with_name("coupprof"))


def live(runs: int, frames: int, level: str) -> list[dict]:
    board = choose_board("sim")
    proc = board.processor("B")
    khz = proc.freqs_khz[-1] if level == "max" else proc.freqs_khz[int(level) - 1]
    lv = len(proc.freqs_khz) if level == "max" else int(level)
    truth_w = np.array([layer_truth(board, "B", layer.model_bytes, khz)[1]
                        for layer in slice_model(long_layers()).layers])
    idle_w = sim_model.idle_power_w(board)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "long.tflite").write_bytes(long_layers())
        for run in range(runs):
            r = subprocess.run([COUPPROF, "layers", "--board", "sim", "-p", "B", "--freq", level,
                                "--model", "long.tflite", "--frames", str(frames), "--warmup",
                                "2", "--power", "sim:ina260", "--csv", f"r{run}.csv"],
                               cwd=d, capture_output=True, text=True)
            if r.returncode:
                raise SystemExit(r.stderr)
            t = pd.read_csv(d / f"r{run}.csv")
            meta = json.loads((d / f"r{run}.json").read_text())["extra"]
            r = subprocess.run([COUPPROF, "import", meta["readings_file"], "--active-level", "1",
                                "--order", "BBBBB", "--model", "long", "--frames", str(frames),
                                "--warmup", "0", "--levels", str(lv), "--trailing", "1",
                                "--board", "sim", "-o", f"imp{run}"],
                               cwd=d, capture_output=True, text=True)
            if r.returncode:
                raise SystemExit(r.stderr)
            off = pd.read_csv(d / f"imp{run}/long_BBBBB.csv")
            out.append({
                "truth_w": truth_w.round(4).tolist(), "idle_w": idle_w,
                "time_ms": t["time_ms_mean"].round(2).tolist(),
                "lag_ms": meta["sensor_lag_ms"], "faults": meta["alignment"]["faults"],
                "clock_residual_ms": meta["logger_clock"]["residual_ms"],
                "coupprof_pct": (100 * (t["power_w"] / truth_w - 1)).round(3).tolist(),
                "armcoup_pct": (100 * (t["armcoup_power_w"] / truth_w - 1)).round(3).tolist(),
                "offline_time_ms": off["time_ms_mean"].round(2).tolist(),
                "offline_coupprof_pct": (100 * (off["power_w"] / truth_w - 1)).round(3).tolist(),
            })
            print(f"live run {run}: B level {lv}, truth {truth_w.round(3).tolist()} W (idle "
                  f"{idle_w:.3f} W), lag {meta['sensor_lag_ms']} "
                  f"ms, faults {meta['alignment']['faults']}; layers {out[-1]['time_ms']} ms")
            for k in ("coupprof_pct", "armcoup_pct", "offline_coupprof_pct"):
                print(f"  {k:22s} {out[-1][k]}")
    return out


LAYER_MS = np.array([12.0, 30.0, 8.0, 45.0, 20.0, 15.0, 25.0, 10.0])
LAYER_MW = np.array([3400.0, 3900.0, 3300.0, 4100.0, 3600.0, 3500.0, 3800.0, 3700.0])
SPEED = np.array([1.6, 1.25, 1.0])
POWER = np.array([0.9, 0.95, 1.0])


def offline(seeds: int) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(1, seeds + 1):
            lay = RunLayout("B" * 8, frames=10, warmup=3, settings=tuple(Setting(i + 1)
                                                                         for i in range(3)))
            run = simulate_run(lay, LAYER_MS[None, :] * SPEED[:, None],
                               LAYER_MW[None, :] * POWER[:, None], seed=seed)
            path = Path(tmp) / f"s{seed}.csv"
            path.write_text(run.text)
            rec = read_armcoup_log(path)
            al = align(rec, lay, None)
            ours = [f for f in coupprof_method(rec, al).figures if f.metric == "task"]
            theirs = [f for f in armcoup_method(rec, al).figures if f.metric == "task"]
            long_ = [run.truth_time_ms[f.setting, f.layer] >= 10.0 for f in ours]
            e_o = [100 * (f.power_mw / run.truth_power_mw[f.setting, f.layer] - 1) for f in ours]
            e_t = [100 * (f.power_mw / run.truth_power_mw[f.setting, f.layer] - 1) for f in theirs]
            out.append({"seed": seed, "faults": al.faults,
                        "coupprof_max_pct": max(abs(e) for e, ok in zip(e_o, long_, strict=True) if ok),
                        "armcoup_max_pct": max(abs(e) for e, ok in zip(e_t, long_, strict=True) if ok),
                        "armcoup_mean_pct": float(np.mean([abs(e) for e, ok in zip(e_t, long_, strict=True) if ok]))})
            print(f"offline seed {seed}: faults {al.faults}, layers >= 10 ms: coupprof max "
                  f"|err| {out[-1]['coupprof_max_pct']:.2f} %, armcoup max {out[-1]['armcoup_max_pct']:.2f} "
                  f"% (mean {out[-1]['armcoup_mean_pct']:.2f} %)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--level", default="max")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    res = {"live": live(a.runs, a.frames, a.level) if a.runs else [],
           "offline": offline(a.seeds) if a.seeds else []}
    if res["live"]:
        def worst(key: str, tkey: str = "time_ms") -> float:
            return max(abs(e) for r in res["live"] for e, t in zip(r[key], r[tkey], strict=True)
                       if t >= 10.0 and np.isfinite(e))
        arm = [e for r in res["live"] for e, t in zip(r["armcoup_pct"], r["time_ms"], strict=True)
               if t >= 10.0]
        print(f"\nlive, {len(res['live'])} runs x {a.frames} frames, layers >= 10 ms: coupprof "
              f"max |err| {worst('coupprof_pct'):.2f} % (offline import of the same recordings "
              f"{worst('offline_coupprof_pct', 'offline_time_ms'):.2f} %); armcoup "
              f"{min(arm):.2f} to {max(arm):.2f} %")
    if res["offline"]:
        print(f"offline, {len(res['offline'])} simulated ARM-CO-UP runs, layers >= 10 ms: coupprof "
              f"max |err| {max(r['coupprof_max_pct'] for r in res['offline']):.2f} %, armcoup max "
              f"{max(r['armcoup_max_pct'] for r in res['offline']):.2f} %")
    if a.json:
        a.json.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
