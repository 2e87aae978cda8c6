"""`coupprof transfer-matrix`: the cost of handing each layer boundary between processors.

    coupprof transfer-matrix [--model M] [--board B] [--processors L,B,G,N] [--freq 4]
                             [--frames N] [--power SPEC] [--method fused|sliced] [--csv PATH]

For every layer boundary and ordered processor pair (src = dst included, the
baseline), the time from the producing sub-model finishing on src to the consuming
sub-model's inputs being written on dst, each processor driven by its own thread on
its own cores (ARM-CO-UP Fig. 18). Long CSV: boundary, src, dst, bytes, tensors,
time_ms_{mean,median,p95,std}, reps, and energy_mj when --power gives a source.
See profiler/mapping/transfer.py for exactly what is timed.

`--method fused` adds, per boundary and src, ``readout_ms``: what cutting the model
there costs the producer beyond the fused layer times, i.e. its call reading every
crossing tensor back in full rather than reduced (an accelerator's download; 0 on a
CPU). `coupprof predict` charges it to the producing stage.
"""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

from profiler.cli import command_help
from profiler.cli.common.devices import add_devices_option, render_links
from profiler.cli.common.options import (
    add_method_options,
    add_multi_processor_options,
    add_output_options,
    nonneg_int,
    positive_int,
)
from profiler.cli.common.output import Output
from profiler.cli.common.plumbing import (
    choose_board,
    fused_settings,
    load_model,
    open_power,
    parse_letters,
    say,
    sysfs_root,
)
from profiler.cli.common.progress import step, task_progress
from profiler.errors import BadInputError
from profiler.measure.method import Method

if TYPE_CHECKING:
    import pandas as pd

    from profiler.cli.common.options import Subparsers


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "transfer-matrix",
        help=command_help(__name__),
        description="For every layer boundary and ordered processor pair (src = dst too, as "
        "the baseline), measure the time (and energy, with --power) of handing the "
        "boundary's tensors from the producing sub-model on src to the consuming one on dst: "
        "the producer finishes on src, its outputs are read out and handed to dst's thread "
        "(pinned to dst's cores), written into dst's input buffers, and the consumer can "
        "start (ARM-CO-UP Fig. 18). Writes a long CSV (boundary, src, dst, bytes, time_ms "
        "mean/median/p95/std, energy_mj with a power source) and a JSON sidecar; prints a "
        "src x dst summary and the per-boundary view.",
    )
    add_multi_processor_options(p)
    p.add_argument("--processors", default=None, metavar="L,B,G,N",
                   help="processors to pair (default: every processor of the board; on "
                   "'host', G is LiteRT's GPU accelerator and must be asked for)")
    p.add_argument("--freq", default=None, metavar="SPEC",
                   help="DVFS levels held during the measurement, set once: '4' (every "
                   "processor) or 'G=4,B=8' (per processor); N uses its host's level "
                   "(default: leave frequencies alone)")
    p.add_argument("--frames", type=positive_int, default=30,
                   help="measured hand-overs per (boundary, src, dst) (default: 30)")
    p.add_argument("--warmup", type=nonneg_int, default=3,
                   help="unrecorded hand-overs first (default: 3)")
    p.add_argument("--energy-updates", type=positive_int, default=20, metavar="N",
                   help="with a counter power source (nvml, rapl, hwmon): each energy "
                   "window spans at least N counter updates (default: 20)")
    p.add_argument("--boundaries", default=None, metavar="B,B,...",
                   help="only these boundaries (b: between layer b and b+1; default: all)")
    add_method_options(
        p, group_help=MATRIX_METHOD_HELP, budget_s=10.0,
        budget_help="fused: wall seconds of interleaved rounds per (boundary, src) read-back",
        window=False,
        method_help="sliced (default): the hand-over between two per-layer sub-models; "
        "fused: the same, plus readout_ms, the producer's extra read-back of the boundary's "
        "tensors in full, which fused layer tables leave out")
    add_output_options(p, csv="./coupprof-out/transfers-MODEL.csv", trace=True)
    add_devices_option(p, "instead of processors of one board, time each boundary handed "
                       "from one device to another over MPI (one rank per device; "
                       "--frames, --warmup, --boundaries, --model as above) and fit "
                       "latency + bytes / bandwidth per device pair; writes "
                       "transfers-devices-MODEL.csv and a sidecar with the fitted links, "
                       "for `coupprof predict --devices --links`. Example: coupprof "
                       "transfer-matrix --devices devices.toml --model vgg19.tflite "
                       "--frames 10")
    p.set_defaults(func=run)


MATRIX_METHOD_HELP = (
    "A hand-over is the same whichever method measured the layers: the producer's outputs "
    "are read out on the host, handed to dst's thread and written into dst's inputs. What "
    "differs is what the producer pays to be cut there. Sliced layer times already hold it "
    "(each sub-model reads its outputs back). Fused layer times do not: they come from "
    "prefixes whose outputs are reduced before read-back, so --method fused measures it: "
    "readout_ms = T(layers 0..b, crossing tensors read back in full) - T(same, reduced), in "
    "interleaved rounds (0 on CPU clusters).")


def _boundaries(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise BadInputError(f"--boundaries {text!r} is not a list of numbers",
                            "e.g. --boundaries 0,3,7") from None


def _ms(v: float) -> str:
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def render_matrix(df: pd.DataFrame, title: str) -> list[Table]:
    """The src x dst summary and the per-boundary view."""
    from profiler.mapping.transfer import summary

    letters = list(dict.fromkeys([*df["src"], *df["dst"]]))
    summ = summary(df)
    t1 = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left",
               caption="ms per hand-over, mean over boundaries", caption_justify="left")
    t1.add_column("src \\ dst")
    for d in letters:
        t1.add_column(d, justify="right")
    for s in letters:
        t1.add_row(s, *[_ms(float(summ.loc[s, d])) if s in summ.index and d in summ.columns
                        else "" for d in letters])
    t2 = Table(title="per boundary (ms; rows: src, columns: dst)", box=box.SIMPLE_HEAD,
               title_justify="left", caption="b: between layer b and b+1",
               caption_justify="left")
    for name in ("b", "KiB", "src"):
        t2.add_column(name, justify="right")
    for d in letters:
        t2.add_column(d, justify="right")
    for b, grp in df.groupby("boundary", sort=True):
        cell = {(r.src, r.dst): r.time_ms_mean for r in grp.itertuples()}
        kib = f"{int(grp['bytes'].iloc[0]) / 1024:.1f}"
        for k, s in enumerate(letters):
            t2.add_row(str(b) if k == 0 else "", kib if k == 0 else "", s,
                       *[_ms(cell[(s, d)]) if (s, d) in cell else "" for d in letters],
                       end_section=k == len(letters) - 1)
    has_e = "energy_mj" in df.columns
    tables = [t1, t2]
    if "readout_ms" in df.columns:
        t4 = Table(title="fused: producer's extra read-back at a cut (ms, readout_ms), "
                   "mean over boundaries", box=box.SIMPLE_HEAD, title_justify="left")
        t4.add_column("src")
        t4.add_column("read-back ms", justify="right")
        for s, grp in df.groupby("src", sort=False):
            t4.add_row(str(s), f"{float(grp['readout_ms'].mean()):.4f}")
        tables.append(t4)
    if has_e:
        t3 = Table(title="energy per hand-over (mJ), mean over boundaries", box=box.SIMPLE_HEAD)
        es = summary(df, "energy_mj")
        t3.add_column("src \\ dst")
        for d in letters:
            t3.add_column(d, justify="right")
        for s in letters:
            t3.add_row(s, *[f"{float(es.loc[s, d]):.4f}" if s in es.index and d in es.columns
                            else "" for d in letters])
        tables.append(t3)
    return tables


def run(args: argparse.Namespace) -> int:
    from profiler.executors.logs import quiet_native_exit
    from profiler.mapping.spec import Mapping, parse_freq
    from profiler.mapping.transfer import measure_transfer_matrix, transfer_sidecar
    from profiler.measure.results import environment
    from profiler.tflite.model_io import sha256_bytes

    quiet_native_exit()
    if args.devices is not None:
        return _devices(args)
    out = Output.of(args)
    wanted = [t.strip().upper() for t in (args.processors or "").split(",") if t.strip()]
    board = choose_board(args, wanted)
    letters = parse_letters(args.processors, board)
    bounds = _boundaries(args.boundaries)
    spec = (args.freq or "").strip()
    if "/" in spec or ("," in spec and "=" not in spec and ":" not in spec):
        raise BadInputError(f"--freq {spec!r}: the transfer matrix holds one level per "
                            "processor", "use --freq 4 or --freq G=4,B=8")
    plan = parse_freq(spec, Mapping("".join(letters)), board) if spec else None
    from profiler.measure.hardware import governors_for
    from profiler.measure.layers import Levels

    govs = governors_for(board, letters, sysfs_root(args)) if plan is not None else {}
    with ExitStack() as stack, task_progress(out.progress) as bar:
        model, data, sliced = load_model(args, bar)
        if len(sliced.layers) < 2:
            raise BadInputError(f"{model} has {len(sliced.layers)} layer: no boundary to hand "
                                "over", "use a model with more layers, or --granularity op")
        default_csv = Path("coupprof-out") / f"transfers-{model.stem}.csv"
        trace_dir = out.trace_dir(default_csv)
        meter, sim_model = open_power(args, board, trace_dir)
        if meter is not None:
            stack.enter_context(meter)
        if meter is not None:
            meter.counter_updates = args.energy_updates
        held = stack.enter_context(Levels(govs.values(), note=say))
        if plan is not None:
            held.setup(plan.setup, govs)
        method = Method(args.method or Method.SLICED)
        matrix = measure_transfer_matrix(
            sliced, board, letters, reps=args.frames, warmup=args.warmup, boundaries=bounds,
            power=meter, activity=sim_model, seed=args.seed, model_name=model.name,
            progress=step(bar, "hand-overs"), method=method, model_bytes=data,
            fused=fused_settings(args) if method == Method.FUSED else None)
    df = matrix.table()
    sim = " (simulated board)" if board.simulated else ""
    title = (f"{model.name} on {board.name}{sim}: transfer matrix ({matrix.info['method']}), "
             f"{len(matrix.info['boundaries'])} boundaries")
    for t in render_matrix(df, title):
        out.table(t, drop=("KiB",))
    info = {"board": board.name, "simulated": board.simulated,
            "model_path": str(model.resolve()), "model_sha256": sha256_bytes(data),
            "granularity": sliced.granularity, "cuts": list(sliced.cuts),
            "layers": len(sliced.layers), "freq": plan.describe() if plan else "left alone",
            "freq_khz": {d: khz for d, (_, khz) in plan.setup.items()} if plan else {},
            **environment()}
    written = out.save(df, transfer_sidecar(matrix, None, info), default_csv)
    out.wrote(written, f"{len(df)} rows", trace=trace_dir)
    return 0


def _devices(args: argparse.Namespace) -> int:
    """--devices: the links between devices, measured over MPI and fitted."""
    from profiler.devices.link_probe import boundaries_of, measure_links
    from profiler.devices.linkfit import fit_probe, links_sidecar
    from profiler.devices.spec import read_devices
    from profiler.measure.results import environment
    from profiler.tflite.model_io import sha256_bytes

    for flag, value in (("--power", args.power), ("--freq", args.freq),
                        ("--processors", args.processors), ("--method", args.method)):
        if value:
            raise BadInputError(f"{flag} is for one board's processors; with --devices the "
                                "links between devices are timed", f"leave out {flag}")
    out = Output.of(args)
    devices = read_devices(args.devices)
    with task_progress(out.progress) as bar:
        model, data, sliced = load_model(args, bar)
    bounds = boundaries_of(sliced, _boundaries(args.boundaries))
    if not bounds:
        raise BadInputError(f"{model} has no boundary to hand over",
                            "use a model with more layers, or --granularity op")
    say(f"timing {len(bounds)} boundaries between {len(devices.devices)} devices over MPI, "
        f"{args.frames} hand-overs each")
    probe = measure_links(devices, bounds, reps=args.frames, warmup=args.warmup,
                          seed=args.seed, echo=not args.quiet)
    fitted = fit_probe(probe.rows)
    for t in render_links(probe.rows, fitted, devices, model.stem):
        out.table(t)
    info = {"devices_file": str(args.devices), "devices": devices.names,
            "model_path": str(model.resolve()), "model_sha256": sha256_bytes(data),
            "granularity": sliced.granularity, "cuts": list(sliced.cuts),
            "layers": len(sliced.layers), "reps": args.frames, "warmup": args.warmup,
            "one_clock": probe.one_clock, "probe_wall_s": probe.wall_s, **environment()}
    default_csv = Path("coupprof-out") / f"transfers-devices-{model.stem}.csv"
    written = out.save(probe.rows, links_sidecar(fitted, info, devices), default_csv)
    out.wrote(written, f"{len(probe.rows)} rows")
    return 0
