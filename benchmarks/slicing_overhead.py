"""What slicing a model into per-layer sub-models costs, single thread.

1. Ratio: median over frames of (sum of the layer times in one frame) divided by the
   median of the whole model's invoke time. Both run in the same process on the same
   core, interleaved frame by frame (order alternating), so drift hits both alike.
   Targets: <= 1.10 on the default model, <= 1.05 on ResNet50.
   Beside it, the fused method (`profiler.measure.fused`: differences of cumulative prefixes in
   interleaved rounds, the whole model among them): (sum of fused layers + the fixed
   per-call row) / the whole model's median invoke, target within 2 %; and, for every
   layer of 1 ms or more, fused vs sliced, target within 5 %. The sliced layers compared
   are frames run between the fused rounds (each after an untimed one; median over
   them), so drift over the minutes the rounds take hits both alike. ResNet50's 54
   layers are measured in windows of 3 (`--resnet-window`, `FusedSettings.window`):
   whole prefixes of a model that deep cost 27 model runs a round, and their
   differences carry the jitter of runs 280 ms long.
   The fused calls find the caches as `--cache` says (default auto: cold where the
   model's weights outgrow the core's last-level cache, as ResNet50's 102 MB do on
   most cores; `profiler.measure.fused`, "Cache state"), and windows start `--lead` layers early.
2. Wall time to slice ResNet50 (cache off).
3. Instrumentation cost per layer: a chain of N trivial ADD sub-models, run through
   the runner (clock reads, hand-over copies, timestamp bookkeeping) and bare
   (only the N invokes); (instrumented - bare) / N. Target: <= 5 us per layer.

    .venv/bin/python benchmarks/slicing_overhead.py [--frames 300] [--resnet-frames 30]
        [--fused-budget-s 60] [--resnet-fused-budget-s 900] [--window 0] [--resnet-window 3]
        [--cache auto|warm|cold] [--lead 6]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from profiler import zoo
from profiler.boards.model import ProcessorKind, ProcessorSpec
from profiler.executors.cpu import CpuExecutor
from profiler.measure.fused import CACHE_STATES, FusedSettings, fused_profiler, trimmed_estimate
from profiler.measure.runner import LayerRunner
from profiler.slicing.slicer import slice_model
from profiler.tflite.model_io import serialize_model
from profiler.zoo.emit import draw_constants, to_model
from profiler.zoo.graph import GraphBuilder

TARGETS = {"default": 1.10, "resnet50": 1.05}
FUSED_WHOLE_TARGET = 0.02  # |fused sum + fixed - whole| / whole
FUSED_SLICED_TARGET = 0.05  # |fused - sliced| / sliced, layers of 1 ms or more
INSTRUMENTATION_TARGET_US = 5.0


def verdict(value: float, target: float) -> str:
    return "ok" if value <= target else "OVER TARGET"


def ratio(data: bytes, executor: CpuExecutor, frames: int, warmup: int) -> dict[str, Any]:
    """Interleaved per-layer frames and whole-model invokes on the same inputs."""
    sliced = slice_model(data, cache_dir=False)
    runner = LayerRunner(sliced, executor, seed=0)
    whole = executor.interpreter(data, name="whole model")
    for det in whole.get_input_details():
        whole.set_tensor(det["index"], runner.inputs[det["index"]])
    clock = time.perf_counter_ns

    def whole_frame() -> int:
        t0 = clock()
        whole.invoke()
        return clock() - t0

    def layer_frame() -> int:
        row = runner.run_frame()
        return sum(end - start for _, _, start, end in row)

    for _ in range(warmup):
        whole_frame()
        layer_frame()
    sums, wholes, rows = [], [], []

    def layer_frame_kept() -> int:
        row = runner.run_frame()
        rows.append([end - start for _, _, start, end in row])
        return sum(rows[-1])

    for f in range(frames):
        if f % 2:  # alternate which goes first
            wholes.append(whole_frame())
            sums.append(layer_frame_kept())
        else:
            sums.append(layer_frame_kept())
            wholes.append(whole_frame())
    med_sum, med_whole = statistics.median(sums), statistics.median(wholes)
    return {
        "layers": len(sliced.layers),
        "frames": frames,
        "median_layer_sum_ms": med_sum / 1e6,
        "median_whole_ms": med_whole / 1e6,
        "ratio": med_sum / med_whole,
        "layer_median_ms": [statistics.median(c) / 1e6 for c in zip(*rows, strict=True)],
    }


def visit_ns(run: Callable[[], object], calls: int = 3, warm: int = 1) -> int:
    """One visit as the fused rounds visit a prefix: ``warm`` untimed calls, then the
    fastest of the other ``calls - warm`` (ns)."""
    for _ in range(warm):
        run()
    best = None
    for _ in range(calls - warm):
        t0 = time.perf_counter_ns()
        run()
        dt = time.perf_counter_ns() - t0
        best = dt if best is None else min(best, dt)
    return int(best or 0)


def fused_vs(data: bytes, executor: CpuExecutor, budget_s: float, window: int,
             cache: str, lead: int, visit_calls: int = FusedSettings.visit_calls,
             visit_warm: int = FusedSettings.visit_warm) -> dict[str, Any]:
    """The fused method on the same core. Each round also visits the whole model (one
    untimed invoke, then the fastest of two timed invokes, as the prefixes are visited),
    so the whole invoke it is compared with shares the rounds' drift and load, and runs
    one sliced frame, whose per-layer medians the fused layers are compared with."""
    sliced = slice_model(data, cache_dir=False)
    # every prefix loaded at once (loaded_mb 0): its rounds are interleaved with whole
    # and sliced frames here, visit by visit (ResNet50's windows hold about 2.3 GB)
    settings = FusedSettings(budget_s=budget_s, target_ms=0.001, target_rel=0.01,
                             window=window, lead=lead, cache=cache, loaded_mb=0,
                             visit_calls=visit_calls, visit_warm=visit_warm)
    prof = fused_profiler(executor, data, sliced, settings)
    runner = LayerRunner(sliced, executor, seed=0)
    whole = executor.load(data, name="whole model")
    for i, x in enumerate(prof.inputs):
        whole.set_input(i, x)

    def whole_visit() -> int:
        return visit_ns(whole.run, settings.visit_calls, settings.visit_warm)

    def sliced_frame() -> list[int]:
        # a frame right after a round finds the caches as the round's last prefixes left
        # them (about 7 % slower on ResNet50 here); the sliced method times frames back to
        # back, so one untimed frame first, as a visit's first call is untimed
        runner.run_frame()
        return [end - start for _, _, start, end in runner.run_frame()]

    calls = [runner.layer_call(k) for k in range(len(sliced.layers))]

    def warm_layers() -> list[int]:
        # each layer called again at once, as a frame left its inputs: what it costs with
        # its own buffers in the cache (docs/fused.md, "What the sliced rows hold")
        out = []
        for call in calls:
            call()
            t0 = time.perf_counter_ns()
            call()
            out.append(time.perf_counter_ns() - t0)
        return out

    for r in range(settings.warmup_rounds):
        prof.run_round(bool(r % 2), calls=settings.visit_calls, warm=settings.visit_warm)
        whole_visit()
        sliced_frame()
    rows, wholes, sliced_rows, warm_rows = [], [], [], []
    start = time.monotonic()
    while time.monotonic() - start < budget_s or len(rows) < settings.min_rounds:
        if len(rows) % 2:
            wholes.append(whole_visit())
            sliced_rows.append(sliced_frame())
        rows.append(prof.run_round(bool(len(rows) % 2), calls=settings.visit_calls,
                                   warm=settings.visit_warm))
        if len(rows) % 2:
            sliced_rows.append(sliced_frame())
            warm_rows.append(warm_layers())
            wholes.append(whole_visit())
    res = prof.result(np.array(rows), settings, time.monotonic() - start, converged=False)
    whole_ms = float(trimmed_estimate(np.array(wholes))[0])
    fused_ms = res.times_ms()
    sl_ms = [float(v) for v in np.median(np.array(sliced_rows), axis=0) / 1e6]
    big = [k for k, t in enumerate(sl_ms) if t >= 1.0]
    gaps = [abs(fused_ms[k] - sl_ms[k]) / sl_ms[k] for k in big]
    warm_ms = [float(v) for v in np.median(np.array(warm_rows), axis=0) / 1e6]
    warm_gaps = [abs(fused_ms[k] - warm_ms[k]) / warm_ms[k] for k in big]
    return {
        "rounds": res.rounds, "elapsed_s": res.elapsed_s, "budget_s": budget_s,
        "window": window, "lead": lead, "cache": res.settings.cache,
        "visit_calls": visit_calls, "visit_warm": visit_warm,
        "evict_bytes": res.evict_bytes, "sliced_frames": len(sliced_rows),
        "fused_layer_sum_ms": res.layer_sum_ms, "fixed_ms": res.fixed.time_ms,
        "fixed_ms_ci95": res.fixed.ci95_ms, "whole_invoke_ms": whole_ms,
        "fused_sum_over_whole": res.layer_sum_ms / whole_ms,
        "sliced_sum_over_whole_same_rounds": float(
            np.median(np.array(sliced_rows).sum(axis=1))) / 1e6 / whole_ms,
        "layers_1ms": len(big), "max_fused_vs_sliced": max(gaps) if gaps else float("nan"),
        "within_target_1ms": int(sum(g <= FUSED_SLICED_TARGET for g in gaps)),
        "median_fused_vs_sliced": float(statistics.median(gaps)) if gaps else float("nan"),
        "below_resolution": [layer.index for layer in res.layers if layer.below_resolution],
        "median_ci95_ms": float(statistics.median(layer.ci95_ms for layer in res.layers)),
        "fused_ms": [float(t) for t in fused_ms],
        "fused_ci95_ms": [layer.ci95_ms for layer in res.layers],
        "sliced_median_ms": sl_ms,
        "warm_alone_median_ms": warm_ms,
        "within_target_1ms_warm_alone": int(sum(g <= FUSED_SLICED_TARGET for g in warm_gaps)),
        "median_fused_vs_warm_alone": float(statistics.median(warm_gaps)) if warm_gaps
        else float("nan"),
        "median_fused_over_sliced": float(statistics.median(fused_ms[k] / sl_ms[k] for k in big))
        if big else float("nan"),
        "median_fused_over_warm_alone": float(statistics.median(
            fused_ms[k] / warm_ms[k] for k in big)) if big else float("nan"),
    }


def print_fused(name: str, f: dict[str, Any], sliced_ratio: float) -> None:
    dev = abs(f["fused_sum_over_whole"] - 1)
    print(f"{name}: side by side: sliced sum / whole invoke = {sliced_ratio:.3f} (frames "
          f"interleaved); fused sum {f['fused_layer_sum_ms']:.3f} ms / whole invoke "
          f"{f['whole_invoke_ms']:.3f} ms (same rounds) = {f['fused_sum_over_whole']:.3f} "
          f"(target within {FUSED_WHOLE_TARGET:.0%}: "
          f"{'ok' if dev <= FUSED_WHOLE_TARGET else 'OVER TARGET'}); fixed row "
          f"{f['fixed_ms']:.4f} ± {f['fixed_ms_ci95']:.4f} ms (a dispatch: the input write is untimed, it is the hand-over); "
          f"{f['rounds']} rounds "
          f"({'windows of ' + str(f['window']) + ', lead ' + str(f['lead']) if f['window'] else 'whole prefixes'}"
          f", caches {f['cache']}) in "
          f"{f['elapsed_s']:.1f} s, median interval "
          f"±{f['median_ci95_ms']:.4f} ms, {len(f['below_resolution'])} layers below resolution")
    if f["layers_1ms"]:
        ok = f["max_fused_vs_sliced"] <= FUSED_SLICED_TARGET
        print(f"{name}: {f['layers_1ms']} layers of 1 ms or more, fused vs sliced (median of "
              f"{f['sliced_frames']} frames between the rounds) at most "
              f"{f['max_fused_vs_sliced']:.1%} apart (target {FUSED_SLICED_TARGET:.0%}: "
              f"{'ok' if ok else 'OVER TARGET'}); {f['within_target_1ms']} of them "
              f"({f['within_target_1ms'] / f['layers_1ms']:.0%}) within "
              f"{FUSED_SLICED_TARGET:.0%}, the median {f['median_fused_vs_sliced']:.1%} apart, "
              f"fused / sliced at the median {f['median_fused_over_sliced']:.3f}")
        print(f"{name}: the same layers against each layer called again at once (its own "
              f"buffers in the cache): {f['within_target_1ms_warm_alone']} of them "
              f"({f['within_target_1ms_warm_alone'] / f['layers_1ms']:.0%}) within "
              f"{FUSED_SLICED_TARGET:.0%}, the median {f['median_fused_vs_warm_alone']:.1%} "
              f"apart, fused / warm alone at the median {f['median_fused_over_warm_alone']:.3f}")
    else:
        print(f"{name}: no layer of 1 ms or more on this core")


def add_chain(n: int, shape: tuple[int, ...] = (1, 8)) -> bytes:
    """x -> x+x -> ... : n ADD operators on a tiny tensor (invoke cost ~ nothing)."""
    g = GraphBuilder("add_chain")
    cur = g.input("x", shape)
    for i in range(n):
        cur = g.add(cur, cur, act="NONE", name=f"add{i}")
    g.output(cur)
    return serialize_model(to_model(g, draw_constants(g, 0)))


def instrumentation(executor: CpuExecutor, n_layers: int, frames: int) -> dict[str, Any]:
    sliced = slice_model(add_chain(n_layers), "op", cache_dir=False)
    runner = LayerRunner(sliced, executor)
    invokes = [interp.invoke for interp in runner.interpreters]
    clock = time.perf_counter_ns

    def bare() -> int:
        t0 = clock()
        for invoke in invokes:
            invoke()
        return clock() - t0

    def instrumented() -> int:
        t0 = clock()
        runner.run_frame()
        return clock() - t0

    for _ in range(20):
        bare()
        instrumented()
    b, m = [], []
    for _ in range(frames):
        b.append(bare())
        m.append(instrumented())
    med_b, med_m = statistics.median(b), statistics.median(m)
    return {
        "layers": n_layers,
        "frames": frames,
        "bare_us_per_layer": med_b / n_layers / 1e3,
        "instrumented_us_per_layer": med_m / n_layers / 1e3,
        "overhead_us_per_layer": (med_m - med_b) / n_layers / 1e3,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=300, help="frames on the default model")
    ap.add_argument("--resnet-frames", type=int, default=30, help="frames on ResNet50")
    ap.add_argument("--resnet-size", type=int, default=224, help="ResNet50 input size")
    ap.add_argument("--fused-budget-s", type=float, default=60.0,
                    help="fused rounds' budget on the default model, s")
    # 300 s (about 60 rounds of windows of 3, intervals +-0.05-0.10 ms) met the 5 %
    # per-layer target in one run of three on the 2-core VM; 900 s (176 rounds, +-0.06 ms)
    # met it: the largest of 52 gaps is an extreme of the noise, which rounds shrink.
    ap.add_argument("--resnet-fused-budget-s", type=float, default=900.0,
                    help="fused rounds' budget on ResNet50, s (default: 900)")
    ap.add_argument("--window", type=int, default=0,
                    help="fused on the default model: layers per window (0: whole prefixes)")
    ap.add_argument("--resnet-window", type=int, default=3,
                    help="fused on ResNet50: layers per window (0: whole prefixes)")
    ap.add_argument("--cache", choices=CACHE_STATES, default=FusedSettings.cache,
                    help="fused: the caches a timed call finds (FusedSettings.cache; auto: "
                    "cold where the model's weights outgrow the last-level cache)")
    ap.add_argument("--lead", type=int, default=FusedSettings.lead,
                    help="fused, in windows: layers a segment's prefixes start before it")
    ap.add_argument("--visit-calls", type=int, default=FusedSettings.visit_calls,
                    help="fused: calls of a prefix back to back per round (its fastest timed "
                    "call is kept)")
    ap.add_argument("--visit-warm", type=int, default=FusedSettings.visit_warm,
                    help="fused: of those, the first not timed")
    ap.add_argument("--skip-fused", action="store_true")
    ap.add_argument("--skip-resnet", action="store_true")
    ap.add_argument("--chain", type=int, default=200, help="trivial layers for the cost test")
    ap.add_argument("--core", type=int, default=None, help="core to pin to (default: the last)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)

    core = args.core if args.core is not None else max(os.sched_getaffinity(0))
    proc = ProcessorSpec("B", ProcessorKind.CPU, f"core {core}", (core,))
    out: dict[str, Any] = {"core": core, "threads": 1, "machine": platform.machine(),
                           "python": platform.python_version(), "command": " ".join(sys.argv)}
    print(f"single thread, pinned to core {core}")
    with CpuExecutor(proc, threads=1) as ex:
        default = zoo.default_model_path()
        r = ratio(default.read_bytes(), ex, args.frames, warmup=20)
        out["default"] = {"model": default.name, **r}
        print(f"{default.name}: {r['layers']} layers, median per-frame layer sum "
              f"{r['median_layer_sum_ms']:.3f} ms / median whole invoke {r['median_whole_ms']:.3f} ms"
              f" = ratio {r['ratio']:.3f} (target <= {TARGETS['default']:.2f}: "
              f"{verdict(r['ratio'], TARGETS['default'])}; {args.frames} frames)")
        if not args.skip_fused:
            f = fused_vs(default.read_bytes(), ex, args.fused_budget_s, args.window,
                         args.cache, args.lead, args.visit_calls, args.visit_warm)
            out["default"]["fused"] = f
            print_fused(default.name, f, r["ratio"])

        if not args.skip_resnet:
            data = zoo.build("resnet50", size=args.resnet_size)
            t0 = time.perf_counter()
            sliced = slice_model(data, cache_dir=False)
            slice_s = time.perf_counter() - t0
            out["resnet50_slice_s"] = slice_s
            print(f"resnet50 (size {args.resnet_size}, {len(data) / 1e6:.1f} MB): sliced into "
                  f"{len(sliced.layers)} layers in {slice_s:.2f} s (cache off)")
            del sliced
            r = ratio(data, ex, args.resnet_frames, warmup=2)
            out["resnet50"] = {"size": args.resnet_size, **r}
            print(f"resnet50: median per-frame layer sum {r['median_layer_sum_ms']:.2f} ms / "
                  f"median whole invoke {r['median_whole_ms']:.2f} ms = ratio {r['ratio']:.3f} "
                  f"(target <= {TARGETS['resnet50']:.2f}: {verdict(r['ratio'], TARGETS['resnet50'])}; "
                  f"{args.resnet_frames} frames)")
            if not args.skip_fused:
                f = fused_vs(data, ex, args.resnet_fused_budget_s, args.resnet_window,
                             args.cache, args.lead, args.visit_calls, args.visit_warm)
                out["resnet50"]["fused"] = f
                print_fused("resnet50", f, r["ratio"])

        c = instrumentation(ex, args.chain, frames=300)
        out["instrumentation"] = c
        print(f"instrumentation on {c['layers']} trivial ADD layers: "
              f"{c['instrumented_us_per_layer']:.2f} us/layer instrumented vs "
              f"{c['bare_us_per_layer']:.2f} bare = {c['overhead_us_per_layer']:.2f} us/layer "
              f"(target <= {INSTRUMENTATION_TARGET_US:g}: "
              f"{verdict(c['overhead_us_per_layer'], INSTRUMENTATION_TARGET_US)})")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
