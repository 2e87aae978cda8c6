"""The transfer matrix: what handing a layer boundary's tensors from one processor to
another costs, per boundary and ordered processor pair (ARM-CO-UP Fig. 18).

One hand-over runs from the producer's finish on src (its thread) to its tensors written
into dst's input buffers (dst's thread), so it includes the cross-core or host-device
copies and the thread wake-up, as a real switch does; ``src == dst`` is the baseline.
With a power source each hand-over also gets its energy (a streaming source's windows, or
a counter source's difference of two repeated windows). The fused view (``method="fused"``)
adds the producer's read-back of the boundary tensors in full (``readout_ms``), which
fused layer times leave out. `PowerSession` (`profiler.power.session`) measures the
energy; `coupprof run` uses this module too.

The measurement step by step: docs/mapping.md ("Transfer matrix").
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from profiler.boards.model import Board
from profiler.clock import Clock, perf_clock
from profiler.csvfile import read_table_csv
from profiler.errors import BadInputError
from profiler.executors.base import Executor, MakeExecutor, SubModel
from profiler.executors.factory import make_executor
from profiler.executors.worker import ProcessorWorker
from profiler.mapping.spec import boundary_tensors
from profiler.measure.method import METHODS, Method
from profiler.measure.runner import random_input
from profiler.power.session import PowerSession, StreamCapture
from profiler.power.sources.base import Activity, NoActivity

if TYPE_CHECKING:
    from profiler.measure.fused import FusedSettings
    from profiler.slicing.specs import SlicedModel, TensorSpec

__all__ = ["CSV_COLUMNS", "Activity", "NoActivity", "TransferMatrix", "TransferSample",
           "measure_transfer_matrix", "model_inputs", "read_transfer_csv", "summary",
           "transfer_sidecar", "write_transfer_csv"]

SIDECAR_FORMAT = "coupprof-transfers/1"
CSV_COLUMNS = ("boundary", "src", "dst", "bytes", "tensors", "time_ms_mean", "time_ms_median",
               "time_ms_p95", "time_ms_std", "reps")

Progress = Callable[[int, int], None]


# --------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------

@dataclass
class TransferSample:
    boundary: int  # between layer `boundary` and `boundary + 1`
    src: str
    dst: str
    nbytes: int
    tensors: int
    time_ns: np.ndarray  # (reps,)
    energy_mj: float | None = None
    readout_ms: float | None = None  # fused: src's extra read-back of the tensors in full
    readout_ms_ci95: float | None = None


@dataclass
class TransferMatrix:
    samples: list[TransferSample]
    info: dict[str, Any] = field(default_factory=dict)

    def table(self) -> pd.DataFrame:
        """Long format: one row per (boundary, src, dst)."""
        rows = []
        for s in self.samples:
            ms = s.time_ns.astype(np.float64) / 1e6
            row: dict[str, Any] = {
                "boundary": s.boundary, "src": s.src, "dst": s.dst, "bytes": s.nbytes,
                "tensors": s.tensors, "time_ms_mean": float(ms.mean()),
                "time_ms_median": float(np.median(ms)), "time_ms_p95": float(np.percentile(ms, 95)),
                "time_ms_std": float(ms.std(ddof=1)) if ms.size > 1 else 0.0, "reps": int(ms.size),
            }
            if s.energy_mj is not None:
                row["energy_mj"] = s.energy_mj
            if s.readout_ms is not None:
                row["readout_ms"] = s.readout_ms
                row["readout_ms_ci95"] = s.readout_ms_ci95
            rows.append(row)
        extra = ["energy_mj"] if any(s.energy_mj is not None for s in self.samples) else []
        if any(s.readout_ms is not None for s in self.samples):
            extra += ["readout_ms", "readout_ms_ci95"]
        return pd.DataFrame(rows, columns=[*CSV_COLUMNS, *extra])


def summary(df: pd.DataFrame, value: str = "time_ms_mean") -> pd.DataFrame:
    """src x dst matrix of `value` averaged over boundaries."""
    return df.pivot_table(index="src", columns="dst", values=value, aggfunc="mean")


# --------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------

@dataclass
class _Plan:
    """Where each boundary tensor lives (producer layer, output slot) and goes
    (consumer layer, input slot)."""

    tensors: list[list[TensorSpec]]  # per boundary
    producer: dict[int, tuple[int, int]]  # tensor -> (layer pos or -1 for model input, slot)
    consumers: dict[int, list[tuple[int, int]]]  # tensor -> [(layer pos, input slot)]


def _plan(sliced: SlicedModel) -> _Plan:
    producer: dict[int, tuple[int, int]] = {int(t.index): (-1, k)
                                            for k, t in enumerate(sliced.model_inputs)}
    consumers: dict[int, list[tuple[int, int]]] = {}
    for pos, layer in enumerate(sliced.layers):
        for slot, t in enumerate(layer.inputs):
            consumers.setdefault(int(t.index), []).append((pos, slot))
        for slot, t in enumerate(layer.outputs):
            producer[int(t.index)] = (pos, slot)
    return _Plan(boundary_tensors(sliced), producer, consumers)


class _Loaded:
    """A processor's copy of every layer, chained once so all buffers hold real data."""

    def __init__(self, ex: Executor, sliced: SlicedModel, plan: _Plan, inputs: dict[int, np.ndarray],
                 model_name: str) -> None:
        self.subs: list[SubModel] = [ex.load(layer.model_bytes,
                                             f"layer {layer.index} of {model_name}")
                                     for layer in sliced.layers]
        self.plan = plan
        self.inputs = inputs
        for pos, layer in enumerate(sliced.layers):
            for slot, t in enumerate(layer.inputs):
                self.subs[pos].set_input(slot, self.source(int(t.index)))
            self.subs[pos].run()

    def source(self, tensor: int) -> np.ndarray:
        pos, slot = self.plan.producer[tensor]
        return self.inputs[tensor] if pos < 0 else self.subs[pos].output(slot)

    def deliver(self, boundary: int, arrays: Sequence[np.ndarray], once: bool = False) -> None:
        """Write the boundary's tensors into every consumer after it; ``once``: into the
        first only, as a run writes each into the one sub-model of the next call (fused)."""
        for spec, arr in zip(self.plan.tensors[boundary], arrays, strict=True):
            for pos, slot in self.plan.consumers.get(int(spec.index), []):
                if pos > boundary:
                    self.subs[pos].set_input(slot, arr)
                    if once:
                        break


def model_inputs(sliced: SlicedModel, seed: int = 0) -> dict[int, np.ndarray]:
    """Random inputs shaped as the slicer lists them, keyed by tensor index."""
    rng = np.random.default_rng(seed)
    return {int(t.index): random_input(t.shape, t.dtype, rng) for t in sliced.model_inputs}


def measure_transfer_matrix(
    sliced: SlicedModel,
    board: Board,
    processors: Sequence[str],
    *,
    reps: int = 30,
    warmup: int = 3,
    boundaries: Sequence[int] | None = None,
    only: Sequence[tuple[int, str, str]] | None = None,
    make: MakeExecutor | None = None,
    power: PowerSession | None = None,
    activity: Activity | None = None,
    clock: Clock = perf_clock,
    seed: int = 0,
    model_name: str = "model",
    progress: Progress | None = None,
    method: Method = Method.SLICED,
    model_bytes: bytes | None = None,
    fused: FusedSettings | None = None,
) -> TransferMatrix:
    """Time (and energy) of every (boundary, src, dst) hand-over; see docs/mapping.md.

    only: measure just these (boundary, src, dst) triples (what a mapping needs).
    method "fused" (``model_bytes`` given; ``fused``: the `FusedSettings` of each
    read-back measurement) adds each (boundary, src)'s read-back at a cut.
    """
    if method not in METHODS:
        raise BadInputError(f"--method {method!r} is not fused or sliced")
    if method == Method.FUSED and model_bytes is None:
        raise ValueError("the fused method needs the model's bytes")
    if reps < 1 or warmup < 0:
        raise BadInputError(f"need at least 1 repetition and warmup >= 0, got {reps}, {warmup}")
    letters = list(dict.fromkeys(p.upper() for p in processors))
    for p in letters:
        board.processor(p)
    plan = _plan(sliced)
    n_bound = len(plan.tensors)
    todo = list(range(n_bound)) if boundaries is None else sorted(set(boundaries))
    for b in todo:
        if not 0 <= b < n_bound:
            raise BadInputError(f"boundary {b} does not exist (the model has {n_bound} "
                                f"boundaries, 0..{n_bound - 1})")
    wanted = None if only is None else {(int(b), s.upper(), d.upper()) for b, s, d in only}
    if wanted is not None:
        todo = sorted({b for b, _, _ in wanted})
    build = make or (lambda bd, letter: make_executor(bd, letter, clock=clock))
    inputs = model_inputs(sliced, seed)
    act = activity or NoActivity()
    workers: dict[str, ProcessorWorker] = {}
    loaded: dict[str, _Loaded] = {}
    samples: list[TransferSample] = []
    windows: list[np.ndarray] = []  # per sample, streaming: (reps, 4) lo, start, end, hi
    total = len(todo) * len(letters) ** 2 if wanted is None else len(wanted)
    cap: StreamCapture | None = None
    info: dict[str, Any] = {}
    try:
        for p in letters:
            workers[p] = ProcessorWorker(partial(build, board, p), name=p)
            workers[p].start()
            loaded[p] = workers[p].call(lambda ex: _Loaded(ex, sliced, plan, inputs, model_name))
        if power is not None and power.streaming:
            cap = power.capture().start()
        done = 0
        for b in todo:
            specs = plan.tensors[b]
            nbytes = sum(int(t.nbytes) for t in specs)
            for src in letters:
                for dst in letters:
                    if wanted is not None and (b, src, dst) not in wanted:
                        continue
                    pair = _Pair(b, src, dst, workers[src], loaded[src], workers[dst],
                                 loaded[dst], clock, act, once=method == Method.FUSED)
                    times, marks = pair.time(reps, warmup, cap)
                    energy = None
                    if power is not None and cap is None:
                        energy = pair.energy_by_difference(power)
                    samples.append(TransferSample(b, src, dst, nbytes, len(specs), times, energy))
                    windows.append(marks)
                    done += 1
                    if progress:
                        progress(done, total)
        if method == Method.FUSED:
            readouts = {}
            for b, src in dict.fromkeys((s.boundary, s.src) for s in samples):
                readouts[(b, src)] = workers[src].call(partial(
                    _readout_cost, sliced=sliced, data=model_bytes or b"", b=b, settings=fused,
                    seed=seed, model_name=model_name))
            for s in samples:
                s.readout_ms, s.readout_ms_ci95 = readouts[(s.boundary, s.src)]
        if cap is not None:
            cap.stop()
            _energy_from_windows(cap, samples, windows)
            info = {"baseline_power_w": power.baseline_w if power else None,
                    "energy_method": "marker window per hand-over", **cap.info}
        elif power is not None:
            info = {"energy_method": "with minus without the hand-over (counter)"}
    finally:
        for w in workers.values():
            w.stop()
    info = {"processors": letters, "boundaries": todo, "reps": reps, "warmup": warmup,
            "method": method,
            "power_source": power.name if power is not None else "none", **info,
            "executors": {p: w.executor.describe() for p, w in workers.items()
                          if w.executor is not None}}
    return TransferMatrix(samples, info)


def _energy_from_windows(cap: StreamCapture, samples: list[TransferSample],
                         windows: list[np.ndarray]) -> None:
    """Each sample's energy per hand-over: the board's mean power over its windows
    times its mean time.

    The windows are the timed [t0, t1] themselves, put on the logger's clock by the fit
    over the marker edges (integrating between the edges would add the marker calls'
    own microseconds, a large share of a 20-us hand-over). Windows shorter than the
    sample period often hold no sample and are left out of the mean power; taking the
    mean *energy* of the others instead would favour the longer windows."""
    if not samples:
        return
    w = np.stack(windows, axis=1)  # (reps, samples, 4)
    att = cap.windows_on_host(w[..., 1], w[..., 2])
    for s, le in zip(samples, att.layers, strict=True):
        mean_ms = float(s.time_ns.mean()) / 1e6
        s.energy_mj = float(le.power_w) * mean_ms if np.isfinite(le.power_w) \
            else float(le.energy_mj)


def _readout_cost(ex: Executor, sliced: SlicedModel, data: bytes, b: int,
                  settings: FusedSettings | None, seed: int,
                  model_name: str) -> tuple[float, float]:
    """(ms, 95 % half-width): what src's call of layers 0..b takes longer when it reads
    every crossing tensor back in full rather than reduced (0 on a CPU)."""
    from profiler.measure.fused import FusedProfiler, FusedSettings
    from profiler.slicing.prefix import REDUCE_ABOVE_BYTES, prefix_models

    if not ex.proc.kind.downloads_results:
        return 0.0, 0.0
    empty, reduced = prefix_models(data, sliced, reduce_above_bytes=REDUCE_ABOVE_BYTES,
                                   lasts=[-1, b])
    (full,) = prefix_models(data, sliced, reduce_above_bytes=None, lasts=[b])
    prof = FusedProfiler([empty, reduced, full], ex, seed=seed, read_outputs=True,
                         model_name=f"{model_name} (read-back at boundary {b})")
    try:  # (the difference is wanted, not the whole model alone)
        res = prof.measure(replace(settings or FusedSettings(), alone_calls=0))
    finally:
        for sub in prof.subs:
            sub.close()
    return res.layers[1].time_ms, res.layers[1].ci95_ms


def _readout(loaded: _Loaded, b: int) -> list[np.ndarray]:
    return [np.array(loaded.source(int(t.index)), copy=True) for t in loaded.plan.tensors[b]]


class _Pair:
    """One (boundary, src, dst): a timed hand-over, with the marker around it when a
    stream captures, and the processors' activity reported."""

    def __init__(self, b: int, src: str, dst: str, wsrc: ProcessorWorker, lsrc: _Loaded,
                 wdst: ProcessorWorker, ldst: _Loaded, clock: Clock, act: Activity,
                 once: bool = False) -> None:
        self.b, self.src, self.dst, self.once = b, src, dst, once
        self.wsrc, self.lsrc, self.wdst, self.ldst = wsrc, lsrc, wdst, ldst
        self.clock, self.act = clock, act

    def same(self, cap: StreamCapture | None) -> tuple[int, int, int, int]:
        """Producer runs, then its outputs go straight into the consumers (one thread)."""
        lsrc, b, clock, act, p = self.lsrc, self.b, self.clock, self.act, self.src
        act.busy(p)
        lsrc.subs[b].run()
        lo = cap.mark(1)[0] if cap is not None else 0
        t0 = clock()
        lsrc.deliver(b, [lsrc.source(int(t.index)) for t in lsrc.plan.tensors[b]], self.once)
        t1 = clock()
        act.idle(p)  # after t1: a preemption here must not count as idle in the window
        hi = cap.mark(0)[1] if cap is not None else 0
        return lo, t0, t1, hi

    def cross(self, cap: StreamCapture | None) -> tuple[int, int, int, int]:
        b, clock, act = self.b, self.clock, self.act
        handoff: queue.Queue[list[np.ndarray]] = queue.Queue(maxsize=1)
        waiting = threading.Event()

        def consumer(_: Executor) -> tuple[int, int]:
            waiting.set()
            arrays = handoff.get()
            act.busy(self.dst)
            self.ldst.deliver(b, arrays, self.once)
            t1 = clock()
            act.idle(self.dst)
            hi = cap.mark(0)[1] if cap is not None else 0
            return t1, hi

        def producer(_: Executor) -> tuple[int, int]:
            waiting.wait()
            act.busy(self.src)
            self.lsrc.subs[b].run()
            lo = cap.mark(1)[0] if cap is not None else 0
            t0 = clock()
            arrays = _readout(self.lsrc, b)
            act.idle(self.src)
            handoff.put(arrays)
            return lo, t0

        got = self.wdst.submit(consumer)
        lo, t0 = self.wsrc.submit(producer).result()
        t1, hi = got.result()
        return lo, t0, t1, hi

    def time(self, reps: int, warmup: int,
             cap: StreamCapture | None) -> tuple[np.ndarray, np.ndarray]:
        """Hand-over times (reps,) and, with a capture, the marked windows (reps, 4)."""
        if self.src == self.dst:
            def batch(_: Executor) -> list[tuple[int, int, int, int]]:
                return [self.same(cap if k >= warmup else None) for k in range(warmup + reps)]

            rows = self.wsrc.call(batch)
        else:
            rows = [self.cross(cap if k >= warmup else None) for k in range(warmup + reps)]
        w = np.asarray(rows[warmup:], dtype=np.int64).reshape(reps, 4)
        return w[:, 2] - w[:, 1], w

    def energy_by_difference(self, meter: PowerSession) -> float:
        """Counter sources: per call, (producer + hand-over) minus producer alone."""
        if self.src == self.dst:
            with_handover = meter.per_call(lambda: self.wsrc.call(lambda _: self.same(None)))
        else:
            with_handover = meter.per_call(lambda: self.cross(None))
        alone = meter.per_call(lambda: self.wsrc.call(lambda _: self.lsrc.subs[self.b].run()))
        return with_handover - alone


# --------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------

def transfer_sidecar(matrix: TransferMatrix, csv_name: str | None,
                     info: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON sidecar of a transfer table's CSV named ``csv_name`` (None: it went to
    standard output), with the caller's ``info`` (board, model, levels)."""
    return {"format": SIDECAR_FORMAT, "csv": csv_name, **(info or {}), **matrix.info,
            "units": {"time_ms": "ms from the producer finishing on src to the "
                                 "consumer's inputs written on dst",
                      "bytes": "bytes of the tensors crossing the boundary",
                      "energy_mj": "mJ per hand-over (with minus without it)"}}


def write_transfer_csv(matrix: TransferMatrix, csv_path: str | Path,
                       json_path: str | Path | None = None,
                       info: dict[str, Any] | None = None) -> tuple[Path, Path]:
    csv_p = Path(csv_path)
    json_p = Path(json_path) if json_path is not None else csv_p.with_suffix(".json")
    df = matrix.table()
    try:
        csv_p.parent.mkdir(parents=True, exist_ok=True)
        json_p.parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(csv_p, index=False)
        sidecar = transfer_sidecar(matrix, csv_p.name, info)
        json_p.write_text(json.dumps(sidecar, indent=2, default=str) + "\n")
    except OSError as err:
        raise BadInputError(f"cannot write results to {err.filename or csv_p}: {err.strerror}",
                            "choose a writable path with --csv") from None
    return csv_p, json_p


def read_transfer_csv(path: str | Path) -> pd.DataFrame:
    """A transfer table written by `coupprof transfer-matrix` (or compatible)."""
    df = read_table_csv(path, "transfer table", ("boundary", "src", "dst", "time_ms_mean"),
                        "pass the CSV written by `coupprof transfer-matrix`")
    df["src"] = df["src"].astype(str).str.upper()
    df["dst"] = df["dst"].astype(str).str.upper()
    return df
