"""What MPI rank r of `coupprof run --devices` runs: its device's part of the model.

Every rank reads the same job (`RankJob`, a JSON file the launcher writes), slices the
model the same way and takes part r of the device mapping. It opens its device's board
(a simulated board gets its own sysfs tree, kept in the output directory so its levels
can be checked, and restored, from outside), its power source, sets the levels of
``--freq`` (restored on every way out: `profiler.measure.layers.Levels`), and runs its
layers with the one-board machinery (`profiler.mapping.pipeline.run_mapping`): its frames
come from the rank before (`profiler.devices.wire.TensorReceiver`), each finished frame's
boundary tensors go to the rank after (`TensorSender`), and the last rank tells the first
when a frame is done, which bounds the frames in flight (one in switch mode).

It writes what it measures as it goes, one JSON line per event, to ``rank-R.jsonl`` in
the output directory: its start, the governors' saved state, each frame, its result, the
governors as read back after the restore, its end. A rank that dies leaves what it wrote;
`restore_saved` puts back the levels it had set (`profiler.devices.run`).

    python -m profiler.devices.rank JOB.json
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import resource
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import numpy as np

from profiler.clock import perf_clock
from profiler.devices.spec import (
    Device,
    DeviceMapping,
    DevicePart,
    parse_device_order,
    read_devices,
)
from profiler.devices.wire import Credits, TensorReceiver, TensorSender, ready, send_credit
from profiler.devices.wire import wait as wire_wait
from profiler.errors import BadInputError, ProfilerError

if TYPE_CHECKING:
    from governors import Governor, SavedState
    from profiler.boards.model import Board
    from profiler.slicing.specs import SlicedModel, TensorSpec

RANK_FILE = "rank-{rank}.jsonl"
OUTPUTS_FILE = "outputs.npz"  # the last rank's model outputs of the first measured frame


@dataclass(frozen=True)
class RankJob:
    """What every rank is told: the same for all, each takes its own part."""

    devices: str  # the devices file
    order: str  # the device mapping, e.g. 'd0:B4G3 d1:B8'
    mode: str
    frames: int
    warmup: int
    model: str
    out_dir: str
    granularity: str = "layer"
    cuts: str | None = None
    method: str = "fused"
    freq: str | None = None
    queue_depth: int = 2
    window: int = 2  # frames in flight across all devices (pipeline; switch: 1)
    seed: int = 0

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self), indent=1))

    @classmethod
    def read(cls, path: Path) -> RankJob:
        return cls(**json.loads(path.read_text()))


class Partial:
    """A rank's JSON-lines file, each line flushed as it is written (kept if it dies)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._f = path.open("w")
        self._lock = threading.RLock()  # a signal handler may write too

    def write(self, event: str, **fields: Any) -> None:
        with self._lock:
            self._f.write(json.dumps({"event": event, **fields}) + "\n")
            self._f.flush()

    def close(self) -> None:
        self._f.close()


def read_partial(path: Path) -> list[dict[str, Any]]:
    """The events a rank wrote (a line cut short by its death is left out)."""
    out = []
    if path.is_file():
        for line in path.read_text().splitlines():
            with suppress(json.JSONDecodeError):
                out.append(json.loads(line))
    return out


# -- the model's part on this rank -----------------------------------------------------


def outgoing(sliced: SlicedModel, dmap: DeviceMapping, r: int) -> list[TensorSpec]:
    """The tensors part r hands to part r + 1: those crossing its last boundary and the
    model outputs made so far (the last part keeps the model's outputs)."""
    from profiler.mapping.spec import boundary_tensors

    part = dmap.parts[r]
    if r == len(dmap.parts) - 1:
        return list(sliced.model_outputs)
    spec = {int(t.index): t for t in boundary_tensors(sliced)[part.last]}
    made = {int(t.index) for layer in sliced.layers[:part.last + 1] for t in layer.outputs}
    for t in sliced.model_outputs:
        if int(t.index) in made:
            spec.setdefault(int(t.index), t)
    return [spec[i] for i in sorted(spec)]


def incoming(sliced: SlicedModel, dmap: DeviceMapping, r: int) -> list[TensorSpec]:
    """What part r receives: the model inputs for the first part, else what r - 1 sends."""
    return list(sliced.model_inputs) if r == 0 else outgoing(sliced, dmap, r - 1)


def part_model(sliced: SlicedModel, dmap: DeviceMapping, r: int) -> SlicedModel:
    """Part r's layers as a model of their own: its inputs are what it receives and reads,
    its outputs what it makes of what it hands on."""
    from profiler.slicing.spans import span_io

    part = dmap.parts[r]
    ins, _ = span_io(sliced, part.first, part.last)
    made = {int(t.index) for layer in sliced.layers[part.first:part.last + 1]
            for t in layer.outputs}
    outs = [t for t in outgoing(sliced, dmap, r) if int(t.index) in made]
    return dataclasses.replace(sliced, layers=list(sliced.layers[part.first:part.last + 1]),
                               model_inputs=ins, model_outputs=outs)


def tensor_bytes(sub: SlicedModel) -> int:
    """Bytes of every tensor of the part's sub-models (weights and activations, before an
    interpreter's arena reuses memory): what its interpreters hold at most."""
    from profiler.slicing.costs import tensor_bytes as one
    from profiler.slicing.graph import ModelView
    from profiler.tflite.model_io import parse_model

    total = 0
    for layer in sub.layers:
        g = ModelView.of(parse_model(layer.model_bytes, "layer", copy=False))
        total += sum(one(g, t) for t in range(len(g.model.subgraphs[0].tensors)))
    return total


# -- governors: saved, restored, read back ----------------------------------------------


def _state(saved: SavedState) -> dict[str, Any]:
    return {"kind": saved.kind, "directory": str(saved.directory),
            "files": {k: base64.b64encode(v).decode() for k, v in saved.files.items()}}


def _unstate(d: dict[str, Any]) -> SavedState:
    from governors import SavedState

    return SavedState(d["kind"], Path(d["directory"]),
                      {k: base64.b64decode(v) for k, v in d["files"].items()})


def read_back(govs: dict[str, Governor], saved: dict[str, dict[str, Any]]
              ) -> dict[str, bool]:
    """Per DVFS domain: its files now hold what was saved before the run."""
    return {dom: _unstate(saved[dom]).files == gov.save().files for dom, gov in govs.items()}


def device_sysfs(device: Device, board: Board, out_dir: Path) -> Path | None:
    """Where the device's governors live: a simulated board's own tree (the devices file's
    sysfs_root, else one in the output directory), or the device's sysfs root."""
    if board.simulated:
        return Path(device.sysfs_root) if device.sysfs_root else out_dir / f"sysfs-{device.name}"
    return Path(device.sysfs_root) if device.sysfs_root else None


def open_governors(device: Device, board: Board, letters: list[str], out_dir: Path, *,
                   fresh: bool = False) -> dict[str, Governor]:
    """The device's governors of `letters`' DVFS domains, on its own tree (``fresh``: a
    simulated board's tree in the output directory is laid out anew, as at boot)."""
    import shutil

    from profiler.measure.hardware import governors_for

    root = device_sysfs(device, board, out_dir)
    if board.simulated:
        from profiler.sim.governor import SimTree

        assert root is not None
        if fresh and not device.sysfs_root:  # ours, from an earlier run
            shutil.rmtree(root, ignore_errors=True)
        SimTree.share_at(board, root)
    return governors_for(board, letters, root)


def restore_saved(events: list[dict[str, Any]], out_dir: Path) -> dict[str, bool]:
    """Put back the levels a rank saved before it set them (it died before its own
    restore), and read them back: per domain, whether the files hold the saved state."""
    from profiler.platform import choose_board

    saved = next((e for e in events if e["event"] == "saved"), None)
    start = next((e for e in events if e["event"] == "start"), None)
    if saved is None or start is None or not saved["governors"]:
        return {}
    device = Device(**{**start["device"], "cores": tuple(start["device"]["cores"])})
    board = choose_board(device.board, device.sysfs_root)
    govs = open_governors(device, board, list(saved["letters"]), out_dir)
    for dom, gov in govs.items():
        gov.restore(_unstate(saved["governors"][dom]))
    return read_back(govs, saved["governors"])


# -- one rank ----------------------------------------------------------------------------


@contextmanager
def _mpi() -> Iterator[Any]:
    try:
        from mpi4py import MPI
    except ImportError:
        raise BadInputError("MPI is not installed", "pip install 'coupprof[devices]'") from None
    yield MPI.COMM_WORLD


def run_rank(job: RankJob, comm: Any) -> int:
    """Run this rank's part; its exit code (0, or a `ProfilerError`'s)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    out_dir = Path(job.out_dir)
    log = Partial(out_dir / RANK_FILE.format(rank=rank))
    try:
        return _run(job, comm, rank, size, out_dir, log)
    except ProfilerError as err:
        log.write("error", message=str(err), exit_code=err.exit_code)
        if size > 1:  # the other ranks wait for this one's frames: stop them all
            log.close()
            comm.Abort(err.exit_code)
        return err.exit_code
    except BaseException as err:
        log.write("error", message=f"{type(err).__name__}: {err}", exit_code=1,
                  traceback=traceback.format_exc())
        if size > 1:  # as above; the traceback first, for whoever reads the output
            traceback.print_exc()
            log.close()
            comm.Abort(1)
        raise
    finally:
        log.close()


def _run(job: RankJob, comm: Any, rank: int, size: int, out_dir: Path, log: Partial) -> int:
    from profiler.mapping.pipeline import MappingRunConfig, run_mapping
    from profiler.mapping.spec import parse_freq, parse_order
    from profiler.mapping.transfer import model_inputs
    from profiler.measure.hardware import open_power
    from profiler.measure.layers import Levels
    from profiler.measure.method import Method
    from profiler.platform import choose_board
    from profiler.slicing.slicer import slice_model
    from profiler.tflite.model_io import read_model_bytes

    devices = read_devices(job.devices)
    data = read_model_bytes(Path(job.model))
    sliced = slice_model(Path(job.model), job.granularity, job.cuts)
    dmap = parse_device_order(job.order, len(sliced.layers), devices)
    if len(dmap.parts) != size:
        raise BadInputError(f"{len(dmap.parts)} device parts but {size} MPI ranks")
    part: DevicePart = dmap.parts[rank]
    device = devices.device(part.device)
    log.write("start", rank=rank, pid=os.getpid(), device=dataclasses.asdict(device),
              first=part.first, last=part.last, order=part.mapping.compact,
              affinity=sorted(os.sched_getaffinity(0)))
    board = choose_board(device.board, device.sysfs_root, letters=part.mapping.processors)
    mapping = parse_order(part.mapping.order, part.mapping.n_layers, board)
    sub = part_model(sliced, dmap, rank)
    plan = parse_freq(job.freq, mapping, board)
    govs = open_governors(device, board, mapping.processors, out_dir, fresh=True) \
        if plan.mode != "none" else {}
    meter, activity = open_power(board, device.power, device.marker,
                                 trace_dir=None, sysfs_root=device_sysfs(device, board, out_dir)
                                 if not board.simulated else None)
    first, last = rank == 0, rank == size - 1
    total = job.warmup + job.frames
    window = 1 if job.mode == "switch" else max(1, job.window)
    ins = incoming(sliced, dmap, rank)
    outs = outgoing(sliced, dmap, rank) if not last else []
    made = {int(t.index) for t in sub.model_outputs}
    final = [int(t.index) for t in sliced.model_outputs]
    link_in = devices.link(dmap.parts[rank - 1].device, device.name) if not first else None
    recv = None
    if not first:
        assert link_in is not None
        recv = TensorReceiver(comm, rank - 1, [(int(t.index), tuple(t.shape), t.dtype)
                                               for t in ins], total, link_in, ahead=window)
    send = None
    if not last:
        send = TensorSender(comm, rank + 1, [int(t.index) for t in outs])
    credits = None
    if first and not last:
        credits = Credits(comm, size - 1, total)
    credit_keep: list[tuple[Any, Any]] = []
    fixed = model_inputs(sliced, job.seed) if first else {}
    passing: dict[int, dict[int, np.ndarray]] = {}  # frame -> tensors it only passes on
    fed_ns: dict[int, int] = {}
    arrivals: dict[int, dict[str, int]] = {}
    sent_bytes: dict[int, int] = {}

    def feed(frame: int) -> dict[int, np.ndarray]:
        if frame == job.warmup and size > 1:  # called once this rank measures
            ready(comm, rank, size)
        if recv is None:
            if credits is not None:
                credits.wait_for(frame - window)
            passing[frame] = {i: a for i, a in fixed.items() if i not in made}
            fed_ns[frame] = perf_clock()
            return fixed
        got = recv.take()
        if got.frame != frame:
            raise ProfilerError(f"rank {rank} expected frame {frame}, got {got.frame}")
        arrivals[frame] = {"sent_ns": got.sent_ns, "got_ns": got.got_ns,
                           "ready_ns": got.ready_ns, "bytes": got.nbytes}
        passing[frame] = {i: a for i, a in got.tensors.items() if i not in made}
        fed_ns[frame] = perf_clock()
        return got.tensors

    def sink(frame: int, tensors: dict[int, np.ndarray], done_ns: int) -> None:
        nbytes = 0
        on = {**passing.pop(frame, {}), **tensors}  # what this part hands on
        if send is not None:
            nbytes = send.send(frame, on)
        else:
            if not first:
                send_credit(comm, 0, frame, done_ns, credit_keep)
            if frame == job.warmup:  # the model's outputs, once, to check a run against
                arrays: dict[str, Any] = {str(i): on[i] for i in final}
                np.savez(out_dir / OUTPUTS_FILE, **arrays)
        sent_bytes[frame] = nbytes
        log.write("frame", frame=frame, fed_ns=fed_ns.get(frame), done_ns=done_ns,
                  sent_bytes=nbytes, recv=arrivals.get(frame))

    saved = {dom: _state(g.save()) for dom, g in govs.items()}
    log.write("saved", letters=mapping.processors, governors=saved,
              sysfs=str(device_sysfs(device, board, out_dir) or ""))
    try:
        with ExitStack() as stack:
            if meter is not None:
                stack.enter_context(meter)
            held = stack.enter_context(Levels(govs.values()))
            _stop_on_signals(govs, saved, log)
            if plan.mode == "per-processor":
                held.setup(plan.setup, govs)
                log.write("set", khz={dom: g.read_khz() for dom, g in govs.items()})
            for t in (recv, credits):
                if t is not None:
                    t.start()
            stops = [t.stop for t in (recv, credits, send) if t is not None]
            try:
                result = run_mapping(sub, board, MappingRunConfig(
                    mapping, job.mode, frames=job.frames, warmup=job.warmup, freq=plan,
                    governors=govs, queue_depth=job.queue_depth, power=meter,
                    counter_repeats=False,  # the neighbours run these frames once
                    activity=activity, seed=job.seed, inputs=feed, sink=sink,
                    model_name=Path(job.model).name, method=Method(job.method),
                    model_bytes=data))
                if send is not None:
                    send.flush()
                for req, _ in credit_keep:  # the last credits, before MPI finalizes
                    wire_wait(req)
            finally:
                for stop in stops:
                    stop.set()
            truth = _true_energy_mj(board, result)
    finally:  # every way out (an error, SIGINT, SIGTERM): the levels as read back now
        log.write("restored", governors=read_back(govs, saved) if govs else {})
    measured = list(range(job.warmup, job.warmup + job.frames))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    log.write("result", stages=[{
        "stage": st.index, "processor": st.processor, "first_layer": part.first + st.first,
        "last_layer": part.first + st.last,
        "time_ms_mean": float(result.stage_busy_ns[:, st.index].mean()) / 1e6,
    } for st in mapping.stages],
        energy_mj=result.energy_mj, true_energy_mj=truth,
        energy_window_ns=list(result.energy_window_ns) if result.energy_window_ns else None,
        power_error=str(result.power_error) if result.power_error else None,
        power_source=meter.name if meter is not None else "none",
        peak_rss_mb=ru.ru_maxrss / 1024, tensor_mb=tensor_bytes(sub) / 1e6,
        bytes_in=float(np.mean([arrivals[f]["bytes"] for f in measured])) if arrivals else 0.0,
        bytes_out=float(np.mean([sent_bytes[f] for f in measured])),
        done_ns=[int(v) for v in result.done_ns], fed_ns=[fed_ns[f] for f in measured],
        board=board.name, simulated=board.simulated)
    log.write("end", exit_code=0)
    return 0


def _stop_on_signals(govs: dict[str, Governor], saved: dict[str, dict[str, Any]],
                     log: Partial) -> None:
    """SIGINT or SIGTERM (the launcher's, passed on): put the levels back, say so, and end
    the rank now, not after its stage threads, which may wait on partners already gone."""

    def stop_now(signum: int, _frame: FrameType | None) -> None:
        # the launcher's signal comes twice (through mpiexec and straight to the rank): a
        # second one must not cut this restore short, nor a stage thread's write undo it
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        back: dict[str, bool] = {}
        for attempt in range(5):
            for dom, gov in govs.items():
                with suppress(ProfilerError):
                    gov.restore(_unstate(saved[dom]))
            back = read_back(govs, saved) if govs else {}
            if all(back.values()):
                break
            time.sleep(0.02 * (attempt + 1))
        log.write("restored", governors=back)
        log.write("error", message=f"stopped by {signal.Signals(signum).name}", exit_code=130)
        log.close()
        os._exit(130 if signum == signal.SIGINT else 143)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, stop_now)


def _true_energy_mj(board: Board, result: Any) -> float | None:
    """The simulated board's true energy per frame over the window the run measured."""
    if not board.simulated or result.energy_window_ns is None or result.frames < 2:
        return None
    counted = result.power_info.get("energy_frames")  # a counter: its window's frames
    from profiler.sim.power import current

    model = current(board)
    if model is None:
        return None
    t0, t1 = result.energy_window_ns
    return model.true_energy_mj(t0, t1) / (counted or result.frames - 1)


def main(argv: list[str]) -> int:
    job = RankJob.read(Path(argv[0]))
    with _mpi() as comm:
        return run_rank(job, comm)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
