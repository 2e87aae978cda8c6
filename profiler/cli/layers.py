"""`coupprof layers`: time every layer of a model on one processor of a board.

Slices the model (default grouping, `--granularity op` or `--cuts`), pins to the
processor's cores, runs warm-up then measured frames layer by layer, prints the
layer table and writes a tidy CSV with a JSON sidecar. With `--method fused` (the
default for G and N) it then measures every layer inside uninterrupted runs of the
model (`profiler.measure.fused`) and the table shows those times, their intervals and the
fixed per-call row beside the sliced ones.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from profiler.boards.host import format_cpu_list
from profiler.cli import command_help
from profiler.cli.common.options import (
    add_board_args,
    add_host_freq_option,
    add_method_options,
    add_model_options,
    add_power_options,
    nonneg_int,
    positive_int,
    stdout_console,
)
from profiler.cli.common.plumbing import (
    choose_board,
    clock_samplers,
    fused_settings,
    load_model,
    method_for,
    open_power,
    resolve_freq,
    say,
    set_host_freq,
    sysfs_root,
)
from profiler.cli.common.progress import step, task_progress
from profiler.errors import ProfilerError
from profiler.measure.freq_trace import clock_while
from profiler.measure.results import LayerInfo, LayerRun, RunInfo, environment
from profiler.tflite.model_io import sha256_bytes


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "layers",
        help=command_help(__name__),
        description="Run a .tflite model layer by layer (one sub-model per layer) on one "
        "processor of a board and report per-layer time, transfer time and bytes. "
        "Writes a tidy CSV and a JSON sidecar. For a G or N whose clock can be read "
        "(NVML's SM clock for LiteRT's GPU, or the board's governor) the sidecar keeps the "
        "clock the table was measured at (extra.freq_trace), which `coupprof run` compares "
        "with its own.",
    )
    add_model_options(p)
    add_board_args(p)
    p.add_argument("--processor", "-p", default="B", metavar="LETTER",
                   help="L little CPU cluster, B big CPU cluster, G GPU, N NPU (default: B)")
    p.add_argument("--freq", default=None, metavar="K",
                   help="DVFS level: 1-based index into the processor's frequency table, "
                   "or min / max (default: leave the frequency alone)")
    add_host_freq_option(p)
    p.add_argument("--frames", type=positive_int, default=60,
                   help="measured frames (default: 60)")
    p.add_argument("--warmup", type=nonneg_int, default=5,
                   help="unrecorded warm-up frames first (default: 5)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="interpreter threads per layer (default: the processor's core count)")
    p.add_argument("--csv", type=Path, default=None,
                   help="CSV to write (default: ./coupprof-out/layers-MODEL-PROCESSOR.csv)")
    p.add_argument("--json", type=Path, default=None,
                   help="JSON sidecar to write (default: the CSV path with .json)")
    p.add_argument("--raw", action="store_true",
                   help="also write one CSV row per layer and frame with raw timestamps")
    p.add_argument("--seed", type=int, default=0, help="seed of the random input (default: 0)")
    add_power_options(p)
    add_method_options(p)
    p.set_defaults(func=run)


def default_csv_path(model: Path, letter: str) -> Path:
    return Path("coupprof-out") / f"layers-{model.stem}-{letter}.csv"


def run(args: argparse.Namespace) -> int:
    from contextlib import ExitStack

    from governors import RestoreGuard, writable_governor
    from governors.host import read_host_level
    from profiler.executors.factory import make_executor
    from profiler.executors.logs import quiet_native_exit
    from profiler.measure.fused import measure_model
    from profiler.measure.runner import LayerRunner
    from profiler.measure.tables import render, run_tables, with_fused, write_tables

    quiet_native_exit()
    board = choose_board(args)
    proc = board.processor(args.processor)
    level = resolve_freq(board, proc, args.freq)
    method = method_for(args, proc)
    settings = fused_settings(args) if method == "fused" else None
    fused = fused_energy = None

    power_error: ProfilerError | None = None
    power = None
    gov_result = None
    with ExitStack() as stack, task_progress(sys.stderr.isatty()) as bar:
        model, data, sliced = load_model(args, bar)
        csv_path = args.csv or default_csv_path(model, proc.letter)
        root = sysfs_root(args)
        gov = writable_governor(board, proc.letter, root) if level else None
        host_gov, host_level = set_host_freq(board, proc, args.host_freq, root)
        # Frequencies are restored on success, errors, Ctrl-C and SIGTERM.
        stack.enter_context(RestoreGuard([g for g in (gov, host_gov) if g is not None]))
        session, _ = open_power(args, board, csv_path.with_suffix(".trace"), layer_runs=True)
        if session is not None:
            stack.enter_context(session)
        if gov is not None and level is not None:
            gov_result = gov.set_khz(level[1], level=level[0])
            if gov_result.warning:
                say(f"warning: {gov_result.warning}")
        if host_gov is not None and host_level is not None:
            host_result = host_gov.set_khz(host_level[1], level=host_level[0])
            if host_result.warning:
                say(f"warning: host {host_result.warning}")
        host = read_host_level(board, proc.letter, root, requested=host_gov is not None)
        if session is not None:
            # The idle baseline comes first: compiling layers for an accelerator is work
            # too, and a GPU stays clocked up for seconds after it.
            session.begin()
        executor = stack.enter_context(make_executor(board, proc.letter, threads=args.threads))
        runner = LayerRunner(sliced, executor, seed=args.seed, model_name=model.name)
        if session is not None:
            runner.hooks = session.hooks(args.frames, len(sliced.layers))
        # The clock (where it can be read) while the figures the table reports are
        # measured: the frames, or the fused rounds.
        sampler = clock_samplers(stack, board, [proc.letter], root).get(proc.letter)
        try:
            with clock_while(sampler if settings is None else None):
                timings = runner.run(
                    frames=args.frames, warmup=args.warmup,
                    progress=step(bar, "frames"),
                )
        except BaseException:
            if session is not None:
                session.abort()
            raise
        # The fused method's energies come from its prefixes (each run back to back while
        # the source resolves its power), not from the sliced layers' windows, which hold
        # each sliced call's own fixed cost.
        prefix_energy = session is not None and settings is not None
        if session is not None:
            power = session.finish(
                timings, [] if prefix_energy and not session.streaming else
                [runner.layer_call(i) for i in range(len(sliced.layers))],
                progress=step(bar, "energy per layer"))
            power_error = power.error
        fallback = fallback_columns(runner)
        fallback.update(late_columns(runner))
        if settings is not None:
            powers = (lambda calls: session.call_powers(calls, step(bar, "energy per prefix"))) \
                if prefix_energy and session is not None else None
            with clock_while(sampler):
                fused, fused_energy = measure_model(
                    executor, data, sliced, settings, seed=args.seed,
                    progress=step(bar, "fused rounds"), model_name=model.name,
                    prefix_powers=powers, sysfs_root=root)

    extra: dict[str, Any] = {"board_description": board.description, "seed": args.seed,
                             "cores_text": format_cpu_list(executor.cores),
                             "executor": executor.describe()}
    if gov_result is not None:
        extra["governor"] = {"kind": gov.kind, "requested_khz": level[1] if level else None,
                             "effective_khz": gov_result.effective_khz,
                             "warning": gov_result.warning}
    if sampler is not None:
        trace = sampler.trace()
        extra["freq_trace"] = trace.to_dict() if trace is not None else None
        if sampler.error:
            extra["freq_trace_error"] = sampler.error
        say(f"{proc.letter}'s clock while measured: "
            f"{trace.text() if trace else 'no sample read'}"
            f"{f' (sampling stopped: {sampler.error})' if sampler.error else ''}")
    if power is not None:
        extra.update(power.info)
        if power.error is not None:
            extra["power_error"] = str(power.error)
    info = RunInfo(
        board=board.name,
        simulated=board.simulated,
        model_path=str(model.resolve()),
        model_sha256=sha256_bytes(data),
        processor=proc.letter,
        processor_name=proc.name,
        cores=tuple(executor.cores),
        threads=executor.threads,
        frames=args.frames,
        warmup=args.warmup,
        granularity=sliced.granularity,
        cuts=tuple(sliced.cuts),
        freq_level=level[0] if level else None,
        freq_khz=level[1] if level else None,
        power_source=session.source.spec if session is not None else "none",
        method=method,
        extra=extra,
        **environment(),
    )
    layer_extras = dict(power.columns) if power is not None else {}
    layer_extras.update(fallback)
    if host is not None:
        layer_extras.update(host.columns(len(sliced.layers)))
        extra["host"] = host.to_dict()
    result = LayerRun(info, [LayerInfo.from_layer(layer) for layer in sliced.layers], timings,
                      layer_extras=layer_extras,
                      total_extras=dict(power.totals) if power is not None else {})
    tables = run_tables(result, raw=args.raw)
    if fused is not None:
        tables = with_fused(tables, fused, fused_energy)
    stdout_console().print(render(tables))
    csv_p, json_p = write_tables(tables, csv_path, args.json)
    print(f"wrote {csv_p} ({len(tables.layers)} layer rows"
          f"{f', {len(tables.frames)} frame rows' if tables.frames is not None else ''})"
          f" and {json_p}")
    if power_error is not None:
        print(f"coupprof layers: error: {power_error} (timings kept; power columns "
              f"{'partial' if power and power.columns else 'absent'})", file=sys.stderr)
        return power_error.exit_code
    return 0


def late_columns(runner: Any) -> dict[str, Any]:
    """On the simulated board, `sim_late_runs`: per layer, the runs (warm-up included) in
    which this machine took longer than the modelled processor, so the layer took the
    host's time instead of the model's."""
    from profiler.executors import late_runs

    counts = late_runs(runner.interpreters)
    if not any(runs for runs, _ in counts):
        return {}
    return {"sim_late_runs": [late for _, late in counts]}


def fallback_columns(runner: Any) -> dict[str, Any]:
    """A `fallback` column when any layer ran (partly) on the CPU instead of its accelerator."""
    from profiler.executors import fallback_flags

    flags = fallback_flags(runner.interpreters)
    if all(f is None for f in flags):
        return {}
    return {"fallback": ["" if f is None else ("yes" if f else "no") for f in flags]}
