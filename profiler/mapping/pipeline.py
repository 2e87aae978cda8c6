"""Run a mapping of layers to processors, as ARM-CO-UP does, in Switch or Pipeline mode.

Each stage gets its own thread, pinned to its processor's host cores, which creates the
stage's sub-models and loops over frames taken from a bounded input queue: hand the inputs
over, apply per-layer DVFS, run the stage's calls (fused or sliced), put the outputs on its
output queue. Pipeline mode feeds frames as fast as the first queue takes them; Switch mode
keeps one frame in flight. A stage whose executor holds the GIL runs apart, in a process of
its own (`profiler.mapping.stage_process`). With a power source the run also gets its
energy per frame. `run_mapping(MappingRunConfig)` returns a `MappedRun`.

The design (timestamps, energy per frame, the stage loop): docs/mapping.md.
"""

from __future__ import annotations

import contextlib
import gc
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from time import thread_time_ns
from typing import TYPE_CHECKING, Any

import numpy as np

from profiler.boards.model import Board
from profiler.clock import Clock, perf_clock
from profiler.errors import BadInputError, ProfilerError
from profiler.executors.base import Executor, MakeExecutor, SubModel
from profiler.executors.factory import make_executor
from profiler.mapping.queueing import QUEUE_DEPTH
from profiler.mapping.spec import (
    Call,
    FreqPlan,
    Mapping,
    Stage,
    boundary_tensors,
    calls,
    pipeline_conflicts,
)
from profiler.mapping.stage_process import StageProcess, StageReady, StageSpec
from profiler.mapping.transfer import Activity, NoActivity, model_inputs
from profiler.measure.method import METHODS, Method
from profiler.measure.results import LAYER_END, LAYER_START, TRANSFER_END, TRANSFER_START
from profiler.power.session import PowerSession, StreamCapture

if TYPE_CHECKING:
    from profiler.slicing.spans import Span
    from profiler.slicing.specs import Layer, SlicedModel

MODES = ("switch", "pipeline")
APART = ("auto", "always", "never")  # MappingRunConfig.apart
Progress = Callable[[int, int], None]
FrameInputs = Callable[[int], dict[int, np.ndarray]]  # frame -> {model input tensor: array}
FrameSink = Callable[[int, dict[int, np.ndarray], int], None]  # frame, tensors, done_ns
_STOP = None


@dataclass
class _Msg:
    frame: int
    tensors: dict[int, np.ndarray]
    ready_ns: int  # when the producing stage finished its last layer; -1 from the source
    sent_ns: int = 0  # when it had read its tensors out and was about to put the message


@dataclass
class MappedRun:
    """What a Switch or Pipeline run measured (warm-up frames excluded)."""

    mode: str
    mapping: Mapping
    ts_ns: np.ndarray  # (frames, calls, 4), as profiler.measure.results.LayerTimings per call
    stage_busy_ns: np.ndarray  # (frames, stages): first hand-over start .. read-out done
    stage_readout_ns: np.ndarray  # (frames, stages): copying tensors out for later stages
    done_ns: np.ndarray  # (frames,): the last stage finished the frame
    fallback: list[bool | None]  # per call
    executors: dict[int, dict[str, Any]]  # per stage: executor description
    # per stage: frame ids in the order it processed them (all frames; with a counter
    # source, the last warm-up frame again while its window's start is awaited)
    seen: list[list[int]]
    max_in_flight: int
    queue_depth: int
    energy_mj: float | None = None  # per frame, when a power source measured the run
    # stage -> a stage in its own process: the mean time (measured frames) its thread
    # spends handing a frame to the process (until the process has it) and taking the
    # results back (from the process's read-out end); part of the stage's busy time
    process_handover_ms: dict[int, float] = field(default_factory=dict)
    # the same over the warm-up frames after the first (their median), for the prediction
    process_handover_warmup_ms: dict[int, float] = field(default_factory=dict)
    stage_cpu_ns: np.ndarray | None = None  # (frames, stages): stage threads' host CPU time
    outputs: dict[int, dict[int, np.ndarray]] = field(default_factory=dict)  # frame -> outputs
    # Streaming sources only:
    frame_energy_mj: np.ndarray | None = None  # (frames - 1,): between completions
    stage_energy_mj: np.ndarray | None = None  # (stages,): switch mode, per frame
    energy_window_ns: tuple[int, int] | None = None  # the span energy_mj comes from
    power_info: dict[str, Any] = field(default_factory=dict)  # baseline, samples, clock fit
    power_error: ProfilerError | None = None  # the capture failed; timings are kept
    method: Method = Method.SLICED  # how layers were executed (sliced: one call each)
    calls: list[Call] = field(default_factory=list)  # what ran; default: one per layer

    def __post_init__(self) -> None:
        if not self.calls:
            self.calls = calls(self.mapping, method=Method.SLICED)

    def stage_first_call(self, stage: int) -> int:
        """Index of the first call of `stage` (its column in ts_ns)."""
        return next(c.index for c in self.calls if c.stage == stage)

    @property
    def frames(self) -> int:
        return int(self.ts_ns.shape[0])

    @property
    def latency_ns(self) -> np.ndarray:
        """End-to-end per frame: first hand-over into stage 0 .. the last stage done."""
        return self.done_ns - self.ts_ns[:, 0, TRANSFER_START]

    @property
    def throughput_fps(self) -> float:
        """Frames completed per second (steady state: between the first and last completion)."""
        if self.frames >= 2 and self.done_ns[-1] > self.done_ns[0]:
            return (self.frames - 1) * 1e9 / float(self.done_ns[-1] - self.done_ns[0])
        return 1e9 / float(self.latency_ns.mean())

    @property
    def host_cores_used(self) -> float:
        """Host cores the stage threads kept busy over the measured frames (their CPU
        time / the span): on the simulated board, what the simulation needs free."""
        span = float(self.done_ns[-1] - self.ts_ns[0, 0, TRANSFER_START])
        if self.stage_cpu_ns is None or span <= 0:
            return float("nan")
        return float(self.stage_cpu_ns.sum()) / span

    @property
    def call_time_ns(self) -> np.ndarray:
        """(frames, calls): each call's run (a layer's, when sliced)."""
        return self.ts_ns[:, :, LAYER_END] - self.ts_ns[:, :, LAYER_START]

    @property
    def transfer_ns(self) -> np.ndarray:
        """(frames, calls): the hand-over of each call's inputs."""
        return self.ts_ns[:, :, TRANSFER_END] - self.ts_ns[:, :, TRANSFER_START]


@dataclass(frozen=True)
class MappingRunConfig:
    """One Switch or Pipeline run: what runs, for how many frames, and what it talks to."""

    mapping: Mapping  # the --order: layers -> processors, grouped into stages
    mode: str  # one of MODES
    frames: int = 30  # measured frames
    warmup: int = 3  # frames run before them, not measured
    freq: FreqPlan | None = None  # the --freq SPEC
    # DVFS domain letter -> governor, for per-layer SPECs (requests only; per-processor
    # levels are the caller's to set before, with read-back).
    governors: dict[str, Any] = field(default_factory=dict)
    queue_depth: int = QUEUE_DEPTH  # frames each queue between stages holds
    seed: int = 0  # of the default random input
    inputs: FrameInputs | None = None  # frame -> {model input tensor: array}; default: seeded
    keep_outputs: bool = False  # keep every measured frame's model outputs (tests compare)
    model_name: str = "model"  # for the executors' messages
    # How layers run (docs/mapping.md): "fused" needs the model's bytes to cut spans from.
    method: Method = Method.FUSED
    model_bytes: bytes | None = None
    # What the run talks to:
    make: MakeExecutor | None = None  # default: profiler.executors.factory.make_executor
    power: PowerSession | None = None  # energy per frame, when given
    # A counter source's window: the measured frames repeated until it holds enough counter
    # updates (True), or the measured frames once (False: a part of a model on one of
    # several devices, whose neighbours run exactly those frames).
    counter_repeats: bool = True
    activity: Activity | None = None  # told when each stage's processor works (sim power)
    clock: Clock = perf_clock
    progress: Progress | None = None  # (frames done, total), warm-up included
    # Each finished frame (warm-up included), in the driver's thread: its id, the tensors
    # its last stage forwards and when it was done. A part of a model on one of several
    # devices hands its boundary tensors on from here (`profiler.devices.rank`); its
    # frames come from `inputs`.
    sink: FrameSink | None = None
    # Stages in a process of their own (`profiler.mapping.stage_process`): "auto" for a Pipeline
    # stage whose executor holds the GIL while it runs; "always" (tests); "never".
    apart: str = "auto"

    @property
    def measured(self) -> range:
        """Frame ids of the measured frames (warm-up frames come first)."""
        return range(self.warmup, self.warmup + self.frames)

    def check(self, n_layers: int) -> None:
        """Refuse what cannot run: a bad mode or count, a mapping of another length, or
        pipeline stages that ask one shared DVFS domain for different levels."""
        if self.mode not in MODES:
            raise BadInputError(f"--mode {self.mode!r} is not one of {', '.join(MODES)}",
                                "use --mode switch or --mode pipeline")
        if self.method not in METHODS:
            raise BadInputError(f"--method {self.method!r} is not one of "
                                f"{', '.join(METHODS)}", "use --method fused or sliced")
        if self.method == Method.FUSED and self.model_bytes is None:
            raise ValueError("fused execution cuts stages from the model: give model_bytes")
        if self.apart not in APART:
            raise ValueError(f"apart must be one of {', '.join(APART)}, not {self.apart!r}")
        if self.frames < 1 or self.warmup < 0 or self.queue_depth < 1:
            raise BadInputError(f"need frames >= 1, warmup >= 0, queue depth >= 1 "
                                f"(got {self.frames}, {self.warmup}, {self.queue_depth})")
        if n_layers != self.mapping.n_layers:
            raise BadInputError(f"the mapping has {self.mapping.n_layers} layers, the model "
                                f"{n_layers}")
        if self.mode == "pipeline" and self.freq is not None:
            clash = pipeline_conflicts(self.freq, self.mapping)
            if clash:
                raise BadInputError(f"--freq {self.freq.text}: {clash}",
                                    "give those stages the same level, or use --mode switch")


@dataclass
class _StagePlan:
    stage: Stage
    calls: list[Call]
    units: Sequence[Layer | Span]  # per call: what it loads (a layer, or a span of layers)
    # per call position in the stage, per input slot: ("msg", tensor) or ("local", pos, slot)
    feeds: list[list[tuple[Any, ...]]]
    forwards: list[int]  # tensors to send on (needed later, or model outputs)
    local_out: dict[int, tuple[int, int]]  # tensor -> (stage-local call pos, slot)
    requests: list[int | None]  # per call: the kHz its per-layer SPEC asks for, if any


def _units(sliced: SlicedModel, config: MappingRunConfig, run_calls: list[Call]
           ) -> Sequence[Layer | Span]:
    """What each call loads: the sliced layer itself, or its layers cut as one span."""
    if config.method == Method.SLICED:
        return [sliced.layers[c.first] for c in run_calls]
    from profiler.slicing.spans import span_models

    assert config.model_bytes is not None
    return span_models(config.model_bytes, sliced, [(c.first, c.last) for c in run_calls])


def _plans(sliced: SlicedModel, mapping: Mapping, run_calls: list[Call],
           units: Sequence[Layer | Span],
           freq: FreqPlan | None) -> list[_StagePlan]:
    layers = list(sliced.layers)
    crossing = boundary_tensors(sliced)
    outputs = [int(t.index) for t in sliced.model_outputs]
    produced_at = {int(t.index): -1 for t in sliced.model_inputs}
    for pos, layer in enumerate(layers):
        for t in layer.outputs:
            produced_at[int(t.index)] = pos
    per_layer = freq is not None and freq.mode == "per-layer"
    plans = []
    for st in mapping.stages:
        mine = [c for c in run_calls if c.stage == st.index]
        local_out: dict[int, tuple[int, int]] = {}
        feeds: list[list[tuple[Any, ...]]] = []
        for k, c in enumerate(mine):
            row: list[tuple[Any, ...]] = []
            for t in units[c.index].inputs:
                idx = int(t.index)
                row.append(("local", *local_out[idx]) if idx in local_out else ("msg", idx))
            feeds.append(row)
            for slot, t in enumerate(units[c.index].outputs):
                local_out[int(t.index)] = (k, slot)
        fwd = [int(t.index) for t in crossing[st.last]] if st.last < len(layers) - 1 else []
        fwd += [t for t in outputs if produced_at.get(t, -1) <= st.last and t not in fwd]
        requests: list[int | None] = []
        for c in mine:  # a call's layers ask for one level (calls are cut where it changes)
            asked = [freq.khz[p] for p in c.layers if freq.khz[p] is not None] \
                if per_layer and freq is not None else []
            requests.append(asked[0] if asked else None)
        plans.append(_StagePlan(st, mine, [units[c.index] for c in mine], feeds, fwd,
                                local_out, requests))
    return plans


_Put = Callable[[int, np.ndarray], None]


def _local_feed(put: _Put, slot: int, get: Callable[[int], np.ndarray], o: int
                ) -> Callable[[], None]:
    return lambda: put(slot, get(o))


def _remote_feed(put: _Put, slot: int, idx: int) -> Callable[[Any], None]:
    return lambda t: put(slot, t[idx])


def _call_name(c: Call, model: str) -> str:
    what = f"layer {c.first}" if len(c.layers) == 1 else f"layers {c.first}..{c.last}"
    return f"{what} of {model}"


class _StageThread(threading.Thread):
    """One stage: creates its sub-models, then runs every frame it takes (docs/mapping.md)."""

    def __init__(self, plan: _StagePlan, make: Callable[[], Executor], q_in: queue.Queue[Any],
                 q_out: queue.Queue[Any], config: MappingRunConfig) -> None:
        super().__init__(name=f"coupprof-stage{plan.stage.index}-{plan.stage.processor}",
                         daemon=True)
        self.plan, self.make, self.q_in, self.q_out = plan, make, q_in, q_out
        self.ts: dict[int, np.ndarray] = {}  # frame -> (calls, 4) timestamps
        self.busy: dict[int, tuple[int, int, int]] = {}  # frame -> start, read-out start, end
        self.cpu: dict[int, int] = {}  # frame -> this thread's CPU time on it (ns)
        # frame -> a stage in its own process: handing the frame to it and back (ns)
        self.handover: dict[int, int] = {}
        self.freq, self.governors, self.clock = config.freq, config.governors, config.clock
        self.model_name = config.model_name
        self.activity = config.activity or NoActivity()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.subs: list[SubModel] = []
        self.executor: Executor | None = None
        self.seen: list[int] = []

    def run(self) -> None:
        try:
            ex = self.make()
            ex.open()
        except BaseException as err:
            self.error = err
            self.ready.set()
            return
        self.executor = ex
        try:
            for c, unit in zip(self.plan.calls, self.plan.units, strict=True):
                self.subs.append(ex.load(unit.model_bytes, _call_name(c, self.model_name)))
        except BaseException as err:
            self.error = err
            self.ready.set()
            ex.close()
            return
        self._serve(self._loop, ex.close)

    def _serve(self, loop: Callable[[], None], close: Callable[[], None]) -> None:
        """Say ready, then run `loop` until the stop message; on an error, pass the stop
        on and take the upstream stages' frames until theirs (so none blocks on a put),
        leaving the error for the driver to raise; `close` in the end."""
        self.ready.set()
        try:
            loop()
        except BaseException as err:  # reported by the driver; unblock everyone
            self.error = err
            self.q_out.put(_STOP)
            while self.q_in.get() is not _STOP:  # let upstream stages finish their puts
                pass
        finally:
            close()

    def fallbacks(self) -> list[bool | None]:
        """Per call: whether the runtime added the CPU to run it (None: not known)."""
        return [s.fallback for s in self.subs]

    def described(self) -> dict[str, Any] | None:
        return self.executor.describe() if self.executor is not None else None

    def _requests(self) -> list[Callable[[], None] | None]:
        out: list[Callable[[], None] | None] = []
        for c, f in zip(self.plan.calls, self.plan.requests, strict=True):
            gov = self.governors.get(self.freq.domain[c.first]) if f is not None and self.freq \
                else None
            out.append(partial(gov.request_khz, f) if gov is not None else None)
        return out

    def _feeders(self) -> list[tuple[list[Callable[[], None]], list[Callable[[Any], None]]]]:
        """Per call: hand-overs from this stage's own calls (bound once), and writes
        of tensors that arrive in the message."""
        out = []
        for k, sub in enumerate(self.subs):
            local: list[Callable[[], None]] = []
            remote: list[Callable[[Any], None]] = []
            for slot, src in enumerate(self.plan.feeds[k]):
                put = sub.set_input
                if src[0] == "local":
                    local.append(_local_feed(put, slot, self.subs[src[1]].output, src[2]))
                else:
                    remote.append(_remote_feed(put, slot, src[1]))
            out.append((local, remote))
        return out

    def _loop(self) -> None:
        clock, subs, plan = self.clock, self.subs, self.plan
        requests = self._requests()
        feeders = self._feeders()
        runs = [sub.run for sub in subs]
        letter, key = plan.stage.processor, plan.stage.index
        busy, idle = self.activity.busy, self.activity.idle
        free_ns = clock()
        while True:
            msg = self.q_in.get()
            if msg is _STOP:
                self.q_out.put(_STOP)
                return
            busy(letter, key)
            cpu0 = thread_time_ns()
            got_ns = clock()
            self.seen.append(msg.frame)
            tensors = msg.tensors
            rows = []
            # From the source (ready_ns < 0) a frame starts when taken; from a stage, when
            # the producer finished, or when this stage became free if it was busy then.
            start = got_ns if msg.ready_ns < 0 else max(msg.ready_ns, free_ns)
            for k, (local, remote) in enumerate(feeders):
                t0 = start if k == 0 else clock()
                for feed in local:
                    feed()
                for write in remote:
                    write(tensors)
                t1 = clock()
                req = requests[k]
                if req is not None:
                    req()
                    busy(letter, key)  # the frequency may have changed
                t2 = clock()
                runs[k]()
                t3 = clock()
                rows.append((t0, t1, t2, t3))
            t_out0 = clock()
            out: dict[int, np.ndarray] = {}
            for idx in plan.forwards:
                if idx in plan.local_out:
                    k, slot = plan.local_out[idx]
                    out[idx] = np.array(subs[k].output(slot), copy=True)
                else:
                    out[idx] = tensors[idx]
            t_out1 = clock()
            idle(letter, key)
            self.ts[msg.frame] = np.array(rows, dtype=np.int64)
            self.busy[msg.frame] = (start, t_out0, t_out1)
            self.cpu[msg.frame] = thread_time_ns() - cpu0
            self.q_out.put(_Msg(msg.frame, out, rows[-1][3], t_out1))
            free_ns = clock()


class _ApartStage(_StageThread):
    """A stage whose calls run in a child process (`profiler.mapping.stage_process`); this
    thread only hands each frame's tensors over and puts what comes back on."""

    def __init__(self, plan: _StagePlan, spec: StageSpec, q_in: queue.Queue[Any],
                 q_out: queue.Queue[Any], config: MappingRunConfig) -> None:
        super().__init__(plan, _no_executor, q_in, q_out, config)
        self.remote = StageProcess(spec)
        self._ready: StageReady | None = None

    def fallbacks(self) -> list[bool | None]:
        return list(self._ready.fallback) if self._ready is not None else \
            [None] * len(self.plan.calls)

    def described(self) -> dict[str, Any] | None:
        if self._ready is None:
            return None
        return {**self._ready.executor, "process": "own (the call holds the GIL)"}

    def run(self) -> None:
        try:
            self._ready = self.remote.start()
        except BaseException as err:
            self.error = err
            self.ready.set()
            self.remote.stop()
            return
        self._serve(self._proxy, self.remote.stop)

    def _proxy(self) -> None:
        plan, clock = self.plan, self.clock
        free_ns = clock()
        while True:
            msg = self.q_in.get()
            if msg is _STOP:
                self.q_out.put(_STOP)
                return
            self.seen.append(msg.frame)
            taken = clock()
            # The stage starts a frame as a thread stage does (`_loop`), its thread being
            # the stage: when taken from the source; else when the producer finished, or
            # when this thread became free if it was busy then. The child starts its
            # first hand-over's clock there, so the hand-over to the process is in it.
            start = taken if msg.ready_ns < 0 else max(msg.ready_ns, free_ns)
            made, done = self.remote.run_frame(msg.frame, msg.tensors, start)
            out = {idx: made[idx] if idx in made else msg.tensors[idx]
                   for idx in plan.forwards}
            back = clock()
            self.ts[msg.frame] = np.array(done.rows, dtype=np.int64)
            # the read-out ends with the tensors back in this process
            self.busy[msg.frame] = (done.busy[0], done.busy[1], back)
            self.cpu[msg.frame] = done.cpu_ns
            # to the process (placing the inputs, the pipe, its wake-up) and back
            self.handover[msg.frame] = (done.got_ns - taken) + (back - done.busy[2])
            self.q_out.put(_Msg(msg.frame, out, done.rows[-1][3], back))
            free_ns = clock()


def _no_executor() -> Executor:
    raise AssertionError("an apart stage opens its executor in its own process")


def _runs_apart(board: Board, plan: _StagePlan, config: MappingRunConfig, stages: int) -> bool:
    """Whether this stage runs in its own process (docs/mapping.md: stages apart)."""
    if config.apart == "never" or stages < 2:
        return False
    own_power = config.activity is not None and not isinstance(config.activity, NoActivity)
    if (config.make is not None or config.clock is not perf_clock or own_power
            or any(r is not None for r in plan.requests)):
        return False  # what the child cannot do (stage_process.py)
    if config.apart == "always":
        return True
    return config.mode == "pipeline" and \
        make_executor(board, plan.stage.processor).holds_gil


def run_mapping(sliced: SlicedModel, board: Board, config: MappingRunConfig) -> MappedRun:
    """Run `config.frames` measured frames (after `config.warmup`) of `sliced` on `board`,
    its layers placed by `config.mapping`: set up the stages, run the warm-up, measure
    (with the power source, if any), and gather the result."""
    config.check(len(sliced.layers))
    run_calls = calls(config.mapping, config.freq, config.method)
    stages = _Stages(sliced, board, config, run_calls)
    stages.start()
    try:
        stages.raise_error()
        driver = _Driver(stages, config, _frame_inputs(sliced, config),
                         [int(t.index) for t in sliced.model_outputs])
        driver.batch(range(config.warmup))
        energy = _measure(driver, config)
    finally:
        stages.stop()
    stages.raise_error()
    return _result(config, stages, driver, energy, run_calls)


# -- set-up ------------------------------------------------------------------------


def _frame_inputs(sliced: SlicedModel, config: MappingRunConfig) -> FrameInputs:
    if config.inputs is not None:
        return config.inputs
    fixed = model_inputs(sliced, config.seed)
    return lambda frame: fixed


class _Stages:
    """The stage threads and the queues that join them: queue k feeds stage k, the
    last one takes finished frames."""

    def __init__(self, sliced: SlicedModel, board: Board, config: MappingRunConfig,
                 run_calls: list[Call]) -> None:
        build = config.make or (lambda bd, letter: make_executor(bd, letter, clock=config.clock))
        plans = _plans(sliced, config.mapping, run_calls, _units(sliced, config, run_calls),
                       config.freq)
        self.queues: list[queue.Queue[Any]] = [queue.Queue(maxsize=config.queue_depth)
                                               for _ in range(len(plans) + 1)]
        self.threads: list[_StageThread] = []
        for k, p in enumerate(plans):
            q_in, q_out = self.queues[k], self.queues[k + 1]
            if _runs_apart(board, p, config, len(plans)):
                spec = StageSpec(board, p.stage.processor, None,
                                 [(u.model_bytes, _call_name(c, config.model_name)) for c, u
                                  in zip(p.calls, p.units, strict=True)],
                                 p.feeds, [i for i in p.forwards if i in p.local_out],
                                 p.local_out)
                self.threads.append(_ApartStage(p, spec, q_in, q_out, config))
            else:
                self.threads.append(_StageThread(
                    p, partial(build, board, p.stage.processor), q_in, q_out,
                    config))

    def start(self) -> None:
        for t in self.threads:
            t.start()
        for t in self.threads:  # one at a time: sub-model creation logs through one fd
            t.ready.wait()

    def raise_error(self) -> None:
        errors = [t.error for t in self.threads if t.error is not None]
        if errors:
            raise errors[0]

    def stop(self) -> None:
        # Every frame is through (or something failed): tell every stage directly, so a
        # stage behind a dead one is not left waiting.
        for q in self.queues[:-1]:
            with contextlib.suppress(queue.Full):
                q.put_nowait(_STOP)
        for t in self.threads:
            t.join(timeout=60)


# -- per-mode execution --------------------------------------------------------------


class _Driver:
    """Feeds frames into the first queue and collects them from the last."""

    def __init__(self, stages: _Stages, config: MappingRunConfig, feed: FrameInputs,
                 output_ids: list[int]) -> None:
        self.q_first, self.q_last = stages.queues[0], stages.queues[-1]
        self.stages = stages
        self.switch = config.mode == "switch"
        self.feed = feed
        self.output_ids = output_ids if config.keep_outputs else None
        self.progress, self.total = config.progress, config.warmup + config.frames
        self.done: dict[int, int] = {}
        self.outputs: dict[int, dict[int, np.ndarray]] = {}
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self.source_error: BaseException | None = None
        self.on_done: Callable[[int], None] | None = None  # after each completion
        self.sink = config.sink

    def _source(self, ids: Sequence[int]) -> None:
        try:
            for f in ids:
                tensors = self.feed(f)
                self.q_first.put(_Msg(f, tensors, -1))
                with self._lock:
                    self._in_flight += 1
                    self.max_in_flight = max(self.max_in_flight, self._in_flight)
        except BaseException as err:  # pragma: no cover - feed() failing
            self.source_error = err

    def batch(self, ids: range) -> None:
        if len(ids) == 0:
            return
        if self.switch:
            # One frame in flight: the next is fed as soon as the last one is out, by
            # this thread (a source thread would add a wake-up to every frame).
            for f in ids:
                self.q_first.put(_Msg(f, self.feed(f), -1))
                self.max_in_flight = 1
                msg = self.q_last.get()
                if msg is _STOP:
                    break
                self._took(msg)
            self.stages.raise_error()
            return
        src = threading.Thread(target=self._source, args=(ids,), name="coupprof-source",
                               daemon=True)
        src.start()
        for _ in ids:
            msg = self.q_last.get()
            if msg is _STOP:
                break
            with self._lock:
                self._in_flight -= 1
            self._took(msg)
        src.join(timeout=60)
        self.stages.raise_error()
        if self.source_error is not None:
            raise self.source_error

    def _took(self, msg: _Msg) -> None:
        """A finished frame: record it (and its outputs, when kept)."""
        self.done[msg.frame] = msg.sent_ns
        if self.sink is not None:
            self.sink(msg.frame, msg.tensors, msg.sent_ns)
        if self.on_done is not None:
            self.on_done(msg.frame)
        if self.output_ids is not None:
            self.outputs[msg.frame] = {t: msg.tensors[t] for t in self.output_ids
                                       if t in msg.tensors}
        if self.progress:
            self.progress(len(self.done), self.total)


# -- measurement ---------------------------------------------------------------------


@dataclass
class _Energy:
    """What the power source gave for the measured frames (nothing without one)."""

    capture: StreamCapture | None = None  # streaming: the stopped capture
    capture_error: ProfilerError | None = None  # it failed; the timings are kept
    per_frame_mj: float | None = None  # counter: energy / frames over repeated batches
    counter_window_ns: tuple[int, int] | None = None
    counter_frames: int = 0  # frames inside the counter's window


def _measure(driver: _Driver, config: MappingRunConfig) -> _Energy:
    """Run the measured frames, through the power source when there is one."""
    power = config.power
    capture = None
    if power is not None and power.streaming:
        capture = power.capture().start()  # (measures the idle baseline the first time)
    with _gc_paused():
        if capture is not None:
            return _measure_streaming(driver, config, capture)
        if power is not None:
            return _measure_counter(driver, config, power)
        driver.batch(config.measured)
        return _Energy()


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """As the layer runner does: no garbage-collector pauses in measured frames, and only
    the young generations collected first (a full collection starves a streaming
    capture's reader; docs/power.md)."""
    gc.collect(1)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _measure_streaming(driver: _Driver, config: MappingRunConfig,
                       capture: StreamCapture) -> _Energy:
    # Marker high from just before the first measured frame, then a change at every
    # completion: edges all along the run for the clock fit.
    level = [1]
    capture.mark(1)

    def toggle(_: int) -> None:
        level[0] ^= 1
        capture.mark(level[0])

    driver.on_done = toggle
    error: ProfilerError | None = None
    try:
        driver.batch(config.measured)
    finally:
        driver.on_done = None
        try:
            capture.stop()
        except ProfilerError as err:  # the timings are kept; the caller reports it
            error = err
    return _Energy(capture=capture, capture_error=error)


def _measure_counter(driver: _Driver, config: MappingRunConfig, power: PowerSession) -> _Energy:
    started: list[int] = []

    def measured_batches() -> int:
        # A counter source needs a window of many updates: repeat the batch (extra
        # frames count for energy only) until the window is long enough.
        t0, done = config.clock(), 0
        started.append(t0)
        while True:
            first = config.warmup + done
            driver.batch(range(first, first + config.frames))
            done += config.frames
            if config.clock() - t0 >= power.window_ns:
                return done

    def measured_once() -> int:
        started.append(config.clock())
        driver.batch(config.measured)
        return config.frames

    # While the counter's next update is awaited, the last warm-up frame runs again: an
    # idle GPU's clock falls within milliseconds, and the measured frames would start slow.
    # Not where the frames are a part of a run across devices (no `counter_repeats`): the
    # neighbours run each frame once, and would never send or take one run again.
    last_warm = config.warmup - 1
    busy = (lambda: driver.batch(range(last_warm, last_warm + 1))) \
        if last_warm >= 0 and config.counter_repeats else None
    n_frames, energy, c0, c1 = power.span(measured_batches if config.counter_repeats
                                          else measured_once, busy=busy)
    # the window began up to one busy frame before the measured ones: their share of it
    energy *= (c1 - started[0]) / max(c1 - c0, 1)
    return _Energy(per_frame_mj=energy / n_frames, counter_window_ns=(int(started[0]), int(c1)),
                   counter_frames=int(n_frames))


# -- result --------------------------------------------------------------------------


def _result(config: MappingRunConfig, stages: _Stages, driver: _Driver,
            energy: _Energy, run_calls: list[Call]) -> MappedRun:
    """The measured frames' timings from every stage, and their energy."""
    measured = config.measured
    n_st = len(stages.threads)
    all_ts = np.empty((config.frames, len(run_calls), 4), dtype=np.int64)
    stage_busy = np.empty((config.frames, n_st), dtype=np.int64)
    stage_read = np.empty((config.frames, n_st), dtype=np.int64)
    stage_cpu = np.empty((config.frames, n_st), dtype=np.int64)
    for k, t in enumerate(stages.threads):
        for row, f in enumerate(measured):
            all_ts[row, [c.index for c in t.plan.calls]] = t.ts[f]
            s, r0, r1 = t.busy[f]
            stage_busy[row, k] = r1 - s
            stage_read[row, k] = r1 - r0
            stage_cpu[row, k] = t.cpu[f]
    fallback: list[bool | None] = []
    for t in stages.threads:
        fallback += t.fallbacks()
    handover = {k: float(np.mean([t.handover[f] for f in measured])) / 1e6
                for k, t in enumerate(stages.threads) if t.handover}
    warm = {k: [t.handover[f] for f in range(1, config.warmup)]
            for k, t in enumerate(stages.threads) if t.handover}
    warm_ms = {k: float(np.median(v)) / 1e6 for k, v in warm.items() if v}
    run = MappedRun(
        mode=config.mode, mapping=config.mapping, ts_ns=all_ts, stage_busy_ns=stage_busy,
        stage_readout_ns=stage_read, stage_cpu_ns=stage_cpu,
        done_ns=np.array([driver.done[f] for f in measured], dtype=np.int64),
        fallback=fallback,
        executors={t.plan.stage.index: d for t in stages.threads
                   if (d := t.described()) is not None},
        seen=[list(t.seen) for t in stages.threads], max_in_flight=driver.max_in_flight,
        queue_depth=config.queue_depth, energy_mj=energy.per_frame_mj,
        outputs={f: driver.outputs[f] for f in measured if f in driver.outputs},
        method=config.method, calls=run_calls, process_handover_ms=handover,
        process_handover_warmup_ms=warm_ms,
    )
    if energy.capture is not None:
        run.power_error = energy.capture_error
        if energy.capture_error is None:
            _stream_energy(run, energy.capture, stage_busy)
    elif energy.counter_window_ns is not None:
        run.energy_window_ns = energy.counter_window_ns
        run.power_info = {"energy_frames": energy.counter_frames,
                          "energy_method": "counter over repeated batches"
                          if config.counter_repeats else "counter over the measured frames"}
    return run


def _stream_energy(run: MappedRun, cap: StreamCapture, stage_busy: np.ndarray) -> None:
    """Energy per frame (and per stage in switch mode) from a finished capture."""
    done = run.done_ns
    first_in = run.ts_ns[:, 0, TRANSFER_START]
    if run.frames >= 2:
        att = cap.windows_on_host(done[None, :-1], done[None, 1:])
        run.frame_energy_mj = att.window_energy_mj[0].copy()
        run.energy_mj = float(run.frame_energy_mj.sum()) / (run.frames - 1)
        run.energy_window_ns = (int(done[0]), int(done[-1]))
        samples, lost = int(att.window_samples.sum()), int(att.window_lost_frames.sum())
    else:
        att = cap.windows_on_host([[first_in[0]]], [[done[0]]])
        run.frame_energy_mj = att.window_energy_mj[0].copy()
        run.energy_mj = float(run.frame_energy_mj[0])
        run.energy_window_ns = (int(first_in[0]), int(done[0]))
        samples, lost = int(att.window_samples.sum()), int(att.window_lost_frames.sum())
    if run.mode == "switch":
        # The frames inside the span energy_mj covers (all but the first, when there
        # are several), so the stages' energies add up to at most a frame's (plus the
        # read-out, during which the next stage may already have started).
        rows = slice(1, None) if run.frames >= 2 else slice(None)
        starts = np.stack([run.ts_ns[rows, run.stage_first_call(st.index), TRANSFER_START]
                           for st in run.mapping.stages], axis=1)
        st_att = cap.windows_on_host(starts, starts + stage_busy[rows])
        run.stage_energy_mj = np.array([le.energy_mj for le in st_att.layers])
    run.power_info = {"baseline_power_w": cap.session.baseline_w,
                      "energy_method": "board energy first..last completion / (frames - 1)"
                      if run.frames >= 2 else "board energy of the one frame",
                      "window_samples": samples, "window_lost_frames": lost, **cap.info}
