"""Pipeline search (profiler.explore.pipeline) against brute force, and explore's costs
against `coupprof predict`'s (profiler.mapping.predict) on the same tables."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.boards.profiles import load_board
from profiler.explore.pipeline import (
    decode,
    enumerate_front,
    epsilon,
    genes,
    igd,
    nsga2_front,
    pick,
    search_pipeline,
    space_size,
)
from profiler.explore.space import (
    Candidate,
    CostTables,
    evaluate,
    freq_spec,
    order_string,
    stages_of,
)
from tests.test_explore_switch import small

BOARD = load_board("sim")


def brute_front(t: CostTables) -> tuple[list, int]:
    """Every pipeline point (contiguous stages, distinct processors, one level per
    domain), costed by evaluate; the non-dominated ones (throughput, FPS/W)."""
    n, U = t.n_layers, len(t.units)
    pts = []
    for units in itertools.product(range(U), repeat=n):
        st = stages_of(units)
        if len({t.units[u].letter for u, _, _ in st}) != len(st):
            continue
        doms = sorted({t.units[u].domain for u in units})
        choices = [sorted(set.intersection(*[set(t.levels[u]) for u in set(units)
                                             if t.units[u].domain == d])) for d in doms]
        for lv in itertools.product(*choices):
            level = dict(zip(doms, lv, strict=True))
            c = Candidate("pipeline", units, tuple(level[t.units[u].domain] for u in units))
            pts.append(evaluate(t, c))
    front = [p for p in pts if not any(
        q.throughput_fps >= p.throughput_fps and q.fps_per_w >= p.fps_per_w
        and (q.throughput_fps > p.throughput_fps or q.fps_per_w > p.fps_per_w) for q in pts)]
    return front, len(pts)


def values(front: list) -> set:
    return {(round(e.throughput_fps, 9), round(e.fps_per_w, 9)) for e in front}


@pytest.mark.parametrize("seed, procs, fixed_energy", [(0, "BGN", False), (1, "LBG", False),
                                                       (2, "LBGN", False), (3, "BGN", True)])
def test_exact_front_is_the_brute_force_front(seed: int, procs: str, fixed_energy: bool) -> None:
    t = small(seed, n=5, procs=procs, fixed_energy=fixed_energy)
    want, count = brute_front(t)
    res = enumerate_front(t)
    assert res.space == count == space_size(t)
    assert values(res.front) == values(want)
    assert "true Pareto front" in res.describe()


@pytest.mark.parametrize("seed", [0, 3, 8])
def test_nsga2_front_is_within_a_stated_distance_of_the_true_front(seed: int) -> None:
    """Seeded NSGA-II, 100 x 100 evaluations plus its local search, on 10-layer,
    4-processor spaces of ~70,000 points: every point of the exact front has an NSGA-II
    point with at least 1 / 1.10 of its throughput and of its FPS/W (epsilon <= 0.10;
    over seeds 0-9 the worst was 0.076), and none of its points beats the true front
    (they are real, exactly costed points). On the tables without read-backs at G and N
    cuts, where that figure was measured: with them, seed 8 reaches 0.118 (the cost
    model's own tests use them)."""
    t = small(seed, n=10, procs="LBGN", readout=False)
    true = enumerate_front(t)
    found = nsga2_front(t, pop_size=100, generations=100, seed=0)
    assert found.method == "NSGA-II" and found.evaluations == 10_000
    assert epsilon(found.front, true.front) <= 0.10
    assert igd(found.front, true.front) <= 0.15
    for e in found.front:
        assert not any(e.throughput_fps > q.throughput_fps * (1 + 1e-9)
                       and e.fps_per_w > q.fps_per_w * (1 + 1e-9) for q in true.front)
    if seed == 0:  # the same seed gives the same front
        again = nsga2_front(t, pop_size=100, generations=100, seed=0)
        assert values(again.front) == values(found.front)


def test_decoded_points_are_valid_pipelines() -> None:
    t = small(3, n=7, procs="LBGN")
    rng = np.random.default_rng(0)
    for _ in range(300):
        c = decode(t, rng.integers(0, genes(t) + 1))
        st = stages_of(c.units)
        assert len({t.units[u].letter for u, _, _ in st}) == len(st)
        per_dom = {}
        for u, lv in zip(c.units, c.levels, strict=True):
            assert per_dom.setdefault(t.units[u].domain, lv) == lv
        assert len(freq_spec(t, c).split("/")) == len(st)


def test_auto_picks_exact_for_small_spaces_and_pick_respects_min_fps() -> None:
    t = small(0, n=5, procs="BGN")
    res = search_pipeline(t)
    assert res.method == "exact"
    fastest = max(e.throughput_fps for e in res.front)
    assert pick(res.front, fastest * 1.01) is None
    p = pick(res.front, fastest * 0.5)
    assert p.throughput_fps >= fastest * 0.5
    assert p.fps_per_w == max(e.fps_per_w for e in res.front if e.throughput_fps >= fastest * 0.5)


def test_missing_pymoo_is_one_line_with_the_pip_command(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "pymoo"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no pymoo here')\n")
    code = ("from tests.test_explore_switch import small\n"
            "from profiler.explore.pipeline import nsga2_front\n"
            "from profiler.errors import BadInputError\n"
            "try:\n    nsga2_front(small(0, n=3), 4, 2)\n"
            "except BadInputError as e:\n    print('ERR', e)\n")
    env = {**os.environ, "PYTHONPATH": f"{shadow.parent}{os.pathsep}{Path.cwd()}"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=Path(__file__).parent.parent, timeout=60)
    assert "ERR" in out.stdout and "pip install 'coupprof[explore]'" in out.stdout, out


@pytest.mark.parametrize("mode", ["switch", "pipeline"])
@pytest.mark.parametrize("fixed_energy", [False, True])
def test_costs_equal_coupprof_predict_on_the_same_tables(mode: str, fixed_energy: bool) -> None:
    """explore's evaluate and profiler.mapping.predict.predict agree (no DVFS delays: predict
    leaves them out) on random mappings of the same layer and transfer tables, with and
    without a counter's fixed-row energies."""
    from profiler.mapping.predict import LayerCosts, predict
    from profiler.mapping.spec import Mapping, parse_freq

    t = small(4, n=6, procs="LBGN", delays=False, fixed_energy=fixed_energy)
    rows = [{"processor": t.units[u].letter, "level": lv, "layer": i,
             "time_ms": t.time_ms[u, k, i], "transfer_ms": t.feed_ms[u, k, i],
             "energy_mj": t.energy_mj[u, k, i], "dynamic_energy_mj": t.dynamic_energy_mj[u, k, i]}
            for u in range(len(t.units)) for k, lv in enumerate(t.levels[u])
            for i in range(t.n_layers)]
    table = pd.DataFrame(rows)
    table["level"] = table["level"].astype("Int64")
    fixed = {(t.units[u].letter, lv): t.fixed(u, lv) for u in range(len(t.units))
             for lv in t.levels[u]}
    assert any(fixed.values())  # G and N fused: a stage pays its fixed cost once
    assert t.fixed_energy_mj is not None
    fixed_e = {(t.units[u].letter, lv): float(t.fixed_energy_mj[u, k])
               for u in range(len(t.units)) for k, lv in enumerate(t.levels[u])
               if not math.isnan(t.fixed_energy_mj[u, k])}
    assert bool(fixed_e) == fixed_energy
    layers = LayerCosts(table, {u.letter: t.idle_power_w for u in t.units}, fixed_ms=fixed,
                        fixed_energy_mj=fixed_e)
    assert t.readout_ms is not None and t.readout_ms.any()  # G and N pay a read-back at a cut
    transfers = pd.DataFrame([{"boundary": b, "src": t.units[a].letter, "dst": t.units[c].letter,
                               "time_ms_mean": t.transfer_ms[b, a, c],
                               "energy_mj": t.transfer_mj[b, a, c],
                               "readout_ms": t.readout_ms[b, a]}
                              for b in range(t.n_layers - 1) for a in range(len(t.units))
                              for c in range(len(t.units))])
    rng = np.random.default_rng(1)
    for _ in range(25):
        if mode == "pipeline":
            c = decode(t, rng.integers(0, genes(t) + 1))
        else:
            units = tuple(int(u) for u in rng.integers(0, len(t.units), t.n_layers))
            levels = tuple(int(rng.choice(t.levels[u])) for u in units)
            c = Candidate("switch", units, levels)
        mine = evaluate(t, c)
        mapping = Mapping("".join(t.units[u].letter for u in c.units))
        assert order_string(t, c) == mapping.compact
        plan = parse_freq(freq_spec(t, c), mapping, BOARD)
        theirs = predict(mapping, mode, layers, transfers, plan)
        assert math.isclose(mine.latency_ms, theirs.latency_ms, rel_tol=1e-9)
        assert math.isclose(mine.throughput_fps, theirs.throughput_fps, rel_tol=1e-9)
        assert math.isclose(mine.energy_mj, theirs.energy_mj, rel_tol=1e-9)


def test_the_fast_stage_costs_equal_evaluate() -> None:
    """The exact search's array costs of a stage (fixed cost, read-back at its cut,
    layers, the hand-over into it) are evaluate's stage times, and its stage energies
    plus the idle power over the period are evaluate's energy, on random pipelines of
    tables where G and N pay read-backs and a counter measured their fixed rows."""
    from profiler.explore.pipeline import _Fast

    t = small(5, n=7, procs="LBGN", fixed_energy=True)
    assert t.readout_ms is not None and t.readout_ms.any()
    fast = _Fast(t)
    assert fast.exact_energy and fast.fix_x.any()
    rng = np.random.default_rng(2)
    for _ in range(40):
        c = decode(t, rng.integers(0, genes(t) + 1))
        ev = evaluate(t, c)
        st = stages_of(c.units)
        energy = 0.0
        for j, (u, a, b) in enumerate(st):
            ms, en = fast.stage(u, a, b, st[j - 1][0] if j else None)
            k = t.level_index(u, c.levels[a])
            assert ms[k] == pytest.approx(ev.stage_ms[j], rel=1e-12)
            energy += float(en[k])
        assert energy + fast.idle * max(ev.stage_ms) == pytest.approx(ev.energy_mj, rel=1e-12)
