"""Tables that know their clock (`profiler.measure.clock_fit`), on a processor whose clock
coupprof cannot set: the simulated ``sim-driver`` G, whose clock its driver picks from its
load (`profiler.sim.governor.SimDriver`).

The fit's maths on made-up rounds; the driver's policy on a scripted clock; ``--freq``
refused; and, end to end on the simulated board, a fused table measured in interleaved
rounds (the driver wanders at 200-600 MHz) whose rows' a and b match the sim's model,
and a `coupprof run` of the whole model (its frames keep G at the top, 800 MHz) priced at
the run's clock within 10 %, where the table's plain figures miss by far more.

Ground truth is the sim's per-call model (tests/sim_truth.py), never a measurement.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_runs import run_coupprof
from sim_truth import layer_truth

from governors import writable_governor
from governors.factory import make_governor
from profiler import zoo
from profiler.boards.profiles import load_board
from profiler.errors import BoardError, ProfilerError
from profiler.mapping.predict import LayerCosts, predict, priced_at_clocks, read_layer_tables
from profiler.mapping.spec import parse_order
from profiler.measure.clock_fit import ClockFit, VisitClocks, fit_clock, fit_prefix
from profiler.measure.freq_trace import FreqReader, FreqTrace
from profiler.measure.fused import Estimate, FusedLayer, FusedResult, FusedSettings
from profiler.measure.layers import LayerSettings, ModelUnderTest, measure_layers
from profiler.measure.tables import write_tables
from profiler.platform.choose import choose_board
from profiler.resources import boards_dir
from profiler.sim.governor import DriverPolicy, SimDriver
from profiler.slicing.prefix import REDUCE_ABOVE_BYTES, prefix_models
from profiler.slicing.slicer import slice_model


def driver_board_file(folder: Path) -> Path:
    """The simulated board with G's clock left to its driver (``sim-driver``)."""
    text = (boards_dir() / "sim.toml").read_text()
    g_line = 'governor = { kind = "sim", path = "class/devfreq/ff9a0000.gpu" }'
    assert text.count(g_line) == 1 and text.count('name = "sim"\n') == 1
    path = folder / "sim-driver.toml"
    path.write_text(text.replace(g_line, 'governor = { kind = "sim-driver" }')
                    .replace('name = "sim"\n', 'name = "sim-driver"\n'))
    return path


# -- the fit's maths -------------------------------------------------------------------


def test_a_prefix_fit_recovers_a_and_b_and_leaves_a_late_call_out() -> None:
    rng = np.random.default_rng(3)
    x = rng.choice([0.5, 0.75, 1.0, 1.5, 2.0], 40)
    t = 1.2 + 3.4 * x + rng.normal(0, 0.002, x.size)
    t[7] += 5.0  # a call the host delayed
    f = fit_prefix(t, x)
    assert f.a_ms == pytest.approx(1.2, abs=0.01) and f.b_ms == pytest.approx(3.4, abs=0.01)
    assert 36 <= f.visits <= 39 and f.rms_ms < 0.005  # the late call left out


class Script(FreqReader):
    source = "script"

    def __init__(self, values: list[int | None]) -> None:
        self.values = values

    def read_khz(self) -> int | None:
        return self.values.pop(0)


def test_visit_clocks_make_rounds_and_leave_out_a_visit_whose_clock_moved() -> None:
    # two rounds of three positions, forward then backward, read before and after each
    reads: list[int | None] = [100, 100, 200, 200, 300, 300,  # round 0: 0, 1, 2
                               300, 300, 400, 500, 500, None]  # round 1: 2, 1 (moved), 0
    hooks = VisitClocks(Script(reads))
    for p in (0, 1, 2, 2, 1, 0):
        hooks(p, True)
        hooks(p, False)
    got = hooks.visit_khz(3)
    np.testing.assert_array_equal(got, [[100, 200, 300], [np.nan, np.nan, 300]])


def fused_result(round_ns: np.ndarray) -> FusedResult:
    n = round_ns.shape[1] - 1
    return FusedResult([FusedLayer(k, 0.0, 0.0, False, True) for k in range(n)],
                       Estimate(0, 0), Estimate(0, 0), round_ns.shape[0], 0.0, True,
                       FusedSettings(), round_ns=round_ns)


def visits(khz: np.ndarray) -> VisitClocks:
    """Hooks that read ``khz`` (rounds, positions) at every visit, before and after."""
    reads = [int(v) for row in khz for v in row for _ in range(2)]
    hooks = VisitClocks(Script(reads))
    for row in khz:
        for p in range(len(row)):
            hooks(p, True)
            hooks(p, False)
    return hooks


def test_rows_are_differences_of_the_prefixes_fits_and_a_steady_clock_is_not_fitted() -> None:
    a = np.array([2.0, 2.5, 3.5, 3.6])  # per prefix, ms: the empty one first
    b = np.array([1.0, 1.8, 2.0, 3.0])  # at the reference clock
    rng = np.random.default_rng(0)
    khz = rng.choice([200_000, 300_000, 400_000, 600_000], (20, 4)).astype(float)
    ref = float(np.median(khz))
    t_ms = a + b * ref / khz
    fit = fit_clock(fused_result((t_ms * 1e6).astype(np.int64)), visits(khz))
    assert fit is not None and fit.identified and fit.freq_ref_khz == ref
    assert (fit.freq_min_khz, fit.freq_max_khz) == (200_000, 600_000)
    np.testing.assert_allclose(fit.layer_a_ms, np.diff(a), atol=1e-4)
    np.testing.assert_allclose(fit.layer_b_ms, np.diff(b), atol=1e-4)
    assert fit.fixed_ms(800_000) == pytest.approx(a[0] + b[0] * ref / 800_000, abs=1e-4)
    # the rows and the fixed row add up to the whole model at any clock
    for f in (150_000, 500_000, 2_000_000):
        assert fit.fixed_ms(f) + fit.layer_ms(f).sum() == pytest.approx(fit.whole_ms(f))
    assert fit.outside(400_000) == 0 and fit.outside(800_000) == pytest.approx(1 / 3)
    back = ClockFit.from_info(json.loads(json.dumps(fit.info())))
    np.testing.assert_allclose(back.layer_ms(800_000), fit.layer_ms(800_000))
    assert back.whole_ci95_ms(800_000) == pytest.approx(fit.whole_ci95_ms(800_000))
    # a clock that held: nothing to fit, the plain figures stand
    still = np.full((20, 4), 600_000.0)
    held = fit_clock(fused_result((t_ms * 1e6).astype(np.int64)), visits(still))
    assert held is not None and not held.identified and "hardly moved" in held.why
    assert "layer_a_ms" not in held.info()


def test_a_run_is_priced_at_its_clock_and_tables_without_a_fit_keep_the_mismatch_note() -> None:
    fit = ClockFit("script", True, "", 400_000, 200_000, 600_000, 60,
                   layer_a_ms=[0.5, 0.25], layer_b_ms=[1.0, 0.5],
                   prefix_a_ms=[2.0, 2.5, 2.75], prefix_b_ms=[1.0, 2.0, 2.5])
    table = pd.DataFrame({"processor": ["G", "G", "B", "B"], "level": pd.array(
        [None, None, 3, 3], dtype="Int64"), "layer": [0, 1, 0, 1],
        "time_ms": [9.0, 9.0, 4.0, 4.0], "transfer_ms": 0.0})
    traces = {("G", None): FreqTrace("s", 9, 300_000, 200_000, 600_000),
              ("B", 3): FreqTrace("s", 9, 1_000_000, 1_000_000, 1_000_000)}
    costs = LayerCosts(table, fixed_ms={("G", None): 7.0, ("B", 3): 1.0},
                       freq_traces=traces, clock_fits={("G", None): fit})
    run = {"G": FreqTrace("s", 9, 800_000, 800_000, 800_000),
           "B": FreqTrace("s", 9, 500_000, 500_000, 500_000)}
    priced, notes = priced_at_clocks(costs, run, lambda letter: 3 if letter == "B" else None)
    g = priced.table[priced.table["processor"] == "G"]["time_ms"].to_numpy()
    np.testing.assert_allclose(g, [0.5 + 1.0 * 0.5, 0.25 + 0.5 * 0.5])
    assert priced.fixed_for("G", None) == pytest.approx(2.0 + 1.0 * 0.5)
    assert list(priced.table[priced.table["processor"] == "B"]["time_ms"]) == [4.0, 4.0]
    assert costs.table["time_ms"].tolist() == [9.0, 9.0, 4.0, 4.0]  # the input is kept
    assert any(n.startswith("G: priced at 800 MHz") and "33 % outside" in n for n in notes)
    assert any(n.startswith("B ran at 500 MHz") for n in notes)  # no fit: the old note
    mapping = parse_order("GG", 2)
    pred = predict(mapping, "switch", priced)
    assert pred.latency_ms == pytest.approx(2.5 + 1.0 + 0.5)
    # inside the range: priced, not said to extrapolate
    _, inside = priced_at_clocks(costs, {"G": FreqTrace("s", 9, 500_000, 0, 0)},
                                 lambda letter: None)
    assert len(inside) == 1 and "outside" not in inside[0]
    # a clock that moved in the run: priced at the harmonic mean of its samples, where
    # the part that scales with 1 / f takes its mean time
    moving = FreqTrace.from_samples("s", [200_000, 600_000, 600_000])
    assert moving is not None and moving.median_khz == 600_000
    assert moving.hmean_khz == 360_000 and FreqTrace.from_dict(moving.to_dict()) == moving
    at, said = priced_at_clocks(costs, {"G": moving}, lambda letter: None)
    assert at.fixed_for("G", None) == pytest.approx(
        np.mean([2.0 + 1.0 * 400_000 / f for f in (200_000, 600_000, 600_000)]))
    assert said[0].startswith("G: priced at 360 MHz") and "harmonic mean" in said[0]


# -- the simulated driver ----------------------------------------------------------------


def test_the_driver_goes_to_the_top_under_sustained_work_and_wanders_below_it_when_light(
        tmp_path: Path) -> None:
    board = load_board(driver_board_file(tmp_path))
    g = board.processor("G")
    now = [0]
    drv = SimDriver(g, DriverPolicy(), clock_ns=lambda: now[0])
    top, below = g.freqs_khz[-1], set(g.freqs_khz[:-1])

    def calls(seconds: float, call_ms: float, work_share: float, gap_ms: float = 0.0
              ) -> list[int]:
        """Calls ``gap_ms`` apart for ``seconds``; the clock at each one's start."""
        seen = []
        for _ in range(int(seconds * 1000 / (call_ms + gap_ms))):
            seen.append(drv.effective_khz())
            drv.busy(now[0], int(call_ms * work_share * 1e6), int(call_ms * 1e6))
            now[0] += int((call_ms + gap_ms) * 1e6)
        return seen

    light = calls(3.0, 6.0, 0.50)  # a fused table's rounds: 0.46-0.53 of their time
    assert set(light) <= below and len(set(light[len(light) // 3:])) >= 2
    heavy = calls(3.0, 7.5, 0.61)  # the whole model's frames: 0.61
    assert heavy[-len(heavy) // 2:] == [top] * (len(heavy) - len(heavy) // 2)
    sparse = calls(3.0, 2.0, 0.9, gap_ms=100.0)  # busy calls, but the processor idles
    assert set(sparse[len(sparse) // 2:]) <= below
    # the same calls, the same clocks: a seeded driver
    now[0] = 0
    drv = SimDriver(g, DriverPolicy(), clock_ns=lambda: now[0])
    assert calls(3.0, 6.0, 0.50) == light


def test_freq_is_refused_where_the_driver_picks_the_clock(tmp_path: Path) -> None:
    path = driver_board_file(tmp_path)
    board = choose_board(path, letters=["G"])
    with pytest.raises(BoardError, match="whose driver picks the clock"):
        writable_governor(board, "G")
    gov = make_governor(board, board.processor("G"))
    assert not gov.settable and gov.read_khz() in board.processor("G").freqs_khz
    with pytest.raises(ProfilerError):
        gov.set_level(2)
    r = run_coupprof(("layers", "--board", str(path), "-p", "G", "--freq", "4"),
                     cwd=tmp_path, cache=tmp_path / "cache", check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "drop --freq" in r.stderr


# -- end to end on the simulated board --------------------------------------------------


def test_a_table_measured_at_low_clocks_predicts_a_run_at_the_top(tmp_path: Path) -> None:
    path = driver_board_file(tmp_path)
    board = choose_board(path, letters=["G"])
    model = zoo.default_model_path()
    data = model.read_bytes()
    sliced = slice_model(data, cache_dir=False)
    m = measure_layers(board, "G", ModelUnderTest.of(model, data, sliced), LayerSettings(
        frames=3, warmup=1, fused=FusedSettings(min_rounds=15, max_rounds=15, budget_s=60,
                                                # the fit is what is checked here: no hold
                                                # (which takes the rounds to the top level)
                                                hold_ms=0.0)))
    fit = m.clock_fit
    assert fit is not None and fit.identified, fit
    g = board.processor("G")
    assert fit.freq_max_khz < g.freqs_khz[-1] and fit.freq_max_khz > fit.freq_min_khz

    # a and b of the sim's model: from its price of each prefix at two clocks
    host_khz = make_governor(board, board.processor("B")).read_khz()
    prefixes = prefix_models(data, sliced, reduce_above_bytes=REDUCE_ABOVE_BYTES)
    f1, f2 = fit.freq_min_khz, fit.freq_max_khz
    t1, t2 = (np.array([layer_truth(board, "G", p.model_bytes, f, host_khz)[0]
                        for p in prefixes]) for f in (f1, f2))
    x1, x2 = fit.freq_ref_khz / f1, fit.freq_ref_khz / f2
    b_true = (t1 - t2) / (x1 - x2)
    a_true = t1 - b_true * x1
    rows_a, rows_b = np.diff(a_true), np.diff(b_true)
    assert sum(fit.layer_a_ms) == pytest.approx(rows_a.sum(), rel=0.05)
    assert sum(fit.layer_b_ms) == pytest.approx(rows_b.sum(), rel=0.05)
    assert fit.fixed_b_ms == pytest.approx(b_true[0], rel=0.05)
    assert fit.fixed_a_ms == pytest.approx(a_true[0], abs=0.1)  # + the harness's own call
    big = rows_b >= 0.25
    np.testing.assert_allclose(np.array(fit.layer_b_ms)[big], rows_b[big], rtol=0.15)

    # the table as `coupprof layers` writes it: the fit in the CSV and the sidecar
    csv = tmp_path / "g.csv"
    write_tables(m.tables(), csv)
    df = pd.read_csv(csv)
    rows = df[df["kind"] == "layer"]
    np.testing.assert_allclose(rows["time_ms_clock_fixed"], fit.layer_a_ms)
    np.testing.assert_allclose(rows["time_ms_clock_scaled"], fit.layer_b_ms)
    assert (rows["freq_ref_khz"] == fit.freq_ref_khz).all()
    side = json.loads(csv.with_suffix(".json").read_text())["clock_fit"]
    assert side["freq_min_khz"] == f1 and side["freq_max_khz"] == f2
    assert len(side["visit_clock_khz"]) == 15 and len(side["visit_clock_khz"][0]) == 16

    # the prediction from the table's plain figures, as before this fit
    old = predict(parse_order("G15", len(sliced.layers)), "switch",
                  read_layer_tables([csv])).latency_ms
    r = run_coupprof(("run", "--board", str(path), "--order", "G15", "--mode", "switch",
                      "--frames", "40", "--warmup", "120", "--layers", str(csv),
                      "--csv", "run.csv", "-q"), cwd=tmp_path, cache=tmp_path / "cache")
    out = json.loads((tmp_path / "run.json").read_text())
    assert out["freq_traces"]["run"]["G"]["median_khz"] == g.freqs_khz[-1]
    summary = pd.read_csv(tmp_path / "run.csv").query("kind == 'summary'").set_index("metric")
    measured = float(summary.loc["latency_ms_mean", "measured"])
    new = float(out["prediction"]["latency_ms"])
    truth = layer_truth(board, "G", data, g.freqs_khz[-1], host_khz)[0]
    assert abs(old / measured - 1) > 0.10, (old, measured)
    assert abs(new / measured - 1) <= 0.10, (new, measured, r.stderr)
    assert new == pytest.approx(truth, rel=0.05)
    assert any(n.startswith("G: priced at 800 MHz") and "outside" in n for n in out["notes"])
    assert not any("its table was measured at" in n for n in out["notes"])
    assert math.isfinite(out["freq_traces"]["table_fits"]["G"]["freq_ref_khz"])
