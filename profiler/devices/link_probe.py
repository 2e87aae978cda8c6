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
added. Where every device is on this host and has a streaming power source, each rank
also captures its own power through the probe (its marker toggled with each frame, for
the logger's clock), and each hand-over's energy on the sending and on the receiving device is its
power integrated over the hand-over's window (``energy_mj_src``, ``energy_mj_dst``).
What is timed and measured: docs/devices.md ("Link tables").

Run by hand: ``mpiexec -n 2 python -m profiler.devices.link_probe PLAN.json OUT.json``.
"""

from __future__ import annotations

import contextlib
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

from profiler.devices.spec import Device, DeviceSet, Link, parse_devices
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
                  seed: int = 0, echo: bool = True, one_clock: bool | None = None,
                  energy: bool = True) -> ProbeResult:
    """Run the probe over MPI, one rank per device, and read its rows back.
    ``one_clock``: time on the one host clock (default: where every device is local),
    else by round trips, as across hosts. ``energy``: each hand-over's energy on both
    devices, from their own power sources, where the hand-overs are timed on one clock
    (the rows' ``energy_mj_*`` are NaN otherwise)."""
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
            "one_clock": one_clock, "energy": bool(energy and one_clock),
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
        lines += ["[[device]]", f"name = {json.dumps(d.name)}", f"host = {json.dumps(d.host)}",
                  f"board = {json.dumps(d.board)}"]
        for key in ("power", "marker", "sysfs_root"):
            if getattr(d, key) is not None:
                lines.append(f"{key} = {json.dumps(getattr(d, key))}")
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
                     "wake_ms_median": float(np.median(s["wake_ms"])),
                     # each device's energy over a hand-over: the mean of the repetitions
                     # (a window is shorter than a logger's update; its mean is unbiased)
                     **{f"energy_mj_{side}": _mean(s.get(f"energy_mj_{side}"))
                        for side in ("src", "dst")},
                     **{f"true_energy_mj_{side}": _mean(s.get(f"true_energy_mj_{side}"))
                        for side in ("src", "dst")}})
    return pd.DataFrame(rows)


def _mean(values: list[float] | None) -> float:
    return float(np.mean(values)) if values else float("nan")


# -- what one rank runs -------------------------------------------------------------


RowKey = tuple[int, str, str, str]  # a row's boundary, src, dst and pass


def _key(row: dict[str, Any]) -> RowKey:
    return (int(row["boundary"]), str(row["src"]), str(row["dst"]), str(row["pass"]))


class _Meter:
    """One rank's power capture through the probe, and the frames' hand-over windows
    integrated afterwards on the host clock. The marker goes high and low with each frame
    on this rank: its edges fit the logger's clock to the host's."""

    def __init__(self, device: Device) -> None:
        from profiler.measure.hardware import open_power
        from profiler.platform import choose_board

        self.board = choose_board(device.board, device.sysfs_root)
        self.session, _ = open_power(self.board, device.power, device.marker,
                                     sysfs_root=Path(device.sysfs_root)
                                     if device.sysfs_root and not self.board.simulated
                                     else None)
        if self.session is not None and not self.session.streaming:
            self.session = None  # a counter cannot resolve a hand-over of a millisecond
        self.capture: Any = None
        self.windows: list[tuple[int, int, RowKey, str]] = []  # t0, t1, its row, side
        self.energy: dict[tuple[RowKey, str], list[float]] = {}  # per row and side, in order

    def __enter__(self) -> _Meter:
        if self.session is not None:
            self.session.__enter__()
            self.capture = self.session.capture().start()
        return self

    def mark(self, level: int) -> None:
        if self.capture is not None:
            self.capture.mark(level)

    def window(self, t0_ns: int, t1_ns: int, key: RowKey, side: str) -> None:
        self.windows.append((t0_ns, t1_ns, key, side))

    def __exit__(self, *exc: object) -> None:
        if self.capture is None or self.session is None:
            return
        try:
            self.capture.stop()
            if self.windows:
                t0 = np.array([w[0] for w in self.windows], dtype=np.int64)
                t1 = np.array([w[1] for w in self.windows], dtype=np.int64)
                att = self.capture.windows_on_host(t0[None, :], t1[None, :])
                truth = _truth(self.board)
                for k, (a, b, key, side) in enumerate(self.windows):
                    self.energy.setdefault((key, f"energy_mj_{side}"), []).append(
                        float(att.window_energy_mj[0, k]))
                    if truth is not None:
                        self.energy.setdefault((key, f"true_energy_mj_{side}"), []).append(
                            float(truth.true_energy_mj(int(a), int(b))))
        finally:
            self.session.__exit__(*exc)


def _truth(board: Any) -> Any:
    """The simulated board's live power model (its true energy), else None."""
    if not board.simulated:
        return None
    from profiler.sim.power import current

    return current(board)


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
          names: list[str], meter: _Meter | None = None) -> list[dict[str, Any]]:
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
            posted: list[int] = []
            for f, _ in frames:
                if meter is not None:
                    meter.mark(1)
                t0 = perf_clock()
                posted.append(t0)
                tx.send(f, data)
                # the acknowledgement says the frame arrived (its sends are done by then
                # as far as this frame is concerned; the sender keeps their buffers)
                _spin(comm.Irecv(ack, source=b, tag=ACK_TAG))
                trips.append((perf_clock() - t0) / 1e6)
                if meter is not None:
                    meter.mark(0)
            tx.flush()
            comm.send(trips, dest=b, tag=ACK_TAG + 100)
            # the receiver's rows, and when each frame was let through, for this side's
            # energy over the same windows (one clock: the ranks' times compare)
            theirs, ready_ns = comm.recv(source=b, tag=ACK_TAG + 101)
            if meter is not None:
                for key, ks in theirs:
                    for k in ks:
                        meter.window(posted[k], ready_ns[k], key, "src")
            continue

        def receiver(w: int, specs: list[tuple[int, tuple[int, ...], str]] = specs
                     ) -> TensorReceiver:
            rx = TensorReceiver(comm, a, specs, 1, passes[w][1], ahead=1)
            rx.start()
            return rx

        direct: list[float] = []
        held: list[float] = []
        woke: list[float] = []
        spans: list[tuple[int, int]] = []  # (sent, let through), host ns
        nbytes = 0
        rx = receiver(frames[0][1])
        for k in range(len(frames)):
            got = rx.take()
            t_take = perf_clock()
            if meter is not None:
                meter.mark(1)
            spans.append((int(got.sent_ns), int(got.ready_ns)))
            rx.join()
            nbytes = got.nbytes
            direct.append((got.ready_ns - got.sent_ns) / 1e6)
            woke.append((t_take - got.ready_ns) / 1e6)
            if k + 1 < len(frames):
                rx = receiver(frames[k + 1][1])
                time.sleep(POST_S)  # its receives posted before the next frame comes
            held.append((perf_clock() - t_take) / 1e6)
            comm.Send(np.array([k], dtype=np.int64), dest=a, tag=ACK_TAG)
            if meter is not None:
                meter.mark(0)
        trips = comm.recv(source=a, tag=ACK_TAG + 100)
        windows: list[tuple[RowKey, list[int]]] = []  # each row's frames
        by_pass: dict[str, list[float]] = {}
        for w, (what, _) in enumerate(passes):
            mine = [k for k, (f, ww) in enumerate(frames) if ww == w and f >= warmup]
            times = [direct[k] for k in mine] if one_clock else \
                [trips[k] - held[k] - woke[k] - half_ping for k in mine]
            by_pass[what] = times
            row = {"boundary": int(bd["boundary"]), "src": names[a], "dst": names[b],
                   "bytes": nbytes, "tensors": len(specs), "pass": what,
                   "time_ms": times, "wake_ms": [woke[k] for k in mine]}
            rows.append(row)
            windows.append((_key(row), mine))
        # each row's hand-over windows: this side's, and the sender's over the same frames
        if meter is not None:
            for key, ks in windows:
                for k in ks:
                    meter.window(spans[k][0], spans[k][1], key, "dst")
        comm.send((windows, [e for _, e in spans]), dest=a, tag=ACK_TAG + 101)
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
    meter = None
    if plan.get("energy"):
        try:
            meter = _Meter(devices.device(names[rank]))
        except ProfilerError as err:  # its hand-overs are still timed
            print(f"link probe: device {names[rank]}: no energy ({err})", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    with meter if meter is not None else contextlib.nullcontext():
        for a in range(size):
            for b in range(a + 1, size):
                if rank in (a, b):
                    rows += _pair(comm, rank, a, b, devices.link(names[a], names[b]), plan,
                                  names, meter)
                comm.Barrier()
    energy = list(meter.energy.items()) if meter is not None else []
    gathered = comm.gather((rows, energy), root=0)
    if rank == 0 and gathered is not None:
        found: dict[RowKey, dict[str, list[float]]] = {}
        for _, part in gathered:
            for (key, column), values in part:
                found.setdefault(key, {})[column] = values
        out = [r | found.get(_key(r), {}) for part, _ in gathered for r in part]
        out_path.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
