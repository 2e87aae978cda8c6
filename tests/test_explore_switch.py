"""Exact switch-mode search (profiler.explore.switch) against brute force.

Ground truth: every (unit, level) per layer enumerated and costed by
`explore_space.evaluate`, which is written layer by layer, independently of the DP's
matrices. Tables: synthetic ones on the sim board's levels (N shares B's DVFS domain,
so its transitions interact; G and N "fused", paying a fixed cost per stage), a hand-built one whose optimum is known, and real ones
from a quick `coupprof sweep` on the simulated board (tests/test_explore_cli.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from profiler.boards.profiles import load_board
from profiler.errors import BadInputError
from profiler.explore.space import Candidate, CostTables, evaluate, freq_spec, order_string
from profiler.explore.switch import search_switch
from profiler.explore.tables import from_frames, synthetic_tables

BOARD = load_board("sim")


def brute(t: CostTables) -> list:
    states = [(u, lv) for u in range(len(t.units)) for lv in t.levels[u]]
    out = []
    for combo in itertools.product(states, repeat=t.n_layers):
        c = Candidate("switch", tuple(s[0] for s in combo), tuple(s[1] for s in combo))
        out.append(evaluate(t, c))
    return out


def small(seed: int, n: int = 4, procs: str = "BGN", delays: bool = True,
          readout: bool = True, fixed_energy: bool = False,
          call_factor: dict | None = None) -> CostTables:
    t = synthetic_tables(BOARD, n, seed, processors=list(procs), delays=delays)
    # keep levels 1, 3, 5 so brute force stays small (9 states per layer)
    df = pd.DataFrame([{"processor": t.units[u].letter, "freq_level": lv, "layer": i,
                        "time_ms_mean": t.time_ms[u, k, i], "transfer_ms_mean": t.feed_ms[u, k, i],
                        "energy_mj": t.energy_mj[u, k, i],
                        "dynamic_energy_mj": t.dynamic_energy_mj[u, k, i]}
                       for u in range(len(t.units)) for k, lv in enumerate(t.levels[u])
                       if lv in (1, 3, 5) for i in range(n)])
    # G and N swept fused: their times are fused ones, and a call of theirs that ends at
    # a cut pays a read-back (per boundary and src, as the fused transfer matrix gives it)
    fused = df["processor"].isin(["G", "N"])
    df["time_ms_ci95"] = pd.Series(0.01, index=df.index).where(fused)
    rng = np.random.default_rng(seed + 100)
    ro = {(b, a): float(rng.uniform(0.05, 0.5)) if readout and t.units[a].letter in "GN"
          else 0.0 for b in range(n - 1) for a in range(len(t.units))}
    tr = pd.DataFrame([{"boundary": b, "src": t.units[a].letter, "dst": t.units[c].letter,
                        "time_ms_mean": t.transfer_ms[b, a, c], "energy_mj": t.transfer_mj[b, a, c],
                        "readout_ms": ro[(b, a)]}
                       for b in range(n - 1) for a in range(len(t.units)) for c in range(len(t.units))])
    dl = None
    if delays:
        dl = pd.DataFrame([{"processor": d, "from_level": a, "to_level": b,
                            "delay_us": 1000.0 * t.delay(d, a, b)}
                           for d in t.domains() for a in (1, 3, 5) for b in (1, 3, 5) if a != b])
    fixed = {(t.units[u].letter, lv): t.fixed(u, lv) for u in range(len(t.units))
             for lv in t.levels[u] if lv in (1, 3, 5)}
    # a counter's fixed-row energy: above the idle power over the fixed time, and more so
    # at high levels, so it can move the optimum
    fixed_e = {key: (t.idle_power_w or 0.0) * ms * 1.5 + 0.4 * key[1]
               for key, ms in fixed.items() if ms > 0} if fixed_energy else None
    return from_frames(df, BOARD, tr, dl, t.idle_power_w, t.model, fixed_ms=fixed,
                       fixed_energy_mj=fixed_e, call_factor=call_factor)


def test_a_call_factor_scales_that_pairs_fused_times_and_fixed_row_only() -> None:
    """As predict reads a sweep: a fused pair's layer times and fixed row x its factor."""
    plain = small(0)
    scaled = small(0, call_factor={("G", 3): 1.25, ("B", 3): 1.5})
    g, b = plain.unit_index("G"), plain.unit_index("B")
    k = plain.level_index(g, 3)
    np.testing.assert_allclose(scaled.time_ms[g, k], 1.25 * plain.time_ms[g, k])
    assert scaled.fixed(g, 3) == pytest.approx(1.25 * plain.fixed(g, 3)) and plain.fixed(g, 3) > 0
    for lv in (1, 5):  # other levels of G as they were
        kk = plain.level_index(g, lv)
        np.testing.assert_allclose(scaled.time_ms[g, kk], plain.time_ms[g, kk])
    # B's rows are sliced (no fused time): a factor for them changes nothing
    np.testing.assert_allclose(scaled.time_ms[b], plain.time_ms[b])


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize(("delays", "fixed_energy"), [(True, False), (False, False),
                                                     (True, True)])
def test_every_exact_result_equals_brute_force(seed: int, delays: bool,
                                               fixed_energy: bool) -> None:
    t = small(seed, delays=delays, fixed_energy=fixed_energy)
    allp = brute(t)
    lat_opt = min(e.latency_ms for e in allp)
    en_opt = min(e.energy_mj for e in allp)
    r = search_switch(t, None, "latency")
    assert r.optimal and close(r.best.latency_ms, lat_opt)
    r = search_switch(t, None, "energy")
    assert r.optimal and close(r.best.energy_mj, en_opt)
    lats = sorted(e.latency_ms for e in allp)
    # bounds from the tight end (only the fastest fits) to the loose one
    for q in (0.0, 0.02, 0.1, 0.3, 0.6):
        bound = lats[int(q * (len(lats) - 1))] * (1 + 1e-12)
        want = min(e.energy_mj for e in allp if e.latency_ms <= bound)
        r = search_switch(t, bound, "energy", bins=200)
        assert r.optimal, r.proof()
        assert r.best.latency_ms <= bound
        assert close(r.best.energy_mj, want), (q, r.best.energy_mj, want)
        assert "optimal" in r.proof() and "NOT" not in r.proof()
    r = search_switch(t, lat_opt * 0.999, "energy")
    assert r.best is None and "no mapping meets" in r.proof()


def test_five_layers_three_units_with_shared_domain() -> None:
    t = small(7, n=5)
    allp = brute(t)
    lats = sorted(e.latency_ms for e in allp)
    for q in (0.05, 0.25):
        bound = lats[int(q * (len(lats) - 1))]
        want = min(e.energy_mj for e in allp if e.latency_ms <= bound)
        r = search_switch(t, bound, "energy", bins=100)
        assert r.optimal and close(r.best.energy_mj, want)


def test_transition_delays_are_charged_across_domains() -> None:
    """B at 5, then G, then B at 1: B's level changes although G ran in between."""
    t = small(0, n=3, procs="BG")
    a = evaluate(t, Candidate("switch", (0, 1, 0), (5, 3, 1)))
    b = evaluate(t, Candidate("switch", (0, 1, 0), (5, 3, 5)))
    # a: B 5->1 in the frame and 1->5 into the next one; b: none
    assert close(a.dvfs_delay_ms, t.delay("B", 5, 1) + t.delay("B", 1, 5))
    assert b.dvfs_delay_ms == 0.0


def test_known_optimum_by_hand() -> None:
    """Two layers, B fast and hungry, G slow and frugal, one level each, free
    hand-overs: least latency is BB, least energy GG, and with 25 ms allowed the best is
    one layer on each, the big one (layer 1) on B."""
    rows = []
    for i, work in enumerate((5.0, 20.0)):
        rows.append({"processor": "B", "freq_level": 1, "layer": i, "time_ms_mean": work,
                     "transfer_ms_mean": 0.0, "energy_mj": 2.0 * work})
        rows.append({"processor": "G", "freq_level": 1, "layer": i, "time_ms_mean": 2 * work,
                     "transfer_ms_mean": 0.0, "energy_mj": 0.5 * 2 * work})
    tr = pd.DataFrame([{"boundary": 0, "src": a, "dst": b, "time_ms_mean": 0.0,
                        "energy_mj": 0.0} for a in "BG" for b in "BG"])
    t = from_frames(pd.DataFrame(rows), BOARD, tr, None, 0.0)
    assert order_string(t, search_switch(t, None, "latency").best.candidate) == "B2"
    assert order_string(t, search_switch(t, None, "energy").best.candidate) == "G2"
    r = search_switch(t, 30.0, "energy")
    assert order_string(t, r.best.candidate) == "G1B1"
    assert r.best.latency_ms == 30.0 and r.best.energy_mj == 5.0 + 40.0
    assert freq_spec(t, r.best.candidate) == "1,1"


def test_a_fused_layer_below_zero_counts_as_nothing() -> None:
    """A layer below the fused method's resolution can come out negative (a difference of
    two noisy prefixes); the bounded DP needs non-negative steps, so it counts 0 and the
    tables say so (before, the latency bins broke on it)."""
    rows = []
    for i, fused in enumerate((5.0, -0.4, 6.0)):
        rows.append({"processor": "B", "freq_level": 1, "layer": i, "time_ms_mean": fused,
                     "time_ms_ci95": 0.5, "transfer_ms_mean": 0.0, "energy_mj": 1.0})
    t = from_frames(pd.DataFrame(rows), BOARD, None, None, 0.0)
    assert list(t.time_ms[0, 0]) == [5.0, 0.0, 6.0]
    assert any("1 fused layer time(s) below 0" in n for n in t.sources)
    r = search_switch(t, 11.5, "energy")
    assert r.best.latency_ms == pytest.approx(11.0)


def test_bad_inputs_are_one_line_errors() -> None:
    t = small(0, n=2)
    with pytest.raises(BadInputError):
        search_switch(t, -1.0)
    with pytest.raises(BadInputError):
        search_switch(t, 10.0, "fps")
    t.energy_mj = None
    with pytest.raises(BadInputError, match="no energy"):
        search_switch(t, 10.0, "energy")


def test_a_stage_pays_its_fixed_cost_once() -> None:
    """Fused G: G3 is one call (its fixed per-call cost once, no hand-over inside), G1B1G1
    pays it twice, and G3 with a level change after layer 1 is two calls (as `coupprof
    run` cuts it: a fixed cost each and the same-unit hand-over at the cut); a G call
    that ends at a cut also pays its read-back there."""
    t = small(0, n=3, procs="BG")
    g, b = t.unit_index("G"), t.unit_index("B")
    f = t.fixed(g, 5)
    assert f > 0 and t.fixed(b, 5) == 0.0
    k = t.level_index(g, 5)
    one = evaluate(t, Candidate("switch", (g, g, g), (5, 5, 5)))
    assert one.latency_ms == pytest.approx(sum(t.time_ms[g, k]) + f + t.feed_ms[g, k, 0])
    lo = min(lv for lv in t.levels[g] if lv != 5)
    cut = evaluate(t, Candidate("switch", (g, g, g), (5, 5, lo)))
    kl = t.level_index(g, lo)
    assert cut.latency_ms == pytest.approx(
        t.time_ms[g, k, 0] + t.time_ms[g, k, 1] + t.time_ms[g, kl, 2] + f + t.fixed(g, lo)
        + t.feed_ms[g, k, 0] + t.transfer_ms[1, g, g] + cut.dvfs_delay_ms + t.readout(1, g))
    two = evaluate(t, Candidate("switch", (g, b, g), (5, 5, 5)))
    assert t.readout(0, g) > 0
    assert two.stage_ms[0] == pytest.approx(f + t.time_ms[g, t.level_index(g, 5), 0]
                                            + t.feed_ms[g, t.level_index(g, 5), 0]
                                            + t.readout(0, g))
    assert len(two.stage_ms) == 3


def test_resnet50_sized_search_states() -> None:
    """54 layers, every unit and level of the sim board: the latency DP is exact and
    quick; its pick is no slower than the best single-processor mapping."""
    t = synthetic_tables(BOARD, 54, 3)
    r = search_switch(t, None, "latency")
    assert r.optimal and r.states == 4 * 6 * 8 * 5
    singles = [evaluate(t, Candidate("switch", (u,) * 54, (lv,) * 54)).latency_ms
               for u in range(4) for lv in t.levels[u]]
    assert r.best.latency_ms <= min(singles) + 1e-9
    assert np.isfinite(r.best.latency_ms)


def two_level_table() -> CostTables:
    """B with levels 1 and 5; layer 0 is almost as fast at 1 and far cheaper there,
    layer 1 needs level 5. Changing level costs 0.5 ms (0.5 mJ at 1 W idle) each way,
    also from the previous frame's last layer into this one's first."""
    rows = [
        {"processor": "B", "freq_level": 1, "layer": 0, "time_ms_mean": 3.0, "energy_mj": 1.0},
        {"processor": "B", "freq_level": 5, "layer": 0, "time_ms_mean": 2.9, "energy_mj": 10.0},
        {"processor": "B", "freq_level": 1, "layer": 1, "time_ms_mean": 30.0, "energy_mj": 5.0},
        {"processor": "B", "freq_level": 5, "layer": 1, "time_ms_mean": 3.0, "energy_mj": 6.0},
    ]
    df = pd.DataFrame(rows).assign(transfer_ms_mean=0.0)
    tr = pd.DataFrame([{"boundary": 0, "src": "B", "dst": "B", "time_ms_mean": 0.0,
                        "energy_mj": 0.0}])
    dl = pd.DataFrame([{"processor": "B", "from_level": a, "to_level": b, "delay_us": 500.0}
                       for a, b in ((1, 5), (5, 1))])
    return from_frames(df, BOARD, tr, dl, 1.0)


@pytest.mark.parametrize("bound, levels, energy", [(6.8, (5, 5), 16.0), (7.2, (1, 5), 8.0),
                                                   (None, (1, 1), 6.0)])
def test_the_frame_to_frame_transition_is_proven_by_start_levels(bound, levels, energy) -> None:
    """The relaxed DP lets each domain start a frame at any level, so it thinks (1, 5)
    costs 6.5 ms / 7.5 mJ; it really costs 7 ms / 8 mJ (5 -> 1 into the next frame).
    The search then tries every start level and still proves its pick."""
    t = two_level_table()
    allp = brute(t)
    ok = [e for e in allp if bound is None or e.latency_ms <= bound]
    assert min(e.energy_mj for e in ok) == pytest.approx(energy)
    r = search_switch(t, bound, "energy")
    assert r.optimal, r.proof()
    assert r.best.candidate.levels == levels and r.best.energy_mj == pytest.approx(energy)
    if bound is not None:
        r = search_switch(t, bound, "energy", cycle_limit=0)  # start levels not tried
        assert not r.optimal and "NOT proven optimal" in r.proof()
        assert r.best.energy_mj >= energy - 1e-9


def test_imported_table_with_host_levels_and_blank_feeds() -> None:
    """An imported (ARM-CO-UP-like) table: G timed at every level of its host too, no
    feed times. G keeps its rows at the host's top level; blank feeds count 0."""
    rows = []
    for host, ms in ((1, 30.0), (8, 10.0)):
        rows += [{"processor": "G", "freq_level": 5, "host_level": host, "layer": i,
                  "time_ms_mean": ms, "transfer_ms_mean": float("nan"), "energy_mj": ms}
                 for i in range(2)]
    rows += [{"processor": "B", "freq_level": 8, "host_level": float("nan"), "layer": i,
              "time_ms_mean": 12.0, "transfer_ms_mean": float("nan"), "energy_mj": 20.0}
             for i in range(2)]
    t = from_frames(pd.DataFrame(rows), load_board("rk3399pro"), None, None, None)
    assert "G: rows at host level 8 only" in t.sources
    r = search_switch(t, None, "latency")
    assert order_string(t, r.best.candidate) == "G2" and r.best.latency_ms == 20.0
    assert r.best.missing == ()


def test_the_dp_steps_cost_a_mapping_as_evaluate_does() -> None:
    """Summed along a mapping, the DP's steps (first layer, then each layer inside a
    call or starting one: hand-over, fixed cost, the read-back the call before pays) give
    evaluate's latency and energy, on random mappings of tables where G and N pay
    read-backs (no DVFS delays, so the path's levels alone fix its cost)."""
    from profiler.explore.switch import _space, _step

    t = small(3, n=5, procs="BGN", delays=False)
    assert t.readout_ms is not None and t.readout_ms.any()
    sp = _space(t)
    rng = np.random.default_rng(4)
    for _ in range(60):
        units = tuple(int(u) for u in rng.integers(0, len(t.units), t.n_layers))
        levels = tuple(int(rng.choice(t.levels[u])) for u in units)
        ev = evaluate(t, Candidate("switch", units, levels))
        j = [sp.dlev[sp.udom[u]].index(lv) for u, lv in zip(units, levels, strict=True)]
        ms, mj = float(sp.lat0[units[0], j[0]]), float(sp.en0[units[0], j[0]])
        for i in range(1, t.n_layers):
            a = j[i - 1] if units[i] == units[i - 1] else 0
            s_ms, s_mj = _step(sp, i, units[i - 1], units[i], a, j[i])
            ms, mj = ms + s_ms, mj + s_mj
        assert close(ms, ev.latency_ms) and close(mj, float(ev.energy_mj)), (units, levels)
