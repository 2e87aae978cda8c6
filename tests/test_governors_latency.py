"""`coupprof dvfs-latency`: the detection on the simulated board (deterministic, virtual
clock), the read-back method against a fake 'hardware' thread, and the CLI."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_sysfs import DelayedCurFreq, build, snapshot

from governors import RestoreGuard, latency, make_governor
from governors.latency import LatencyPlan, measure, summary
from profiler.boards.profiles import load_board
from profiler.sim import model as sim_model
from profiler.sim.busy_loop import SimBusyLoop, VirtualClock
from profiler.sim.governor import SimTree

REPO = Path(__file__).resolve().parent.parent
COUPPROF = [sys.executable, "-m", "profiler"]


@pytest.mark.parametrize("letter", ["L", "B", "G"])
def test_sim_detection_recovers_the_modelled_delay_within_one_chunk(tmp_path, letter):
    board = load_board("sim")
    proc = board.processor(letter)
    clock = VirtualClock()
    tree = SimTree(board, root=tmp_path, clock_ns=clock)
    gov = make_governor(board, proc, sim_tree=tree)
    loop = SimBusyLoop(gov, clock)
    levels = list(range(1, len(proc.freqs_khz) + 1))
    before = snapshot(tmp_path)
    with RestoreGuard([gov]):
        run = measure(gov, LatencyPlan(proc, levels, repeats=2, chunk_target_us=40),
                      loop, "sim", True)
    assert snapshot(tmp_path) == before
    assert run.method == "sim-busy-loop" and run.simulated
    # slower levels run longer chunks
    assert [run.chunk_us[k] for k in levels] == sorted(run.chunk_us.values(), reverse=True)
    assert len(run.transitions) == len(levels) * (len(levels) - 1)
    for tr in run.transitions:
        model = sim_model.transition_delay_us(proc, tr.from_khz, tr.to_khz)
        for d in tr.delays_us:
            assert d is not None
            # the first chunk that starts after the change: [model, model + one old chunk)
            assert model - 0.01 <= d < model + run.chunk_us[tr.from_level] + 0.01, (tr, model)
    rows = {r["direction"]: r for r in summary(run)}
    c = proc.extra["sim"]
    for direction, (lo, hi) in (("up", c["dvfs_delay_up_us"]), ("down", c["dvfs_delay_down_us"])):
        chunk = max(run.chunk_us.values())
        assert lo <= rows[direction]["min_delay_us"] < lo + chunk
        assert hi <= rows[direction]["max_delay_us"] < hi + chunk
    # Table 10's extremes: one level up is the shortest, the whole table up the longest
    assert (rows["up"]["min_from"], rows["up"]["min_to"]) in \
        [(k, k + 1) for k in range(1, len(levels))]
    assert (rows["up"]["max_from"], rows["up"]["max_to"]) == (1, len(levels))


@pytest.mark.parametrize("delay_s", [0.003, 0.15])
def test_readback_method_waits_for_the_kernel_to_report(tmp_path, monkeypatch, capsys,
                                                        delay_s: float):
    """0.15 s: longer than a level's 50 ms settle and the 20 ms wait after it, as a
    starved 'hardware' thread on a busy host made 3 ms look once: the starting level must
    read back before the transition from it is timed, or the read-back still shows the
    last target and b seems reached at once (478 us measured against 3 ms). The give-up
    bound goes to 0.5 s so that 0.15 s is seen at all."""
    from profiler.cli import main

    monkeypatch.setattr(latency, "TIMEOUT_S", 0.5)

    tree = build("rk3399pro", tmp_path)
    before_tree = snapshot(tmp_path)
    monkeypatch.setenv("COUPPROF_SYSFS_ROOT", str(tree.sys))
    out_csv = tmp_path / "out" / "lat.csv"
    with DelayedCurFreq(tree.sys / "devices/system/cpu/cpufreq/policy4", delay_s):
        rc = main(["dvfs-latency", "--board", "rk3399pro", "-p", "B", "--method", "readback",
                   "--levels", "3,8", "--repeats", "2", "--csv", str(out_csv)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "kernel read-back" in text
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == 4
    assert {(r["from_mhz"], r["to_mhz"]) for r in rows} == {("816", "1800"), ("1800", "816")}
    for r in rows:
        assert r["detected"] == "True" and r["method"] == "readback"
        # causal bound: the fake hardware changes delay_s after it sees the request
        assert float(r["delay_us"]) >= delay_s * 1e6 - 50
    side = json.loads(out_csv.with_suffix(".json").read_text())
    assert side["method"] == "readback" and side["simulated"] is False
    tree.kernel.settle()
    after = {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("out")}
    assert after == before_tree


def run_cli(args, root=None, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("COUPPROF_SYSFS_ROOT", None)
    if root is not None:
        env["COUPPROF_SYSFS_ROOT"] = str(root)
    return subprocess.run([*COUPPROF, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_cli_on_the_simulated_board_is_labelled(tmp_path):
    empty = tmp_path / "nosys"
    empty.mkdir()
    out = run_cli(["dvfs-latency", "-p", "G", "--levels", "1,5", "--repeats", "1"], root=empty,
                  cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "using the simulated board 'sim'" in out.stderr
    assert "SIMULATED board" in out.stdout and "not a measurement" in out.stdout
    path = tmp_path / "coupprof-out" / "dvfs-latency-sim-G.csv"
    rows = list(csv.DictReader(path.open()))
    assert [(r["from_level"], r["to_level"]) for r in rows] == [("1", "5"), ("5", "1")]
    assert all(r["simulated"] == "True" and r["method"] == "sim-busy-loop" for r in rows)
    g = load_board("sim").processor("G")
    up = float(rows[0]["delay_us"])
    assert sim_model.transition_delay_us(g, 200000, 800000) <= up
    side = json.loads(path.with_suffix(".json").read_text())
    assert side["simulated"] is True and "SIMULATED" in side["title"]


def test_cli_busy_loop_on_a_tree_whose_speed_never_changes(tmp_path):
    """On a fake tree the host's speed does not follow the files: the run must say so,
    never invent delays, and must leave the tree as it was."""
    tree = build("rk3399pro", tmp_path / "board")
    before = snapshot(tmp_path / "board")
    out = run_cli(["dvfs-latency", "--board", "rk3399pro", "-p", "L", "--levels", "1,6",
                   "--repeats", "1", "--csv", str(tmp_path / "l.csv")], root=tree.sys)
    assert out.returncode == 0, out.stderr
    assert "busy loop on the cluster" in out.stdout
    rows = list(csv.DictReader((tmp_path / "l.csv").open()))
    assert "does not follow the frequency" in out.stdout
    assert rows == []
    tree.kernel.settle()
    assert snapshot(tmp_path / "board") == before


def test_follows_needs_the_loop_to_track_the_clock():
    from governors.latency import follows

    assert follows(100.0, 50.0, 500_000, 1_000_000)       # twice the clock, half the time
    assert follows(50.0, 100.0, 1_000_000, 500_000)       # and down again
    assert not follows(100.0, 97.0, 408_000, 1_416_000)   # noise: 3 % for a 3.5x clock step
    assert not follows(100.0, 200.0, 500_000, 1_000_000)  # slower at a higher clock
    assert follows(100.0, 85.0, 1_608_000, 1_800_000)     # adjacent big levels (12 %)


def test_cli_rejects_bad_levels_and_busy_loop_on_gpu(tmp_path):
    tree = build("rk3399pro", tmp_path)
    for args, text in [
        (["-p", "B", "--levels", "1,9"], "has levels 1..8"),
        (["-p", "B", "--levels", "x"], "not a comma-separated list"),
        (["-p", "G", "--method", "busy-loop"], "use --method readback"),
    ]:
        out = run_cli(["dvfs-latency", "--board", "rk3399pro", *args], root=tree.sys,
                      cwd=tmp_path)
        assert out.returncode == 2, out.stderr
        assert text in out.stderr and "Traceback" not in out.stderr


@pytest.mark.hardware
def test_real_board_big_cluster_transition_delays():
    """On a real board (e.g. ROCK Pi N10 running its vendor kernel), as root, nothing wired:
    `pytest -m hardware tests/test_governors_latency.py`. Measures B's adjacent up/down
    transitions with the busy loop; the board's governor state is restored afterwards."""
    from governors import sysfs_root_from_env
    from governors.latency import BusyLoop, pin_to_cores
    from profiler.boards.profiles import select_board

    root = sysfs_root_from_env()
    board = select_board(None, root)
    if board.simulated:
        pytest.skip("no known board detected")
    proc = board.processor("B")
    gov = make_governor(board, proc, root)
    old = pin_to_cores(proc.cores)
    try:
        with RestoreGuard([gov]):
            run = measure(gov, LatencyPlan(proc, [1, 2, len(proc.freqs_khz)], repeats=3),
                          BusyLoop(), board.name, False)
    finally:
        if old is not None:
            os.sched_setaffinity(0, old)
    delays = [d for tr in run.transitions for d in tr.detected]
    assert delays and all(0 <= d < 50_000 for d in delays)
