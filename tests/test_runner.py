"""The per-layer runner on real LiteRT sub-models: hand-over correctness, exact timing
maths with a step clock, hooks, and CPU affinity of LiteRT's worker threads."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pytest

from profiler.boards.model import ProcessorSpec
from profiler.clock import StepClock
from profiler.errors import ModelError
from profiler.executors.cpu import CpuExecutor
from profiler.measure.runner import LayerHooks, LayerRunner
from profiler.slicing.specs import Layer, TensorSpec
from profiler.zoo.emit import draw_constants, to_bytes, to_model
from profiler.zoo.graph import GraphBuilder

SHAPE = (1, 4, 4, 3)


def spec(index: int, name: str) -> TensorSpec:
    return TensorSpec(index, name, SHAPE, "float32", int(np.prod(SHAPE)) * 4)


def add_layer(index: int, a: TensorSpec, b: TensorSpec, out: TensorSpec) -> Layer:
    """A one-ADD sub-model out = a + b whose inputs are [a, b] (or [a] when a is b)."""
    g = GraphBuilder(f"layer{index}")
    ins = [a] if a.index == b.index else [a, b]
    ts = [g.input(s.name, s.shape, signature_name=s.name) for s in ins]
    y = g.add(ts[0], ts[-1], act="NONE", name=out.name)
    g.output(y, out.name)
    return Layer(index, [index], ["ADD"], int(np.prod(SHAPE)), 0, ins, [out],
                 to_bytes(to_model(g, draw_constants(g, 0))))


@dataclass
class Chain:
    """Stand-in for a sliced model: y0 = x+x, y1 = y0+y0, y2 = y1+x (skip from the model
    input), y3 = y2+y0 (skip over two layers). So y3 = 7x."""

    layers: list[Layer]
    model_inputs: list[TensorSpec]
    model_outputs: list[TensorSpec]


def chain() -> Chain:
    x, y0, y1, y2, y3 = (spec(i, n) for i, n in enumerate(("x", "y0", "y1", "y2", "y3")))
    layers = [add_layer(0, x, x, y0), add_layer(1, y0, y0, y1),
              add_layer(2, y1, x, y2), add_layer(3, y2, y0, y3)]
    return Chain(layers, [x], [y3])


def big_proc(cores: tuple[int, ...] | None = None) -> ProcessorSpec:
    cores = cores or tuple(sorted(os.sched_getaffinity(0)))
    return ProcessorSpec("B", "cpu", "test cores", cores)


def test_hand_over_reproduces_the_whole_chain() -> None:
    x = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)
    with CpuExecutor(big_proc(), threads=1) as ex:
        runner = LayerRunner(chain(), ex, inputs={0: x})
        runner.run(frames=2, warmup=1)
        out = runner.outputs()
    np.testing.assert_allclose(out[4], 7 * x, rtol=1e-6)


def test_random_inputs_are_seeded() -> None:
    with CpuExecutor(big_proc(), threads=1) as ex:
        a = LayerRunner(chain(), ex, seed=5).inputs[0]
        b = LayerRunner(chain(), ex, seed=5).inputs[0]
        c = LayerRunner(chain(), ex, seed=6).inputs[0]
    assert a.dtype == np.float32 and a.shape == SHAPE
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_step_clock_timestamps_are_exact() -> None:
    """Each layer reads the clock 4 times: transfer start/end, layer start/end. Give every
    gap its own known length and check every timestamp lands in (frame, layer, slot)."""
    n_layers, frames, warmup = 4, 3, 2
    rng = np.random.default_rng(0)
    gaps = rng.integers(1, 10_000, size=(warmup + frames, n_layers, 4))
    clock = StepClock(start_ns=10**15, step_ns=iter(gaps.reshape(-1).tolist()))
    with CpuExecutor(big_proc(), threads=1) as ex:
        timings = LayerRunner(chain(), ex, clock=clock).run(frames=frames, warmup=warmup)
    assert clock.reads == 4 * n_layers * (warmup + frames)
    assert timings.ts_ns.shape == (frames, n_layers, 4)
    recorded = gaps[warmup:]
    np.testing.assert_array_equal(timings.transfer_ns, recorded[:, :, 0])
    np.testing.assert_array_equal(timings.time_ns, recorded[:, :, 2])
    # Absolute stamps: the clock's start plus every gap before the read.
    stamps = 10**15 + np.concatenate([[0], np.cumsum(gaps.reshape(-1))])[:-1].reshape(gaps.shape)
    np.testing.assert_array_equal(timings.ts_ns, stamps[warmup:])


class Recorder(LayerHooks):
    def __init__(self, clock: StepClock | None = None) -> None:
        self.calls: list[tuple] = []
        self.clock = clock

    def before_frame(self, frame: int, warmup: bool) -> None:
        self.calls.append(("frame", frame, warmup))

    def before_layer(self, layer: int) -> None:
        self.calls.append(("before", layer))
        if self.clock:
            self.clock.advance(1_000_000 * (layer + 1))  # a slow marker/DVFS write

    def after_layer(self, layer: int) -> None:
        self.calls.append(("after", layer))


def test_hooks_order_and_their_time_is_outside_both_windows() -> None:
    clock = StepClock(step_ns=100)
    hooks = Recorder(clock)
    with CpuExecutor(big_proc(), threads=1) as ex:
        timings = LayerRunner(chain(), ex, clock=clock, hooks=hooks).run(frames=2, warmup=1)
    per_frame = [c for i in range(4) for c in (("before", i), ("after", i))]
    assert hooks.calls == ([("frame", 0, True), *per_frame, ("frame", 0, False), *per_frame,
                            ("frame", 1, False), *per_frame])
    assert (timings.time_ns == 100).all() and (timings.transfer_ns == 100).all()
    gap = timings.start_ns - timings.transfer_end_ns
    np.testing.assert_array_equal(gap, np.tile(100 + 1_000_000 * np.arange(1, 5), (2, 1)))


def test_real_clock_stamps_are_ordered() -> None:
    with CpuExecutor(big_proc(), threads=1) as ex:
        t = LayerRunner(chain(), ex).run(frames=5, warmup=0)
    flat = t.ts_ns.reshape(-1)
    assert (np.diff(flat) >= 0).all()
    assert (t.time_ns > 0).all()


def test_progress_counts_every_frame() -> None:
    seen: list[tuple[int, int]] = []
    with CpuExecutor(big_proc(), threads=1) as ex:
        LayerRunner(chain(), ex).run(frames=3, warmup=2, progress=lambda d, n: seen.append((d, n)))
    assert seen == [(i, 5) for i in range(1, 6)]


def test_unproduced_input_is_a_model_error() -> None:
    c = chain()
    c.layers = c.layers[2:]  # y1 and y0 are now produced by nobody
    with CpuExecutor(big_proc(), threads=1) as ex, pytest.raises(ModelError, match="produced by no"):
        LayerRunner(c, ex)


def _threads() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_worker_threads_inherit_the_processors_cores() -> None:
    """Affinity is set before the interpreters exist, so LiteRT's pool threads are pinned."""
    original = os.sched_getaffinity(0)
    core = max(original)
    before = _threads()
    ex = CpuExecutor(big_proc((core,)), threads=2)
    assert ex.threads == 2
    with ex:
        assert os.sched_getaffinity(0) == {core}
        runner = LayerRunner(chain(), ex)
        runner.run(frames=1, warmup=0)
        new = _threads() - before
        assert new, "LiteRT made no worker threads with num_threads=2"
        assert all(os.sched_getaffinity(tid) == {core} for tid in new)
    assert os.sched_getaffinity(0) == original


def test_threads_default_to_core_count_and_affinity_is_restored_on_error() -> None:
    original = os.sched_getaffinity(0)
    ex = CpuExecutor(big_proc())
    assert ex.threads == len(original)
    with pytest.raises(ZeroDivisionError), ex:
        1 / 0  # noqa: B018
    assert os.sched_getaffinity(0) == original


def test_interpreter_refused_before_pinning() -> None:
    with pytest.raises(RuntimeError, match="before open"):
        CpuExecutor(big_proc()).interpreter(chain().layers[0].model_bytes)


def test_cores_this_process_cannot_use_are_a_hardware_error() -> None:
    from profiler.errors import HardwareError

    original = os.sched_getaffinity(0)
    with pytest.raises(HardwareError, match="cannot pin processor B to cores 1000"):
        CpuExecutor(big_proc((1000,))).open()
    assert os.sched_getaffinity(0) == original


def test_garbage_collector_paused_only_while_measuring() -> None:
    import gc

    class GcProbe(LayerHooks):
        def __init__(self) -> None:
            self.seen: list[tuple[bool, bool]] = []
            self.warm = False

        def before_frame(self, frame: int, warmup: bool) -> None:
            self.warm = warmup

        def before_layer(self, layer: int) -> None:
            self.seen.append((self.warm, gc.isenabled()))

    probe = GcProbe()
    assert gc.isenabled()
    with CpuExecutor(big_proc(), threads=1) as ex:
        LayerRunner(chain(), ex, hooks=probe).run(frames=1, warmup=1)
    assert probe.seen == [(True, True)] * 4 + [(False, False)] * 4
    assert gc.isenabled()


def test_spec_count_mismatch_is_a_model_error() -> None:
    c = chain()
    layer = c.layers[2]  # two inputs (y1, x); claim a third
    c.layers[2] = Layer(layer.index, layer.op_indices, layer.op_types, layer.macs, 0,
                        [*layer.inputs, spec(9, "ghost")], layer.outputs, layer.model_bytes)
    with CpuExecutor(big_proc(), threads=1) as ex, pytest.raises(ModelError, match="has 2 inputs"):
        LayerRunner(c, ex)
