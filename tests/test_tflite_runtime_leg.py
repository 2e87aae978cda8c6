"""coupprof on tflite-runtime alone: the runtime many boards have, and the one the project
card names.

`./setup.sh` builds `.venv-tflite`: tflite-runtime 2.14.0, NumPy below 2 (2.14 opens no
model under NumPy 2) and coupprof with its dependencies but without ai-edge-litert. The
CPU path runs there as a user runs it, one subprocess per command: `slice --verify`,
`layers` on the simulated board and on `host`, `transfer-matrix` and `run`. What LiteRT
alone has (its GPU and NPU accelerators) must say so in one line, never a traceback.

Ground truth comes from this process, which runs on LiteRT: the sub-models the leg writes
are the bytes LiteRT's environment writes, and the simulated board's layer times follow
its model (`tests/sim_truth.py`) for those bytes.

Outside CI, a checkout without `.venv-tflite` skips this module with the reason; in CI
(`CI` set) its absence fails, since setup.sh must have built it.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from sim_truth import layer_truth

from profiler.boards.profiles import load_board
from profiler.measure.tables import sliced_stat
from profiler.slicing import SlicedModel
from profiler.slicing.slicer import slice_model
from profiler.zoo import default_model_path

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv-tflite"
COUPPROF = VENV / "bin" / "coupprof"
DEFAULT_MODEL = default_model_path()
SIM_B_LEVEL, SIM_B_KHZ = "1", 408_000  # the sim's B at its lowest level: slow, easy to pace
BOUNDARY = 7  # B8G7 hands over between layers 7 and 8

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def leg() -> None:
    if not COUPPROF.is_file():
        why = (f"{VENV} is missing: ./setup.sh builds it (tflite-runtime 2.14.0 has wheels "
               "for CPython 3.8-3.11 only)")
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tflite-leg")


def coupprof(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # Nothing may bring this process's packages (LiteRT) into the leg's interpreter.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(COUPPROF_CACHE=str(cwd / "cache"), COLUMNS="200")
    return subprocess.run([str(COUPPROF), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, (f"{' '.join(proc.args)} exited {proc.returncode}\n"
                                  f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def one_line_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("coupprof: ")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def sidecar(csv: Path) -> dict[str, object]:
    meta: dict[str, object] = json.loads(csv.with_suffix(".json").read_text())
    # What the leg is for: tflite-runtime ran it, under NumPy 1.
    assert (meta["runtime"], meta["runtime_version"]) == ("tflite-runtime", "2.14.0"), meta
    assert str(meta["numpy"]).startswith("1."), meta["numpy"]
    return meta


@pytest.fixture(scope="module")
def sliced_here() -> SlicedModel:
    """The default model sliced in this process, on LiteRT."""
    return slice_model(DEFAULT_MODEL, cache_dir=False)


@pytest.fixture(scope="module")
def sim_b(work: Path) -> Path:
    """`layers` of the default model on the simulated board's B at its lowest level."""
    ok(coupprof("layers", "--board", "sim", "--processor", "B", "--freq", SIM_B_LEVEL,
                "--frames", "3", "--warmup", "1", "--csv", "sim-b/layers.csv", cwd=work))
    return work / "sim-b" / "layers.csv"


def test_the_leg_runs_tflite_runtime_without_litert() -> None:
    code = ("import importlib.util, numpy; from profiler.runtime import runtime; "
            "rt = runtime(); print(rt.name, rt.version, numpy.__version__, "
            "importlib.util.find_spec('ai_edge_litert') is None)")
    out = subprocess.run([str(VENV / "bin" / "python"), "-c", code], capture_output=True,
                         text=True, timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr
    name, version, numpy_version, no_litert = out.stdout.split()
    assert (name, version, no_litert) == ("tflite-runtime", "2.14.0", "True")
    assert numpy_version.startswith("1."), numpy_version


def test_slice_writes_litert_s_bytes_and_verifies(work: Path, sliced_here: SlicedModel) -> None:
    proc = ok(coupprof("slice", str(DEFAULT_MODEL), "--verify", "-o", "sliced", cwd=work))
    n = len(sliced_here.layers)
    assert f"{n} layers" in proc.stdout + proc.stderr
    assert "chained sub-models match the whole model" in proc.stdout + proc.stderr
    manifest = json.loads((work / "sliced" / "manifest.json").read_text())
    written = [hashlib.sha256((work / "sliced" / f"layer_{i:03d}.tflite").read_bytes()).hexdigest()
               for i in range(n)]
    assert len(manifest["layers"]) == n
    assert [layer["sha256"] for layer in manifest["layers"]] == written
    assert written == [hashlib.sha256(layer.model_bytes).hexdigest()
                       for layer in sliced_here.layers]


def test_layers_on_the_sim_board_follow_its_model(sim_b: Path, sliced_here: SlicedModel) -> None:
    meta = sidecar(sim_b)
    assert meta["board"] == "sim" and meta["simulated"] is True
    rows = pd.read_csv(sim_b)
    rows = rows[rows["kind"] == "layer"]
    assert list(rows["layer"]) == list(range(len(sliced_here.layers)))
    assert set(rows["freq_khz"]) == {SIM_B_KHZ}
    board = load_board("sim")
    truth = [layer_truth(board, "B", layer.model_bytes, SIM_B_KHZ)[0]
             for layer in sliced_here.layers]
    ratio = [m / t for m, t in zip(rows["time_ms_median"], truth, strict=True)]
    # The sim paces each call to its model: never early; late only by host load.
    assert min(ratio) > 0.98, ratio
    assert statistics.median(ratio) < 1.25, ratio


@pytest.mark.parametrize("method", [
    [],  # sliced, on every core of B
    # fused in windows: each window's inputs come from one run that keeps every tensor
    # (`slicing.prefix.tensor_values`, the interpreter's preserve-all-tensors mode)
    ["--method", "fused", "--window", "5", "--threads", "1", "--min-rounds", "3",
     "--max-rounds", "3"],
], ids=["sliced", "fused-window"])
def test_layers_on_host_b(work: Path, sliced_here: SlicedModel, method: list[str]) -> None:
    csv = work / f"host-b-{len(method)}" / "layers.csv"
    ok(coupprof("layers", "--board", "host", "--processor", "B", "--frames", "3",
                "--warmup", "1", *method, "--csv", str(csv), cwd=work))
    meta = sidecar(csv)
    assert meta["board"] == "host" and meta["simulated"] is False
    assert meta["method"] == ("fused" if method else "sliced")
    rows = pd.read_csv(csv)
    rows = rows[rows["kind"] == "layer"]
    assert list(rows["layer"]) == list(range(len(sliced_here.layers)))
    assert list(rows["macs"]) == [layer.macs for layer in sliced_here.layers]
    assert (sliced_stat(rows, "median") > 0).all()
    if method:
        assert rows["time_ms_ci95"].notna().all()


def test_transfer_matrix_then_run_on_the_sim_board(work: Path, sim_b: Path,
                                                   sliced_here: SlicedModel) -> None:
    # Sliced, as B's table: G's default (fused, in timed rounds) is covered on host B.
    ok(coupprof("layers", "--board", "sim", "--processor", "G", "--freq", "2", "--method",
                "sliced", "--frames", "3", "--warmup", "1", "--csv", "sim-g/layers.csv",
                cwd=work))
    sidecar(work / "sim-g" / "layers.csv")
    ok(coupprof("transfer-matrix", "--board", "sim", "--processors", "B,G", "--boundaries",
                str(BOUNDARY), "--frames", "3", "--warmup", "1", "--csv", "t/transfers.csv",
                cwd=work))
    sidecar(work / "t" / "transfers.csv")
    moves = pd.read_csv(work / "t" / "transfers.csv")
    assert sorted(zip(moves["src"], moves["dst"], strict=True)) == [
        ("B", "B"), ("B", "G"), ("G", "B"), ("G", "G")]
    crossing = sum(t.nbytes for t in sliced_here.layers[BOUNDARY].outputs)
    assert set(moves["boundary"]) == {BOUNDARY} and set(moves["bytes"]) == {crossing}
    assert (moves["time_ms_mean"] > 0).all()

    n = len(sliced_here.layers)
    order = f"B{BOUNDARY + 1}G{n - BOUNDARY - 1}"
    ok(coupprof("run", "--board", "sim", "--order", order, "--mode", "switch", "--freq",
                f"B={SIM_B_LEVEL},G=2", "--frames", "3", "--warmup", "1",
                "--layers", f"{sim_b},{work / 'sim-g' / 'layers.csv'}",
                "--transfers", str(work / "t" / "transfers.csv"), "--csv", "run/run.csv",
                cwd=work))
    meta = sidecar(work / "run" / "run.csv")
    assert meta["order"] == "B" * (BOUNDARY + 1) + "G" * (n - BOUNDARY - 1)
    out = pd.read_csv(work / "run" / "run.csv")
    stages = out[out["kind"] == "stage"]
    assert [(s.processor, int(s.first_layer), int(s.last_layer)) for s in stages.itertuples()] \
        == [("B", 0, BOUNDARY), ("G", BOUNDARY + 1, n - 1)]
    summary = out[out["kind"] == "summary"].set_index("metric")
    assert summary.loc["latency_ms_mean", "measured"] > 0
    assert summary.loc["latency_ms_mean", "predicted"] > 0


@pytest.mark.parametrize("command", [
    ["layers", "--processor", "G"],
    ["run", "--order", "B8G7", "--mode", "switch"],
    ["transfer-matrix", "--processors", "B,G"],
], ids=lambda c: c[0])
def test_g_on_host_says_tflite_runtime_has_none(work: Path, command: list[str]) -> None:
    """`host`'s G is LiteRT's GPU accelerator: under LiteRT it is there (a GPU or not is
    found when a layer compiles); tflite-runtime has no accelerators at all."""
    line = one_line_error(coupprof(*command, "--board", "host", "--frames", "1",
                                   "--csv", "g.csv", cwd=work), 3)
    assert line.startswith(f"coupprof {command[0]}: error: board 'host' has no processor 'G'")
    assert "tflite-runtime 2.14.0" in line and "ai-edge-litert" in line, line
    assert "it has: B" in line, line
    assert not (work / "g.csv").exists()


def test_a_profile_s_litert_accelerator_says_tflite_runtime_has_none(work: Path) -> None:
    # A profile whose G names LiteRT's accelerator (`accelerator = "gpu"`).
    (work / "gpu-board.toml").write_text(
        '[board]\nname = "one-gpu"\ndescription = "a CPU core and a LiteRT GPU"\n\n'
        '[processors.B]\nkind = "cpu"\nname = "CPU x1"\ncores = [0]\n\n'
        '[processors.G]\nkind = "gpu"\nname = "GPU"\nhost = "B"\naccelerator = "gpu"\n')
    line = one_line_error(coupprof("layers", "--board", "gpu-board.toml", "--processor", "G",
                                   "--frames", "1", "--warmup", "0", "--csv", "g.csv",
                                   cwd=work), 3)
    assert line.startswith("coupprof layers: error: LiteRT's accelerators"), line
    assert "tflite-runtime 2.14.0" in line and "ai-edge-litert" in line, line
    assert not (work / "g.csv").exists()
