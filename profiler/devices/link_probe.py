"""Time the hand-over of boundary tensors between devices over MPI, for the link fit.

`measure_links` starts one rank per device (`profiler.devices.launch`) running this
module. For each pair of devices (in rank order, a -> b) and each boundary, rank a
sends the boundary's tensors (their shapes and dtypes, random data) with the runner's
own non-blocking sender, rank b takes them through the runner's receiver and its
simulated link (`profiler.devices.wire`), and sends an acknowledgement, so one frame is
on the wire at a time. A hand-over is timed from a's posting of the sends to the receiver
letting the tensors through (where a simulated link's wait ends): on one host, on the one
clock every rank reads; across hosts, as the round trip less b's own time before its
acknowledgement and half an empty round trip. How much later b's consumer thread wakes
is kept apart (``wake_ms_median``). Where the link is simulated, each boundary is also
timed with the model off (the real local transfer), so the fit can say what the link
added. What is timed: docs/devices.md ("Link tables").

Run by hand: ``mpiexec -n 2 python -m profiler.devices.link_probe PLAN.json OUT.json``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler.devices.spec import DeviceSet, Link, parse_devices
from profiler.errors import BadInputError, ProfilerError

ACK_TAG = 3
PING_TAG = 4
POST_S = 0.001  # the receiver's wait for its next receives to be posted (untimed)
PROBE_FIX = "see the ranks' lines above; `coupprof doctor` checks MPI"


@dataclass(frozen=True)
class BoundaryTensors:
    """What crosses one boundary: (shape, dtype) per tensor."""

    boundary: int
    tensors: tuple[tuple[tuple[int, ...], str], ...]

    @property
    def nbytes(self) -> int:
        return sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d in self.tensors)


def boundaries_of(sliced: Any, only: Sequence[int] | None = None) -> list[BoundaryTensors]:
    """The sliced model's boundaries (`profiler.mapping.spec.boundary_tensors`)."""
    from profiler.mapping.spec import boundary_tensors

    specs = boundary_tensors(sliced)
    todo = range(len(specs)) if only is None else sorted(set(only))
    out = []
    for b in todo:
        if not 0 <= b < len(specs):
            raise BadInputError(f"boundary {b} does not exist (the model has {len(specs)} "
                                f"boundaries, 0..{len(specs) - 1})")
        out.append(BoundaryTensors(b, tuple((tuple(int(x) for x in t.shape), str(t.dtype))
                                            for t in specs[b])))
    return out


@dataclass
class ProbeResult:
    """The measured rows (one per boundary, pair and pass) and what the run was."""

    rows: pd.DataFrame  # boundary, src, dst, bytes, tensors, pass, time_ms_* , reps
    one_clock: bool
    wall_s: float


def measure_links(devices: DeviceSet, boundaries: Sequence[BoundaryTensors], *,
                  reps: int = 20, warmup: int = 3, timeout_s: float | None = 600.0,
                  seed: int = 0, echo: bool = True, one_clock: bool | None = None
                  ) -> ProbeResult:
    """Run the probe over MPI, one rank per device, and read its rows back.
    ``one_clock``: time on the one host clock (default: where every device is local),
    else by round trips, as across hosts."""
    from profiler.devices.launch import launch

    if len(devices.devices) < 2:
        raise BadInputError("a link needs two devices, and the devices file lists one",
                            "add a second [[device]]")
    if reps < 1 or warmup < 0:
        raise BadInputError(f"need at least 1 repetition and warmup >= 0, got {reps}, {warmup}")
    if one_clock is None:
        one_clock = all(d.local for d in devices.devices)
    with tempfile.TemporaryDirectory(prefix="coupprof-links-") as tmp:
        plan = Path(tmp) / "plan.json"
        out = Path(tmp) / "out.json"
        plan.write_text(json.dumps({
            "devices": _devices_toml(devices), "reps": reps, "warmup": warmup, "seed": seed,
            "one_clock": one_clock,
            "boundaries": [{"boundary": b.boundary, "tensors": [[list(s), d] for s, d in
                                                                b.tensors]}
                           for b in boundaries]}))
        res = launch("profiler.devices.link_probe", [str(plan), str(out)],
                     len(devices.devices), cores=[list(d.cores) for d in devices.devices],
                     hosts=[d.host for d in devices.devices],
                     envs=[dict(d.env) for d in devices.devices], timeout_s=timeout_s, echo=echo)
        if not res.ok or not out.is_file():
            why = "timed out" if res.timed_out else f"ranks {res.failed} failed"
            raise ProfilerError(f"the link probe {why} (mpiexec exit {res.returncode})",
                                PROBE_FIX)
        samples = json.loads(out.read_text())
    return ProbeResult(_rows(samples), one_clock, res.wall_s)


def _devices_toml(devices: DeviceSet) -> str:
    """The devices file's text (the ranks parse it again)."""
    if devices.path is not None and devices.path.is_file():
        return devices.path.read_text()
    lines = []
    for d in devices.devices:
        lines += ["[[device]]", f"name = {json.dumps(d.name)}", f"host = {json.dumps(d.host)}"]
        if d.cores:
            lines.append(f"cores = {list(d.cores)}")
        if d.env:
            lines.append("env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in d.env)
                         + " }")
    for pair, link in [(None, devices.default_link), *devices.links.items()]:
        lines.append("[[link]]")
        if pair is not None:
            lines.append(f"between = {json.dumps(sorted(pair))}")
        lines.append(f"latency_ms = {link.latency_ms}")
        if link.bandwidth_mb_s is not None:
            lines.append(f"bandwidth_mb_s = {link.bandwidth_mb_s}")
    return "\n".join(lines) + "\n"


def _rows(samples: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for s in samples:
        ms = np.asarray(s["time_ms"], dtype=np.float64)
        rows.append({"boundary": s["boundary"], "src": s["src"], "dst": s["dst"],
                     "bytes": s["bytes"], "tensors": s["tensors"], "pass": s["pass"],
                     "time_ms_mean": float(ms.mean()), "time_ms_median": float(np.median(ms)),
                     "time_ms_p95": float(np.percentile(ms, 95)),
                     "time_ms_std": float(ms.std(ddof=1)) if ms.size > 1 else 0.0,
                     "reps": int(ms.size),
                     # the consumer's thread wakes this long after the link delivers
                     "wake_ms_median": float(np.median(s["wake_ms"]))})
    return pd.DataFrame(rows)


# -- what one rank runs -------------------------------------------------------------


def _spin(req: Any) -> None:
    """Wait for a request without sleeping: the round trips time the message, not a
    sleep's grain (the ranks are on cores or hosts of their own)."""
    while not req.Test():
        pass


def _ping_ms(comm: Any, me: int, other: int, sender: bool, n: int = 20) -> float:
    """Median round trip of an empty message (the sender's view; 0 on the receiver)."""
    from profiler.clock import perf_clock

    buf = np.zeros(1, dtype=np.int64)
    times = []
    for _ in range(n):
        if sender:
            t0 = perf_clock()
            comm.Send(buf, dest=other, tag=PING_TAG)
            _spin(comm.Irecv(buf, source=other, tag=PING_TAG))
            times.append((perf_clock() - t0) / 1e6)
        else:
            _spin(comm.Irecv(buf, source=other, tag=PING_TAG))
            comm.Send(buf, dest=other, tag=PING_TAG)
    return float(np.median(times)) if times else 0.0


def _pair(comm: Any, rank: int, a: int, b: int, link: Link, plan: dict[str, Any],
          names: list[str]) -> list[dict[str, Any]]:
    """Rank a sends every boundary to rank b; b's rows (a's round trips folded in).

    Where the link is simulated, its frames and the same frames with its model off
    alternate (link, local, local, link, ...), so both meet the cores and caches in the
    same states (a frame after a simulated link's wait finds them idle)."""
    from profiler.clock import perf_clock
    from profiler.devices.wire import TensorReceiver, TensorSender

    reps, warmup = int(plan["reps"]), int(plan["warmup"])
    one_clock = bool(plan["one_clock"])
    rng = np.random.default_rng(int(plan["seed"]))
    passes = [("link", link)] + ([("local", Link())] if link.simulated else [])
    sender = rank == a
    half_ping = _ping_ms(comm, rank, b if sender else a, sender) / 2
    rows: list[dict[str, Any]] = []
    ack = np.zeros(1, dtype=np.int64)
    for bd in plan["boundaries"]:
        specs = [(k, tuple(s), str(d)) for k, (s, d) in enumerate(bd["tensors"])]
        # the passes' order flips each repetition, so each follows either as often
        frames = [(f, w) for f in range(warmup + reps)
                  for w in (range(len(passes)) if f % 2 == 0 else reversed(range(len(passes))))]
        if sender:
            tx = TensorSender(comm, b, [k for k, _, _ in specs])
            data = {k: _random(s, d, rng) for k, s, d in specs}
            trips: list[float] = []
            for f, _ in frames:
                t0 = perf_clock()
                tx.send(f, data)
                # the acknowledgement says the frame arrived (its sends are done by then
                # as far as this frame is concerned; the sender keeps their buffers)
                _spin(comm.Irecv(ack, source=b, tag=ACK_TAG))
                trips.append((perf_clock() - t0) / 1e6)
            tx.flush()
            comm.send(trips, dest=b, tag=ACK_TAG + 100)
            continue

        def receiver(w: int, specs: list[tuple[int, tuple[int, ...], str]] = specs
                     ) -> TensorReceiver:
            rx = TensorReceiver(comm, a, specs, 1, passes[w][1], ahead=1)
            rx.start()
            return rx

        direct: list[float] = []
        held: list[float] = []
        woke: list[float] = []
        nbytes = 0
        rx = receiver(frames[0][1])
        for k in range(len(frames)):
            got = rx.take()
            t_take = perf_clock()
            rx.join()
            nbytes = got.nbytes
            direct.append((got.ready_ns - got.sent_ns) / 1e6)
            woke.append((t_take - got.ready_ns) / 1e6)
            if k + 1 < len(frames):
                rx = receiver(frames[k + 1][1])
                time.sleep(POST_S)  # its receives posted before the next frame comes
            held.append((perf_clock() - t_take) / 1e6)
            comm.Send(np.array([k], dtype=np.int64), dest=a, tag=ACK_TAG)
        trips = comm.recv(source=a, tag=ACK_TAG + 100)
        by_pass: dict[str, list[float]] = {}
        for w, (what, _) in enumerate(passes):
            mine = [k for k, (f, ww) in enumerate(frames) if ww == w and f >= warmup]
            times = [direct[k] for k in mine] if one_clock else \
                [trips[k] - held[k] - woke[k] - half_ping for k in mine]
            by_pass[what] = times
            rows.append({"boundary": int(bd["boundary"]), "src": names[a], "dst": names[b],
                         "bytes": nbytes, "tensors": len(specs), "pass": what,
                         "time_ms": times, "wake_ms": [woke[k] for k in mine]})
        if "local" in by_pass:  # what the link added, each repetition's frames paired
            rows.append({"boundary": int(bd["boundary"]), "src": names[a], "dst": names[b],
                         "bytes": nbytes, "tensors": len(specs), "pass": "added",
                         "time_ms": [x - y for x, y in zip(by_pass["link"], by_pass["local"],
                                                           strict=True)],
                         "wake_ms": [0.0]})
    return rows


def _random(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(max(info.min, -128), min(info.max, 127) + 1, shape).astype(dt)


def main(argv: list[str]) -> int:
    from mpi4py import MPI

    plan_path, out_path = Path(argv[0]), Path(argv[1])
    plan = json.loads(plan_path.read_text())
    devices = parse_devices(plan["devices"])
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    names = devices.names
    if size != len(names):
        print(f"link probe: {size} ranks for {len(names)} devices", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    for a in range(size):
        for b in range(a + 1, size):
            if rank in (a, b):
                rows += _pair(comm, rank, a, b, devices.link(names[a], names[b]), plan, names)
            comm.Barrier()
    gathered = comm.gather(rows, root=0)
    if rank == 0 and gathered is not None:
        out_path.write_text(json.dumps([r for part in gathered for r in part]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
