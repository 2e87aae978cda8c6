"""Measuring explore's picks with the machinery behind `coupprof run`, here or on a Dask
cluster.

`measure(job)` loads the board and model, sets the per-processor levels or requests
the per-layer ones, opens the power source (`sim` on the simulated board) as `coupprof
run` does (`profiler.measure.hardware`, `profiler.measure.layers.Levels`) and runs the
mapping with `profiler.mapping.pipeline.run_mapping`, restoring every governor after. A job
is a small frozen dataclass, so Dask ships it to a worker as it is; each worker drives
the board it runs on (start workers with one thread each: one measurement per board at
a time; simulated boards on one host take turns). `measure_all` streams results back
as they finish.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from profiler.errors import BadInputError

if TYPE_CHECKING:
    from profiler.boards.model import Board

DASK_FIX = "pip install 'coupprof[cluster]'   (or: pip install 'dask[distributed]>=2024.1')"


@dataclass(frozen=True)
class MeasureJob:
    """One `coupprof run`, as explore would type it."""

    rank: int
    board: str
    model: str  # .tflite path on the worker
    order: str
    mode: str
    freq: str
    frames: int = 30
    warmup: int = 3
    seed: int = 0
    power: str | None = None  # default: sim on the simulated board, else none
    marker: str | None = None
    granularity: str = "layer"
    cuts: str | None = None
    sysfs_root: str | None = None


@dataclass(frozen=True)
class Measured:
    job: MeasureJob
    latency_ms: float
    throughput_fps: float
    energy_mj: float | None
    seconds: float
    worker: str

    @property
    def fps_per_w(self) -> float | None:
        return 1000.0 / self.energy_mj if self.energy_mj else None


def measure(job: MeasureJob) -> Measured:
    """Run one job on this machine's board (see the module docstring)."""
    from governors import sysfs_root_from_env
    from profiler.platform import choose_board

    root = Path(job.sysfs_root) if job.sysfs_root else sysfs_root_from_env()
    board = choose_board(job.board, root, letters=[c for c in job.order.upper() if c.isalpha()])
    with ExitStack() as turn:
        if board.simulated:
            turn.enter_context(_host_turn())
        return _measure(job, board, root)


def _host_turn() -> AbstractContextManager[object]:
    """On a Dask worker, this host's turn for a simulated board; elsewhere nothing.

    A simulated board stands in for a whole board on the host's cores, so two measured at
    once on one host stretch each other's modelled times (on 2 cores, a B-only frame of
    2.5 ms measured +41 % in time and +80 % in energy): workers sharing a host take turns,
    while those on other hosts go on. Real boards never wait."""
    try:
        from distributed import Lock, get_worker
        get_worker()
    except (ImportError, ValueError):  # not on a worker (ValueError: no worker here)
        return nullcontext()
    return Lock(f"coupprof-simulated-board@{socket.gethostname()}")


def _measure(job: MeasureJob, board: Board, root: Path | None) -> Measured:
    from profiler.mapping.pipeline import MappingRunConfig, run_mapping
    from profiler.mapping.spec import parse_freq, parse_order
    from profiler.measure.hardware import governors_for, open_power
    from profiler.measure.layers import Levels
    from profiler.slicing.slicer import slice_model

    t0 = time.perf_counter()
    sliced = slice_model(Path(job.model), job.granularity, job.cuts)
    mapping = parse_order(job.order, len(sliced.layers), board)
    plan = parse_freq(job.freq, mapping, board)
    govs = governors_for(board, mapping.processors, root) if plan.mode != "none" else {}
    with ExitStack() as stack:
        session, activity = open_power(board, job.power, job.marker, baseline_s=0.3,
                                       sysfs_root=root)
        if session is not None:
            stack.enter_context(session)
        levels = stack.enter_context(Levels(govs.values()))
        if plan.mode == "per-processor":
            levels.setup(plan.setup, govs)
        run = run_mapping(sliced, board, MappingRunConfig(
            mapping, job.mode, frames=job.frames, warmup=job.warmup, freq=plan,
            governors=govs, power=session, activity=activity, seed=job.seed,
            model_name=Path(job.model).name, model_bytes=Path(job.model).read_bytes()))
    return Measured(job, float(run.latency_ns.mean()) / 1e6, float(run.throughput_fps),
                    None if run.energy_mj is None else float(run.energy_mj),
                    time.perf_counter() - t0, f"{socket.gethostname()}:{os.getpid()}")


def measure_all(jobs: Sequence[MeasureJob], cluster: str | None = None,
                on_result: Callable[[Measured], None] | None = None) -> list[Measured]:
    """Measure `jobs` here one after the other, or on the Dask scheduler at `cluster`
    (results in the order they finish; `on_result` hears each as it arrives)."""
    out: list[Measured] = []
    if cluster is None:
        for job in jobs:
            m = measure(job)
            out.append(m)
            if on_result:
                on_result(m)
        return out
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise BadInputError("--cluster needs dask.distributed, which is not installed",
                            DASK_FIX) from None
    try:
        client = Client(cluster, timeout=5)
    except (OSError, TimeoutError) as err:
        raise BadInputError(f"cannot reach the Dask scheduler at {cluster}: {err}",
                            "start one (dask scheduler) and workers with --nthreads 1") from None
    try:
        futures = client.map(measure, list(jobs), pure=False)
        for fut in as_completed(futures):
            m = fut.result()
            out.append(m)
            if on_result:
                on_result(m)
    finally:
        client.close()
    return out


__all__ = ["DASK_FIX", "MeasureJob", "Measured", "measure", "measure_all"]
