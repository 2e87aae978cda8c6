"""How long `coupprof explore`'s searches take at ResNet50's size.

1. Exact switch search: 54 layers, 4 processors (L, B, G, N: N shares B's DVFS
   domain), every level of the sim board (6 + 8 + 5 levels: 960 DP states per layer),
   DVFS delays charged. Least latency (one exact DP), then least energy under a latency
   bound (binned DP; the bins are doubled until the pick is proven). Target < 10 s.
2. Pipeline NSGA-II: 100 x 100 evaluations (plus its local search) over the same
   tables. Target < 60 s.

Tables: by default synthetic ones on the sim board's levels and its 54-layer ResNet50
size (`profiler.explore.tables.synthetic_tables`: random per-layer work and per-processor
speeds, time ~ 1/f, power ~ V^2 f, transfers ~ boundary size, delays 0.2 ms + 0.5 ms per
level apart), since a full ResNet50 sweep of every level on the simulated board takes
far longer than the search. Pass --sweep DIR (with --transfers, --delays) to time real
tables instead.

    .venv/bin/python benchmarks/explore.py [--layers 54] [--seed 0] [--bins 1000]
                                           [--bound 1.3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from profiler.explore.pipeline import nsga2_front, space_size
from profiler.explore.space import freq_spec, order_string, single_processor, switch_space_size
from profiler.explore.switch import search_switch
from profiler.explore.tables import load_tables, synthetic_tables
from profiler.platform import choose_board


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=54)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bins", type=int, default=1000)
    ap.add_argument("--bound", type=float, default=1.3,
                    help="latency bound as a multiple of the least latency (default 1.3)")
    ap.add_argument("--population", type=int, default=100)
    ap.add_argument("--generations", type=int, default=100)
    ap.add_argument("--sweep", type=Path, default=None)
    ap.add_argument("--transfers", type=Path, default=None)
    ap.add_argument("--delays", default="")
    ap.add_argument("--board", default="sim")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    board = choose_board(args.board)
    if args.sweep:
        t = load_tables(args.sweep, board, args.transfers,
                        [d for d in args.delays.split(",") if d])
    else:
        t = synthetic_tables(board, args.layers, args.seed)
    print(f"tables: {t.model} ({t.n_layers} layers; units "
          f"{', '.join(u.name for u in t.units)}; levels "
          f"{', '.join(f'{u.name}:{len(lv)}' for u, lv in zip(t.units, t.levels, strict=True))}; "
          f"DVFS delays {'on' if t.delay_ms else 'off'})")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}")
    out: dict[str, object] = {"tables": t.model, "layers": t.n_layers}

    t0 = time.perf_counter()
    fast = search_switch(t, None, "latency")
    lat_s = time.perf_counter() - t0
    assert fast.best is not None
    bound = fast.best.latency_ms * args.bound
    t0 = time.perf_counter()
    res = search_switch(t, bound, "energy", bins=args.bins)
    con_s = time.perf_counter() - t0
    assert res.best is not None
    singles = single_processor(t, "switch")
    ok = [e for e in singles if e.latency_ms <= bound]
    best_single = min(ok, key=lambda e: e.energy_mj or 0.0) if ok else None
    print(f"\n1. exact switch search, {switch_space_size(t):.3g} points, {res.states} DP states "
          "per layer")
    print(f"   least latency: {fast.best.latency_ms:.3f} ms in {lat_s:.2f} s ({fast.proof()})")
    print(f"   least energy under {bound:.3f} ms: {res.best.energy_mj:.3f} mJ at "
          f"{res.best.latency_ms:.3f} ms, {order_string(t, res.best.candidate)}, in "
          f"{con_s:.2f} s (target < 10 s)")
    print(f"   {res.proof()}")
    if best_single is not None:
        print(f"   best single processor under the bound: {order_string(t, best_single.candidate)}"
              f" @ {best_single.candidate.levels[0]}: {best_single.energy_mj:.3f} mJ")
    out["switch"] = {"least_latency_s": lat_s, "bounded_energy_s": con_s, "bins": res.bins,
                     "optimal": res.optimal, "energy_mj": res.best.energy_mj,
                     "latency_ms": res.best.latency_ms, "bound_ms": bound,
                     "order": order_string(t, res.best.candidate),
                     "freq": freq_spec(t, res.best.candidate)}

    t0 = time.perf_counter()
    pipe = nsga2_front(t, args.population, args.generations, seed=args.seed)
    nsga_s = time.perf_counter() - t0
    top = max(pipe.front, key=lambda e: e.throughput_fps)
    eff = max(pipe.front, key=lambda e: e.fps_per_w or 0.0)
    print(f"\n2. pipeline NSGA-II, {args.population} x {args.generations} evaluations over "
          f"{space_size(t):.3g} points: {nsga_s:.2f} s (target < 60 s), "
          f"{pipe.local_evaluations} local-search evaluations included")
    print(f"   front: {len(pipe.front)} points; fastest {order_string(t, top.candidate)} "
          f"@ {freq_spec(t, top.candidate)} {top.throughput_fps:.1f} FPS; most efficient "
          f"{order_string(t, eff.candidate)} @ {freq_spec(t, eff.candidate)} "
          f"{eff.fps_per_w:.1f} FPS/W")
    out["pipeline"] = {"seconds": nsga_s, "evaluations": pipe.evaluations,
                       "local_evaluations": pipe.local_evaluations, "front": len(pipe.front)}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
