"""`coupprof explore` as a subprocess on real tables: a quick `coupprof sweep`,
`transfer-matrix` and `dvfs-latency` on the simulated board (the default model cut into
3 layers, so brute force over every mapping stays small), then explore's picks checked
against brute force, its files, its bad-input lines, and --measure here and over a Dask
LocalCluster of two simulated-board worker processes."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from shared_runs import EXPLORE_CUTS, SharedRuns

from profiler.boards.profiles import load_board
from profiler.explore.space import Candidate, evaluate, order_string
from profiler.explore.tables import load_tables

COUPPROF = str(Path(sys.executable).with_name("coupprof"))
CUTS = EXPLORE_CUTS  # op indices: 3 layers, those of the tables


def cli(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([COUPPROF, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    if check:
        assert out.returncode == 0, out.stderr
    return out


@pytest.fixture(scope="module")
def tables_dir(tmp_path_factory: pytest.TempPathFactory, sim_runs: SharedRuns) -> Path:
    """The session's sweep of B, G, N at levels 1, 3, 5 (sw/), transfer matrix (tm.csv) and
    DVFS delays (dv-B.csv, dv-G.csv) on the model in 3 layers (tests/shared_runs.py),
    copied: the tests write their outputs beside them."""
    d = tmp_path_factory.mktemp("explore")
    shutil.copytree(sim_runs.explore, d, dirs_exist_ok=True)
    return d


INPUTS = ["explore", "--sweep", "sw", "--transfers", "tm.csv", "--delays", "dv-B.csv,dv-G.csv"]


def real_tables(d: Path, procs: str):
    return load_tables(d / "sw", load_board("sim"), d / "tm.csv",
                       [d / "dv-B.csv", d / "dv-G.csv"], list(procs))


def every_switch_point(t):
    states = [(u, lv) for u in range(len(t.units)) for lv in t.levels[u]]
    for combo in itertools.product(states, repeat=t.n_layers):
        yield evaluate(t, Candidate("switch", tuple(s[0] for s in combo),
                                    tuple(s[1] for s in combo)))


@pytest.mark.parametrize("procs", ["BG", "BGN"])
def test_switch_pick_equals_brute_force_on_measured_tables(tables_dir: Path, procs: str) -> None:
    t = real_tables(tables_dir, procs)
    allp = list(every_switch_point(t))
    lats = sorted(e.latency_ms for e in allp)
    for q in (0.05, 0.5):
        bound = lats[int(q * (len(lats) - 1))]
        want = min(e.energy_mj for e in allp if e.latency_ms <= bound)
        out = cli(*INPUTS, "--processors", ",".join(procs), "--latency-ms", f"{bound!r}",
                  "--csv", f"s-{procs}-{q}.csv", cwd=tables_dir)
        assert "optimal: latency discretised" in out.stdout and "NOT" not in out.stdout
        rows = pd.read_csv(tables_dir / f"s-{procs}-{q}.csv")
        pick = rows.iloc[0]
        assert pick["kind"] == "pick" and pick["latency_ms"] <= bound
        assert pick["energy_mj"] == pytest.approx(want, rel=1e-9)
        assert pick["command"].startswith(f"coupprof run --order {pick['order']} --mode switch "
                                          f"--freq {pick['freq']} --board sim --model ")
    out = cli(*INPUTS, "--processors", ",".join(procs), "--objective", "latency",
              "--csv", "lat.csv", cwd=tables_dir)
    assert "optimal: exact DP" in out.stdout
    pick = pd.read_csv(tables_dir / "lat.csv").iloc[0]
    assert pick["latency_ms"] == pytest.approx(lats[0], rel=1e-9)


def test_pipeline_front_is_exact_and_written(tables_dir: Path) -> None:
    out = cli(*INPUTS, "--mode", "pipeline", "--csv", "p.csv", cwd=tables_dir)
    assert "exact: all" in out.stdout and "true Pareto front" in out.stdout
    rows = pd.read_csv(tables_dir / "p.csv")
    assert set(rows["kind"]) <= {"pick", "front", "single"} and rows.iloc[0]["kind"] == "pick"
    t = real_tables(tables_dir, "BGN")
    # fused pairs (sweep's default for G and N): their fixed per-call cost is loaded
    pairs = json.loads((tables_dir / "sw" / "sweep.json").read_text())["pairs"]
    for p in pairs.values():
        want = (p.get("fused") or {}).get("fixed_ms", 0.0)
        assert t.fixed(t.unit_index(p["processor"]), p["level"]) == pytest.approx(want)
    # ... and the fixed rows' energies, which predict adds to a stage's energy too
    from profiler.sweep.schema import read_sweep

    fixed_e = read_sweep(tables_dir / "sw").fixed_energy_mj()
    assert fixed_e and t.fixed_energy_mj is not None
    for (proc, lv), e in fixed_e.items():
        u = t.unit_index(proc)
        assert t.fixed_energy_mj[u, t.level_index(u, lv)] == pytest.approx(e)
    from profiler.explore.pipeline import enumerate_front

    best = max(e.fps_per_w for e in enumerate_front(t).front)
    assert rows.iloc[0]["fps_per_w"] == pytest.approx(best, rel=1e-9)
    front = rows[rows["kind"] != "single"]
    for r in front.itertuples():  # every row's --freq has one level per stage
        assert len(str(r.freq).split("/")) == r.stages
    meta = json.loads((tables_dir / "p.json").read_text())
    assert meta["format"] == "coupprof-explore/1" and meta["method"] == "exact"
    assert order_string(t, enumerate_front(t).front[0].candidate)


@pytest.mark.parametrize("args, words", [
    (["explore", "--sweep", "nope"], "sweep results not found"),
    ([*INPUTS, "--latency-ms", "0.0001"], "no mapping meets latency <= 0.0001 ms"),
    ([*INPUTS, "--objective", "fps"], "is a pipeline objective"),
    ([*INPUTS, "--cluster", "tcp://127.0.0.1:1"], "no --measure was given"),
    ([*INPUTS, "--processors", "L"], "no layer rows left"),
    ([*INPUTS, "--levels", "x"], "is not a list of level numbers"),
    ([*INPUTS, "--mode", "pipeline", "--min-fps", "1e9"], "no pipeline reaches"),
    ([*INPUTS, "--measure", "1", "--cluster", "tcp://127.0.0.1:1"], "cannot reach the Dask"),
])
def test_bad_input_is_one_line_exit_2(tables_dir: Path, args: list[str], words: str) -> None:
    out = cli(*args, cwd=tables_dir, check=False)
    assert out.returncode == 2, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if not ln.startswith("coupprof: ")]
    assert len(lines) == 1 and words in lines[0], out.stderr


def test_measure_here_and_over_a_local_dask_cluster(tables_dir: Path) -> None:
    """Three mappings measured one after the other (twice, for the run-to-run spread)
    and over a LocalCluster of two worker processes, each with its own simulated board:
    the cluster's figures lie within the sequential runs' spread (3x their range, at
    least 10 %). The two workers share this host, so their simulated boards take turns
    (`profiler.explore.measure._host_turn`): measured at once, two boards stretched each
    other's frames on 2 cores (B1G2 switch at level 1: +14 % energy per frame with the
    host otherwise busy; a B-only frame of 2.5 ms +41 % and +80 %). The frames' inter-frame
    gaps are still host time, so the runs compared are ones of tens of ms per frame.
    Then `coupprof explore --measure --cluster` end to end."""
    from distributed import LocalCluster

    from profiler.explore.measure import MeasureJob, measure_all

    model = json.loads((tables_dir / "sw" / "sweep.json").read_text())["settings"]["model_path"]
    jobs = [MeasureJob(k, "sim", model, order, mode, freq, frames=12, warmup=2, cuts=CUTS)
            for k, (order, mode, freq) in enumerate(
                [("G3", "switch", "1"), ("B1G2", "pipeline", "1/1"),
                 ("B1G2", "switch", "1,1,1")], 1)]
    seq = [{m.job.rank: m for m in measure_all(jobs)} for _ in range(2)]
    heard: list[int] = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster:
        par = {m.job.rank: m for m in measure_all(jobs, cluster.scheduler_address,
                                                  on_result=lambda m: heard.append(m.job.rank))}
        out = cli(*INPUTS, "--processors", "B,G", "--levels", "1,3", "--measure", "2",
                  "--frames", "10", "--csv", "mc.csv", "--cluster", cluster.scheduler_address,
                  cwd=tables_dir)
    assert sorted(heard) == [1, 2, 3] and len({m.worker for m in par.values()}) == 2
    for k in par:
        for col in ("latency_ms", "energy_mj"):
            a, b, c = (getattr(x[k], col) for x in (seq[0], seq[1], par))
            mean = (a + b) / 2
            assert abs(c - mean) <= max(3 * abs(a - b), 0.10 * mean), (k, col, a, b, c)
    assert "on the Dask cluster at" in out.stderr and "measured #1" in out.stderr
    measured = pd.read_csv(tables_dir / "mc-measured.csv")
    assert len(measured) == 2 and measured["energy_mj"].gt(0).all()
    assert "measured beside predicted" in out.stdout


def test_plot_pareto_from_explore_csv(tables_dir: Path) -> None:
    for mode in ("switch", "pipeline"):
        cli(*INPUTS, "--mode", mode, "--csv", f"pl-{mode}.csv", cwd=tables_dir)
        out = cli("plot", "pareto", f"pl-{mode}.csv", "-o", f"pl-{mode}.png", cwd=tables_dir)
        png = tables_dir / f"pl-{mode}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and str(png.name) in out.stdout
    bad = cli("plot", "pareto", "sw/sweep.csv", "-o", "x.png", cwd=tables_dir, check=False)
    assert bad.returncode == 2 and "needed by the pareto plot" in bad.stderr


def test_a_pipeline_rows_latency_waits_in_the_queues_before_its_slowest_stage(
        tables_dir: Path) -> None:
    """Explore's pipeline rows keep their stage times; the row's latency is the steady
    state's behind `coupprof run`'s queues, and `--measure` compares a run of N frames with
    the mean over N frames from an empty pipeline."""
    from profiler.explore.space import row_latency_ms
    from profiler.mapping.queueing import QUEUE_DEPTH, pipeline_latency_ms, steady_latency_ms

    # B1G2 and G1B2: in one of them the slower processor's stage comes second
    cli(*INPUTS, "--mode", "pipeline", "--compare", "B1G2", "--compare", "G1B2", "--csv",
        "q.csv", cwd=tables_dir)
    rows = pd.read_csv(tables_dir / "q.csv")
    waited = 0
    for _, r in rows.iterrows():
        stage_ms = [float(x) for x in str(r["stage_ms"]).split(";")]
        assert len(stage_ms) == r["stages"] and max(stage_ms) == pytest.approx(
            r["slowest_stage_ms"], rel=1e-5)
        assert r["latency_ms"] == pytest.approx(steady_latency_ms(stage_ms, QUEUE_DEPTH),
                                                rel=1e-5)
        waited += r["latency_ms"] > sum(stage_ms) * (1 + 1e-5)
        assert row_latency_ms(dict(r), 7) == pytest.approx(
            pipeline_latency_ms(stage_ms, QUEUE_DEPTH, 7), rel=1e-9)
    assert waited >= 1  # a point whose slowest stage is not its first


def test_top_levels_and_given_mappings(tables_dir: Path) -> None:
    """--levels max keeps each processor's top level (ARM-CO-UP Table 8's setting);
    --compare costs a given mapping on the same tables, as `coupprof predict` would."""
    cli(*INPUTS, "--levels", "max", "--compare", "G1B2", "--compare", "N2B1@5",
        "--csv", "cmp.csv", cwd=tables_dir)
    rows = pd.read_csv(tables_dir / "cmp.csv")
    assert set(rows["freq"]) == {"5,5,5"}
    given = rows[rows["kind"] == "given"].set_index("order")
    t = real_tables(tables_dir, "BGN")
    want = evaluate(t, Candidate("switch", (t.unit_index("G"), t.unit_index("B"),
                                            t.unit_index("B")), (5, 5, 5)))
    assert given.loc["G1B2", "energy_mj"] == pytest.approx(want.energy_mj, rel=1e-12)
    assert given.loc["N2B1", "latency_ms"] >= rows.iloc[0]["latency_ms"] - 1e-12 or \
        given.loc["N2B1", "energy_mj"] >= rows.iloc[0]["energy_mj"] - 1e-12
    bad = cli(*INPUTS, "--compare", "G1B2@9", cwd=tables_dir, check=False)
    assert bad.returncode == 2 and "no level 9 for G" in bad.stderr


def test_predict_and_run_take_the_sweep_directory(tables_dir: Path) -> None:
    """`predict --layers DIR` reads a sweep's rows at the levels --freq names: a fused
    pair's stage is one call, its fixed row (from the sidecar) plus its layers' fused
    times; a sliced pair's layers are their sliced times. Computed here from the sweep's
    own CSV and sidecar."""
    rows = pd.read_csv(tables_dir / "sw" / "sweep.csv")
    rows = rows[rows["kind"] == "layer"]
    pairs = json.loads((tables_dir / "sw" / "sweep.json").read_text())["pairs"]
    fixed = {(p["processor"], p["level"]): p["fused"]["fixed_ms"] for p in pairs.values()
             if p.get("fused")}

    def fused(letter: str, level: int, layer: int, col: str = "time_ms_mean") -> float:
        sel = rows[(rows["processor"] == letter) & (rows["freq_level"] == level)
                   & (rows["layer"] == layer)]
        return float(sel[col].iloc[0])

    for order, freq, want in [
        ("G3", "5", fixed[("G", 5)] + sum(fused("G", 5, k) for k in range(3))
         + fused("G", 5, 0, "transfer_ms_mean")),
        # B (a CPU: swept sliced, so its time holds its call) then G; no transfer table,
        # so the hand-over at the change counts 0 (and is named)
        ("B1G2", "1,3,3", fused("B", 1, 0, "time_ms_mean") + fused("B", 1, 0, "transfer_ms_mean")
         + fixed[("G", 3)] + fused("G", 3, 1) + fused("G", 3, 2)),
    ]:
        out = cli("predict", "--board", "sim", "--layers", "sw", "--order", order, "--mode",
                  "switch", "--freq", freq, "--json", f"p-{order}.json", cwd=tables_dir)
        got = json.loads((tables_dir / f"p-{order}.json").read_text())
        assert got["latency_ms"] == pytest.approx(want, rel=1e-9), out.stdout
    # run --layers DIR prices its mapping from the same rows
    model = json.loads((tables_dir / "sw" / "sweep.json").read_text())["settings"]["model_path"]
    cli("run", "--board", "sim", "--model", model, "--cuts", CUTS, "--layers", "sw",
        "--transfers", "tm.csv", "--order", "G3", "--mode", "switch", "--freq", "5",
        "--frames", "3", "--warmup", "1", "--power", "none", "--csv", "r-G3.csv", cwd=tables_dir)
    cli("predict", "--board", "sim", "--layers", "sw", "--transfers", "tm.csv", "--order", "G3",
        "--mode", "switch", "--freq", "5", "--json", "p-G3t.json", cwd=tables_dir)
    r = pd.read_csv(tables_dir / "r-G3.csv").set_index("metric")
    assert r.loc["latency_ms_mean", "predicted"] == pytest.approx(
        json.loads((tables_dir / "p-G3t.json").read_text())["latency_ms"], rel=1e-9)
    bad = cli("predict", "--board", "sim", "--layers", "sw", "--order", "L3", "--freq", "1",
              cwd=tables_dir, check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    # G swept at two host levels: predict cannot pick one, and says so
    two = tables_dir / "sw-two-hosts"
    shutil.copytree(tables_dir / "sw", two, dirs_exist_ok=True)
    csv = pd.read_csv(two / "sweep.csv")
    g = csv[csv["processor"] == "G"].assign(host_level=lambda d: d["host_level"] - 1)
    pd.concat([csv, g]).to_csv(two / "sweep.csv", index=False)
    bad = cli("predict", "--board", "sim", "--layers", two.name, "--order", "G3", "--freq", "5",
              cwd=tables_dir, check=False)
    assert bad.returncode == 2 and "several host levels" in bad.stderr, bad.stderr
