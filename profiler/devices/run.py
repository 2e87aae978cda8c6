"""One model across several devices, measured: check the input, start the ranks, gather.

`run_devices(DevicesRunConfig)` checks everything it can before any rank starts (MPI
installed, the devices file, the device mapping against the model, each local device's
board and processors, each remote host reachable through MPI, host cores that exist), then
writes the job and starts one rank per device part (`profiler.devices.launch`,
`profiler.devices.rank`). When `mpiexec` is done it reads what each rank wrote as it went,
puts back the levels of any rank that died before its own restore, and gathers per device
its stage times, energy, memory and bytes per frame, and for the whole the throughput and
the frame latency (rank 0's feed to the last rank's output, on the one host clock).

`part_rows` / `sidecar` turn a `DevicesRun` into the CSV's rows and its JSON sidecar. The
command (`coupprof run --devices`) only parses, calls these and renders; docs/devices.md
says what each figure means.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from profiler.devices.launch import LaunchResult, launch, require_mpi
from profiler.devices.rank import RANK_FILE, RankJob, read_partial, restore_saved
from profiler.devices.spec import DeviceMapping, DeviceSet, parse_device_order, read_devices
from profiler.errors import BadInputError, ProfilerError

MODES = ("switch", "pipeline")
REACH_TIMEOUT_S = 20.0
SIDECAR_FORMAT = "coupprof-run-devices/1"


@dataclass(frozen=True)
class DevicesRunConfig:
    """`coupprof run --devices`: what runs where, for how many frames."""

    devices: Path
    order: str
    mode: str
    model: Path
    out_dir: Path
    frames: int = 30
    warmup: int = 3
    granularity: str = "layer"
    cuts: str | None = None
    method: str = "fused"
    freq: str | None = None
    queue_depth: int = 2
    window: int | None = None  # frames in flight across devices (pipeline); default 2 x parts
    seed: int = 0
    timeout_s: float | None = None


@dataclass
class PartRun:
    """What one rank (one device part) wrote, and how it ended."""

    rank: int
    device: str
    host: str
    first_layer: int
    last_layer: int
    order: str
    events: list[dict[str, Any]]
    exit_code: int | None  # None: it died without one
    restored: dict[str, bool] = field(default_factory=dict)  # DVFS domain -> files as saved
    restored_by: str = ""  # "rank", "launcher", or "" (it set no level)
    restore_error: str = ""  # why the launcher could not put the levels back

    def last(self, event: str) -> dict[str, Any] | None:
        found = [e for e in self.events if e["event"] == event]
        return found[-1] if found else None

    @property
    def result(self) -> dict[str, Any] | None:
        return self.last("result")

    @property
    def frames(self) -> dict[int, dict[str, Any]]:
        return {e["frame"]: e for e in self.events if e["event"] == "frame"}

    @property
    def finished(self) -> bool:
        return self.last("end") is not None


@dataclass
class DevicesRun:
    """A run across devices: per part what it measured, for the whole what came out."""

    config: DevicesRunConfig
    devices: DeviceSet
    mapping: DeviceMapping
    launched: LaunchResult
    parts: list[PartRun]
    latency_ns: np.ndarray  # measured frames that came out of the last rank
    done_ns: np.ndarray  # ... when they did

    @property
    def measured(self) -> range:
        return range(self.config.warmup, self.config.warmup + self.config.frames)

    @property
    def throughput_fps(self) -> float | None:
        d = self.done_ns
        if len(d) >= 2 and d[-1] > d[0]:
            return (len(d) - 1) * 1e9 / float(d[-1] - d[0])
        return None

    @property
    def error(self) -> ProfilerError | None:
        """A rank's own error (bad input found on its device: exit 2 or 3), else None."""
        for p in self.parts:
            e = p.last("error")
            if e is not None and e.get("exit_code") in (2, 3):
                err = ProfilerError(f"device {p.device}: {e['message']}")
                err.exit_code = int(e["exit_code"])
                return err
        return None

    @property
    def exit_code(self) -> int:
        """0; 130 when the launcher was interrupted; a rank's bad input (2, 3); 4 when a
        rank died or failed (partial results kept)."""
        if self.launched.signalled is not None:
            return 130
        err = self.error
        if err is not None:
            return err.exit_code
        if not (self.launched.ok and all(p.finished for p in self.parts)):
            return 4
        # a power source that failed mid-run: timings kept, no energy (as one board's run)
        return 4 if self.power_errors else 0

    @property
    def power_errors(self) -> dict[str, str]:
        """Device -> its power source's error, where one failed mid-run."""
        return {p.device: p.result["power_error"] for p in self.parts
                if p.result is not None and p.result.get("power_error")}

    @property
    def first_dead(self) -> PartRun | None:
        """The part whose rank died first, where `mpiexec` named it (Hydra names the
        process whose end made it stop the others)."""
        pids = {(p.last("start") or {}).get("pid"): p for p in self.parts}
        for line in self.launched.log:
            m = re.search(r"PID (\d+) RUNNING AT", line)
            if m and int(m.group(1)) in pids:
                return pids[int(m.group(1))]
        return None

    def mode_title(self, model: str) -> str:
        c = self.config
        return (f"{model} across {len(self.parts)} devices: {self.mapping.text}, {c.mode} mode, "
                f"{c.frames} frames" + (f", --freq {c.freq}" if c.freq else ""))

    @property
    def all_restored(self) -> bool:
        return all(all(p.restored.values()) for p in self.parts)


def check(config: DevicesRunConfig) -> tuple[DeviceSet, DeviceMapping]:
    """Everything wrong with the input, as one BadInputError, before any rank starts."""
    from profiler.mapping.spec import parse_order
    from profiler.platform import choose_board
    from profiler.slicing.slicer import slice_model

    if config.mode not in MODES:
        raise BadInputError(f"--mode {config.mode!r} is not one of {', '.join(MODES)}")
    if config.frames < 1 or config.warmup < 0:
        raise BadInputError(f"need frames >= 1 and warmup >= 0 (got {config.frames}, "
                            f"{config.warmup})")
    require_mpi()
    devices = read_devices(config.devices)
    sliced = slice_model(config.model, config.granularity, config.cuts)
    dmap = parse_device_order(config.order, len(sliced.layers), devices)
    have = os.sched_getaffinity(0)
    for part in dmap.parts:
        device = devices.device(part.device)
        if not device.local:
            _reach(device.host)
            continue
        if set(device.cores) - have:
            raise BadInputError(f"device {device.name}: cores {list(device.cores)} are not all "
                                f"on this host (it has {sorted(have)})",
                                "give each simulated device cores this machine has")
        board = choose_board(device.board, device.sysfs_root, letters=part.mapping.processors)
        try:
            parse_order(part.mapping.order, part.mapping.n_layers, board)
        except ProfilerError as err:
            raise BadInputError(f"device {device.name}: {err.message}",
                                "use the processors of that device's board (its `board` in "
                                "the devices file)") from None
    return devices, dmap


def _reach(host: str) -> None:
    """One rank on `host` through MPI, or one BadInputError line."""
    exe = require_mpi()
    try:
        done = subprocess.run([str(exe), "-n", "1", "-host", host, "true"],
                              capture_output=True, timeout=REACH_TIMEOUT_S)
        ok = done.returncode == 0
    except subprocess.TimeoutExpired:
        ok = False
    if not ok:
        raise BadInputError(f"host {host} cannot be reached through MPI",
                            "check that `mpiexec -n 1 -host HOST true` works (ssh keys, the "
                            "same MPI and coupprof there), or fix the devices file")


def run_devices(config: DevicesRunConfig) -> DevicesRun:
    """Check, start one rank per device part, wait, restore what a dead rank left, gather."""
    devices, dmap = check(config)
    out = config.out_dir
    out.mkdir(parents=True, exist_ok=True)
    for r in range(len(dmap.parts)):
        (out / RANK_FILE.format(rank=r)).unlink(missing_ok=True)
    n = len(dmap.parts)
    found = devices.path or Path(config.devices)  # a bundled one by name: its path
    job = RankJob(str(found.resolve()), config.order, config.mode,
                  config.frames, config.warmup, str(Path(config.model).resolve()),
                  str(out.resolve()), config.granularity, config.cuts, config.method,
                  config.freq, config.queue_depth, config.window or 2 * n, config.seed)
    job_path = out / "run-devices-job.json"
    job.write(job_path)
    parts_dev = [devices.device(p.device) for p in dmap.parts]
    launched = launch("profiler.devices.rank", [str(job_path.resolve())], n,
                      cores=[d.cores for d in parts_dev], hosts=[d.host for d in parts_dev],
                      envs=[dict(d.env) for d in parts_dev],
                      timeout_s=config.timeout_s, status_dir=out / "ranks")
    parts = []
    for r, (p, d) in enumerate(zip(dmap.parts, parts_dev, strict=True)):
        events = read_partial(out / RANK_FILE.format(rank=r))
        part = PartRun(r, d.name, d.host, p.first, p.last, p.mapping.compact, events,
                       launched.exit_codes[r])
        own = part.last("restored")
        saved = part.last("saved")
        if own is not None and own["governors"]:
            part.restored, part.restored_by = dict(own["governors"]), "rank"
        elif saved is not None and saved["governors"] and d.local:
            # it died with its levels set: put them back from here, and read them back
            try:
                part.restored, part.restored_by = restore_saved(events, out), "launcher"
            except (ProfilerError, OSError) as err:  # what was measured is still gathered
                part.restored = {dom: False for dom in saved["governors"]}
                part.restore_error = str(err)
        elif saved is not None and saved["governors"]:
            part.restored = {dom: False for dom in saved["governors"]}
        parts.append(part)
    first, last = parts[0].frames, parts[-1].frames
    ids = [f for f in range(config.warmup, config.warmup + config.frames)
           if f in last and f in first and first[f].get("fed_ns") is not None]
    done = np.array([last[f]["done_ns"] for f in ids], dtype=np.int64)
    fed = np.array([first[f]["fed_ns"] for f in ids], dtype=np.int64)
    return DevicesRun(config, devices, dmap, launched, parts, done - fed, done)


# -- rows and sidecar ---------------------------------------------------------------------


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def part_rows(run: DevicesRun) -> list[dict[str, Any]]:
    """One row per device part, and a totals row (kind "total")."""
    rows: list[dict[str, Any]] = []
    measured = set(run.measured)
    for p in run.parts:
        res = p.result or {}
        frames = {f: e for f, e in p.frames.items() if f in measured}
        recv = [e["recv"] for e in frames.values() if e.get("recv")]
        stages = res.get("stages", [])
        rows.append({
            "kind": "device", "rank": p.rank, "device": p.device, "host": p.host,
            "board": res.get("board", ""), "first_layer": p.first_layer,
            "last_layer": p.last_layer, "order": p.order, "frames_done": len(frames),
            "stage_ms": " ".join(f"{s['processor']}{s['first_layer']}-{s['last_layer']}="
                                 f"{s['time_ms_mean']:.3f}" for s in stages),
            "busy_ms_mean": sum(s["time_ms_mean"] for s in stages) if stages else math.nan,
            "energy_mj": res.get("energy_mj") if res.get("energy_mj") is not None else math.nan,
            "true_energy_mj": res.get("true_energy_mj")
            if res.get("true_energy_mj") is not None else math.nan,
            "peak_rss_mb": res.get("peak_rss_mb", math.nan),
            "tensor_mb": res.get("tensor_mb", math.nan),
            "bytes_in": _mean([r["bytes"] for r in recv]) if recv else 0.0,
            "bytes_out": _mean([e["sent_bytes"] for e in frames.values()]),
            "link_real_ms": _mean([(r["got_ns"] - r["sent_ns"]) / 1e6 for r in recv]),
            "link_added_ms": _mean([(r["ready_ns"] - r["got_ns"]) / 1e6 for r in recv]),
            "restored": ("yes" if all(p.restored.values()) else "NO") if p.restored else "-",
            "restored_by": p.restored_by, "ended": _ended(p),
        })
    lat = run.latency_ns.astype(np.float64) / 1e6
    energies = [r["energy_mj"] for r in rows]
    rows.append({
        "kind": "total", "device": "total", "frames_done": int(len(run.done_ns)),
        "throughput_fps": run.throughput_fps if run.throughput_fps is not None else math.nan,
        "latency_ms_mean": float(lat.mean()) if len(lat) else math.nan,
        "latency_ms_p95": float(np.percentile(lat, 95)) if len(lat) else math.nan,
        "energy_mj": float(np.sum(energies)) if not any(math.isnan(e) for e in energies)
        else math.nan,
        "peak_rss_mb": float(np.nansum([r["peak_rss_mb"] for r in rows])),
        "tensor_mb": float(np.nansum([r["tensor_mb"] for r in rows])),
    })
    return rows


def _ended(p: PartRun) -> str:
    if p.finished:
        return "ok"
    err = p.last("error")
    if err is not None:
        return f"error: {err['message']}"
    return "died" if p.exit_code is None else f"exit {p.exit_code}"


def sidecar(run: DevicesRun) -> dict[str, Any]:
    """The JSON sidecar: the set-up, each rank's end and result, the frames' latencies."""
    c = run.config
    return {
        "format": SIDECAR_FORMAT, "devices_file": str(run.devices.path or c.devices),
        "order": run.mapping.text,
        "mode": c.mode, "model_path": str(Path(c.model).resolve()), "method": c.method,
        "freq": c.freq, "frames": c.frames, "warmup": c.warmup, "queue_depth": c.queue_depth,
        "window": 1 if c.mode == "switch" else (c.window or 2 * len(run.parts)),
        "devices": [{"name": d.name, "host": d.host, "board": d.board, "power": d.power,
                     "cores": list(d.cores)} for d in run.devices.devices],
        "links": {f"{p.device}->{q.device}": _link(run, p.device, q.device)
                  for p, q in zip(run.mapping.parts, run.mapping.parts[1:], strict=False)},
        "exit_code": run.exit_code, "mpiexec_returncode": run.launched.returncode,
        "rank_exit_codes": run.launched.exit_codes, "signalled": run.launched.signalled,
        "timed_out": run.launched.timed_out,
        "first_dead": run.first_dead.device if run.first_dead is not None else None,
        "mpiexec_log_tail": run.launched.log[-20:],
        "parts": [{"rank": p.rank, "device": p.device, "ended": _ended(p),
                   "restored": p.restored, "restored_by": p.restored_by,
                   "restore_error": p.restore_error,
                   "result": p.result} for p in run.parts],
        "latency_ms": [float(v) / 1e6 for v in run.latency_ns],
        "throughput_fps": run.throughput_fps,
        "clock": "perf_counter_ns on one host (CLOCK_MONOTONIC); see docs/devices.md",
    }


def _link(run: DevicesRun, a: str, b: str) -> dict[str, Any]:
    link = run.devices.link(a, b)
    return {"latency_ms": link.latency_ms, "bandwidth_mb_s": link.bandwidth_mb_s,
            "simulated": link.simulated}
