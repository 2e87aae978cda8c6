"""`coupprof collect` as a user runs it (a subprocess): the virtual logger demo,
a logger on a pty that vanishes or never answers, loop://, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.sim.virtual_logger import VirtualLogger

COUPPROF = [sys.executable, "-m", "profiler"]


def collect(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COUPPROF, "collect", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_virtual_port_writes_samples_edges_and_sidecar(tmp_path: Path) -> None:
    out = tmp_path / "trace.csv"
    r = collect("--port", "virtual", "--seconds", "0.5", "-o", str(out), "--rate", "4000",
                "--trace-dir", str(tmp_path / "bin"))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # no progress bar in a pipe
    assert "0 lost, 0 corrupt" in r.stdout and "wrote" in r.stdout
    s = pd.read_csv(out)
    assert list(s.columns) == ["t_us", "host_ns", "current_a", "bus_v", "power_w", "markers"]
    meta = json.loads((tmp_path / "trace.json").read_text())
    assert meta["samples"] == len(s) == meta["counters"]["device_samples_total"]
    assert meta["logger"]["rate_hz"] == 4000 and meta["power_source"] == "arduino"
    assert np.all(np.diff(s["t_us"]) == 250)
    # the demo waveform: 2.5 W + 1.5 W while marker 0 is high + 0.1 W at 7 Hz
    want = 2.5 + 1.5 * (s["markers"] & 1) + 0.1 * np.sin(2 * np.pi * 7 * s["t_us"] * 1e-6)
    assert np.allclose(s["power_w"], want, atol=0.5e-3)
    assert np.allclose(s["power_w"], s["current_a"] * s["bus_v"], rtol=1e-6)
    # edges with host times: the demo toggles marker 0 and maps the clock
    e = pd.read_csv(tmp_path / "trace.edges.csv")
    assert list(e.columns) == ["t_us", "host_ns", "markers", "changed"]
    assert len(e) >= 3 and set(e["changed"]) == {1}
    assert e["host_ns"].notna().all() and s["host_ns"].notna().all()
    assert np.all(np.diff(s["host_ns"]) > 0)
    assert meta["clock"]["matched"] == len(e)
    # the binary trace directory was kept
    assert (tmp_path / "bin" / "meta.json").exists()


def _wait(cond, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_port_vanishing_mid_run_exits_4_and_writes_what_was_measured(tmp_path: Path) -> None:
    out = tmp_path / "cut.csv"
    with VirtualLogger(lambda t, m: 3.0 + 0 * t, rate_hz=4000) as vl:
        proc = subprocess.Popen([*COUPPROF, "collect", "--port", vl.port, "--seconds", "30",
                                 "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            _wait(lambda: vl.counters.samples_total >= 2000 or proc.poll() is not None,
                  "the capture to start")
            vl.close_port()
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 4, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr
    assert f"serial port {vl.port} vanished" in lines[0]
    assert "capture ended early" in stdout
    s = pd.read_csv(out)
    # what arrived before the cable was pulled: a gapless run of samples
    assert 0 < len(s) <= vl.counters.samples_total
    assert np.all(np.diff(s["t_us"]) == 250)
    assert np.allclose(s["power_w"], 3.0, atol=0.5e-3)
    meta = json.loads((tmp_path / "cut.json").read_text())
    assert "vanished" in meta["error"] and meta["samples"] == len(s)


def test_logger_that_never_answers_exits_4(tmp_path: Path) -> None:
    with VirtualLogger(answer_commands=False) as vl:
        r = collect("--port", vl.port, "--seconds", "1", "-o", str(tmp_path / "x.csv"),
                    "--timeout", "0.5")
    assert r.returncode == 4
    assert f"logger on {vl.port} did not answer IDENTIFY within 0.5 s" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.csv").exists()  # nothing was measured


def test_loop_url_never_answers_exits_4(tmp_path: Path) -> None:
    r = collect("--port", "loop://", "--seconds", "1", "-o", str(tmp_path / "x.csv"),
                "--timeout", "0.3")
    assert r.returncode == 4
    assert "logger on loop:// did not answer IDENTIFY" in r.stderr


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["--seconds", "-1"], 2, "must be a positive number"),
        (["--seconds", "abc"], 2, "is not a number"),
        (["--seconds", "1", "--rate", "0"], 2, "must be 1 or more"),
        (["--seconds", "1", "-o", "/nonexistent-dir/x.csv"], 2, "does not exist"),
        (["--seconds", "1", "--port", "/dev/ttyACM-nonexistent"], 3, "cannot open serial port"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], code: int, needle: str) -> None:
    base = {"--port": "virtual", "-o": str(tmp_path / "x.csv")}
    for k, v in base.items():
        if k not in args:
            args = [k, v, *args]
    r = collect(*args)
    assert r.returncode == code, r.stderr
    assert needle in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_parquet_output_holds_the_trace_directory_values(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from profiler.power.trace import DeviceTrace

    out = tmp_path / "trace.parquet"
    r = collect("--port", "virtual", "--seconds", "0.5", "-o", str(out), "--rate", "4000",
                "--trace-dir", str(tmp_path / "bin"))
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}, {tmp_path / 'trace.edges.parquet'}, {tmp_path / 'trace.json'}" in r.stdout
    kept = DeviceTrace.load(tmp_path / "bin")
    assert kept.clock is not None  # collect saved its clock map into the kept directory
    got = pq.read_table(out).to_pandas()
    assert len(got) == kept.samples.size > 1500
    assert np.array_equal(got["t_us"], kept.t_us)
    assert np.array_equal(got["power_w"], kept.power_w)
    assert np.array_equal(got["host_ns"], kept.host_ns)
    assert np.array_equal(got["markers"], kept.markers)
    edges = pq.read_table(tmp_path / "trace.edges.parquet").to_pandas()
    assert edges["t_us"].tolist() == kept.edges["t_us"].tolist() and len(edges) >= 3
    meta = json.loads((tmp_path / "trace.json").read_text())
    assert meta["files"] == {"samples": "trace.parquet", "edges": "trace.edges.parquet"}
    assert meta["samples"] == len(got)


def test_kept_trace_directory_re_exports_the_same_csv(tmp_path: Path) -> None:
    from profiler.power.export import export
    from profiler.power.trace import DeviceTrace

    r = collect("--port", "virtual", "--seconds", "0.4", "-o", str(tmp_path / "a.csv"),
                "--rate", "4000", "--trace-dir", str(tmp_path / "bin"))
    assert r.returncode == 0, r.stderr
    export(DeviceTrace.load(tmp_path / "bin"), tmp_path / "b.csv", 123)
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    assert (tmp_path / "a.edges.csv").read_bytes() == (tmp_path / "b.edges.csv").read_bytes()


def test_parquet_without_pyarrow_is_one_line_exit_2_before_capturing(tmp_path: Path) -> None:
    # pyarrow made unimportable for this one process (None in sys.modules: ImportError)
    code = ("import sys; sys.modules['pyarrow'] = None; from profiler.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code, "collect", "--port", "virtual",
                        "--seconds", "30", "-o", str(tmp_path / "t.parquet")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "pip install 'coupprof[parquet]'" in r.stderr
    assert time.monotonic() - t0 < 20  # refused at once, not after the 30 s capture
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("sig", "code", "name"), [("SIGINT", 130, "Ctrl-C"),
                                                    ("SIGTERM", 143, "SIGTERM")])
def test_interrupted_capture_writes_what_was_measured(tmp_path: Path, sig: str, code: int,
                                                      name: str) -> None:
    import signal

    out = tmp_path / "cut.csv"
    # Ctrl-C as a terminal's foreground job gets it: a suite started as a background
    # job (`pytest &`) ignores SIGINT, and its children would inherit that and run on.
    proc = subprocess.Popen([*COUPPROF, "collect", "--port", "virtual", "--seconds", "60",
                             "--rate", "4000", "-o", str(out), "--trace-dir", str(tmp_path / "bin")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        samples = tmp_path / "bin" / "samples.bin"
        # 1 s of samples on disk (13 bytes each): the capture is under way
        _wait(lambda: (samples.exists() and samples.stat().st_size > 4000 * 13)
              or proc.poll() is not None, "the capture to start")
        proc.send_signal(getattr(signal, sig))
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) <= 1
    assert f"capture ended early: interrupted by {name}" in stdout
    s = pd.read_csv(out)
    assert len(s) >= 4000 and np.all(np.diff(s["t_us"]) == 250)
    meta = json.loads((tmp_path / "cut.json").read_text())
    assert meta["error"] == f"interrupted by {name}" and meta["samples"] == len(s)
    assert meta["counters"]["lost_frames"] == 0
    # the logger was told to stop: its last STATUS counts every sample received
    assert meta["counters"]["device_samples_total"] == len(s)
    assert json.loads((tmp_path / "bin" / "meta.json").read_text())["error"] == meta["error"]
