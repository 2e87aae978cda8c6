"""`coupprof layers` end to end, as a user runs it (subprocess, real LiteRT, real /sys)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from profiler.boards.host import host_board
from profiler.measure.tables import read_tables, render_text
from profiler.slicing.slicer import slice_model
from profiler.zoo import default_model_path

COUPPROF = str(Path(sys.executable).with_name("coupprof"))
DEFAULT_MODEL = default_model_path()


def coupprof(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "COUPPROF_CACHE": str(cwd / "cache"), **(env or {})}
    return subprocess.run([COUPPROF, "layers", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("layers")


def test_default_model_on_host_b(run_dir: Path) -> None:
    r = coupprof("--board", "host", "--processor", "B", "--frames", "5", "--warmup", "1",
                 "--csv", "out.csv", cwd=run_dir)
    assert r.returncode == 0, r.stderr
    title = " ".join(r.stdout.split())
    assert f"{DEFAULT_MODEL.name} on board host, processor B" in title
    assert "total" in r.stdout and "FPS" in r.stdout
    assert "wrote out.csv" in r.stdout
    # Nothing but LiteRT's own log line on stderr: no progress bar in a pipe.
    assert all(line.startswith("INFO:") for line in r.stderr.splitlines()), r.stderr

    df = pd.read_csv(run_dir / "out.csv")
    n_layers = len(slice_model(DEFAULT_MODEL, cache_dir=False).layers)
    assert len(df) == n_layers and list(df["layer"]) == list(range(n_layers))
    assert (df["kind"] == "layer").all()
    assert (df["time_ms_mean"] > 0).all() and (df["time_ms_median"] > 0).all()
    assert (df["frames"] == 5).all()

    meta = json.loads((run_dir / "out.json").read_text())
    cores = host_board().processor("B").cores
    assert meta["model_sha256"] == hashlib.sha256(DEFAULT_MODEL.read_bytes()).hexdigest()
    assert meta["board"] == "host" and meta["simulated"] is False
    assert meta["processor"] == "B" and meta["cores"] == list(cores)
    assert meta["threads"] == len(cores)
    assert (meta["frames"], meta["warmup"]) == (5, 1)
    assert meta["runtime"] == "ai-edge-litert" and meta["runtime_version"]
    assert meta["power_source"] == "none"
    assert "--frames 5" in meta["command"]
    # Re-rendering the saved files gives the same numbers as the table just printed.
    again = " ".join(render_text(read_tables(run_dir / "out.csv")).split())
    total = f"{meta['totals']['time_ms_mean']:.3f}"
    assert total in again and total in " ".join(r.stdout.split())


def test_raw_rows_per_operator_single_thread(run_dir: Path) -> None:
    r = coupprof("--granularity", "op", "--threads", "1", "--frames", "3", "--warmup", "0",
                 "--raw", "--csv", "ops/raw.csv", "--json", "ops/meta.json", cwd=run_dir)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(run_dir / "ops/raw.csv", dtype={"start_ns": "Int64", "end_ns": "Int64"})
    n_ops = slice_model(DEFAULT_MODEL, cache_dir=False).num_ops
    layers, frames = df[df["kind"] == "layer"], df[df["kind"] == "frame"]
    assert len(layers) == n_ops and len(frames) == 3 * n_ops
    assert sorted(set(frames["frame"].astype(int))) == [0, 1, 2]
    # time_ms is exactly the raw stamps' difference less the host's late wake-up (the
    # simulated B's modelled time), and stamps run forward frame by frame.
    diff_ms = (frames["end_ns"] - frames["start_ns"] - frames["overrun_ns"]).astype("int64") / 1e6
    assert (frames["overrun_ns"] >= 0).all()
    assert (abs(frames["time_ms"] - diff_ms) < 1e-9).all()
    assert (frames["time_ms"] > 0).all()
    meta = json.loads((run_dir / "ops/meta.json").read_text())
    assert meta["threads"] == 1 and meta["granularity"] == "op" and meta["raw_rows"] is True


def test_cuts_and_default_csv_path(run_dir: Path) -> None:
    r = coupprof("--cuts", "5,10", "--frames", "2", "--warmup", "0", cwd=run_dir)
    assert r.returncode == 0, r.stderr
    csv = run_dir / "coupprof-out" / f"layers-{DEFAULT_MODEL.stem}-B.csv"
    assert f"wrote {csv.relative_to(run_dir)}" in r.stdout
    df = pd.read_csv(csv)
    assert len(df) == 3  # ops 0-4, 5-9, 10-end
    assert json.loads(csv.with_suffix(".json").read_text())["cuts"] == [5, 10]


def test_freq_on_host_without_dvfs_lists_what_the_board_has(tmp_path: Path) -> None:
    cpu = tmp_path / "sys/devices/system/cpu"
    cpu.mkdir(parents=True)
    (cpu / "online").write_text("0\n")
    r = coupprof("--board", "host", "--sysfs-root", str(tmp_path / "sys"), "--freq", "2",
                 cwd=tmp_path)
    assert r.returncode == 2
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert "has no DVFS levels" in err and "B = CPU x1 (cores 0)" in err


def _fast_sim(path: Path) -> Path:
    """The sim board with a B that is far faster than any host: no fixed costs, huge
    rates and bandwidths, so every layer's modelled time is ~0."""
    import re

    from profiler.boards.profiles import BOARDS_DIR

    text = (BOARDS_DIR / "sim.toml").read_text()
    head = text.index("[processors.B.sim.timing]\n")
    end = text.index("[processors.B.sim.power]")
    zero = {"call_us", "call_kcycles", "host_call_kcycles", "op_kcycles", "host_op_kcycles",
            "memory_clock_share", "half_occupancy_pixels", "weight_cache_kb"}

    def value(m: re.Match[str]) -> str:
        key = m.group(1)
        return f"{key} = {'1.0' if key == 'roofline_p' else '0.0' if key in zero else '1e6'}"

    block = re.sub(r"^(\w+) = [-+0-9.e]+$", value, text[head:end], flags=re.M)
    path.write_text(text[:head] + block + text[end:])
    return path


def test_sim_rows_say_when_the_host_was_slower_than_the_model(tmp_path: Path) -> None:
    board = _fast_sim(tmp_path / "fast.toml")
    r = coupprof("--board", str(board), "--processor", "B", "--method", "sliced", "--frames",
               "3", "--warmup", "1", "--power", "none", "--csv", "fast.csv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "fast.csv")
    # Every run (warm-up included) took the host's time: the modelled B needs ~none.
    assert df["sim_late_runs"].eq(4).all()
    assert "host slow" in r.stdout and "4 runs" in r.stdout
    # The shipped sim board's layers take ms; this host computes them in far less.
    r = coupprof("--board", "sim", "--processor", "B", "--method", "sliced", "--frames", "3",
               "--warmup", "1", "--power", "none", "--csv", "sim.csv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert pd.read_csv(tmp_path / "sim.csv")["sim_late_runs"].eq(0).all()
    assert "host slow" not in r.stdout


def test_fused_rows_count_the_late_prefixes_their_differences_use(tmp_path: Path) -> None:
    board = _fast_sim(tmp_path / "fast.toml")
    fused = ("--method", "fused", "--min-rounds", "3", "--max-rounds", "3", "--frames", "2",
             "--warmup", "1", "--power", "none")
    r = coupprof("--board", str(board), "--processor", "B", *fused, "--csv", "fast.csv",
                 cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "fast.csv")
    df = df[df["kind"] == "layer"]
    meta = json.loads((tmp_path / "fast.json").read_text())
    # Every prefix call took the host's time: all 16 prefixes (empty one included) are
    # late, and every row adds its two prefixes' late calls to its 3 sliced ones.
    assert meta["fused"]["late_prefixes"] == list(range(len(df) + 1))
    assert (df["sim_late_runs"] > 3).all()
    r = coupprof("--board", "sim", "--processor", "B", *fused, "--csv", "sim.csv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "sim.json").read_text())["fused"]["late_prefixes"] == []
    assert pd.read_csv(tmp_path / "sim.csv")["sim_late_runs"].fillna(0).eq(0).all()
