"""Pipeline stages whose executor holds the GIL run in their own process
(profiler/mapping/stage_process.py): with LiteRT's CompiledModel (its CPU accelerator stands in
for a GPU here; its run keeps the GIL the same way), every frame still passes every
stage once, in order, with the whole model's outputs, and the timestamps taken in the
child join the parent's clock."""

from __future__ import annotations

import multiprocessing as mp
import threading
from dataclasses import replace
from multiprocessing.shared_memory import SharedMemory

import numpy as np
import pytest

from profiler import zoo
from profiler.clock import StepClock
from profiler.errors import ProfilerError
from profiler.executors.accelerator import AcceleratorExecutor
from profiler.executors.cpu import CpuExecutor
from profiler.executors.factory import make_executor
from profiler.mapping.pipeline import MappingRunConfig, run_mapping
from profiler.mapping.spec import parse_order
from profiler.mapping.stage_process import (
    FrameDone,
    StageProcess,
    StageSpec,
    _place,
    _serve,
)
from profiler.runtime import make_interpreter
from profiler.slicing.slicer import slice_model
from tests.test_pipeline import (
    assert_timestamps_follow_the_data,
    assert_whole_model_outputs,
    frame_inputs,
    order_cutting_skips,
)
from tests.three_processors import board3


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    data = zoo.build("resnet50", size=32, classes=10)
    return data, slice_model(data, "op", cache_dir=tmp_path_factory.mktemp("slices"))


def cpu_accelerated_g():
    """board3 with G's profile naming LiteRT's CPU accelerator, so the default factory
    (the one a child process uses) builds it as an AcceleratorExecutor."""
    b = board3()
    procs = dict(b.processors)
    procs["G"] = replace(procs["G"], accelerator="cpu")
    return replace(b, processors=procs)


def test_only_the_accelerator_says_it_holds_the_gil() -> None:
    assert AcceleratorExecutor.holds_gil and not CpuExecutor.holds_gil


@pytest.mark.parametrize("method", ["fused", "sliced"])
def test_g_stages_run_apart_with_every_frame_and_its_outputs(resnet, method: str) -> None:
    data, sliced = resnet
    board = cpu_accelerated_g()
    n = len(sliced.layers)
    mapping = parse_order(order_cutting_skips(n), n, board)
    feed = frame_inputs(sliced)
    frames, warmup = 6, 2
    run = run_mapping(sliced, board, MappingRunConfig(
        mapping, "pipeline", frames=frames, warmup=warmup, queue_depth=1, inputs=feed,
        keep_outputs=True, method=method, model_bytes=data))
    # The two G stages (1 and 3) ran in a process each; the CPU stages on threads.
    apart = sorted(k for k, d in run.executors.items() if "process" in d)
    assert apart == [st.index for st in mapping.stages if st.processor == "G"] == [1, 3]
    assert run.seen == [list(range(frames + warmup))] * len(mapping.stages)
    assert sorted(run.outputs) == list(range(warmup, warmup + frames))
    assert_whole_model_outputs(data, feed, run.outputs)
    g_calls = sum(c.processor == "G" for c in run.calls)
    assert run.fallback.count(False) == g_calls  # as the child's CompiledModels said
    # The child's timestamps are on the parent's clock: every call starts its hand-over
    # after the call before it ended, across processes too.
    assert_timestamps_follow_the_data(run)
    assert (run.stage_cpu_ns[:, apart] > 0).all()
    # Each process stage's hand-over (shared memory, a pipe, two wake-ups) costs something
    # and is part of the stage's time (its thread holds the frame from taking it to having
    # the results back); the warm-up's is the one frame after the first.
    assert sorted(run.process_handover_ms) == sorted(run.process_handover_warmup_ms) == apart
    for k in apart:
        busy_ms = float(run.stage_busy_ns[:, k].mean()) / 1e6
        assert 0 < run.process_handover_ms[k] < busy_ms, (k, run.process_handover_ms, busy_ms)
        assert run.process_handover_warmup_ms[k] > 0


def test_switch_mode_and_never_keep_every_stage_on_a_thread(resnet) -> None:
    data, sliced = resnet
    board = cpu_accelerated_g()
    n = len(sliced.layers)
    mapping = parse_order(order_cutting_skips(n), n, board)
    for mode, apart in (("switch", "auto"), ("pipeline", "never")):
        run = run_mapping(sliced, board, MappingRunConfig(
            mapping, mode, frames=2, warmup=0, method="fused", model_bytes=data,
            apart=apart))
        assert not any("process" in d for d in run.executors.values()), (mode, apart)


def test_a_stage_that_fails_in_its_process_says_why() -> None:
    spec = StageSpec(cpu_accelerated_g(), "G", None, [(b"not a model", "layer 0 of junk")],
                     [[("msg", 0)]], [], {})
    proc = StageProcess(spec)
    try:
        with pytest.raises(ProfilerError, match="layer 0 of junk|G"):
            proc.start()
    finally:
        proc.stop()


class _SendTakesTime:
    """One end of a pipe whose every send is followed by `ns` of the child's time
    passing before it reads the clock again: a busy host that deschedules the child
    right after it hands its results over."""

    def __init__(self, conn, clock: StepClock, ns: int) -> None:
        self._conn, self._clock, self._ns = conn, clock, ns

    def recv(self):
        return self._conn.recv()

    def send(self, msg) -> None:
        self._conn.send(msg)
        self._clock.advance(self._ns)


def test_a_stage_is_free_once_its_results_are_placed_not_after_the_send() -> None:
    """The next frame's stage time starts when it was ready, if the stage had placed the
    last frame's results by then, however late the child's next clock read comes (on a
    busy host, after the parent already took the next frame): else its stage time would
    begin after its own hand-over did."""
    data = zoo.build("mobilenet_v1", alpha=0.25, size=32, classes=10)
    interp = make_interpreter(data, num_threads=1)
    (din,), (dout,) = interp.get_input_details(), interp.get_output_details()
    spec = StageSpec(board3(), "B", 1, [(data, "whole")], [[("msg", din["index"])]],
                     [dout["index"]], {dout["index"]: (0, 0)})
    ex = make_executor(spec.board, "B", threads=1)
    ex.open()
    blocks: dict[str, SharedMemory] = {}
    parent, child = mp.Pipe()
    clock = StepClock(start_ns=1_000_000, step_ns=1_000)
    late_ns = 10_000_000
    server = threading.Thread(target=_serve, args=(
        _SendTakesTime(child, clock, late_ns), spec, [ex.load(data, "whole")], blocks,
        clock))
    server.start()
    try:
        x = np.zeros(din["shape"], dtype=din["dtype"])
        layout, _ = _place({din["index"]: x}, {}, blocks)
        parent.send((0, -1, layout))
        assert parent.poll(60), "the stage stopped serving"
        first = parent.recv()
        assert isinstance(first, FrameDone)
        placed_ns = first.busy[2]
        # the parent takes the next frame 5 µs after the results were placed, long
        # before the (descheduled) child reads its clock again
        ready_ns = placed_ns + 5_000
        parent.send((1, ready_ns, None))
        assert parent.poll(60), "the stage stopped serving"
        second = parent.recv()
        assert isinstance(second, FrameDone)
        assert second.got_ns >= placed_ns + late_ns  # the child really woke late
        assert second.busy[0] == second.rows[0][0] == ready_ns
    finally:
        parent.send(None)
        server.join(timeout=30)
        ex.close()
        for shm in blocks.values():
            shm.close()
            shm.unlink()
