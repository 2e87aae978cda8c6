"""`coupprof run`: execute a mapping of layers to processors and measure it.

    coupprof run --order GGBBBBNN --mode switch|pipeline [--freq SPEC] [--frames N]
                 [--layers CSV,...] [--transfers CSV] [--power SPEC]

Switch: one frame at a time, layers serially on their processors with per-layer
DVFS. Pipeline: each run of same-letter layers is a stage with its own pinned thread
and bounded queues in between. Prints per-stage time, throughput, end-to-end
latency (and energy per frame with a power source) beside the prediction from layer
and transfer tables (`profiler.mapping.predict`), measured here when none are given.

`--method fused` (the default) runs each stage as an application would: its layers
as one sub-model, one call (cut only where a per-layer --freq changes the level);
`--method sliced` runs every layer as its own sub-model, as the per-layer tables'
sliced frames do. The output says which ran, and the prediction prices the same calls.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from rich import box
from rich.table import Table

from profiler.cli import command_help
from profiler.cli.common.devices import add_devices_option
from profiler.cli.common.options import (
    add_method_options,
    add_multi_processor_options,
    add_output_options,
    add_queue_depth_option,
    nonneg_int,
    positive_float,
    positive_int,
)
from profiler.cli.common.output import Output
from profiler.cli.common.plumbing import (
    choose_board,
    fused_settings,
    load_model,
    open_power,
    say,
    sysfs_root,
)
from profiler.cli.common.progress import task_progress
from profiler.errors import BadInputError
from profiler.measure.method import Method

if TYPE_CHECKING:
    from profiler.boards.model import Board
    from profiler.cli.common.options import Subparsers
    from profiler.mapping.pipeline import MappedRun
    from profiler.mapping.predict import Prediction
    from profiler.mapping.spec import Mapping
    from profiler.power.session import PowerSession
    from profiler.slicing.specs import SlicedModel

SIDECAR_FORMAT = "coupprof-run/1"

FREQ_HELP = """\
DVFS SPEC (levels are 1-based indices into each processor's table, or min/max; N uses
its host cluster's): '4' every processor at level 4 (set once); 'G=4,B=8' per processor
(set once); '4/8/3' per stage; '4,4,6,6,6,6,3,3' per layer ('-' leaves a layer alone),
requested before each layer. See docs/mapping.md. Default: leave frequencies alone."""


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "run",
        help=command_help(__name__),
        description="Run the model with its layers mapped to processors by --order (one "
        "letter per layer, e.g. GGBBBBNN or G2B4N2; the length must equal the layer count). "
        "--mode switch runs each frame's layers serially, switching processors at the "
        "boundaries, with per-layer DVFS; --mode pipeline makes every run of same-letter "
        "layers a stage with its own thread pinned to its processor's host cores, joined "
        "by bounded queues. Reports per-stage time, throughput, end-to-end latency and "
        "energy per frame (with --power) beside the prediction from layer and transfer "
        "tables (--layers/--transfers, or measured first) and the error. Where a G's or "
        "N's clock can be read (NVML's SM clock for LiteRT's GPU, or the board's governor), "
        "it is sampled while the tables and the run are measured; a fused table whose "
        "rounds saw the clock move has its rows fitted against it, and the stage is "
        "priced at the clock this run measured. Without such a fit, the run says when the "
        "clocks differ by more than 15 %: the prediction then may not hold.",
        epilog=FREQ_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--order", required=True, metavar="LETTERS",
                   help="processor per layer, e.g. GGBBBBNN (L little, B big, G GPU, N NPU); "
                   "with --devices, DEVICE:ORDER per device part, e.g. 'd0:B4G3 d1:B8'")
    add_devices_option(p, "run the model across its devices (or a bundled file by name, "
                       "e.g. sim2), one MPI rank per device part, each measured on its own "
                       "board and power source; needs MPI: pip install 'coupprof[devices]'")
    p.add_argument("--timeout-s", type=positive_float, default=None, metavar="S",
                   help="with --devices: stop the ranks after S seconds of wall time, as "
                   "Ctrl-C does (each puts its levels back; what they measured is kept; "
                   "exit 4); default: no limit")
    p.add_argument("--mode", choices=("switch", "pipeline"), required=True,
                   help="switch: one frame at a time; pipeline: stages run concurrently")
    p.add_argument("--freq", default=None, metavar="SPEC", help="DVFS SPEC (see below)")
    add_multi_processor_options(p)
    p.add_argument("--frames", type=positive_int, default=50,
                   help="measured frames (default: 50)")
    p.add_argument("--warmup", type=nonneg_int, default=5,
                   help="unrecorded warm-up frames first (default: 5)")
    add_queue_depth_option(p)
    p.add_argument("--layers", default=None, metavar="CSV|DIR[,...]",
                   help="layer tables from `coupprof layers`, or a `coupprof sweep` "
                   "directory, for the prediction (default: measure each layer on its "
                   "processor first)")
    p.add_argument("--transfers", type=Path, default=None, metavar="CSV",
                   help="transfer table from `coupprof transfer-matrix` (default: measure "
                   "the mapping's hand-overs first)")
    p.add_argument("--raw", action="store_true",
                   help="also write one CSV row per frame and call (kind frame) with raw "
                   "timestamps, and each frame's latency beside its predicted one")
    p.add_argument("--no-predict", action="store_true",
                   help="only measure the mapping; skip the prediction")
    p.add_argument("--profile-frames", type=positive_int, default=20,
                   help="frames per layer when measuring tables for the prediction (default: 20)")
    add_method_options(
        p, group_help=RUN_METHOD_HELP, budget_s=20.0,
        budget_help="fused: wall seconds of interleaved rounds per processor when measuring "
        "tables for the prediction",
        method_help="fused (default): each stage's layers as one sub-model and one call, as "
        "an application runs them; sliced: one sub-model and call per layer")
    add_output_options(p, csv="./coupprof-out/run-MODEL-ORDER-MODE.csv", trace=True)
    p.set_defaults(func=run)


RUN_METHOD_HELP = (
    "How the mapped layers are executed, and priced. fused: a stage's consecutive layers "
    "are cut from the model as one sub-model and run by one call (one compiled model, one "
    "invoke, one read-back), so an accelerator stage pays its fixed per-call cost once; a "
    "per-layer --freq that changes the level inside a stage cuts it there. Tables measured "
    "here for the prediction then use the fused method too. sliced: every layer is its "
    "own sub-model and call (each pays that cost), as the sliced per-layer frames.")


def _stats(ns: np.ndarray) -> tuple[float, float]:
    ms = ns.astype(np.float64) / 1e6
    return float(ms.mean()), float(np.percentile(ms, 95))


def _err(pred: float | None, meas: float | None) -> float:
    from profiler.mapping.accuracy import error_pct

    return error_pct(pred, meas)


def _f(v: float | None, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}"


def tables(run: MappedRun, pred: Prediction | None, sliced: SlicedModel
           ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(layer rows, stage rows, summary rows) of a measured run and its prediction."""
    mapping = run.mapping
    lt, tt = run.call_time_ns, run.transfer_ns
    layer_rows = []
    pred_calls = {(c.first, c.last): c.index for c in pred.calls} if pred else {}
    for c in run.calls:
        t_mean, t_p95 = _stats(lt[:, c.index])
        x_mean, x_p95 = _stats(tt[:, c.index])
        k = pred_calls.get((c.first, c.last))
        p_time = pred.call_ms[k] if pred and k is not None else math.nan
        row: dict[str, Any] = {"kind": "layer" if run.method == Method.SLICED else "call"}
        if run.method == Method.SLICED:
            row["layer"] = int(sliced.layers[c.first].index)
        else:
            row.update({"call": c.index, "first_layer": c.first, "last_layer": c.last})
        row.update({
            "processor": c.processor, "stage": c.stage, "time_ms_mean": t_mean,
            "time_ms_p95": t_p95, "transfer_ms_mean": x_mean, "transfer_ms_p95": x_p95,
            "fallback": "" if run.fallback[c.index] is None else bool(run.fallback[c.index]),
            "predicted_time_ms": p_time,
            "predicted_transfer_ms": pred.handover_ms[c.first] if pred else math.nan,
        })
        layer_rows.append(row)
    stage_rows = []
    for st in mapping.stages:
        b_mean, b_p95 = _stats(run.stage_busy_ns[:, st.index])
        r_mean, _ = _stats(run.stage_readout_ns[:, st.index])
        ps = pred.stages[st.index].time_ms if pred else math.nan
        stage_rows.append({
            "kind": "stage", "stage": st.index, "processor": st.processor,
            "first_layer": st.first, "last_layer": st.last, "time_ms_mean": b_mean,
            "time_ms_p95": b_p95, "readout_ms_mean": r_mean, "predicted_ms": ps,
            "error_pct": _err(ps, b_mean),
        })
        if run.stage_energy_mj is not None:  # switch mode with a streaming source
            stage_rows[-1]["energy_mj"] = float(run.stage_energy_mj[st.index])
        if st.index in run.process_handover_ms:
            stage_rows[-1]["process_ms_mean"] = run.process_handover_ms[st.index]
    lat_mean, lat_p95 = _stats(run.latency_ns)
    summary: list[tuple[str, float | None, float | None]] = [
        ("latency_ms_mean", lat_mean, pred.latency_ms if pred else None),
        ("latency_ms_p95", lat_p95, None),
        ("throughput_fps", run.throughput_fps, pred.throughput_fps if pred else None),
    ]
    if run.energy_mj is not None or (pred is not None and pred.energy_mj is not None):
        summary.append(("energy_mj", run.energy_mj, pred.energy_mj if pred else None))
        e = run.energy_mj
        summary.append(("fps_per_w", 1000.0 / e if e else None,
                        1000.0 / pred.energy_mj if pred and pred.energy_mj else None))
    if run.power_info.get("baseline_power_w") is not None:
        summary.append(("baseline_power_w", run.power_info["baseline_power_w"], None))
    summ_rows = [{"kind": "summary", "metric": m, "measured": v,
                  "predicted": pv, "error_pct": _err(pv, v)} for m, v, pv in summary]
    return pd.DataFrame(layer_rows), pd.DataFrame(stage_rows), pd.DataFrame(summ_rows)


def frame_rows(run: MappedRun, pred: Prediction | None) -> pd.DataFrame:
    """`--raw`: one row per frame and call (``kind = "frame"``) with the raw timestamps, as
    `coupprof layers --raw` writes them, and the frame's latency beside the predicted one
    (Pipeline mode: the frame's own, waiting in queues that fill from an empty pipeline)."""
    from profiler.mapping.queueing import frame_latencies_ms
    from profiler.measure.results import LAYER_END, LAYER_START, TRANSFER_END, TRANSFER_START

    n, ts = run.frames, run.ts_ns
    if pred is None:
        want = [math.nan] * n
    elif run.mode == "pipeline":
        want = frame_latencies_ms([st.time_ms for st in pred.stages], run.queue_depth, n)
    else:
        want = [pred.latency_ms] * n
    rows = []
    for f in range(n):
        for c in run.calls:
            t = ts[f, c.index]
            rows.append({
                "kind": "frame", "frame": f, "call": c.index, "stage": c.stage,
                "processor": c.processor, "first_layer": c.first, "last_layer": c.last,
                "time_ms": (t[LAYER_END] - t[LAYER_START]) / 1e6,
                "transfer_ms": (t[TRANSFER_END] - t[TRANSFER_START]) / 1e6,
                "start_ns": int(t[LAYER_START]), "end_ns": int(t[LAYER_END]),
                "transfer_start_ns": int(t[TRANSFER_START]),
                "transfer_end_ns": int(t[TRANSFER_END]), "done_ns": int(run.done_ns[f]),
                "latency_ms": float(run.latency_ns[f]) / 1e6, "predicted_latency_ms": want[f],
            })
    return pd.DataFrame(rows)


#: The stage table's columns a narrow terminal may leave out, least wanted first
#: (`profiler.cli.common.fit`); the summary table is narrow enough for any.
LESSER_COLUMNS = ("ms p95", "read-out")


def render(run: MappedRun, pred: Prediction | None, stages: pd.DataFrame, summ: pd.DataFrame, title: str,
           notes: list[str]) -> list[Table]:
    from profiler.mapping.accuracy import ERROR_HEADER

    t1 = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    has_e = "energy_mj" in stages.columns
    for col in ("stage", "proc", "layers", "ms mean", "ms p95", "read-out", "predicted",
                ERROR_HEADER, *(["mJ"] if has_e else [])):
        t1.add_column(col, justify="left" if col in ("proc", "layers") else "right")
    slowest = int(stages["time_ms_mean"].idxmax()) if len(stages) else -1
    for k, r in stages.iterrows():
        mark = " *" if k == slowest and run.mode == "pipeline" else ""
        t1.add_row(str(r["stage"]), r["processor"], f"{r['first_layer']}-{r['last_layer']}",
                   _f(r["time_ms_mean"]) + mark, _f(r["time_ms_p95"]), _f(r["readout_ms_mean"]),
                   _f(r["predicted_ms"]), _f(r["error_pct"], 1),
                   *([_f(r["energy_mj"])] if has_e else []))
    calls = f"{len(run.calls)} call{'s' if len(run.calls) != 1 else ''} a frame"
    how = (f"fused: each stage's layers in one call, {calls}" if run.method == Method.FUSED
           else f"sliced: one call per layer, {calls}")
    t2 = Table(title=f"{run.mode} mode, {run.frames} frames; {how}", box=box.SIMPLE_HEAD,
               title_justify="left", caption="\n".join(notes) or None, caption_justify="left")
    for col in ("metric", "measured", "predicted", ERROR_HEADER):
        t2.add_column(col, justify="left" if col == "metric" else "right")
    for _, r in summ.iterrows():
        t2.add_row(r["metric"], _f(r["measured"]), _f(r["predicted"]), _f(r["error_pct"], 1))
    return [t1, t2]


def run(args: argparse.Namespace) -> int:
    from profiler.executors.logs import quiet_native_exit
    from profiler.mapping.accuracy import ERROR_UNIT
    from profiler.mapping.pipeline import MappingRunConfig, run_mapping
    from profiler.mapping.predict import (
        handover_points,
        mapping_transfers,
        measure_costs,
        predict,
        priced_at_clocks,
        read_layer_tables,
    )
    from profiler.mapping.spec import parse_freq, parse_order
    from profiler.mapping.transfer import read_transfer_csv
    from profiler.measure.freq_trace import FreqSampler
    from profiler.measure.hardware import clock_samplers, governors_for
    from profiler.measure.layers import Levels
    from profiler.measure.results import environment
    from profiler.tflite.model_io import sha256_bytes

    quiet_native_exit()
    if args.devices is not None:
        return run_on_devices(args)
    if args.timeout_s is not None:
        raise BadInputError("--timeout-s is for runs across devices",
                            "give --devices FILE, or leave --timeout-s out")
    out = Output.of(args)
    method = Method(args.method or Method.FUSED)
    letters = [c for c in args.order.upper() if c.isalpha()]
    board = choose_board(args, letters)
    notes: list[str] = []
    with ExitStack() as stack, task_progress(out.progress) as bar:
        model, data, sliced = load_model(args, bar)
        mapping = parse_order(args.order, len(sliced.layers), board)
        plan = parse_freq(args.freq, mapping, board)
        layer_costs = read_layer_tables(
            args.layers.split(","), processors=letters,
            note=lambda line: say(f"run: {line}")) if args.layers else None
        transfers = read_transfer_csv(args.transfers) if args.transfers else None
        govs = governors_for(board, mapping.processors, sysfs_root(args)) \
            if plan.mode != "none" else {}
        default_csv = Path("coupprof-out") / f"run-{model.stem}-{mapping.compact}-{args.mode}.csv"
        trace_dir = out.trace_dir(default_csv)
        meter, sim_model = open_power(args, board, trace_dir)
        if meter is not None:
            stack.enter_context(meter)
        held = stack.enter_context(Levels(govs.values(), note=say))
        if plan.mode == "per-processor":
            held.setup(plan.setup, govs)
        # Accelerators' clocks (where they can be read): while their tables are measured
        # here, and while the mapping runs, so a run at another clock is said to be one.
        table_clock = clock_samplers(stack, board, mapping.processors, sysfs_root(args), say)
        if not args.no_predict and layer_costs is None:
            layer_costs, measured_transfers = measure_costs(
                sliced, board, mapping, freq=plan, governors=govs, frames=args.profile_frames,
                warmup=min(args.warmup, 3), power=meter, activity=sim_model, seed=args.seed,
                model_name=model.name, method=method, model_bytes=data,
                fused=fused_settings(args), clock=table_clock)
            notes.append(f"prediction from layer times measured just before the run ({method})")
            if transfers is None:
                transfers = measured_transfers
                notes.append("transfers measured just before the run")
        elif not args.no_predict and transfers is None and handover_points(mapping, plan,
                                                                           method):
            transfers = mapping_transfers(
                sliced, board, mapping, freq=plan, frames=args.profile_frames,
                warmup=min(args.warmup, 3), power=meter, activity=sim_model, seed=args.seed,
                model_name=model.name, method=method, model_bytes=data,
                fused=fused_settings(args))
            notes.append("transfers measured just before the run")
        total = args.warmup + args.frames
        run_clock = {letter: FreqSampler(s.reader) for letter, s in table_clock.items()}
        sampling_started = False
        with ExitStack() as sampling:

            def frames_done(done: int, _total: int) -> None:
                # the clock over the measured frames: sampling starts once the warm-up is done
                nonlocal sampling_started
                if done >= args.warmup and not sampling_started:
                    sampling_started = True
                    for sampler in run_clock.values():
                        sampling.enter_context(sampler)
                if bar:
                    bar("frames", done, total)

            frames_done(0, total)
            result = run_mapping(sliced, board, MappingRunConfig(
                mapping, args.mode, frames=args.frames, warmup=args.warmup, freq=plan,
                governors=govs, queue_depth=args.queue_depth, power=meter, activity=sim_model,
                seed=args.seed, model_name=model.name, method=method, model_bytes=data,
                progress=frames_done))
    run_traces = {letter: s.trace() for letter, s in run_clock.items()}
    clock_notes: list[str] = []
    if layer_costs is not None and not args.no_predict:
        # each processor priced at the clock this run measured, where its table's rows
        # were fitted against the clock; else its figures stand, with a note where the
        # clocks differ
        layer_costs, clock_notes = priced_at_clocks(
            layer_costs, run_traces, lambda letter: plan.level[mapping.order.index(letter)])
    pred = None if args.no_predict or layer_costs is None else \
        predict(mapping, args.mode, layer_costs, transfers, plan, method,
                queue_depth=args.queue_depth, frames=args.frames,
                process_ms=result.process_handover_warmup_ms)
    if pred is not None:
        notes += pred.notes
    if pred is not None and pred.missing:
        notes.append(f"no transfer measured at {', '.join(pred.missing)} (counted as 0)")
    if pred is not None and pred.energy_note:
        notes.append(f"energy: {pred.energy_note}")
    if any(result.fallback):
        fb = [str(i) for i, f in enumerate(result.fallback) if f]
        notes.append(f"CPU fallback in layer(s) {', '.join(fb)}")
    if args.mode == "pipeline":
        notes.append(f"* slowest stage; the predicted latency waits in queues of "
                     f"{args.queue_depth} frames (the mean over {args.frames} frames from an "
                     "empty pipeline)")
        apart = [st for st in mapping.stages if "process" in result.executors.get(st.index, {})]
        kept = [st for st in mapping.stages if board.processor(st.processor).accelerator
                and st not in apart]
        if apart:
            notes.append(f"stage(s) {', '.join(str(st.index) for st in apart)} ran in a process "
                         "of their own: LiteRT's accelerator call holds Python's GIL while it "
                         "runs, which would hold up the other stages")
        for k, ms in sorted(result.process_handover_ms.items()):
            warm = result.process_handover_warmup_ms.get(k)
            priced = (f"the prediction adds {warm:.3f} ms, its median over the warm-up frames"
                      if warm is not None else "not in the prediction: it is measured over "
                      "the warm-up frames after the first (use --warmup 2 or more)")
            notes.append(f"stage {k}: handing a frame to its process and back took {ms:.3f} "
                         f"ms a frame, part of its time ({priced})")
        if kept and len(mapping.stages) > 1 and not board.simulated:
            notes.append(f"stage(s) {', '.join(str(st.index) for st in kept)} ran on a thread "
                         "(a per-layer --freq inside the stage keeps it there), and LiteRT's "
                         "accelerator call holds Python's GIL while it runs, so the other "
                         "stages' hand-overs and read-outs wait for it; the prediction assumes "
                         "they do not")
        shared = _shared_cores(board, mapping)
        if shared:
            notes.append(f"stages {shared} share host cores, so they contend when they run "
                         "at once; the prediction assumes they do not (give the processors "
                         "disjoint cores in the board profile)")
    if pred is not None:
        notes += clock_notes
    if board.simulated:
        notes.append(_host_note(result))
    if pred is not None and plan.mode == "per-layer":
        levels: dict[str, set[int]] = {}
        for dom, khz in zip(plan.domain, plan.khz, strict=True):
            if khz is not None:
                levels.setdefault(dom, set()).add(khz)
        moving = [d for d, ks in levels.items() if len(ks) > 1]
        if moving:
            notes.append(f"per-layer DVFS changes the level of {', '.join(moving)} within each "
                         "frame: governor writes and transition delays are measured, not "
                         "predicted")
    layer_df, stage_df, summ_df = tables(result, pred, sliced)
    sim = " (simulated board)" if board.simulated else ""
    title = f"{model.name} on {board.name}{sim}: {mapping.compact}, {plan.describe()}"
    for t in render(result, pred, stage_df, summ_df, title, notes):
        out.table(t, drop=LESSER_COLUMNS)

    df = pd.concat([summ_df, stage_df, layer_df,
                    *([frame_rows(result, pred)] if args.raw else [])], ignore_index=True)
    sidecar = {
        "format": SIDECAR_FORMAT, "csv": None, "board": board.name,
        "simulated": board.simulated, "model_path": str(model.resolve()),
        "model_sha256": sha256_bytes(data), "order": mapping.order, "compact": mapping.compact,
        "mode": args.mode, "method": method,
        "calls": [[c.first, c.last] for c in result.calls],
        "freq": plan.text, "freq_plan": plan.describe(),
        "freq_khz": [k for k in plan.khz], "frames": args.frames, "warmup": args.warmup,
        "queue_depth": args.queue_depth, "max_in_flight": result.max_in_flight,
        "host_cores_used": result.host_cores_used, "host_cores": len(os.sched_getaffinity(0)),
        "host_loadavg": list(os.getloadavg()),
        "power_source": meter.name if meter is not None else "none",
        "power": _power_meta(result, meter), "executors": result.executors,
        "freq_traces": {
            "run": {k: t.to_dict() if t else None for k, t in run_traces.items()},
            "tables": {f"{k[0]}@{k[1]}" if k[1] is not None else k[0]: t.to_dict()
                       for k, t in (layer_costs.freq_traces if layer_costs else {}).items()},
            # the range each table's rounds saw, where its rows were fitted against it
            "table_fits": {f"{k[0]}@{k[1]}" if k[1] is not None else k[0]: {
                "identified": f.identified, "why": f.why, "freq_ref_khz": f.freq_ref_khz,
                "freq_min_khz": f.freq_min_khz, "freq_max_khz": f.freq_max_khz}
                for k, f in (layer_costs.clock_fits if layer_costs else {}).items()}},
        "prediction": pred.to_dict() if pred else None,
        "prediction_inputs": {"layers": layer_costs.sources if layer_costs else None,
                              "transfers": str(args.transfers) if args.transfers else
                              ("measured" if pred else None)},
        "notes": notes, "units": {"error_pct": ERROR_UNIT}, **environment(),
    }
    out.wrote(out.save(df, sidecar, default_csv), f"{len(df)} rows", trace=trace_dir)
    if result.power_error is not None:
        print(f"coupprof run: error: {result.power_error} (timings kept; no energy)",
              file=sys.stderr)
        return result.power_error.exit_code
    return 0


def _shared_cores(board: Board, mapping: Mapping) -> str:
    """'B and G (cores 0-15)' when processors of different stages drive from the same host
    cores (on the `host` board, G is driven from B's), else ''."""
    from profiler.boards.host import format_cpu_list

    letters = mapping.processors
    pairs = []
    for i, a in enumerate(letters):
        for b in letters[i + 1:]:
            common = set(board.processor(a).cores) & set(board.processor(b).cores)
            if common:
                pairs.append(f"{a} and {b} (cores {format_cpu_list(sorted(common))})")
    return ", ".join(pairs)


def _host_note(run: MappedRun) -> str:
    """On the simulated board the stages really run on this machine: say how much of it
    they needed, and how busy it was (a short host stretches modelled times)."""
    cores = len(os.sched_getaffinity(0))
    load = os.getloadavg()[0]
    return (f"simulated: the stage threads kept {run.host_cores_used:.2f} of this machine's "
            f"{cores} cores busy (1-min load average {load:.2f}); with little to spare, "
            "layers and hand-overs run late and measured times exceed the model's")


def _power_meta(run: MappedRun, meter: PowerSession | None) -> dict[str, Any] | None:
    """The sidecar's power block: baseline, window, per-frame and per-stage energies."""
    if meter is None:
        return None
    out: dict[str, Any] = {"source": meter.name, "energy_mj_per_frame": run.energy_mj,
                           **run.power_info}
    if run.frame_energy_mj is not None:
        out["frame_energy_mj"] = [float(v) for v in run.frame_energy_mj]
    if run.stage_energy_mj is not None:
        out["stage_energy_mj"] = [float(v) for v in run.stage_energy_mj]
    if run.energy_window_ns is not None:
        out["energy_window_ns"] = list(run.energy_window_ns)
    if run.power_error is not None:
        out["error"] = str(run.power_error)
    return out


# -- across devices (--devices) ------------------------------------------------------------

#: run's options that a devices file sets per device, or that only a one-board run has
_NOT_WITH_DEVICES = ("board", "sysfs_root", "power", "marker", "layers", "transfers")


def run_on_devices(args: argparse.Namespace) -> int:
    """`coupprof run --devices FILE`: one rank per device part (`profiler.devices.run`)."""
    import signal

    from profiler.devices.run import DevicesRunConfig, part_rows, run_devices, sidecar

    given = [f"--{k.replace('_', '-')}" for k in _NOT_WITH_DEVICES if getattr(args, k, None)]
    if given:
        raise BadInputError(f"{', '.join(given)} cannot go with --devices",
                            "set each device's board, power and marker in the devices file")
    out = Output.of(args)
    if args.model is None:
        from profiler.zoo import default_model_path

        args.model = default_model_path()
    model = Path(args.model)
    default_csv = Path("coupprof-out") / f"run-devices-{model.stem}.csv"
    csv = out.csv_path(default_csv)
    ranks_dir = (csv or default_csv).with_suffix(".ranks")
    result = run_devices(DevicesRunConfig(
        args.devices, args.order, args.mode, model, ranks_dir, frames=args.frames,
        warmup=args.warmup, granularity=args.granularity, cuts=args.cuts,
        method=args.method or Method.FUSED, freq=args.freq, queue_depth=args.queue_depth,
        seed=args.seed, timeout_s=args.timeout_s))
    rows = part_rows(result)
    out.table(_devices_table(result.mode_title(model.name), rows))
    df = pd.DataFrame(rows).astype({"rank": "Int64", "first_layer": "Int64",
                                    "last_layer": "Int64"})
    out.wrote(out.save(df, sidecar(result), default_csv), f"{len(df)} rows")
    say(f"run: each rank's own record, as it went: {ranks_dir}")
    for p in result.parts:
        if p.restored and not all(p.restored.values()):
            say(f"run: warning: device {p.device}: levels not restored "
                f"({', '.join(d for d, ok in p.restored.items() if not ok)})"
                + (f": {p.restore_error}" if p.restore_error else ""))
    code = result.exit_code
    if result.launched.timed_out:
        print(f"coupprof run: error: the ranks ran past --timeout-s {args.timeout_s:g} and "
              "were stopped"
              f"{', every device' + chr(39) + 's levels are restored' if result.all_restored else ''}"
              f"; what each measured is kept ({ranks_dir})", file=sys.stderr)
    elif code == 4:
        first = result.first_dead
        dead = [first] if first is not None else [p for p in result.parts if not p.finished]
        print(f"coupprof run: error: the rank of {', '.join(p.device for p in dead)} stopped "
              "before the end; MPI stopped the others"
              f"{', every device' + chr(39) + 's levels are restored' if result.all_restored else ''}"
              f" and what each measured is kept ({ranks_dir})", file=sys.stderr)
    elif code == 130:
        sig = signal.Signals(result.launched.signalled or signal.SIGINT).name
        print(f"coupprof run: interrupted ({sig}): the ranks were stopped"
              f"{', every device' + chr(39) + 's levels are restored' if result.all_restored else ''}"
              f" and what each measured is kept ({ranks_dir})", file=sys.stderr)
    elif result.error is not None:
        print(f"coupprof run: error: {result.error}", file=sys.stderr)
    for device, err in result.power_errors.items():
        print(f"coupprof run: error: device {device}: {err} (timings kept; no energy)",
              file=sys.stderr)
    return code


def _devices_table(title: str, rows: list[dict[str, Any]]) -> Table:
    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("device", "layers", "stages ms", "mJ/frame", "peak RSS MB", "tensor MB",
                "in B/frame", "out B/frame", "link ms", "restored"):
        t.add_column(col, justify="left" if col in ("device", "layers", "stages ms") else "right")
    for r in rows:
        if r["kind"] == "total":
            continue
        t.add_row(r["device"], f"{r['first_layer']}-{r['last_layer']}", r["stage_ms"] or "-",
                  _f(r["energy_mj"]), _f(r["peak_rss_mb"], 1), _f(r["tensor_mb"], 2),
                  f"{r['bytes_in']:.0f}", f"{r['bytes_out']:.0f}",
                  _f(r["link_real_ms"] + (0 if math.isnan(r["link_added_ms"])
                                          else r["link_added_ms"])), r["restored"])
    tot = rows[-1]
    t.caption = (f"throughput {_f(tot['throughput_fps'], 2)} fps, latency "
                 f"{_f(tot['latency_ms_mean'])} ms mean, {_f(tot['latency_ms_p95'])} ms p95 "
                 f"({tot['frames_done']} frames out), energy {_f(tot['energy_mj'])} mJ a frame "
                 "over all devices")
    t.caption_justify = "left"
    return t
