"""`coupprof run --devices`: two simulated boards, one MPI rank each, on this machine.

Each board is pinned to one host core (the machine has two). Checked against what can be
computed without the runner: each device's energy against its simulated board's true
energy (`profiler.sim.power`), its tensor bytes against LiteRT's own tensor list, the
bytes handed over against the slicer's boundary tensors, a simulated link's modelled time
in the measured frame latency, and every governor's files, read from each board's own
sysfs tree on disk, back as they were saved, also when a rank is killed mid-run.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from profiler.devices.launch import mpi_installed
from profiler.devices.rank import RANK_FILE, read_partial
from profiler.devices.run import DevicesRun, DevicesRunConfig, part_rows, run_devices
from profiler.devices.spec import Link
from profiler.mapping.spec import boundary_tensors
from profiler.slicing.slicer import slice_model
from profiler.zoo import default_model_path
from tests.cli_runs import COUPPROF

pytestmark = [
    pytest.mark.skipif(not mpi_installed(), reason="MPI not installed (the devices extra)"),
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two host cores"),
    pytest.mark.alone,  # two ranks, a core each
]

ORDER = "d0:B7 d1:B8"  # the default model's 15 layers, cut after layer 6
CUT = 6
TWO = """
[[device]]
name = "d0"
cores = [0]
[[device]]
name = "d1"
cores = [1]
"""
LINK = Link(latency_ms=20.0, bandwidth_mb_s=10.0)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COUPPROF_CACHE", str(path))  # the ranks keep COUPPROF_* variables
        yield path


def _level4_khz() -> int:
    from profiler.platform import choose_board

    return choose_board("sim").processor("B").freqs_khz[3]


def _run(tmp: Path, mode: str, devices: str = TWO, **kw: object) -> DevicesRun:
    f = tmp / "devices.toml"
    f.write_text(devices)
    # a deadlock between ranks (a frame one of them runs twice) ends the run, not the suite
    kw.setdefault("timeout_s", 180.0)
    cfg = DevicesRunConfig(f, ORDER, mode, default_model_path(), tmp / "out", frames=12,
                           warmup=1, freq="4", **kw)  # type: ignore[arg-type]
    return run_devices(cfg)


@pytest.fixture(scope="module")
def switch(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> DevicesRun:
    return _run(tmp_path_factory.mktemp("switch"), "switch")


def _boundary_bytes() -> int:
    sliced = slice_model(default_model_path())
    return sum(t.nbytes for t in boundary_tensors(sliced)[CUT])


def _litert_tensor_mb(first: int, last: int) -> float:
    """Every tensor of the layers' sub-models, as LiteRT lists them."""
    from ai_edge_litert.interpreter import Interpreter

    sliced = slice_model(default_model_path())
    total = 0
    for layer in sliced.layers[first:last + 1]:
        it = Interpreter(model_content=layer.model_bytes)
        total += sum(int(np.prod(d["shape"])) * np.dtype(d["dtype"]).itemsize
                     for d in it.get_tensor_details())
    return total / 1e6


def _tree_matches_saved(out: Path, rank: int) -> bool:
    """The governor files in the rank's board's own tree, on disk now, hold what the rank
    saved before it set any level."""
    events = read_partial(out / RANK_FILE.format(rank=rank))
    saved = next(e for e in events if e["event"] == "saved")
    assert saved["governors"], "the run set no level: nothing to check"
    for gov in saved["governors"].values():
        for name, raw in gov["files"].items():
            if (Path(gov["directory"]) / name).read_bytes() != base64.b64decode(raw):
                return False
    return True


def _levels_were_set(out: Path, rank: int, khz: int) -> bool:
    events = read_partial(out / RANK_FILE.format(rank=rank))
    return any(e["event"] == "set" and set(e["khz"].values()) == {khz} for e in events)


def test_switch_two_boards(switch: DevicesRun) -> None:
    run = switch
    assert run.exit_code == 0, run.launched.log[-20:]
    rows = part_rows(run)
    d0, d1, total = rows
    assert [d0["frames_done"], d1["frames_done"], total["frames_done"]] == [12, 12, 12]
    for r in (d0, d1):  # each board's own logger against its simulated truth
        assert abs(r["energy_mj"] - r["true_energy_mj"]) < 0.03 * r["true_energy_mj"]
        assert r["peak_rss_mb"] > 50
    assert d0["tensor_mb"] == pytest.approx(_litert_tensor_mb(0, CUT), rel=1e-6)
    assert d1["tensor_mb"] == pytest.approx(_litert_tensor_mb(CUT + 1, 14), rel=1e-6)
    nbytes = _boundary_bytes()
    assert d0["bytes_out"] == d1["bytes_in"] == nbytes and d0["bytes_in"] == d1["bytes_out"] == 0
    # one frame in flight: a frame's latency holds both devices' stages, back to back
    assert total["latency_ms_mean"] > d0["busy_ms_mean"] + d1["busy_ms_mean"]
    assert total["throughput_fps"] == pytest.approx(1000 / total["latency_ms_mean"], rel=0.15)
    # levels were set on each board's own tree, and its files are back as saved
    level4 = _level4_khz()
    out = run.config.out_dir
    for rank in (0, 1):
        assert _levels_were_set(out, rank, level4)
        assert _tree_matches_saved(out, rank)
    assert [p.restored_by for p in run.parts] == ["rank", "rank"] and run.all_restored
    # each rank ran pinned to its device's core
    assert [p.last("start")["affinity"] for p in run.parts] == [[0], [1]]  # type: ignore[index]


def test_pipeline_two_boards(cache: Path, tmp_path: Path) -> None:
    run = _run(tmp_path, "pipeline")
    assert run.exit_code == 0, run.launched.log[-20:]
    d0, d1, total = part_rows(run)
    for r in (d0, d1):
        assert abs(r["energy_mj"] - r["true_energy_mj"]) < 0.03 * r["true_energy_mj"]
    # both boards busy at once: the slower device's stage sets the pace
    slowest = max(d0["busy_ms_mean"], d1["busy_ms_mean"])
    assert total["throughput_fps"] == pytest.approx(1000 / slowest, rel=0.15)
    assert run.all_restored


def test_a_counter_source_gives_each_devices_energy_over_its_frames(cache: Path,
                                                                   tmp_path: Path) -> None:
    """An energy counter (as a GPU's NVML or a CPU's RAPL keeps one; here the simulated
    board's, `sim:counter`) is read over the measured frames once on every device, whose
    neighbours run exactly those frames: no repeats. Against each board's true energy over
    the counter's window: the counter reads as of its last 1 ms refresh, up to 1 ms of
    about 600 ms here (0.2 %)."""
    counted = TWO.replace('cores = [0]', 'cores = [0]\npower = "sim:counter"').replace(
        'cores = [1]', 'cores = [1]\npower = "sim:counter"')
    f = tmp_path / "devices.toml"
    f.write_text(counted)
    run = run_devices(DevicesRunConfig(f, ORDER, "pipeline", default_model_path(),
                                       tmp_path / "out", frames=100, warmup=1, freq="4",
                                       timeout_s=180.0))
    assert run.exit_code == 0 and not run.launched.timed_out, run.launched.log[-20:]
    d0, d1, total = part_rows(run)
    for r in (d0, d1):
        assert r["frames_done"] == 100
        assert r["energy_mj"] == pytest.approx(r["true_energy_mj"], rel=0.005), r
    for p in run.parts:
        assert p.result is not None and p.result["power_source"] == "sim:counter"
    assert total["energy_mj"] == pytest.approx(d0["energy_mj"] + d1["energy_mj"])


def test_simulated_link_in_frame_latency(cache: Path, tmp_path: Path) -> None:
    linked = TWO + f"""
[[link]]
between = ["d0", "d1"]
latency_ms = {LINK.latency_ms}
bandwidth_mb_s = {LINK.bandwidth_mb_s}
"""
    run = _run(tmp_path, "switch", devices=linked)
    assert run.exit_code == 0, run.launched.log[-20:]
    modelled_ns = LINK.modelled_ms(_boundary_bytes()) * 1e6  # 20 ms + 32768 B at 10 MB/s
    d0, d1 = run.parts[0].frames, run.parts[1].frames
    lat = dict(zip(run.measured, run.latency_ns, strict=True))
    for f in run.measured:
        # d1 gets each frame no sooner than the link's modelled time after d0 finished it
        gap = d1[f]["fed_ns"] - d0[f]["done_ns"]
        assert gap >= modelled_ns, (f, gap)
        # the frame's latency (rank 0's feed .. rank 1's output) holds d0's part and it
        assert lat[f] >= d0[f]["done_ns"] - d0[f]["fed_ns"] + gap
        # the link's time is added after the real transfer, once: the receiver got the
        # tensors after d0 sent them, and let them through the modelled time later
        r = d1[f]["recv"]
        assert r["got_ns"] >= r["sent_ns"] >= d0[f]["done_ns"]
        assert r["ready_ns"] - r["got_ns"] == pytest.approx(modelled_ns, abs=1e3)
    assert part_rows(run)[1]["link_added_ms"] == pytest.approx(modelled_ns / 1e6, abs=0.5)


def test_a_run_past_its_timeout_is_stopped_keeps_partial_and_restores(cache: Path,
                                                                       tmp_path: Path) -> None:
    """`run --devices --timeout-s S`: at S seconds the ranks are stopped as by SIGTERM (each
    puts its levels back), the command exits 4 saying so, and what each rank measured is
    kept: frames, the CSV, the sidecar marked timed out. (15 s: the ranks start and set
    their levels within a few seconds even on a loaded 2-core machine.) Without
    --devices, one line and exit 2."""
    (tmp_path / "devices.toml").write_text(TWO)
    r = subprocess.run(
        [COUPPROF, "run", "--devices", "devices.toml", "--order", ORDER, "--mode", "pipeline",
         "--frames", "100000", "--warmup", "1", "--freq", "4", "--timeout-s", "15",
         "--csv", "run.csv"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 4, r.stderr
    assert "ran past --timeout-s 15 and were stopped" in r.stderr
    assert "levels are restored" in r.stderr, r.stderr
    side = json.loads((tmp_path / "run.json").read_text())
    assert side["timed_out"] is True and side["signalled"] is None
    ranks = tmp_path / "run.ranks"
    for rank in (0, 1):
        frames = [e for e in read_partial(ranks / RANK_FILE.format(rank=rank))
                  if e["event"] == "frame"]
        assert 0 < len(frames) < 100001
        assert _levels_were_set(ranks, rank, _level4_khz())
        assert _tree_matches_saved(ranks, rank)
    # each rank put its own levels back (it got SIGTERM), none was left to the launcher
    assert {p["restored_by"] for p in side["parts"]} == {"rank"}
    bad = subprocess.run([COUPPROF, "run", "--order", "B15", "--mode", "switch",
                          "--timeout-s", "5"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--timeout-s is for runs across devices" in bad.stderr


@pytest.mark.parametrize(("stop", "code", "says"), [
    ("SIGKILL rank 1", 4, "the rank of d1 stopped before the end"),
    ("SIGTERM coupprof", 130, "interrupted (SIGTERM)"),
])
def test_stopped_run_keeps_partial_restores_levels(cache: Path, tmp_path: Path, stop: str,
                                                   code: int, says: str) -> None:
    (tmp_path / "devices.toml").write_text(TWO)
    ranks = tmp_path / "run.ranks"
    proc = subprocess.Popen(
        [COUPPROF, "run", "--devices", "devices.toml", "--order", ORDER, "--mode", "pipeline",
         "--frames", "400", "--warmup", "1", "--freq", "4", "--csv", "run.csv"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid, t0 = None, time.monotonic()
    while pid is None and time.monotonic() - t0 < 60 and proc.poll() is None:
        events = read_partial(ranks / RANK_FILE.format(rank=1))
        if sum(e["event"] == "frame" for e in events) >= 5:
            pid = events[0]["pid"]
        time.sleep(0.02)
    assert pid is not None, "rank 1 never got going"
    if stop == "SIGKILL rank 1":
        os.kill(pid, signal.SIGKILL)
    else:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert says in err and "levels are restored" in err, err
    side = json.loads((tmp_path / "run.json").read_text())
    ended = {p["device"]: p["ended"] for p in side["parts"]}
    assert "ok" not in ended.values()
    d1_frames = [e for e in read_partial(ranks / RANK_FILE.format(rank=1))
                 if e["event"] == "frame"]
    assert 5 <= len(d1_frames) < 401
    assert (tmp_path / "run.csv").read_text().count("\ndevice,") == 2
    for rank in (0, 1):  # both set level 4; both trees are back as saved, on disk
        assert _levels_were_set(ranks, rank, _level4_khz())
        assert _tree_matches_saved(ranks, rank)


@pytest.mark.parametrize(("topology", "order"), [
    ("long_skip", "d0:B6 d1:B2"),  # the model input and a skip cross d1's cut
    ("multi_io", "d0:B4 d1:B3"),  # an input only d1 reads; a model output made on d0
])
def test_outputs_across_devices_are_the_models(cache: Path, tmp_path: Path, topology: str,
                                               order: str) -> None:
    """Tensors that only pass through a device, and outputs made before the last one, come
    out of the last rank as the whole model's in one interpreter."""
    from ai_edge_litert.interpreter import Interpreter

    from profiler.devices.rank import OUTPUTS_FILE
    from profiler.mapping.transfer import model_inputs
    from tests.models import topologies

    model = tmp_path / f"{topology}.tflite"
    model.write_bytes(getattr(topologies, topology)())
    (tmp_path / "devices.toml").write_text(TWO)
    run = run_devices(DevicesRunConfig(tmp_path / "devices.toml", order, "pipeline", model,
                                       tmp_path / "out", frames=2, warmup=1))
    assert run.exit_code == 0, run.launched.log[-20:]
    got = np.load(tmp_path / "out" / OUTPUTS_FILE)
    it = Interpreter(model_content=model.read_bytes())
    it.allocate_tensors()
    for index, value in model_inputs(slice_model(model), seed=0).items():
        it.set_tensor(index, value)
    it.invoke()
    outs = it.get_output_details()
    assert sorted(got.files) == sorted(str(d["index"]) for d in outs)
    for d in outs:
        np.testing.assert_allclose(got[str(d["index"])], it.get_tensor(d["index"]),
                                   rtol=1e-5, atol=1e-6)


BAD = """
[[device]]
name = "d0"
cores = [0]
[[device]]
name = "d1"
board = "host"
cores = [1]
[[device]]
name = "far"
host = "nohost.invalid"
"""


@pytest.mark.parametrize(("order", "says"), [
    ("d0:B7 d9:B8", "device 'd9' is not in"),
    ("d0:B7 d1:N8", "device d1: --order uses processor N"),
    ("d0:B7 far:B8", "host nohost.invalid cannot be reached through MPI"),
    ("d0:B7 d0:B8 MPI-MISSING", "MPI is not installed; pip install 'coupprof[devices]'"),
])
def test_bad_input_one_line_exit_2(cache: Path, tmp_path: Path, order: str, says: str) -> None:
    (tmp_path / "devices.toml").write_text(BAD)
    args = ["run", "--devices", "devices.toml", "--order", order.split(" MPI")[0],
            "--mode", "switch", "--frames", "2", "--warmup", "0"]
    if "MPI-MISSING" in order:  # this Python without mpi4py
        cmd = [sys.executable, "-c", "import sys; sys.modules['mpi4py'] = None; "
               f"from profiler.cli import main; sys.exit(main({args!r}))"]
    else:
        cmd = [COUPPROF, *args]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], r.stderr
    assert not (tmp_path / "coupprof-out").exists()  # no rank started
