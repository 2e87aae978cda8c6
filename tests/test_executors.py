"""Executors on real LiteRT: chained sub-models reproduce the whole model through every
back end, accelerators go through `CompiledModel` (LiteRT's CPU accelerator stands in
for a GPU here: the same code path), threads are pinned, missing accelerators and
delegates are exit-3 errors naming what is missing, fallback is detected."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from governors import RestoreGuard, make_governor
from profiler import zoo
from profiler.boards.model import Board, ProcessorSpec
from profiler.boards.profiles import load_board
from profiler.clock import StepClock
from profiler.errors import BoardError, ModelError, RuntimeUnavailableError
from profiler.executors import (
    AcceleratorExecutor,
    CpuExecutor,
    DelegateExecutor,
    ModelledCall,
    PacedSubModel,
    ProcessorWorker,
    SubModelInterpreter,
    delegate_coverage,
    make_executor,
    with_accelerators,
)
from profiler.executors.accelerator import (
    VULKAN_LOADER_ENV,
    vulkan_icds,
    vulkan_loader_error,
    webgpu_only,
)
from profiler.executors.logs import native_stderr
from profiler.measure.runner import LayerRunner
from profiler.runtime import make_interpreter
from profiler.slicing.slicer import slice_model

CORES = tuple(sorted(os.sched_getaffinity(0)))
CPU = ProcessorSpec("B", "cpu", "test cores", CORES)
GPU = ProcessorSpec("G", "gpu", "stand-in GPU", CORES, host="B", accelerator="gpu")
MODELS = {
    "resnet50": dict(size=32, classes=10),  # skip connections: multi-input layers
    "mobilenet_v1_int8": dict(alpha=0.25, size=32, classes=10),  # int8 tensors
}


@functools.cache
def model(name: str) -> bytes:
    return zoo.build(name, **MODELS[name])


def whole(data: bytes, inputs: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    interp = make_interpreter(data, num_threads=1)
    for det in interp.get_input_details():
        interp.set_tensor(det["index"], inputs[det["index"]])
    interp.invoke()
    return {d["index"]: interp.get_tensor(d["index"]) for d in interp.get_output_details()}


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == np.int8:
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    else:
        assert np.abs(got - want).max() <= 1e-4 * max(float(np.abs(want).max()), 1e-6)


@pytest.mark.parametrize("name", list(MODELS))
def test_runner_chains_accelerator_submodels_to_the_whole_model(name: str, tmp_path: Path) -> None:
    data = model(name)
    sliced = slice_model(data, "layer", cache_dir=tmp_path)
    with AcceleratorExecutor(GPU, accelerator="cpu") as ex:
        runner = LayerRunner(sliced, ex, seed=3)
        assert all(isinstance(i, SubModelInterpreter) for i in runner.interpreters)
        runner.run(frames=2, warmup=1)
        chained = runner.outputs()
        assert [i.sub.fallback for i in runner.interpreters] == [False] * len(sliced.layers)
    want = whole(data, runner.inputs)
    assert set(chained) == set(want)
    for idx in want:
        assert_close(chained[idx], want[idx])


def test_submodel_api_chain_on_cpu_and_accelerator_agree_with_the_whole_model(
        tmp_path: Path) -> None:
    """Chaining by hand through set_input/run/output, as the pipeline stages do."""
    data = model("resnet50")
    sliced = slice_model(data, "layer", cache_dir=tmp_path)
    rng = np.random.default_rng(7)
    x = {int(t.index): rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in sliced.model_inputs}
    want = whole(data, x)
    for ex in (CpuExecutor(CPU, threads=1), AcceleratorExecutor(GPU, accelerator="cpu")):
        with ex:
            subs = [ex.load(layer.model_bytes, f"layer {layer.index}") for layer in sliced.layers]
            where: dict[int, tuple[int, int]] = {}
            for pos, (layer, sub) in enumerate(zip(sliced.layers, subs, strict=True)):
                for slot, t in enumerate(layer.inputs):
                    idx = int(t.index)
                    src = x[idx] if idx not in where else subs[where[idx][0]].output(where[idx][1])
                    sub.set_input(slot, src)
                sub.run()
                for slot, t in enumerate(layer.outputs):
                    where[int(t.index)] = (pos, slot)
            for idx in want:
                pos, slot = where[idx]
                assert_close(np.array(subs[pos].output(slot)), want[idx])


def test_accelerator_outputs_match_the_cpu_per_layer(tmp_path: Path) -> None:
    sliced = slice_model(model("resnet50"), "layer", cache_dir=tmp_path)
    rng = np.random.default_rng(0)
    with CpuExecutor(CPU, threads=1) as cpu, AcceleratorExecutor(GPU, accelerator="cpu") as acc:
        for layer in sliced.layers[:6]:
            a, b = cpu.load(layer.model_bytes), acc.load(layer.model_bytes)
            assert [t.shape for t in a.inputs] == [t.shape for t in b.inputs]
            for slot, t in enumerate(a.inputs):
                v = rng.uniform(-1, 1, t.shape).astype(t.dtype)
                a.set_input(slot, v)
                b.set_input(slot, v)
            a.run()
            b.run()
            for slot in range(len(a.outputs)):
                assert_close(np.array(b.output(slot)), np.array(a.output(slot)))


def test_lazy_readback_reads_after_the_run_and_gives_the_same_outputs(tmp_path: Path) -> None:
    sliced = slice_model(model("resnet50"), "layer", cache_dir=tmp_path)
    layer = sliced.layers[0]
    x = np.random.default_rng(1).uniform(-1, 1, layer.inputs[0].shape).astype(np.float32)
    outs = []
    for mode in ("run", "lazy"):
        proc = replace(GPU)
        with AcceleratorExecutor(proc, accelerator="cpu", readback=mode) as ex:
            sub = ex.load(layer.model_bytes)
            sub.set_input(0, x)
            sub.run()
            assert (sub._host[0] is None) == (mode == "lazy")  # read only on demand
            outs.append(np.array(sub.output(0)))
    np.testing.assert_array_equal(outs[0], outs[1])


def test_executor_pins_the_driving_thread_and_restores_it() -> None:
    before = os.sched_getaffinity(0)
    one = (CORES[-1],)
    with CpuExecutor(replace(CPU, cores=one)) as ex:
        assert os.sched_getaffinity(0) == set(one)
        assert ex.threads == 1
    assert os.sched_getaffinity(0) == before


def test_worker_runs_jobs_on_its_own_pinned_thread() -> None:
    main = threading.get_ident()
    one = (CORES[0],)
    with ProcessorWorker(lambda: AcceleratorExecutor(replace(GPU, cores=one),
                                                     accelerator="cpu")) as w:
        ident, cpus = w.call(lambda ex: (threading.get_ident(), os.sched_getaffinity(0)))
    assert ident != main and cpus == set(one)
    assert os.sched_getaffinity(0) == set(CORES)  # the caller was never pinned


def test_worker_reports_an_executor_that_cannot_pin() -> None:
    bad = replace(CPU, cores=(4095,))
    w = ProcessorWorker(lambda: CpuExecutor(bad))
    with pytest.raises(Exception) as err:
        w.start()
    assert "4095" in str(err.value) and getattr(err.value, "exit_code", 0) == 3


def test_load_before_open_is_refused() -> None:
    with pytest.raises(RuntimeError, match="before open"):
        CpuExecutor(CPU).load(model("resnet50"))


@pytest.mark.skipif(bool(vulkan_icds()), reason="this machine has a Vulkan driver")
def test_missing_gpu_is_an_exit_3_error_naming_what_is_missing(tmp_path: Path) -> None:
    sliced = slice_model(model("resnet50"), "layer", cache_dir=tmp_path)
    # Without a Vulkan loader opening fails already; with one but no driver, loading does.
    with pytest.raises(RuntimeUnavailableError) as err, AcceleratorExecutor(GPU) as ex:
        ex.load(sliced.layers[0].model_bytes, "layer 0")
    msg = str(err.value)
    assert err.value.exit_code == 3
    assert "processor G" in msg
    assert "Vulkan" in msg or "adapter" in msg.lower()  # LiteRT's reason, not a stack frame
    assert "VK_DRIVER_FILES" in msg or "libvulkan1" in msg  # the fix


@pytest.mark.skipif(not webgpu_only(), reason="this LiteRT has a GPU accelerator besides WebGPU")
def test_missing_vulkan_loader_is_named_before_litert_is_asked(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Any machine: the loader variable names a file that is not there."""
    monkeypatch.setenv(VULKAN_LOADER_ENV, str(tmp_path / "libvulkan.so.1"))
    ex = AcceleratorExecutor(GPU)
    with pytest.raises(RuntimeUnavailableError) as err:
        ex.open()
    msg = str(err.value)
    assert err.value.exit_code == 3
    assert msg.startswith("processor G: no Vulkan loader (")
    assert str(tmp_path / "libvulkan.so.1") in msg  # the dynamic linker's own words
    assert "libvulkan1" in msg and "ICD" in msg  # how to install it
    assert "NPU" not in msg and "penVINO" not in msg  # no other plugin's failures
    assert not ex.is_open and ex.env is None  # LiteRT was never asked


def test_vulkan_loader_check_loads_the_library_it_names(tmp_path: Path) -> None:
    assert vulkan_loader_error("libc.so.6") is None  # any loadable library stands in
    why = vulkan_loader_error(str(tmp_path / "libvulkan.so.1"))
    assert why is not None and "No such file" in why


@pytest.mark.parametrize("libs,expected", [
    (["libLiteRtWebGpuAccelerator.so"], True),
    (["libLiteRtWebGpuAccelerator.so", "libLiteRtGpuAccelerator.so"], False),  # OpenCL too
    (["libLiteRtOpenClAccelerator.so"], False),
    ([], False),
])
def test_vulkan_is_required_only_when_webgpu_is_the_only_gpu_accelerator(
        tmp_path: Path, libs: list[str], expected: bool) -> None:
    for name in libs:
        (tmp_path / name).write_bytes(b"")
    assert webgpu_only(tmp_path) is expected


def test_native_output_capture_takes_litert_lines_on_stdout_too(capfd: pytest.CaptureFixture[str],
                                                               ) -> None:
    """TFLite's tools logger writes INFO to std::cout (e.g. 'Loaded OpenCL library')."""
    print("before", flush=False)  # Python's buffer must reach the real stdout first
    with native_stderr() as log:
        os.write(1, b"INFO: Loaded OpenCL library with dlopen.\n")
        os.write(2, b"INFO: [gpu_environment.h:155] Created LiteRT GpuEnvironment.\n")
    print("after")
    out, err = capfd.readouterr()
    assert out == "before\nafter\n" and err == ""
    assert log.lines == ["INFO: Loaded OpenCL library with dlopen.",
                         "INFO: [gpu_environment.h:155] Created LiteRT GpuEnvironment."]


def test_npu_without_a_usable_dispatch_library_falls_back_or_refuses(tmp_path: Path) -> None:
    """LiteRT's wheel may carry a vendor dispatch directory whose runtime is missing; then
    every op falls back to the CPU and is reported. Without any, it is an exit-3 error."""
    npu = ProcessorSpec("N", "npu", "no NPU here", CORES, host="B", accelerator="npu")
    sliced = slice_model(model("resnet50"), "layer", cache_dir=tmp_path)
    try:
        with AcceleratorExecutor(npu) as ex:
            sub = ex.load(sliced.layers[0].model_bytes, "layer 0")
            assert sub.fallback is True
            assert "not accelerated" in sub.fallback_detail
            x = np.ones(sub.inputs[0].shape, np.float32)
            sub.set_input(0, x)
            sub.run()
            with CpuExecutor(CPU, threads=1) as cpu:
                ref = cpu.load(sliced.layers[0].model_bytes)
                ref.set_input(0, x)
                ref.run()
                assert_close(np.array(sub.output(0)), np.array(ref.output(0)))
    except RuntimeUnavailableError as err:
        assert err.exit_code == 3 and "dispatch" in str(err)


def test_no_fallback_allowed_makes_a_partial_layer_an_error(tmp_path: Path) -> None:
    npu = ProcessorSpec("N", "npu", "no NPU here", CORES, host="B", accelerator="npu")
    sliced = slice_model(model("resnet50"), "layer", cache_dir=tmp_path)
    with pytest.raises((ModelError, RuntimeUnavailableError)) as err, \
            AcceleratorExecutor(npu, allow_fallback=False) as ex:
        ex.load(sliced.layers[0].model_bytes, "layer 0")
    assert "does not run wholly on the NPU" in str(err.value) or "dispatch" in str(err.value)


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_missing_delegate_library_is_an_exit_3_error() -> None:
    proc = ProcessorSpec("N", "npu", "vendor NPU", CORES, host="B",
                         delegate="/nonexistent/libvendor_delegate.so")
    with pytest.raises(RuntimeUnavailableError) as err, DelegateExecutor(proc):
        pass
    assert err.value.exit_code == 3 and "libvendor_delegate.so" in str(err.value)


def test_delegate_coverage_sees_whole_and_missing_delegation() -> None:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    data = zoo.default_model_path().read_bytes()
    full = Interpreter(model_content=data, num_threads=1)  # XNNPACK takes every op
    full.allocate_tensors()
    assert delegate_coverage(full) == (True, "")
    bare = Interpreter(model_content=data, experimental_op_resolver_type=(
        OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    bare.allocate_tensors()
    ok, why = delegate_coverage(bare)
    assert not ok and "no operators" in why


class FixedCall(ModelledCall):
    """A processor model whose every call lasts `ns`; it keeps what it was told."""

    def __init__(self, ns: float) -> None:
        self.ns = ns
        self.told: list[tuple[str, int]] = []

    def begin(self, t0_ns: int) -> float:
        self.told.append(("begin", t0_ns))
        return self.ns

    def end(self, t1_ns: int) -> None:
        self.told.append(("end", t1_ns))


def test_paced_run_lasts_its_modelled_time_on_the_run_clock(tmp_path: Path) -> None:
    sliced = slice_model(model("resnet50"), "layer", cache_dir=tmp_path)
    clock = StepClock(0, 1000)  # every read advances 1 us
    call = FixedCall(3000)
    with CpuExecutor(CPU, threads=1) as ex:
        inner = ex.load(sliced.layers[0].model_bytes)
        sub = PacedSubModel(inner, call, clock, basis="wall")
        start = clock.now_ns
        sub.run()
    # t0 read at `start`, the run's end read 1 us later: elapsed 1 us < 3 us, so the run
    # must reach t0 + 3 us; the spin loop reads until it does (one read past, at most).
    assert start + 3000 <= clock.now_ns - 1000 <= start + 4000
    assert [k for k, _ in call.told] == ["begin", "end"] and call.told[0][1] == start
    assert call.told[1][1] >= start + 3000
    assert (sub.runs, sub.late_runs) == (1, 0)


def test_paced_run_says_when_the_host_was_slower(tmp_path: Path) -> None:
    sliced = slice_model(model("resnet50"), "layer", cache_dir=tmp_path)
    clock = StepClock(0, 1000)
    with CpuExecutor(CPU, threads=1) as ex:
        sub = PacedSubModel(ex.load(sliced.layers[0].model_bytes), FixedCall(500), clock,
                            basis="wall")
        start = clock.now_ns
        sub.run()
        sub.run()
    # The host's run (one clock step, 1 us) is longer than the 0.5 us model: it lasts
    # the host's time and counts as late, every time.
    assert (sub.runs, sub.late_runs) == (2, 2)
    assert sub.late_ns_max == 500
    assert clock.now_ns - start < 10_000


class LateWakeClock(StepClock):
    """1 us per read, but the read `late_after` reads after `arm()` is followed by a
    jump of `late_ns`: a host that wakes the pacing thread that much after its wait."""

    def __init__(self, late_ns: int) -> None:
        super().__init__(0, 1000)
        self.late_ns = late_ns
        self.countdown = -1

    def arm(self, after_reads: int) -> None:
        self.countdown = after_reads

    def __call__(self) -> int:
        self.countdown -= 1
        self._step = self.late_ns if self.countdown == 0 else 1000
        return super().__call__()


class WakesLate(FixedCall):
    """Every call lasts `ns`; its second clock read after begin (the wait's first) is late."""

    def __init__(self, ns: float, clock: LateWakeClock) -> None:
        super().__init__(ns)
        self.clock = clock

    def begin(self, t0_ns: int) -> float:
        self.clock.arm(2)
        return super().begin(t0_ns)


def test_a_late_wake_up_is_the_hosts_time_not_the_layers(tmp_path: Path) -> None:
    """A loaded host that wakes the pacing thread 250 us after a 3 us modelled run ends
    lengthens the marker window (the timestamps stay the host's) but not the layer's time:
    every layer's time is its modelled 3 us plus the runner's own clock reads."""
    sliced = slice_model(model("resnet50"), "layer", cache_dir=tmp_path)
    clock = LateWakeClock(250_000)
    with CpuExecutor(CPU, threads=1, clock=clock,
                     modelled=lambda data, name: WakesLate(3000, clock),
                     pacing_basis="wall") as ex:
        runner = LayerRunner(sliced, ex, clock=clock)
        t = runner.run(frames=2, warmup=0)
    # invoke: t0 read; elapsed read (1 us); the wait's first read (2 us: 1 us left, spin),
    # whose step is the late one; the next read is 250 us on: the run ends there.
    assert t.overrun_ns is not None and (t.overrun_ns == 249_000).all()
    assert ((t.end_ns - t.start_ns) == 1000 + 2000 + 250_000 + 1000).all()
    assert (t.time_ns == 1000 + 3000 + 1000).all()  # t2 -> t0, the modelled 3 us, -> t3


def test_factory_picks_back_ends_from_the_profile(tmp_path: Path) -> None:
    from profiler.sim import model as sim_model
    from profiler.sim import perf
    from profiler.sim.work import model_works
    from profiler.slicing.graph import ModelView
    from profiler.tflite.model_io import parse_model

    sim = load_board("sim")
    ex = make_executor(sim, "G")
    assert isinstance(ex, CpuExecutor) and ex.modelled is not None
    assert set(ex.cores) <= set(CORES) and ex.threads == 1
    # The sim G prices a sub-model by the per-layer model at the levels in effect: its
    # own and its host's (B), each set through its sim governor and restored after.
    layer = slice_model(model("resnet50"), "layer", cache_dir=tmp_path).layers[3]
    call = ex.modelled(layer.model_bytes, "layer 3")
    g, b = sim.processor("G"), sim.processor("B")
    works = perf.Works.of(model_works(ModelView.of(parse_model(layer.model_bytes))))
    govs = [make_governor(sim, g), make_governor(sim, b)]
    with RestoreGuard(govs):
        got = []
        for gk, bk in ((g.freqs_khz[1], b.freqs_khz[2]), (g.freqs_khz[-1], b.freqs_khz[0])):
            govs[0].set_khz(gk)
            govs[1].set_khz(bk)
            time.sleep(0.02)  # past the modelled transition delays (at most 4.5 ms)
            truth = perf.call_split(sim_model.constants(g).timing, works, gk / 1e6, bk / 1e6,
                                    g.freqs_khz[-1] / 1e6).total_ms * 1e6
            got.append(call.begin(0))
            call.end(0)
            assert got[-1] == pytest.approx(float(truth), rel=1e-12)
    assert got[0] > got[1]  # the slower G level dominates the faster host's
    rk = load_board("rk3399pro")
    assert isinstance(make_executor(rk, "G"), AcceleratorExecutor)
    assert isinstance(make_executor(rk, "N"), DelegateExecutor)
    assert isinstance(make_executor(rk, "B"), CpuExecutor)
    bare = Board("x", "", {"G": ProcessorSpec("G", "gpu", "no way to drive it", CORES,
                                               host="B")})
    with pytest.raises(BoardError, match="neither a LiteRT accelerator nor a delegate"):
        make_executor(bare, "G")


def test_host_board_gets_the_litert_gpu_when_asked() -> None:
    host = load_board("host")
    with_g = with_accelerators(host)
    g = with_g.processor("G")
    assert g.accelerator == "gpu" and g.host == "B" and g.cores == host.processor("B").cores
    assert "G" not in host.processors  # the original board is untouched


@pytest.mark.skipif(not webgpu_only(), reason="this LiteRT has a GPU accelerator besides WebGPU")
def test_layers_on_g_without_vulkan_is_one_line_naming_the_loader(tmp_path: Path) -> None:
    """The real CLI in a subprocess; the loader variable names a file that is not there."""
    repo = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(repo),
               **{VULKAN_LOADER_ENV: str(tmp_path / "libvulkan.so.1")})
    env.pop("COUPPROF_LITERT_LOG", None)
    out = subprocess.run(
        [sys.executable, "-m", "profiler", "layers", "--board", "host", "--processor", "G",
         "--frames", "2", "--warmup", "0", "--csv", str(tmp_path / "g.csv")],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("coupprof layers: error: processor G: no Vulkan loader")
    assert "libvulkan1" in lines[0] and "NPU" not in lines[0]
    assert not (tmp_path / "g.csv").exists()
