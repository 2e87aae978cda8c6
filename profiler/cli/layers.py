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
from typing import TYPE_CHECKING

from profiler.cli import command_help
from profiler.cli.common.options import (
    add_board_args,
    add_host_freq_option,
    add_method_options,
    add_model_options,
    add_output_options,
    add_power_options,
    nonneg_int,
    positive_int,
)
from profiler.cli.common.output import Output
from profiler.cli.common.plumbing import (
    choose_board,
    fused_settings,
    load_model,
    method_for,
    open_power,
    resolve_freq,
    say,
    sysfs_root,
)
from profiler.cli.common.progress import task_progress
from profiler.measure.method import Method

if TYPE_CHECKING:
    from profiler.cli.common.options import Subparsers


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "layers",
        help=command_help(__name__),
        description="Time every layer of a .tflite model on one processor of a board and "
        "report per-layer time, energy (with a power source) and bytes. --method fused "
        "times the layers inside runs of the whole model (differences of prefixes), as an "
        "application calls it; --method sliced runs each layer as its own sub-model, which "
        "also gives the hand-over times (the default per processor: see --method). "
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
    add_output_options(p, csv="./coupprof-out/layers-MODEL-PROCESSOR.csv", trace=True)
    p.add_argument("--raw", action="store_true",
                   help="also write one CSV row per layer and frame with raw timestamps")
    p.add_argument("--seed", type=int, default=0, help="seed of the random input (default: 0)")
    add_power_options(p)
    add_method_options(p)
    p.set_defaults(func=run)


#: What the power trace folder beside the CSV holds, for the "wrote" line.
TRACE_WHAT = "the power logger's raw samples and marker edges, which `coupprof plot timeline` draws"


def default_csv_path(model: Path, letter: str) -> Path:
    return Path("coupprof-out") / f"layers-{model.stem}-{letter}.csv"


def run(args: argparse.Namespace) -> int:
    from profiler.executors.logs import quiet_native_exit
    from profiler.measure.hardware import host_level
    from profiler.measure.layers import LayerSettings, ModelUnderTest, measure_layers
    from profiler.measure.tables import LESSER_COLUMNS, layers_sidecar, render, results_frame

    quiet_native_exit()
    out = Output.of(args)
    board = choose_board(args)
    proc = board.processor(args.processor)
    level = resolve_freq(board, proc, args.freq)
    method = method_for(args, proc)
    settings = LayerSettings(frames=args.frames, warmup=args.warmup, seed=args.seed,
                             threads=args.threads,
                             fused=fused_settings(args) if method is Method.FUSED else None)
    with task_progress(out.progress) as bar:
        model, data, sliced = load_model(args, bar)
        default_csv = default_csv_path(model, proc.letter)
        trace_dir = out.trace_dir(default_csv)
        host = host_level(board, proc.letter, args.host_freq)
        session, _ = open_power(args, board, trace_dir, layer_runs=True)
        m = measure_layers(board, proc.letter, ModelUnderTest.of(model, data, sliced), settings,
                           level=level, host_level=host, power=session,
                           sysfs_root=sysfs_root(args), note=say, progress=bar)
    if m.freq is not None:
        trace, error = m.freq_trace, m.freq.error
        say(f"{proc.letter}'s clock while measured: "
            f"{trace.text() if trace else 'no sample read'}"
            f"{f' (sampling stopped: {error})' if error else ''}")
    fit = m.clock_fit  # the rows against the clock read at each visit
    if fit is not None and (fit.identified or m.level is None):  # a level set holds
        say(f"{proc.letter}'s rows against its clock: " + (
            f"fitted as t = a + b * {fit.freq_ref_khz / 1000:.0f} MHz / f over "
            f"{fit.range_text()} (CSV: time_ms_clock_fixed = a, time_ms_clock_scaled = b); "
            "predictions price a run at the clock it measured" if fit.identified
            else f"not fitted: {fit.why}"))
    tables = m.tables(raw=args.raw)
    out.table(render(tables), drop=LESSER_COLUMNS)
    written = out.save(results_frame(tables), layers_sidecar(tables, None), default_csv)
    out.wrote(written, f"{len(tables.layers)} layer rows"
              f"{f', {len(tables.frames)} frame rows' if tables.frames is not None else ''}",
              trace=trace_dir, trace_what=TRACE_WHAT)
    if m.power_error is not None:
        print(f"coupprof layers: error: {m.power_error} (timings kept; power columns "
              f"{'partial' if m.power and m.power.columns else 'absent'})", file=sys.stderr)
        return m.power_error.exit_code
    return 0
