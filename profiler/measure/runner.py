"""The per-layer runner: invoke each layer's sub-model in order, frame after frame.

Per frame and layer it reads the clock four times:

    transfer_start  copy the layer's inputs in (producer outputs, or the frame's
    transfer_end    input for model inputs)
                    hooks.before_layer(i)      <- markers / per-layer DVFS go here
    layer_start     sub-model invoke
    layer_end
                    hooks.after_layer(i)

so hook costs fall outside both the transfer and the layer window. Every raw
timestamp is kept (`LayerTimings`). The hand-over copies once, through numpy
views of the two interpreters' tensor buffers; views are dropped before the
next invoke, as LiteRT requires.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import numpy.typing as npt

from profiler.clock import Clock, perf_clock
from profiler.errors import ModelError
from profiler.executors.base import overrun_ns
from profiler.markers.hooks import LayerHooks
from profiler.measure.results import LayerTimings

if TYPE_CHECKING:  # a type only: importing profiler.executors loads LiteRT's runtimes
    from ai_edge_litert.interpreter import Interpreter

    from profiler.executors.base import Executor, SubModelInterpreter
    from profiler.slicing.specs import SlicedModel

    LayerInterpreter: TypeAlias = Interpreter | SubModelInterpreter


def _overridden(hooks: LayerHooks | None, name: str) -> Callable[..., None] | None:
    if hooks is None or getattr(type(hooks), name) is getattr(LayerHooks, name):
        return None
    return getattr(hooks, name)


def random_input(shape: Sequence[int], dtype: npt.DTypeLike, rng: np.random.Generator
                 ) -> np.ndarray:
    """A reproducible input: uniform [-1, 1) floats, full-range integers, False booleans."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.uniform(-1.0, 1.0, size=tuple(shape)).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = max(int(info.min), -128), min(int(info.max), 255)
        return rng.integers(lo, hi, size=tuple(shape), endpoint=True).astype(dt)
    return np.zeros(tuple(shape), dtype=dt)


class LayerRunner:
    """Builds one interpreter per layer through `executor.interpreter` and runs frames.

    `sliced` is a `profiler.slicing.SlicedModel` (anything with `.layers`, each
    having `.index`, `.model_bytes`, `.inputs`/`.outputs` lists of tensor specs with
    `.index` in the original model, in the sub-model's input/output order; and
    `.model_inputs`/`.model_outputs`). The executor must already be open (affinity set).
    """

    def __init__(
        self,
        sliced: SlicedModel,
        executor: Executor,
        *,
        clock: Clock = perf_clock,
        hooks: LayerHooks | None = None,
        inputs: dict[int, np.ndarray] | None = None,
        seed: int = 0,
        model_name: str = "model",
    ) -> None:
        self.sliced = sliced
        self.clock = clock
        self.hooks = hooks
        self.layers = list(sliced.layers)
        self.interpreters = [
            executor.interpreter(layer.model_bytes, name=f"layer {layer.index} of {model_name}")
            for layer in self.layers
        ]
        self._check_arity()
        self.inputs = self._make_inputs(inputs, seed)
        self._producer: dict[int, tuple[int, int]] = {}  # model tensor -> (layer pos, sub-model tensor)
        self._steps = [self._plan(pos) for pos in range(len(self.layers))]

    # -- set-up -------------------------------------------------------------------

    def _check_arity(self) -> None:
        for layer, interp in zip(self.layers, self.interpreters, strict=True):
            for what, specs, details in (("inputs", layer.inputs, interp.get_input_details()),
                                         ("outputs", layer.outputs, interp.get_output_details())):
                if len(details) != len(specs):
                    raise ModelError(f"layer {layer.index}: sub-model has {len(details)} {what}, "
                                     f"the slicer listed {len(specs)}", "re-slice the model")

    def _make_inputs(self, given: dict[int, np.ndarray] | None, seed: int) -> dict[int, np.ndarray]:
        """One array per model input tensor, shaped and typed as its first consumer wants."""
        rng = np.random.default_rng(seed)
        wanted = {int(t.index) for t in self.sliced.model_inputs}
        out: dict[int, np.ndarray] = {}
        for layer, interp in zip(self.layers, self.interpreters, strict=True):
            for spec, det in zip(layer.inputs, interp.get_input_details(), strict=True):
                idx = int(spec.index)
                if idx in wanted and idx not in out:
                    if given is not None and idx in given:
                        out[idx] = np.ascontiguousarray(given[idx], dtype=det["dtype"]).reshape(det["shape"])
                    else:
                        out[idx] = random_input(det["shape"], det["dtype"], rng)
        return out

    def _plan(self, pos: int) -> tuple[Callable[[], None], list[Callable[[], None]]]:
        """(invoke, feeds) for layer `pos`; records its outputs as producers for later layers."""
        layer, interp = self.layers[pos], self.interpreters[pos]
        in_details = interp.get_input_details()
        feeds: list[Callable[[], None]] = []
        for spec, det in zip(layer.inputs, in_details, strict=True):
            idx, dst = int(spec.index), int(det["index"])
            if idx in self._producer:
                src_pos, src = self._producer[idx]
                feeds.append(_hand_over(self.interpreters[src_pos], src, interp, dst))
            elif idx in self.inputs:
                feeds.append(_set_input(interp, dst, self.inputs[idx]))
            else:
                raise ModelError(f"layer {layer.index}: input tensor {idx} ({spec.name}) "
                                 "is produced by no earlier layer", "re-slice the model")
        for spec, det in zip(layer.outputs, interp.get_output_details(), strict=True):
            self._producer[int(spec.index)] = (pos, int(det["index"]))
        return interp.invoke, feeds

    # -- running ------------------------------------------------------------------

    def run_frame(self, frame: int = 0, warmup: bool = False,
                  overruns: list[int] | None = None) -> list[tuple[int, int, int, int]]:
        """Run every layer once; returns (transfer_start, transfer_end, start, end) per
        layer. ``overruns`` gains each invoke's overrun of a modelled end (`overrun_ns`)."""
        clock = self.clock
        before_frame = _overridden(self.hooks, "before_frame")
        after_frame = _overridden(self.hooks, "after_frame")
        before = _overridden(self.hooks, "before_layer")
        after = _overridden(self.hooks, "after_layer")
        row: list[tuple[int, int, int, int]] = []
        append = row.append
        if before_frame:
            before_frame(frame, warmup)
        for i, (invoke, feeds) in enumerate(self._steps):
            t0 = clock()
            for feed in feeds:
                feed()
            t1 = clock()
            if before:
                before(i)
            o2 = overrun_ns()
            t2 = clock()
            invoke()
            t3 = clock()
            if overruns is not None:
                overruns.append(overrun_ns() - o2)
            if after:
                after(i)
            append((t0, t1, t2, t3))
        if after_frame:
            after_frame(frame, warmup)
        return row

    def run(
        self,
        frames: int = 60,
        warmup: int = 5,
        progress: Callable[[int, int], None] | None = None,
    ) -> LayerTimings:
        """`warmup` unrecorded frames, then `frames` recorded ones."""
        if frames < 1 or warmup < 0:
            raise ValueError(f"need frames >= 1 and warmup >= 0, got {frames}, {warmup}")
        total = warmup + frames
        for f in range(warmup):
            self.run_frame(f, warmup=True)
            if progress:
                progress(f + 1, total)
        ts = np.empty((frames, len(self._steps), 4), dtype=np.int64)
        over = np.zeros((frames, len(self._steps)), dtype=np.int64)
        # As timeit does: no garbage-collector pauses inside a timed window. Only the
        # young generations are collected first (what the warmup left): a full collection
        # holds the GIL for as long as the whole heap takes to scan, and a power capture's
        # reader thread, streaming by now, is starved meanwhile (docs/power.md).
        gc_was_enabled = gc.isenabled()
        gc.collect(1)
        gc.disable()
        try:
            for f in range(frames):
                frame_over: list[int] = []
                ts[f] = self.run_frame(f, overruns=frame_over)
                over[f] = frame_over
                if progress:
                    progress(warmup + f + 1, total)
        finally:
            if gc_was_enabled:
                gc.enable()
        return LayerTimings(ts, over)

    def layer_call(self, pos: int) -> Callable[[], None]:
        """Layer `pos`'s invoke alone (its inputs stay as the last frame left them), for
        sources that repeat a layer until their energy counter resolves it."""
        return self._steps[pos][0]

    def outputs(self) -> dict[int, np.ndarray]:
        """The model outputs of the last frame, keyed by tensor index in the original model."""
        out: dict[int, np.ndarray] = {}
        for spec in self.sliced.model_outputs:
            idx = int(spec.index)
            if idx in self._producer:
                pos, src = self._producer[idx]
                out[idx] = self.interpreters[pos].get_tensor(src)
            elif idx in self.inputs:
                out[idx] = self.inputs[idx].copy()
        return out


def _hand_over(src_interp: LayerInterpreter, src: int, dst_interp: LayerInterpreter, dst: int
               ) -> Callable[[], None]:
    """One copy from a producer's output buffer into a consumer's input buffer: a fresh
    view of the producer's buffer, written by set_tensor (which checks type and shape).
    On an accelerator sub-model that write is the upload, which belongs to the
    hand-over, not to the layer's invoke. On the 2-core VM it costs 2.4 us against 3.8
    us for np.copyto between two fresh views (`benchmarks/slicing_overhead.py`)."""
    out_view, put = src_interp.tensor(src), dst_interp.set_tensor

    def feed() -> None:
        put(dst, out_view())

    return feed


def _set_input(interp: LayerInterpreter, dst: int, value: np.ndarray) -> Callable[[], None]:
    set_tensor = interp.set_tensor

    def feed() -> None:
        set_tensor(dst, value)

    return feed
