"""`coupprof sweep`: pair planning, one slice and one set of interpreters per processor,
the frequency really in force during each pair's frames, append + resume, and a real
interrupted subprocess resumed to the same rows as an uninterrupted sweep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_sysfs import snapshot
from sim_truth import layer_truth
from test_sweep_fakehost import B_FREQS_KHZ, L_FREQS_KHZ, build_fake_host

import profiler.slicing.slicer as slicer_mod
from profiler.boards.host import host_board
from profiler.boards.profiles import load_board
from profiler.errors import BadInputError, BoardError
from profiler.executors.cpu import CpuExecutor
from profiler.measure.runner import LayerHooks
from profiler.measure.tables import ID_COLUMNS
from profiler.slicing.slicer import slice_model
from profiler.sweep.plan import Pair, parse_freqs, parse_processors, plan_pairs
from profiler.sweep.run import Sweep, SweepSettings
from profiler.sweep.schema import read_sweep
from profiler.zoo import default_model_path

COUPPROF = str(Path(sys.executable).with_name("coupprof"))
MODEL = default_model_path()
N_LAYERS = len(slice_model(MODEL, cache_dir=False).layers)


def coupprof(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COUPPROF_CACHE": str(cwd / "cache")}
    return subprocess.run([COUPPROF, "sweep", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


# -- planning ------------------------------------------------------------------------


def test_plan_covers_every_level_and_n_borrows_its_host_table() -> None:
    sim = load_board("sim")
    pairs = plan_pairs(sim, parse_processors("L,B,G,N", sim), parse_freqs("all"))
    by = {p: [x for x in pairs if x.processor == p] for p in "LBGN"}
    assert [x.freq_khz for x in by["L"]] == list(sim.processor("L").freqs_khz)
    assert [x.level for x in by["G"]] == [1, 2, 3, 4, 5]
    # N has no DVFS: its levels index the host cluster B's table (ARM-CO-UP Fig. 16d).
    assert [x.freq_khz for x in by["N"]] == list(sim.processor("B").freqs_khz)
    some = plan_pairs(sim, ["G"], parse_freqs("1,3,5"))
    assert some == [Pair("G", 1, 200_000), Pair("G", 3, 400_000), Pair("G", 5, 800_000)]
    assert plan_pairs(sim, ["B"], parse_freqs("current")) == [Pair("B")]
    # max: each processor's own top level (L has 6, B 8, G 5 on the sim)
    assert plan_pairs(sim, ["L", "B", "G"], parse_freqs("max")) == [
        Pair("L", 6, sim.processor("L").freqs_khz[-1]),
        Pair("B", 8, sim.processor("B").freqs_khz[-1]), Pair("G", 5, 800_000)]


def test_bad_plans_say_what_is_wrong() -> None:
    sim = load_board("sim")
    with pytest.raises(BoardError, match="level 6 is out of range for processor G.*5=800 MHz"):
        plan_pairs(sim, ["G"], parse_freqs("1,6"))
    with pytest.raises(BadInputError, match="not 'all', 'max', 'current' or a list"):
        parse_freqs("fast")
    with pytest.raises(BadInputError, match="1-based"):
        parse_freqs("0,2")
    with pytest.raises(BoardError, match="has no processor 'X'"):
        parse_processors("B,X", sim)
    # Default order follows ARM-CO-UP's letters, not the profile's order.
    assert parse_processors(None, sim) == ["L", "B", "G", "N"]


# -- in process, on a fake host with writable cpufreq files ----------------------------


class CountingExecutor(CpuExecutor):
    """A real CPU executor that counts the interpreters it builds."""

    built = 0

    def interpreter(self, model_bytes: bytes, name: str = "model"):  # type: ignore[override]
        CountingExecutor.built += 1
        return super().interpreter(model_bytes, name)


class SetspeedWatch(LayerHooks):
    """Reads the processor's scaling_setspeed file before every frame."""

    def __init__(self, fake) -> None:
        self.fake = fake
        self.seen: list[tuple[int, int]] = []  # (L kHz, B kHz) per frame

    def before_frame(self, frame: int, warmup: bool) -> None:
        if not warmup:
            self.seen.append((self.fake.setspeed_khz("L"), self.fake.setspeed_khz("B")))


def test_sweep_slices_once_builds_once_per_processor_and_sets_each_level(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = build_fake_host(tmp_path / "fake")
    before = snapshot(fake.sys)
    board = host_board(fake.sys)
    slices = []
    real_slice = slicer_mod.slice_model

    def counting_slice(*a, **kw):
        slices.append(a)
        return real_slice(*a, **kw)

    monkeypatch.setattr(slicer_mod, "slice_model", counting_slice)
    CountingExecutor.built = 0
    watch = SetspeedWatch(fake)
    pairs = plan_pairs(board, ["L", "B"], parse_freqs("all"))
    frames = 4
    sweep = Sweep(board, MODEL, pairs, tmp_path / "out", SweepSettings(frames=frames, warmup=1),
                  sysfs_root=fake.sys, hooks=watch,
                  executor_factory=lambda proc, threads: CountingExecutor(proc, threads=threads))
    result = sweep.run()

    assert len(slices) == 1
    assert CountingExecutor.built == 2 * N_LAYERS  # two processors, not seven pairs
    assert [r.pair for r in result.done] == pairs
    # Every recorded frame of a pair ran with that pair's frequency written.
    want = [(p.freq_khz if p.processor == "L" else None, p.freq_khz if p.processor == "B" else None)
            for p in pairs for _ in range(frames)]
    assert len(watch.seen) == len(want)
    for (l_khz, b_khz), (want_l, want_b) in zip(watch.seen, want, strict=True):
        assert want_l is None or l_khz == want_l
        assert want_b is None or b_khz == want_b
    assert [r.effective_khz for r in result.done] == [p.freq_khz for p in pairs]
    assert all(r.warning is None for r in result.done)
    # The governors' files hold their original bytes again.
    assert snapshot(fake.sys) == before

    df = pd.read_csv(result.csv_path)
    assert list(df.columns[:7]) == ["kind", *ID_COLUMNS]
    assert len(df) == len(pairs) * N_LAYERS
    assert df.groupby(["processor", "freq_level"]).size().eq(N_LAYERS).all()
    assert sorted(set(df["freq_khz"][df["processor"] == "L"])) == list(L_FREQS_KHZ)
    assert sorted(set(df["freq_khz"][df["processor"] == "B"])) == list(B_FREQS_KHZ)
    assert (df["frames"] == frames).all() and (df["time_ms_mean"] > 0).all()
    assert set(df["board"]) == {"host"} and set(df["model"]) == {MODEL.stem}

    meta = json.loads(result.json_path.read_text())
    assert meta["format"] == "coupprof-sweep/2" and meta["settings"]["layers"] == N_LAYERS
    assert meta["pairs"]["B@4"]["effective_khz"] == B_FREQS_KHZ[3]
    assert meta["pairs"]["L@1"]["totals"]["latency_ms_mean"] > 0
    # Sum of recorded frames' times is what the benchmark compares wall time against.
    assert 0 < result.measured_ns < result.wall_ns


def test_resume_drops_a_torn_pair_and_measures_only_what_is_missing(tmp_path: Path) -> None:
    fake = build_fake_host(tmp_path / "fake")
    board = host_board(fake.sys)
    pairs = plan_pairs(board, ["B"], parse_freqs("all"))
    out = tmp_path / "out"
    settings = SweepSettings(frames=2, warmup=0)
    Sweep(board, MODEL, pairs[:2], out, settings, sysfs_root=fake.sys).run()
    csv = out / "sweep.csv"
    full = csv.read_bytes()
    # A crash in the middle of writing pair 2: half its rows, the last one torn.
    lines = full.splitlines(keepends=True)
    csv.write_bytes(b"".join(lines[: 1 + N_LAYERS + N_LAYERS // 2]) + lines[-1][:10])

    with pytest.raises(BadInputError, match="already exists.*--resume"):
        Sweep(board, MODEL, pairs, out, settings, sysfs_root=fake.sys).run()
    result = Sweep(board, MODEL, pairs, out, settings, sysfs_root=fake.sys, resume=True).run()
    assert [p.level for p in result.skipped] == [1]
    assert [r.pair.level for r in result.done] == [2, 3, 4]
    df = pd.read_csv(csv)
    assert len(df) == 4 * N_LAYERS
    assert df.groupby("freq_level").size().to_dict() == {1: N_LAYERS, 2: N_LAYERS, 3: N_LAYERS,
                                                         4: N_LAYERS}
    assert not df.duplicated(["processor", "freq_level", "layer"]).any()
    # Nothing left to do: a second resume measures nothing and leaves the file alone.
    again = Sweep(board, MODEL, pairs, out, settings, sysfs_root=fake.sys, resume=True).run()
    assert again.done == [] and len(again.skipped) == 4
    assert read_sweep(out).pairs() == [("B", k) for k in (1, 2, 3, 4)]


def test_resume_refuses_a_sweep_made_with_other_settings(tmp_path: Path) -> None:
    fake = build_fake_host(tmp_path / "fake")
    board = host_board(fake.sys)
    pairs = plan_pairs(board, ["B"], parse_freqs("1"))
    Sweep(board, MODEL, pairs, tmp_path / "o", SweepSettings(frames=2, warmup=0),
          sysfs_root=fake.sys).run()
    with pytest.raises(BadInputError, match="other settings.*frames 2 there, 3 now"):
        Sweep(board, MODEL, pairs, tmp_path / "o", SweepSettings(frames=3, warmup=0),
              sysfs_root=fake.sys, resume=True).run()


# -- the command, as a user runs it -------------------------------------------------------


def _pairs_in(csv: Path) -> int:
    try:
        rows = csv.read_text().count("\n") - 1
    except FileNotFoundError:
        return 0
    return max(rows, 0) // N_LAYERS


def test_interrupted_sweep_resumes_to_the_same_rows_as_an_uninterrupted_one(tmp_path: Path) -> None:
    fake = build_fake_host(tmp_path / "fake")
    before = snapshot(fake.sys)
    common = ["--board", "host", "--sysfs-root", str(fake.sys), "--processors", "L,B",
              "--freqs", "all", "--frames", "150", "--warmup", "1"]
    env = {**os.environ, "COUPPROF_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen([COUPPROF, "sweep", *common, "-o", "cut"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while _pairs_in(tmp_path / "cut" / "sweep.csv") < 2 and proc.poll() is None:
            assert time.monotonic() < deadline, "the sweep wrote no pairs"
            time.sleep(0.005)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "coupprof sweep: interrupted; " in err and "--resume" in err
    kept = _pairs_in(tmp_path / "cut" / "sweep.csv")
    assert 2 <= kept < 7, "the interrupt should land mid-sweep"
    assert snapshot(fake.sys) == before  # governors restored on Ctrl-C

    r = coupprof(*common, "-o", "cut", "--resume", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"resuming: {kept} pairs already done, {7 - kept} to measure" in r.stdout
    whole = coupprof(*common, "-o", "whole", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    assert snapshot(fake.sys) == before

    cut = pd.read_csv(tmp_path / "cut" / "sweep.csv")
    ref = pd.read_csv(tmp_path / "whole" / "sweep.csv")
    key = ["processor", "freq_level", "layer"]
    assert list(cut.columns) == list(ref.columns)
    assert not cut.duplicated(key).any() and not ref.duplicated(key).any()
    assert set(map(tuple, cut[key].values.tolist())) == set(map(tuple, ref[key].values.tolist()))
    assert len(cut) == len(ref) == 7 * N_LAYERS
    # Identity columns agree row for row once both are in the same order.
    cols = [*ID_COLUMNS, "layer", "op_types", "macs", "bytes_in", "bytes_out", "frames"]
    a = cut.sort_values(key)[cols].reset_index(drop=True)
    b = ref.sort_values(key)[cols].reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)


def test_plain_lines_in_a_pipe_and_one_line_errors(tmp_path: Path) -> None:
    fake = build_fake_host(tmp_path / "fake")
    r = coupprof("--board", "host", "--sysfs-root", str(fake.sys), "--processors", "B",
                 "--freqs", "2,4", "--frames", "2", "--warmup", "0", "-o", "o", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stdout.splitlines() if x.startswith("[")]
    assert lines[0].startswith("[1/2] B level 2 (1000 MHz): ")
    assert lines[1].startswith("[2/2] B level 4 (1800 MHz): ") and "(reads 1800 MHz)" in lines[1]
    assert "\x1b[" not in r.stderr and "━" not in r.stderr  # no bar in a pipe

    again = coupprof("--board", "host", "--sysfs-root", str(fake.sys), "--processors", "B",
                     "--freqs", "2", "--frames", "2", "-o", "o", cwd=tmp_path)
    assert again.returncode == 2
    err = [x for x in again.stderr.splitlines() if not x.startswith("INFO:")]
    assert len(err) == 1 and "already exists" in err[0] and "--resume" in err[0]
    assert "Traceback" not in again.stderr


def test_host_without_cpufreq_says_it_cannot_set_frequencies(tmp_path: Path) -> None:
    fake = build_fake_host(tmp_path / "fake")
    for pol in ("policy0", "policy1"):  # a machine whose cpufreq lists no table
        (fake.policy("L").parent / pol / "scaling_available_frequencies").unlink()
    r = coupprof("--board", "host", "--sysfs-root", str(fake.sys), "--processors", "B",
                 "--frames", "2", "-o", "o", cwd=tmp_path)
    assert r.returncode == 2
    assert "cannot set frequencies: processor B on board 'host' has no DVFS levels" in r.stderr
    assert "--freqs current" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()
    ok = coupprof("--board", "host", "--sysfs-root", str(fake.sys), "--processors", "B",
                  "--freqs", "current", "--frames", "2", "--warmup", "0", "-o", "o", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    df = pd.read_csv(tmp_path / "o" / "sweep.csv")
    assert len(df) == N_LAYERS and df["freq_level"].isna().all()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write read-only files")
def test_unwritable_governor_files_stop_the_sweep_before_it_starts(tmp_path: Path) -> None:
    fake = build_fake_host(tmp_path / "fake")
    for f in fake.policy("B").iterdir():
        if not f.is_symlink():
            f.chmod(0o444)
    r = coupprof("--board", "host", "--sysfs-root", str(fake.sys), "--processors", "B",
                 "--frames", "2", "-o", "o", cwd=tmp_path)
    assert r.returncode == 3
    assert "cannot set frequencies of processor B" in r.stderr and "not writable" in r.stderr


def test_sweep_on_the_simulated_board_covers_l_b_g_at_every_level(tmp_path: Path) -> None:
    r = coupprof("--board", "sim", "--processors", "L,B,G", "--freqs", "all", "--frames", "4",
                 "--warmup", "1", "--baseline-s", "0.05", "--method", "sliced", "-o", "sim",
                 cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    sim = load_board("sim")
    df = pd.read_csv(tmp_path / "sim" / "sweep.csv")
    want = {(p, k + 1) for p in "LBG" for k in range(len(sim.processor(p).freqs_khz))}
    assert len(want) == 6 + 8 + 5
    assert set(zip(df["processor"], df["freq_level"], strict=True)) == want
    assert len(df) == len(want) * N_LAYERS and set(df["simulated"]) == {True}
    for p in "LBG":
        khz = df[df.processor == p].groupby("freq_level")["freq_khz"].first()
        assert khz.tolist() == list(sim.processor(p).freqs_khz)
    meta = json.loads((tmp_path / "sim" / "sweep.json").read_text())
    assert all(v["effective_khz"] == v["freq_khz"] for v in meta["pairs"].values())
    assert meta["settings"]["power_source"] == "sim"
    # Energy on every row (the simulated logger by default), and every layer's time and
    # power is what the board's model gives that layer at that level: idle + the layer's
    # modelled power (tests/sim_truth.py); G's host (B) stays at its boot level, recorded.
    assert df["energy_mj"].gt(0).all() and df["fps_per_w"].gt(0).all()
    assert df["lost_frames"].eq(0).all()
    layers = slice_model(MODEL, cache_dir=False).layers
    idle = sim.extra["sim"]["idle_power_mw"] / 1000
    dyn_share: dict[tuple[str, int], list[float]] = {}
    for r in df.itertuples():
        host = None if pd.isna(r.host_freq_khz) else int(r.host_freq_khz)
        assert (r.processor == "G") == (host is not None)
        t_ms, p_w = layer_truth(sim, r.processor, layers[r.layer].model_bytes, int(r.freq_khz),
                                host)
        key = (r.processor, r.freq_level, r.layer)
        # A run never ends before its modelled time; how much later a wake-up on a busy
        # host makes it is load, checked apart (the level-speed test below).
        assert r.time_ms_median >= t_ms * 0.999, key
        # A layer's window is its run plus what the host did around it (marker writes; on
        # a busy host, time the thread waited for a core), at idle power: never more than
        # the layer's modelled power, and diluted only by that extra time.
        assert r.power_w <= p_w * 1.002, key
        dyn_share.setdefault(key[:2], []).append((r.power_w - idle) / (p_w - idle))
    for key, shares in dyn_share.items():
        # Per pair, the typical layer keeps nearly all its modelled dynamic power (the
        # marker writes take a few % of a 1.5-5 ms window).
        assert 0.85 <= float(np.median(shares)) <= 1.0, (key, shares)


def runqueue_wait_ns() -> int:
    """How long this thread has waited for a CPU while runnable (preempted, or woken and
    not yet running), from /proc/thread-self/schedstat; 0 where the kernel does not say."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


class FrameSpans(LayerHooks):
    """Wall time of every recorded frame and how much of it the thread waited for a CPU,
    in the order the sweep runs them (the sim computes on the driving thread)."""

    def __init__(self) -> None:
        self.wall_ns: list[int] = []
        self.wait_ns: list[int] = []
        self._t0 = self._w0 = 0

    def before_frame(self, frame: int, warmup: bool) -> None:
        self._w0 = runqueue_wait_ns()
        self._t0 = time.perf_counter_ns()

    def after_frame(self, frame: int, warmup: bool) -> None:
        if not warmup:
            self.wall_ns.append(time.perf_counter_ns() - self._t0)
            self.wait_ns.append(runqueue_wait_ns() - self._w0)


def test_simulated_processors_run_at_the_modelled_speed_of_the_level(tmp_path: Path) -> None:
    """The sim stretches each processor to the modelled speed at the level in force: the
    model makes the lowest level >3x slower than the top one on each of L, B, G; half of
    that must show.

    Load-proof bounds on each side. Slow side, all the wall time at level 1: a stretched
    run never ends before its modelled time, and an overshoot (a late wake-up) is made
    up by the next layers (base.StretchedSubModel), so the total keeps to the model
    however busy the host. Fast side, the wall time at the top level less the time the
    host's other work held the CPU: that leaves no more than the modelled time."""
    sim = load_board("sim")
    pairs = [Pair(p, k, sim.processor(p).freqs_khz[k - 1])
             for p in "LBG" for k in (1, len(sim.processor(p).freqs_khz))]
    spans = FrameSpans()
    frames = 6
    Sweep(sim, MODEL, pairs, tmp_path / "o",
          SweepSettings(frames=frames, warmup=1, method="sliced"), hooks=spans).run()
    assert len(spans.wall_ns) == frames * len(pairs)

    def pair_ns(i: int, less_wait: bool) -> int:
        sl = slice(i * frames, (i + 1) * frames)
        return sum(spans.wall_ns[sl]) - (sum(spans.wait_ns[sl]) if less_wait else 0)

    for j, p in enumerate("LBG"):
        slow, fast = pair_ns(2 * j, False), pair_ns(2 * j + 1, True)
        assert slow > 1.5 * fast, (p, slow, fast, spans.wait_ns)


class EffectiveWatch(LayerHooks):
    """Reads the simulated kernel's frequency in effect (it lags writes by the modelled
    transition delay) before every recorded frame."""

    def __init__(self, gov) -> None:
        self.gov = gov
        self.seen: list[int] = []

    def before_frame(self, frame: int, warmup: bool) -> None:
        if not warmup:
            self.seen.append(self.gov.effective_khz())


def test_no_recorded_frame_runs_before_the_new_level_is_in_effect(tmp_path: Path) -> None:
    from governors import make_governor

    sim = load_board("sim")
    g = sim.processor("G")
    watch = EffectiveWatch(make_governor(sim, g))
    # Down from the top then up again: the delays of ARM-CO-UP Table 10 (up to 4.5 ms) apply.
    pairs = [Pair("G", k, g.freqs_khz[k - 1]) for k in (5, 1, 4, 2)]
    Sweep(sim, MODEL, pairs, tmp_path / "o", SweepSettings(frames=2, warmup=0, method="sliced"),
          hooks=watch).run()
    assert watch.seen == [p.freq_khz for p in pairs for _ in range(2)]


class PullCable(LayerHooks):
    """Pulls the simulated logger's cable in the middle of the second pair."""

    def __init__(self, frames_per_pair: int) -> None:
        self.after = frames_per_pair + 1
        self.seen = 0
        self.power = None

    def after_frame(self, frame: int, warmup: bool) -> None:
        self.seen += 1
        if self.seen == self.after:
            self.power.source.virtual.close_port()


def test_a_logger_lost_mid_sweep_keeps_the_finished_pairs_and_resumes(tmp_path: Path) -> None:
    import argparse

    from profiler.cli.sweep import open_power
    from profiler.errors import PowerSourceError

    sim = load_board("sim")
    g = sim.processor("G")
    pairs = [Pair("G", 1, g.freqs_khz[0]), Pair("G", 5, g.freqs_khz[4])]
    settings = SweepSettings(frames=3, warmup=0, method="sliced")
    opts = argparse.Namespace(power=None, marker=None, baseline_s=0.02, rate=None,
                              counter_updates=20)
    power, model = open_power(opts, sim)
    cable = PullCable(settings.frames)
    cable.power = power
    with pytest.raises(PowerSourceError):
        Sweep(sim, MODEL, pairs, tmp_path / "o", settings, power=power,
              hooks=cable).run()
    df = pd.read_csv(tmp_path / "o" / "sweep.csv")
    assert len(df) == N_LAYERS and set(df["freq_level"]) == {1}  # pair 2 not written
    assert df["energy_mj"].gt(0).all()
    # A new logger session finishes the sweep; pair 1 is not measured again.
    power, model = open_power(opts, sim)
    res = Sweep(sim, MODEL, pairs, tmp_path / "o", settings, power=power,
                resume=True).run()
    assert [p.level for p in res.skipped] == [1] and [r.pair.level for r in res.done] == [5]
    df = pd.read_csv(tmp_path / "o" / "sweep.csv")
    assert sorted(set(df["freq_level"])) == [1, 5] and len(df) == 2 * N_LAYERS
    assert df["energy_mj"].notna().all()
