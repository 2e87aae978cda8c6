"""Argument types and option groups shared by several subcommands (no command owns
this module); what they do once parsed is in `profiler.cli.common.plumbing`."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from profiler.measure.method import LOADED_MB_DEFAULT, METHODS

if TYPE_CHECKING:
    from rich.console import Console

    #: What each command module's ``register`` adds its parser to.
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

#: Width of results printed into a pipe or file: rich would use 80 columns there, which
#: squeezes the layer and operator names of a wide table to nothing.
PIPE_WIDTH = 160


def stdout_console(stderr: bool = False) -> Console:
    """A rich console for results on stdout (``stderr``: on stderr, when stdout carries
    data such as `--csv -`): the terminal's width on a terminal; in a pipe or file,
    $COLUMNS if set, else PIPE_WIDTH."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    wide = stream.isatty() or os.environ.get("COLUMNS", "").isdigit()
    return Console(width=None if wide else PIPE_WIDTH, stderr=stderr)


WIDE_HELP = ("show every column of the tables, however wide (default: leave out the lesser "
             "columns whole to fit the terminal, and name them under the table)")


def add_wide_option(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--wide, for a command that prints tables (`profiler.cli.common.output`)."""
    p.add_argument("--wide", action="store_true", help=WIDE_HELP)


def add_output_options(p: argparse.ArgumentParser | argparse._ArgumentGroup, *,
                       csv: str | None, trace: bool = False,
                       json: str = "JSON sidecar to write") -> None:
    """--csv (unless ``csv``, its default for the help, is None), --json, --quiet and
    --wide: where a command's results go (`profiler.cli.common.output`). ``trace``: the
    command keeps a streaming power source's trace beside its CSV."""
    if csv is not None:
        kept = ("; a streaming power source (sim, arduino) also keeps its raw samples and "
                "marker edges in a folder named as the CSV with .trace, which `coupprof plot "
                "timeline` reads (none with -)") if trace else ""
        p.add_argument("--csv", type=Path, default=None, metavar="FILE|-",
                       help=f"CSV to write, - for standard output (the tables and messages "
                       f"then go to standard error; default: {csv}){kept}")
        default = ("the CSV path with .json; with --csv -, none unless given")
    else:
        default = "none"
    p.add_argument("--json", type=Path, default=None, metavar="FILE|-",
                   help=f"{json}, - for standard output (default: {default})")
    add_quiet_option(p)
    add_wide_option(p)


def add_quiet_option(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--quiet (`profiler.cli.common.output`)."""
    p.add_argument("--quiet", "-q", action="store_true",
                   help="print no table, no 'wrote' line and no note, only errors")


def _whole(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{value} must be {least} or more")
    return value


def positive_int(text: str) -> int:
    return _whole(text, 1)


def nonneg_int(text: str) -> int:
    return _whole(text, 0)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return value


def nonneg_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 or more")
    return value


def add_board_args(p: argparse.ArgumentParser) -> None:
    """--board and --sysfs-root."""
    p.add_argument("--board", default=None, metavar="NAME|PATH",
                   help="board profile name or .toml path (default: detect from the device tree,"
                   " else the simulated board 'sim'); `coupprof boards` lists them, 'host' is "
                   "this machine")
    p.add_argument("--sysfs-root", default=None, metavar="DIR",
                   help="sysfs root the host board and governors use "
                   "(default: $COUPPROF_SYSFS_ROOT or /sys)")


def add_model_options(p: argparse.ArgumentParser, *, model: bool = True) -> None:
    """--model (unless the command takes MODEL positionally), --granularity, --cuts."""
    if model:
        p.add_argument("--model", "-m", type=Path, default=None,
                       help="the .tflite model (default: the bundled MobileNetV1 0.25 128x128)")
    p.add_argument("--granularity", choices=("layer", "op"), default="layer",
                   help="layer: the documented default grouping; op: one layer per operator")
    p.add_argument("--cuts", default=None, metavar="I,J,K",
                   help="explicit cut points: op indices where a new layer starts")


POWER_HELP = (
    "Per-layer energy. --power arduino:PORT reads this project's logger firmware over serial "
    "(e.g. arduino:/dev/ttyACM0) and needs a --marker wired to its D2 input; --power sim is "
    "the simulated board's virtual logger (the default there); counter sources "
    "(nvml[:INDEX], rapl[:ZONE], hwmon[:DEVICE[:CH]]) repeat each layer until the counter "
    "resolves it; none leaves the energy columns out. --power ina260:PORT reads an INA260 on "
    "an Arduino printing pin,millis,mW lines (ARM-CO-UP's logger; its pin 13 wired to the "
    "--marker), sim:ina260 the same logger on the simulated board: layers and sweep only, "
    "the marker idles 8 ms after each layer, and layers under ~3 ms get no power. "
    "sim:counter is the simulated board's energy as a counter (RAPL-like: 1 ms, 15.3 uJ).")


def add_power_options(p: argparse.ArgumentParser, *, baseline_s: float = 0.5,
                      baseline_what: str = "before the run", counter: bool = True) -> None:
    """--power, --marker, --baseline-s, --rate (and --counter-updates unless the command
    sizes counter windows its own way)."""
    pw = p.add_argument_group("power", POWER_HELP)
    pw.add_argument("--power", default=None, metavar="SPEC",
                    help="arduino:PORT | sim | sim:ina260 | sim:counter | ina260:PORT | nvml[:I] | "
                    "rapl[:ZONE] | "
                    "hwmon[:DEV[:CH]] | auto | none (default: sim on the simulated board, else "
                    "none)")
    pw.add_argument("--marker", default=None, metavar="SPEC",
                    help="gpiod:CHIP:LINE (e.g. gpiod:/dev/gpiochip0:17) | sysfs:NUMBER | sim | none "
                    "(default: sim with --power sim or sim:ina260, else none)")
    pw.add_argument("--baseline-s", type=float, default=baseline_s, metavar="S",
                    help=f"idle baseline measured {baseline_what}, seconds (default: {baseline_s:g})")
    if counter:
        pw.add_argument("--counter-updates", type=positive_int, default=20, metavar="N",
                        help="counter sources: repeat each layer until its window spans N "
                        "counter updates (error <= 1/N; NVML updates every ~100 ms, so N=20 is "
                        "~2 s per layer; default: 20)")
    pw.add_argument("--rate", type=int, default=None, metavar="HZ",
                    help="ask the logger for this sample rate (default: the firmware's)")


def add_multi_processor_options(p: argparse.ArgumentParser) -> None:
    """The options of commands that run a model across processors (transfer-matrix, run):
    model, board, power (no counter windows) and --seed."""
    add_model_options(p)
    add_board_args(p)
    add_power_options(p, counter=False)
    p.add_argument("--seed", type=int, default=0, help="seed of the random input (default: 0)")


METHOD_HELP = (
    "How a layer's time is measured. fused: inside uninterrupted runs of the model, as "
    "differences of cumulative prefixes (layers 0..k) called in interleaved rounds, with "
    "the fixed per-call cost as its own row and a 95 % interval per layer; rounds go on "
    "until every interval is within the target or the budget is spent. sliced: each "
    "layer as its own sub-model (what a stage boundary pays; gives the hand-overs).")


def add_method_options(p: argparse.ArgumentParser, *, method_help: str | None = None,
                       group_help: str = METHOD_HELP, budget_s: float = 60.0,
                       budget_help: str = "fused: wall seconds of measured rounds at most",
                       window: bool = True) -> None:
    """--method and the fused method's rounds, target and budget; ``window``: --window
    too (per-layer prefixes only: a transfer's prefixes end at its boundary)."""
    m = p.add_argument_group("method", group_help)
    m.add_argument("--method", choices=METHODS, default=None,
                   help=method_help or "fused | sliced (default: fused for G and N, where a "
                   "fixed per-call cost dwarfs small layers; sliced for CPU clusters)")
    m.add_argument("--budget-s", type=positive_float, default=budget_s, metavar="S",
                   help=f"{budget_help} (default: {budget_s:g})")
    m.add_argument("--target-ms", type=nonneg_float, default=None, metavar="MS",
                   help="fused: stop once every row's 95 %% half-width is within this many "
                   "ms or --target-rel of the row (default: a twentieth of the mean layer, the "
                   "whole model less the fixed row over the layers)")
    m.add_argument("--target-rel", type=float, default=0.02, metavar="R",
                   help="fused: relative target (default: 0.02 = 2 %%)")
    m.add_argument("--min-rounds", type=positive_int, default=10, metavar="N",
                   help="fused: measured rounds at least (default: 10)")
    m.add_argument("--max-rounds", type=positive_int, default=10_000, metavar="N",
                   help="fused: measured rounds at most (default: 10000)")
    m.add_argument("--loaded-mb", type=nonneg_float, default=LOADED_MB_DEFAULT, metavar="MB",
                   help="fused: the most MiB of prefix models loaded at once; a deep "
                   "model's prefixes hold about n/2 copies of its weights, so beyond this "
                   "they are built, loaded and measured in blocks of consecutive prefixes "
                   "(ResNet50 224: 1.16 GB of prefixes, under 1 GB of peak RSS in blocks; "
                   "0: all at once; default: %(default)g)")
    m.add_argument("--hold-ms", type=nonneg_float, default=None, metavar="MS",
                   help="fused: before each visit of a prefix, keep the processor busy this "
                   "many ms (untimed) with the heaviest prefix loaded, so that a clock its "
                   "driver moves with the load (a GPU's, where nobody sets it) runs the "
                   "rounds as it runs back-to-back frames; 0: no hold (default: 20 where "
                   "the driver moves the clock, e.g. an NVIDIA GPU read through NVML, "
                   "else 0)")
    if not window:
        p.set_defaults(window=0, lead=6, cache="warm")
        return
    m.add_argument("--cache", choices=("auto", "warm", "cold"), default="auto",
                   help="fused: the caches a timed call finds. warm: as the visit's previous "
                   "call left them; cold: the CPU's last-level cache emptied first, as an "
                   "application's frame leaves it for a model whose weights outgrow it; "
                   "auto: cold on a CPU cluster whose last-level cache (from sysfs) is "
                   "smaller than the model's weights, else warm (default: auto)")
    m.add_argument("--window", type=nonneg_int, default=0, metavar="W",
                   help="fused: cut the layers into segments of W, each measured by "
                   "prefixes of its own that start --lead layers before it, from their "
                   "real inputs; a round then costs about W/2 + L layers per layer "
                   "instead of n/2, and a layer's interval comes from calls W + L layers long, "
                   "not the whole model. For deep models on CPU clusters, e.g. --window 3 "
                   "for ResNet50; the layers then add up to the whole model only within "
                   "their intervals, and the whole model is measured in the same rounds: "
                   "compare the two. "
                   "G and N keep whole prefixes: on an H100 windows over-counted by half, most "
                   "likely from uploads of tensors a window's first calls do not read "
                   "(default: 0 = prefixes of the whole model)")
    m.add_argument("--lead", type=positive_int, default=6, metavar="L",
                   help="fused, with --window: a segment's prefixes start L layers before "
                   "it, so its own buffers are first written by layers that cancel in the "
                   "difference (default: 6; ResNet50 cold in windows of 3 on one core summed "
                   "to 1.038, 1.023, 1.009 of the whole model with leads of 1, 3, 6)")


def add_host_freq_option(p: argparse.ArgumentParser) -> None:
    """--host-freq: the level of the CPU cluster that drives a GPU (its `host`)."""
    p.add_argument("--host-freq", default=None, metavar="K",
                   help="G only: DVFS level of the CPU cluster that drives the GPU (its host "
                   "in the board profile; 1-based, or min / max). A GPU's layer times move "
                   "with it (ARM-CO-UP's Freq_Host). Default: leave it alone; the level "
                   "found is recorded in the host_level / host_freq_khz columns either way")


def add_queue_depth_option(p: argparse.ArgumentParser) -> None:
    """--queue-depth: how many frames wait between Pipeline-mode stages (run and predict)."""
    from profiler.mapping.queueing import QUEUE_DEPTH

    p.add_argument("--queue-depth", type=positive_int, default=QUEUE_DEPTH, metavar="N",
                   help="pipeline: frames each queue between stages holds; every queue before "
                   "the slowest stage fills, so a frame's latency waits behind them "
                   f"(default: {QUEUE_DEPTH})")
