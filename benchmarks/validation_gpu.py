#!/usr/bin/env python3
"""Validation on a machine with an NVIDIA GPU: per-layer time and NVML energy on G
(LiteRT's GPU accelerator over WebGPU/Vulkan) and on CPU core sets, a B<->G transfer
matrix, a check of when LiteRT's GPU run returns, and the simulated board's
predicted-vs-measured pipeline throughput.

    python benchmarks/validation_gpu.py --out data/validation/h200      # on the GPU box
    python benchmarks/validation_gpu.py --out /tmp/v --cpu-only          # plumbing, anywhere

Run from a checkout (it imports `profiler` from the working directory; no network).
Everything goes through coupprof's own code: the per-layer tables are measured by
`profiler.measure.layers`, the path `coupprof layers` takes (with NVML, the energy of
layers shorter than its ~100 ms update period: each layer repeated until the counter
resolves its power, times its time in the frames), beside diagnostics of the whole
model alone; the real CLI (`python -m profiler transfer-matrix`, `python -m profiler
run`) gives the transfer matrix and the simulated board's runs.

Outputs in --out (CSV + JSON sidecar each; the layer tables are in `coupprof layers`
format, so `coupprof predict --layers` reads them):

    layers-MODEL-G.csv, layers-MODEL-B<k>.csv    per layer: time, transfer, energy_mj,
                                                 dynamic_energy_mj, power_w, fps_per_w,
                                                 repeats, fallback (G)
    transfers-MODEL.csv                          B<->G matrix (energy_mj where asked)
    gpu_sync.json                                does run_by_index wait for the GPU?
    layers-MODEL-TAG-fused.csv                   fused method (G and B with all cores): per
                                                 layer fused time and interval beside the
                                                 sliced one, the fixed row; NVML energy =
                                                 differences of prefix energies (each
                                                 prefix's repeat-window power x its time)
    fused-MODEL.json                             sliced sum / whole, fused sum + fixed /
                                                 whole, fused vs sliced per layer >= 1 ms,
                                                 layer energies + fixed vs whole-run energy
    sim-run-*.csv                                simulated board, three pipeline mappings
    validation.json                              versions, device, commands, elapsed, summary

Phases can be run separately (--only layers,transfers,sync,sim,fused,mapped) to fit the
device machine's 10-minute command limit; `fused` is not in the default set (run it
per model: --only fused --models resnet50).

Phase `mapped` (issue 10's prediction errors and NVML energies, all through the real
CLI, about 7 minutes for both models on an H100), per model:

    coupprof layers --processor G --method fused --power nvml   -> layers-MODEL-G-fused.csv
    coupprof layers --processor B --method fused                -> layers-MODEL-B-fused.csv
    coupprof transfer-matrix --processors B,G --method fused --boundaries SPLIT-1
    coupprof run --order ORDER --mode switch|pipeline --layers G,B --transfers T
        for ORDER in all-G, all-B, B-prefix + G-suffix, G-prefix + B-suffix (split in the
        middle) -> run-MODEL-ORDER-MODE.csv, measured beside predicted
    coupprof run --order all-G --mode switch --power nvml   (the whole run's energy)

and, through the library, the whole model on G called back to back (each call's time)
and repeated for NVML (power, time per call, energy per call), to compare with the
layers' energies. Results: mapped-MODEL.json and the table files; summary in
validation-mapped.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from profiler.mapping.accuracy import ERROR_DEFINITION  # noqa: E402

PHASES = ("layers", "transfers", "sync", "sim", "fused", "mapped")
DEFAULT_PHASES = ("layers", "transfers", "sync", "sim")
SIM_MODEL = dict(alpha=1.0, size=160)  # stages of ~10 ms on the simulated board
SIM_MAPPINGS = ("B4G6N5", "L3B5G7", "G5B5N5")


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def environment_facts() -> dict[str, Any]:
    import importlib.metadata as md

    facts: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine(),
                             "kernel": platform.release(), "cpus": os.cpu_count(),
                             "affinity": sorted(os.sched_getaffinity(0))}
    for pkg in ("ai-edge-litert", "numpy", "pandas", "nvidia-ml-py"):
        try:
            facts[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            facts[pkg] = None
    facts["VK_DRIVER_FILES"] = os.environ.get("VK_DRIVER_FILES")
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        facts["gpu"] = name.decode() if isinstance(name, bytes) else name
        facts["nvidia_driver"] = pynvml.nvmlSystemGetDriverVersion()
        pynvml.nvmlShutdown()
    except Exception as err:  # no GPU here: say so in the record
        facts["gpu"] = f"none ({type(err).__name__})"
    return facts


def idle_power_w(source: Any, seconds: float = 2.0) -> float:
    """Mean power over `seconds` with nothing of ours running (the idle baseline)."""
    t0, e0 = source.wait_for_tick()
    time.sleep(seconds)
    t1, e1 = source.wait_for_tick(source.read_energy_mj())
    return (e1 - e0) * 1e6 / (t1 - t0)


def _command() -> dict[str, str]:
    """RunInfo's environment, with this script's command line."""
    from profiler.measure.results import environment

    return {**environment(), "command": shlex.join(["python", "benchmarks/validation_gpu.py",
                                                    *sys.argv[1:]])}


def profile_layers(sliced: Any, board: Any, letter: str, model_path: Path, data: bytes,
                   out: Path, label: str, tag: str, frames: int, warmup: int, source: Any,
                   min_updates: int) -> dict[str, Any]:
    """One processor, every layer, as `coupprof layers --method sliced --power nvml`
    measures it (`profiler.measure.layers`): the layer runner's timings, then each layer
    repeated until the counter resolves its power, times its time in the frames (layers
    shorter than NVML's ~100 ms update period). Written in `coupprof layers` format."""
    from profiler.measure.layers import LayerSettings, ModelUnderTest, ProcessorLayers
    from profiler.measure.tables import write_tables
    from profiler.power.session import PowerSession

    t_start = time.monotonic()
    session = PowerSession(source, counter_updates=min_updates) if source is not None else None

    def progress(what: str, done: int, total: int) -> None:
        if what == "energy per layer" and done % 10 == 0:
            log(f"  {tag}: energy of layer {done}/{total}")

    with ProcessorLayers(board, letter, ModelUnderTest.of(model_path, data, sliced),
                         LayerSettings(frames=frames, warmup=warmup), env=_command()) as layers:
        m = layers.measure(power=session, progress=progress, extra={
            "tag": tag, "energy_min_updates": min_updates,
            "note": "nvml measures the GPU board: for CPU layers it is the GPU's draw "
                    "while the CPU works" if source is not None else None})
    if m.power_error is not None:
        raise m.power_error
    tables = m.tables()
    csv_p, _ = write_tables(tables, out / f"layers-{label}-{tag}.csv")
    t, info = tables.totals, m.run.info
    fallback = m.run.layer_extras.get("fallback", [])
    log(f"  {tag}: {t['latency_ms_mean']:.3f} ms/frame over {len(sliced.layers)} layers"
        + (f", {t['energy_mj']:.2f} mJ/frame" if "energy_mj" in t else "")
        + f" ({time.monotonic() - t_start:.0f} s) -> {csv_p.name}")
    return {"csv": csv_p.name, "latency_ms_mean": t["latency_ms_mean"],
            "time_ms_mean": t["time_ms_mean"], "energy_mj": t.get("energy_mj"),
            "fallback_layers": [i for i, f in enumerate(fallback) if f == "yes"],
            "cores": list(info.cores), "threads": info.threads}


def whole_alone(executor: Any, data: bytes, inputs: list[Any], calls: int = 50,
                warmup: int = 10, visit: tuple[int, int] = (3, 1)) -> dict[str, float]:
    """The whole model run alone, as an application runs it: set the inputs, run, read
    every output back. ``median_ms``: median of ``calls`` calls after ``warmup`` (the
    issue's definition); ``visits_ms``: ``calls`` visits measured as the fused rounds
    measure a prefix (``visit`` = calls per visit, untimed first ones; the fastest timed
    call; 20 % trimmed mean over visits), so the two are compared like for like."""
    from profiler.measure.fused import trimmed_estimate

    sub = executor.load(data, name="whole model")

    def call() -> int:
        t0 = time.perf_counter_ns()
        for i, x in enumerate(inputs):
            sub.set_input(i, x)
        sub.run()
        for i in range(len(sub.outputs)):
            np.array(sub.output(i), copy=True)
        return time.perf_counter_ns() - t0

    singles = [call() for _ in range(warmup + calls)][warmup:]
    visits = []
    for _ in range(calls):
        for _ in range(visit[1]):
            call()
        visits.append(min(call() for _ in range(visit[0] - visit[1])))
    return {"median_ms": float(np.median(singles)) / 1e6,
            "visits_ms": float(trimmed_estimate(np.array(visits))[0])}


def profile_fused(sliced: Any, board: Any, letter: str, model_path: Path, data: bytes,
                  out: Path, label: str, tag: str, frames: int, warmup: int, budget_s: float,
                  source: Any, min_updates: int) -> dict[str, Any]:
    """One processor as `coupprof layers --method fused` measures it
    (`profiler.measure.layers`: the sliced frames, the fused rounds, with NVML each
    prefix's power from its repeat window and the layers' energies as differences of
    prefix energies), and the whole model alone before and after, with NVML its energy
    per call repeated alone, to compare."""
    from profiler.measure.freq_trace import open_freq_reader
    from profiler.measure.fused import FusedSettings
    from profiler.measure.layers import LayerSettings, ModelUnderTest, ProcessorLayers
    from profiler.measure.tables import write_tables
    from profiler.power.repeat import measure_repeated
    from profiler.power.session import PowerSession

    t_start = time.monotonic()
    settings = FusedSettings(budget_s=budget_s)
    session = PowerSession(source, counter_updates=min_updates) if source is not None else None
    with contextlib.ExitStack() as stack:
        reader = open_freq_reader(stack, board, board.processor(letter), None, log)
        layers = stack.enter_context(ProcessorLayers(
            board, letter, ModelUnderTest.of(model_path, data, sliced),
            LayerSettings(frames=frames, warmup=warmup, fused=settings), freq_reader=reader,
            env=_command()))
        prof = layers.prefixes
        visit = (settings.visit_calls, settings.visit_warm)
        before = whole_alone(layers.open(), data, prof.inputs, visit=visit)
        m = layers.measure(power=session, extra={"tag": tag})
        after = whole_alone(layers.open(), data, prof.inputs, visit=visit)
        energy: dict[str, Any] = {}
        fe = m.fused_energy
        if source is not None and fe is not None:
            # The whole model's energy per call repeated alone, against the layers' and
            # the fixed row's (prefix energies, as `coupprof layers --power nvml`).
            whole_r = measure_repeated(prof.call(len(prof.columns) - 1), source,
                                       min_updates=min_updates)
            layer_mj = np.array(fe.layer_energy_mj)
            energy = {"prefix_power_w": fe.prefix_power_w, "layer_energy_mj": layer_mj.tolist(),
                      "fixed_power_w": fe.prefix_power_w[0],
                      "fixed_energy_mj": fe.fixed_energy_mj,
                      "layers_plus_fixed_mj": float(layer_mj.sum() + fe.fixed_energy_mj),
                      "whole_call_energy_mj": whole_r.energy_mj,
                      "whole_call_power_w": whole_r.power_w,
                      "whole_call_ms_repeated": whole_r.energy_mj / whole_r.power_w
                      if whole_r.power_w else None,
                      "counter_updates_per_window": min_updates,
                      "ratio": float((layer_mj.sum() + fe.fixed_energy_mj) / whole_r.energy_mj)}
    if m.power_error is not None:
        raise m.power_error
    fused = m.fused
    assert fused is not None
    m.run.info.extra["energy"] = energy or None
    whole_ms = (before["visits_ms"] + after["visits_ms"]) / 2
    whole_median_ms = (before["median_ms"] + after["median_ms"]) / 2
    sl_ms = np.median(m.run.timings.time_ns, axis=0) / 1e6
    fz = fused.times_ms()
    big = np.flatnonzero(sl_ms >= 1.0)
    tables = m.tables()
    csv_p, _ = write_tables(tables, out / f"layers-{label}-{tag}-fused.csv")
    summary = {
        "csv": csv_p.name, "whole_ms": whole_ms, "whole_median_ms": whole_median_ms,
        "whole_before_after": [before, after],
        "sliced_sum_ms": float(sl_ms.sum()), "sliced_over_whole": float(sl_ms.sum() / whole_ms),
        "fixed_ms": fused.fixed.time_ms, "fused_layer_sum_ms": fused.layer_sum_ms,
        "fused_plus_fixed_over_whole": (fused.layer_sum_ms + fused.fixed.time_ms) / whole_ms,
        "rounds": fused.rounds, "elapsed_s": fused.elapsed_s, "converged": fused.converged,
        "median_ci95_ms": float(np.median([layer.ci95_ms for layer in fused.layers])),
        "below_resolution": [layer.index for layer in fused.layers if layer.below_resolution],
        "layers_1ms": int(big.size),
        "max_fused_vs_sliced_1ms": float(np.max(np.abs(fz[big] - sl_ms[big]) / sl_ms[big]))
        if big.size else None,
        "energy": energy or None, "cores": list(m.run.info.cores),
        "threads": m.run.info.threads,
    }
    log(f"  {tag}: whole {whole_ms:.3f} ms (median of single calls {whole_median_ms:.3f}); sliced sum {sl_ms.sum():.3f} "
        f"({summary['sliced_over_whole']:.2f}x); fused {fused.layer_sum_ms:.3f} + fixed "
        f"{fused.fixed.time_ms:.3f} ({summary['fused_plus_fixed_over_whole']:.3f}x), "
        f"{fused.rounds} rounds, median ±{summary['median_ci95_ms']:.3f} ms, "
        f"{len(summary['below_resolution'])} below resolution"
        + (f"; energy layers+fixed / whole {energy['ratio']:.3f}" if energy else "")
        + f" ({time.monotonic() - t_start:.0f} s) -> {csv_p.name}")
    return summary


def gpu_sync_check(sliced: Any, board: Any, out: Path, reps: int = 20) -> dict[str, Any]:
    """Time run_by_index alone, the read right after it, and the read after a pause: if
    the two reads match, run_by_index already waited for the GPU."""
    from profiler.executors import AcceleratorExecutor

    layers = sorted(sliced.layers, key=lambda layer: -layer.macs)[:3]
    rows = []
    with AcceleratorExecutor(board.processor("G"), readback="lazy") as ex:
        for layer in layers:
            sub = ex.load(layer.model_bytes, f"layer {layer.index}")
            for slot, t in enumerate(sub.inputs):
                sub.set_input(slot, np.zeros(t.shape, t.dtype))
            for _ in range(5):
                sub.run()
                sub.output(0)
            run_ns, read_ns, late_ns = [], [], []
            for _ in range(reps):
                t0 = time.perf_counter_ns()
                sub.run()
                t1 = time.perf_counter_ns()
                sub.output(0)
                t2 = time.perf_counter_ns()
                run_ns.append(t1 - t0)
                read_ns.append(t2 - t1)
                sub.run()
                time.sleep(0.05)
                t3 = time.perf_counter_ns()
                sub.output(0)
                late_ns.append(time.perf_counter_ns() - t3)
            rows.append({"layer": layer.index, "macs": layer.macs,
                         "output_bytes": layer.output_bytes,
                         "run_ms_median": float(np.median(run_ns)) / 1e6,
                         "read_ms_median": float(np.median(read_ns)) / 1e6,
                         "read_after_50ms_ms_median": float(np.median(late_ns)) / 1e6})
    waits = all(r["read_ms_median"] <= 1.5 * r["read_after_50ms_ms_median"] + 0.05 for r in rows)
    result = {"layers": rows, "run_by_index_waits_for_gpu": waits,
              "meaning": "true: a read right after run_by_index costs what a read after a "
                         "pause costs, so the run had already finished on the GPU"}
    (out / "gpu_sync.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def run_summary(csv_p: Path) -> dict[str, Any]:
    """measured, predicted and error of a `coupprof run` CSV's summary rows."""
    import pandas as pd

    df = pd.read_csv(csv_p)
    s = df[df["kind"] == "summary"].set_index("metric")
    out: dict[str, Any] = {}
    for metric in ("latency_ms_mean", "throughput_fps", "energy_mj"):
        if metric in s.index:
            out[metric] = {k: (None if pd.isna(s.loc[metric, k]) else float(s.loc[metric, k]))
                           for k in ("measured", "predicted", "error_pct")}
    st = df[df["kind"] == "stage"]
    out["stages"] = [{"processor": r.processor, "layers": [int(r.first_layer), int(r.last_layer)],
                      "measured_ms": float(r.time_ms_mean), "predicted_ms": float(r.predicted_ms)}
                     for r in st.itertuples()]
    return out


def whole_calls(board: Any, letter: str, data: bytes, source: Any, n_calls: int = 300,
                min_updates: int = 10) -> dict[str, Any]:
    """The whole model on `letter` as `coupprof run` calls it (inputs written, then run
    and read back): each of ``n_calls`` back-to-back calls timed, and a counter repeat
    window of the same call (power, time and energy per call)."""
    from profiler.executors import make_executor
    from profiler.executors.base import app_call
    from profiler.measure.runner import random_input
    from profiler.power.repeat import measure_repeated

    with make_executor(board, letter) as ex:
        sub = ex.load(data, name="whole model")
        rng = np.random.default_rng(0)
        inputs = [random_input(io.shape, io.dtype, rng) for io in sub.inputs]
        times: list[int] = []
        timed = app_call(sub, inputs)

        def call() -> None:
            times.append(timed())

        for _ in range(20):
            call()
        times.clear()
        for _ in range(n_calls):
            call()
        ms = np.array(times) / 1e6
        out: dict[str, Any] = {"calls": n_calls, "median_ms": float(np.median(ms)),
                               "mean_ms": float(ms.mean()), "p10_ms": float(np.percentile(ms, 10)),
                               "p90_ms": float(np.percentile(ms, 90)),
                               "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max())}
        if source is not None:
            times.clear()
            r = measure_repeated(call, source, min_updates=min_updates)
            rm = np.array(times) / 1e6
            out["repeat"] = {**r.to_dict(), "call_median_ms": float(np.median(rm)),
                             "call_mean_ms": float(rm.mean()), "calls_timed": int(rm.size),
                             "energy_mj_at_median": r.power_w * float(np.median(rm))}
    return out


SPLIT_PROFILE = """# This machine with the GPU's driving thread on a core of its own (L = core {g}),
# apart from B (cores {b}): pipeline stages on B and G then do not contend for cores.
[board]
name = "host-split"
description = "this machine: B on cores {b}; G (LiteRT GPU) driven from core {g} alone"

[processors.L]
kind = "cpu"
name = "core {g} (drives G)"
cores = [{g}]

[processors.B]
kind = "cpu"
name = "CPU x{nb} (cores {b})"
cores = [{b_list}]

[processors.G]
kind = "gpu"
name = "GPU via LiteRT, driven from core {g}"
host = "L"
accelerator = "gpu"
"""


def split_profile(out: Path, cores: list[int]) -> Path:
    """A profile of this machine with G driven from its last core and B on the others."""
    b, g = cores[:-1], cores[-1]
    path = out / "host-split.toml"
    path.write_text(SPLIT_PROFILE.format(g=g, b=f"{b[0]}-{b[-1]}", nb=len(b),
                                         b_list=", ".join(map(str, b))))
    return path


def gil_during_run(board: Any, data: bytes, calls: int = 20) -> dict[str, Any]:
    """Does G's call (LiteRT's CompiledModel.run_by_index) let other Python threads run?
    A thread counts in a loop while the calls run; its rate against its rate alone."""
    import threading

    from profiler.executors import make_executor

    count = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            count[0] += 1

    def rate(seconds_or_work: Any) -> float:
        count[0] = 0
        stop.clear()
        t = threading.Thread(target=spin)
        t0 = time.perf_counter()
        t.start()
        seconds_or_work()
        dt = time.perf_counter() - t0
        stop.set()
        t.join()
        return count[0] / dt

    with make_executor(board, "G") as ex:
        sub = ex.load(data, name="whole")
        sub.run()
        alone = rate(lambda: time.sleep(0.3))
        during = rate(lambda: [sub.run() for _ in range(calls)])
    return {"spinner_per_s_alone": alone, "spinner_per_s_during_G_calls": during,
            "ratio": during / alone,
            "meaning": "near 1: the call releases the GIL; near 0: other threads wait"}


def switch_penalty(board: Any, data: bytes, other: bytes, reps: int = 30,
                   calls: int = 8) -> dict[str, Any]:
    """G: the whole model's call times by position after calls of another model (what
    switching between compiled models costs a call, and for how many calls)."""
    from profiler.executors import make_executor
    from profiler.measure.runner import random_input

    with make_executor(board, "G") as ex:
        subs = [ex.load(data, name="whole"), ex.load(other, name="other")]
        rng = np.random.default_rng(0)
        ins = [[random_input(io.shape, io.dtype, rng) for io in s.inputs] for s in subs]

        def call(k: int) -> int:
            for i, x in enumerate(ins[k]):
                subs[k].set_input(i, x)
            t0 = time.perf_counter_ns()
            subs[k].run()
            for i in range(len(subs[k].outputs)):
                np.array(subs[k].output(i), copy=True)
            return time.perf_counter_ns() - t0

        rows = []
        for r in range(reps + 2):
            for _ in range(3):
                call(1)
            row = [call(0) for _ in range(calls)]
            if r >= 2:
                rows.append(row)
    ms = np.array(rows) / 1e6
    return {"median_ms_by_position": [float(v) for v in np.median(ms, axis=0)],
            "reps": reps}


def mapped_phase(name: str, path: Path, n_layers: int, out: Path, record: dict[str, Any],
                 letters: list[str], board: Any, source_open: Any, args: Any) -> dict[str, Any]:
    """Issue 10: fused tables, then `coupprof run` of each mapping beside its prediction."""
    label = name
    res: dict[str, Any] = {"model": path.name, "layers": n_layers}
    big = name == "resnet50"
    tables = {}
    for letter in letters:
        csv_p = out / f"layers-{label}-{letter}-fused.csv"
        budget = (args.g_budget_s if letter == "G" else args.b_budget_s) * (2 if big else 1)
        cmd = ["layers", "--board", args.mapped_board, "--processor", letter,
               "--model", str(path), "--method", "fused", "--budget-s", f"{budget:g}", "--frames", "20",
               "--warmup", "3", "--csv", str(csv_p)]
        if letter == "G" and source_open:
            cmd += ["--power", "nvml", "--counter-updates", str(args.energy_updates),
                    "--baseline-s", "2"]
        if letter == "B" and args.b_window:
            cmd += ["--window", str(args.b_window)]
        if cli(cmd, record["commands"]) == 0:
            tables[letter] = csv_p
    split = n_layers // 2
    tr_p = out / f"transfers-{label}-fused.csv"
    transfers = None
    if len(letters) > 1 and cli(
            ["transfer-matrix", "--board", args.mapped_board, "--processors", ",".join(letters),
             "--model", str(path), "--method", "fused", "--boundaries", str(split - 1),
             "--frames", "30", "--budget-s", "5", "--csv", str(tr_p)], record["commands"]) == 0:
        transfers = tr_p
    orders = [letter * n_layers for letter in letters]
    if len(letters) > 1:
        a, b = ("B", "G") if "B" in letters and "G" in letters else (letters[0], letters[1])
        orders += [a * split + b * (n_layers - split), b * split + a * (n_layers - split)]
    runs = []
    for order in orders:
        if not set(order) <= set(tables):
            continue
        for mode in ("switch", "pipeline"):
            compact = "".join(f"{c}{order.count(c)}" for c in dict.fromkeys(order))
            csv_p = out / f"run-{label}-{compact}-{mode}.csv"
            cmd = ["run", "--board", args.mapped_board, "--model", str(path), "--order", order,
                   "--mode", mode, "--layers", ",".join(str(tables[c]) for c in dict.fromkeys(order)),
                   "--frames", str(args.run_frames), "--warmup", "10", "--csv", str(csv_p)]
            if transfers is not None:
                cmd += ["--transfers", str(transfers)]
            rc = cli(cmd, record["commands"])
            row: dict[str, Any] = {"order": compact, "mode": mode, "rc": rc}
            if rc == 0:
                row.update(run_summary(csv_p))
            runs.append(row)
    res["runs"] = runs
    if source_open and "G" in tables:
        try:
            from profiler.slicing.slicer import slice_model

            first = slice_model(path).layers[0].model_bytes
            res["switch_penalty_G"] = switch_penalty(board, path.read_bytes(), first)
            log(f"  switch penalty (G, whole model after another): "
                f"{res['switch_penalty_G']['median_ms_by_position']}")
        except Exception as err:  # a diagnostic: keep going
            res["switch_penalty_G"] = {"error": repr(err)}
        try:
            res["gil_G"] = gil_during_run(board, path.read_bytes())
            log(f"  G's call and the GIL: {res['gil_G']['ratio']:.2f} of a thread's rate alone")
        except Exception as err:  # a diagnostic: keep going
            res["gil_G"] = {"error": repr(err)}
        csv_p = out / f"run-{label}-G{n_layers}-switch-nvml.csv"
        rc = cli(["run", "--board", args.mapped_board, "--model", str(path),
                  "--order", "G" * n_layers,
                  "--mode", "switch", "--layers", str(tables["G"]), "--power", "nvml",
                  "--frames", str(args.run_frames), "--warmup", "10", "--csv", str(csv_p)],
                 record["commands"])
        if rc == 0:
            res["nvml_run"] = run_summary(csv_p)
        from profiler.power.sources import open_power_source

        src = open_power_source("nvml").open()
        try:
            res["whole_calls_G"] = whole_calls(board, "G", path.read_bytes(), src,
                                               min_updates=args.energy_updates)
        finally:
            src.close()
        g_meta = json.loads(tables["G"].with_suffix(".json").read_text())
        tot = g_meta.get("totals", {})
        res["nvml_tables"] = {k: tot.get(k) for k in (
            "energy_mj", "fixed_energy_mj", "whole_energy_mj", "fixed_ms", "whole_ms",
            "fused_layer_sum_ms", "baseline_power_w")}
    (out / f"mapped-{label}.json").write_text(json.dumps(res, indent=2) + "\n")
    for r in runs:
        if r["rc"] == 0:
            lat, fps = r["latency_ms_mean"], r["throughput_fps"]
            log(f"  {r['order']} {r['mode']}: latency {lat['measured']:.3f} (measured) vs "
                f"{lat['predicted']:.3f} ms (predicted; {lat['error_pct']:+.1f} %), throughput "
                f"{fps['measured']:.1f} vs {fps['predicted']:.1f} FPS ({fps['error_pct']:+.1f} %)")
    return res


def cli(args: list[str], record: list[dict[str, Any]], timeout: int = 590) -> int:
    cmd = [sys.executable, "-m", "profiler", *args]
    shown = "coupprof " + shlex.join(args)
    log(f"$ {shown}")
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "COLUMNS": "120"})
    record.append({"command": shown, "returncode": r.returncode,
                   "elapsed_s": round(time.monotonic() - t0, 1)})
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        sys.stdout.write(r.stderr)
    return r.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="output directory")
    ap.add_argument("--cpu-only", action="store_true",
                    help="skip G and NVML (test the plumbing on a machine without a GPU)")
    ap.add_argument("--only", default=",".join(DEFAULT_PHASES),
                    help=f"phases: {','.join(PHASES)} (default: {','.join(DEFAULT_PHASES)})")
    ap.add_argument("--fused-budget-s", type=float, default=60.0,
                    help="fused phase: seconds of interleaved rounds per processor")
    ap.add_argument("--fused-processors", default="G,B",
                    help="fused phase: G and/or B (B: all its cores), to split long models "
                    "over several commands")
    ap.add_argument("--models", default="mobilenet_v1,resnet50",
                    help="zoo models at their default (224 px) size; 'default' is the bundled "
                    "MobileNetV1 0.25/128")
    ap.add_argument("--size", type=int, default=None, help="input size for every model")
    ap.add_argument("--cpu-sets", default="all,4",
                    help="CPU core sets to profile as B: 'all' and/or core counts")
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--energy-updates", type=int, default=10,
                    help="NVML updates (~100 ms each) per layer energy window")
    ap.add_argument("--transfer-energy", default="mobilenet_v1",
                    help="models whose transfer matrix also gets energy (slow); '' for none")
    ap.add_argument("--sim-frames", type=int, default=150)
    ap.add_argument("--g-budget-s", type=float, default=12.0,
                    help="mapped phase: fused rounds' budget for G (doubled for ResNet50)")
    ap.add_argument("--b-window", type=int, default=0,
                    help="mapped: B's fused table in windows of this many layers (0: whole "
                    "prefixes)")
    ap.add_argument("--b-budget-s", type=float, default=20.0,
                    help="mapped phase: fused rounds' budget for B (doubled for ResNet50; "
                    "16 s left ResNet50's whole model at +-12 %% on a noisy host, "
                    "data/validation/h100-run/host-split-6)")
    ap.add_argument("--run-frames", type=int, default=60,
                    help="mapped phase: measured frames per `coupprof run`")
    ap.add_argument("--mapped-board", default="host",
                    help="mapped phase: the board; host-split: this machine with G driven from "
                    "its last core and B on the others (no contention between B and G "
                    "stages); sim: a dry run of the plumbing, no NVML")
    args = ap.parse_args(argv)

    from profiler import zoo
    from profiler.platform import choose_board
    from profiler.slicing.slicer import slice_model

    phases = [p for p in args.only.split(",") if p]
    for p in phases:
        if p not in PHASES:
            ap.error(f"unknown phase {p!r}")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    record: dict[str, Any] = {"script": "benchmarks/validation_gpu.py",
                              "argv": sys.argv[1:], "environment": environment_facts(),
                              "commands": [], "results": {}}
    log(f"environment: {json.dumps(record['environment'])}")
    board = choose_board("host", letters=() if args.cpu_only else None)
    big = board.processor("B")
    allowed = os.sched_getaffinity(0)
    if not set(big.cores) <= allowed:  # a container's cpuset may be narrower than /sys says
        big = replace(big, cores=tuple(c for c in big.cores if c in allowed))
        board = replace(board, processors={
            **board.processors, "B": big,
            **({"G": replace(board.processor("G"), cores=big.cores)}
               if "G" in board.processors else {})})
    source = baseline = None
    if not args.cpu_only and ("layers" in phases or "fused" in phases):
        from profiler.power.sources import open_power_source

        source = open_power_source("nvml").open()
        baseline = idle_power_w(source)
        record["results"]["idle_power_w"] = baseline
        log(f"NVML idle power {baseline:.2f} W")
    models = [m for m in args.models.split(",") if m]
    nvml = not args.cpu_only and args.mapped_board in ("host", "host-split")
    if "mapped" in phases and args.mapped_board == "host-split":
        args.mapped_board = str(split_profile(out, sorted(allowed)))
        board = choose_board(args.mapped_board)
        record["mapped_board"] = Path(args.mapped_board).read_text()
    try:
        for name in models:
            params = {"size": args.size} if args.size else {}
            # "default": the bundled MobileNetV1 0.25/128 (coupprof's default model)
            path = zoo.default_model_path() if name == "default" else zoo.model_path(name, **params)
            label = f"{name}_{args.size}" if args.size and name != "default" else name
            data = path.read_bytes()
            sliced = slice_model(path)
            res = record["results"].setdefault(name, {"model": path.name,
                                                      "layers": len(sliced.layers)})
            log(f"{name}: {len(sliced.layers)} layers ({path.name})")
            if "layers" in phases:
                sets = []
                for s in args.cpu_sets.split(","):
                    n = len(big.cores) if s == "all" else int(s)
                    sets.append(big.cores[:n])
                jobs = ([] if args.cpu_only else [("G", board, "G")]) + [
                    (f"B{len(c)}", replace(board, processors={
                        **board.processors, "B": replace(big, cores=tuple(c))}), "B")
                    for c in sets]
                for tag, bd, letter in jobs:
                    res[f"layers_{tag}"] = profile_layers(
                        sliced, bd, letter, path, data, out, label, tag, args.frames, args.warmup,
                        source, args.energy_updates)
            if "fused" in phases:
                which = [x.strip().upper() for x in args.fused_processors.split(",")]
                jobs = ([] if args.cpu_only or "G" not in which else [("G", board, "G")]) + (
                    [(f"B{len(big.cores)}", board, "B")] if "B" in which else [])
                fz = res.setdefault("fused", {})
                prev = out / f"fused-{label}.json"
                if prev.is_file():  # another command measured the other processor
                    fz.update({k: v for k, v in json.loads(prev.read_text()).items()
                               if k not in fz})
                for tag, bd, letter in jobs:
                    fz[tag] = profile_fused(sliced, bd, letter, path, data, out, label, tag,
                                            args.frames, args.warmup, args.fused_budget_s,
                                            source, args.energy_updates)
                (out / f"fused-{label}.json").write_text(json.dumps(fz, indent=2) + "\n")
            if "mapped" in phases:
                letters = ["B"] if args.cpu_only else ["G", "B"]
                res["mapped"] = mapped_phase(name, path, len(sliced.layers), out, record,
                                             letters, board, nvml, args)
            if "transfers" in phases:
                procs = "B" if args.cpu_only else "B,G"
                cmd = ["transfer-matrix", "--board", "host", "--processors", procs, "--model",
                       str(path), "--frames", str(args.frames), "--warmup", "3",
                       "--csv", str(out / f"transfers-{label}.csv")]
                if not args.cpu_only and name in args.transfer_energy.split(","):
                    cmd += ["--power", "nvml", "--energy-updates", str(args.energy_updates)]
                res["transfers_rc"] = cli(cmd, record["commands"])
            if "sync" in phases and not args.cpu_only and name == models[0]:
                res["gpu_sync"] = gpu_sync_check(sliced, board, out)
                log(f"gpu sync: {json.dumps(res['gpu_sync']['layers'])}")
    finally:
        if source is not None:
            source.close()
    if "sim" in phases:
        sim_model = zoo.model_path("mobilenet_v1", **SIM_MODEL)
        sims = []
        for order in SIM_MAPPINGS:
            csv_p = out / f"sim-run-mobilenet_v1_160-{order}.csv"
            rc = cli(["run", "--board", "sim", "--model", str(sim_model), "--order", order,
                      "--mode", "pipeline", "--frames", str(args.sim_frames), "--warmup", "10",
                      "--profile-frames", "30", "--csv", str(csv_p)], record["commands"])
            row: dict[str, Any] = {"order": order, "rc": rc}
            if rc == 0:
                import pandas as pd

                df = pd.read_csv(csv_p)
                s = df[df["kind"] == "summary"].set_index("metric")
                row.update({k: float(s.loc["throughput_fps", k])
                            for k in ("measured", "predicted", "error_pct")})
            sims.append(row)
        record["results"]["sim_pipeline_throughput"] = sims
        log(f"sim pipeline throughput (measured, predicted, {ERROR_DEFINITION}): " + "; ".join(
            f"{r['order']}: {r.get('measured', 0):.1f}, {r.get('predicted', 0):.1f}, "
            f"{r.get('error_pct', float('nan')):+.1f}" for r in sims))
    record["elapsed_s"] = round(time.monotonic() - started, 1)
    name = "validation.json" if set(phases) == set(DEFAULT_PHASES) else \
        f"validation-{'-'.join(phases)}.json"
    (out / name).write_text(json.dumps(record, indent=2, default=str) + "\n")
    log(f"done in {record['elapsed_s']} s; wrote {out / name}")
    failed = [c for c in record["commands"] if c["returncode"] != 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
