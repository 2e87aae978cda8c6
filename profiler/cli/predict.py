"""`coupprof predict`: a mapping's latency, throughput and energy from saved tables.

    coupprof predict --order GGBBBBNN --mode pipeline --layers G.csv,B.csv,N.csv
                     [--transfers transfers.csv] [--freq SPEC --board NAME]
                     [--method fused|sliced]
    coupprof predict --single --layers rk/MobileV1/layers.csv --freq max --board rk3399pro

Switch latency = calls (a fixed per-call cost each, with fused tables) + layers +
hand-overs; Pipeline throughput = 1 / slowest stage (hand-overs included), and its
latency waits in the queues before the slowest stage (--queue-depth, --frames); energy
per frame. `--method` says how `coupprof run` executes the mapping (fused, the default: a
stage is one call). The maths is in profiler/mapping/predict.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

from profiler.cli import command_help
from profiler.cli.common.devices import add_devices_option
from profiler.cli.common.options import (
    add_board_args,
    add_output_options,
    add_queue_depth_option,
    positive_int,
)
from profiler.cli.common.output import Output
from profiler.measure.method import METHODS, Method

#: The --json file's format (`coupprof report` finds it by this).
PREDICT_FORMAT = "coupprof-predict/1"
PREDICT_DEVICES_FORMAT = "coupprof-predict-devices/1"

if TYPE_CHECKING:
    from collections.abc import Sequence

    from profiler.cli.common.options import Subparsers
    from profiler.mapping.predict import LayerCosts
    from profiler.measure.freq_trace import FreqTrace


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "predict",
        help=command_help(__name__),
        description="From layer tables (`coupprof layers --csv`, one per processor) and a "
        "transfer table (`coupprof transfer-matrix --csv`), predict a mapping: Switch "
        "latency = sum of layer times + hand-overs (transfers where the processor "
        "changes); Pipeline throughput = 1 / the slowest stage, its hand-over included, "
        "and latency = the stages plus the wait in the full queues before the slowest; "
        "energy per frame where the tables have energy. The order's length must equal the "
        "tables' layer count. --single predicts every processor the tables cover with all "
        "layers on it, and names the fastest.",
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--order", metavar="LETTERS",
                      help="processor per layer, e.g. GGBBBBNN or G2B4N2")
    what.add_argument("--single", action="store_true",
                      help="each processor the tables cover, all layers on it (at --freq: max "
                      "is each one's top level, for G and N with their host at its top)")
    p.add_argument("--mode", choices=("switch", "pipeline"), default=None,
                   help="switch or pipeline (required with --order; one processor is one "
                   "stage, so --single needs none)")
    p.add_argument("--layers", action="append", default=None, metavar="CSV|DIR[,...]",
                   help="layer tables (with their .json sidecars), one per processor (and "
                   "level, with --freq); the folder `coupprof layers` wrote them into "
                   "(coupprof-out: the tables of the processors --order names); or a "
                   "`coupprof sweep` directory holding them all. With --devices: "
                   "DEVICE=CSV|DIR[,...], once per device (each device's own tables)")
    p.add_argument("--model", "-m", default=None, metavar="NAME",
                   help="with a folder of layer tables: which model's, by its file name "
                   "(e.g. mobilenet_v1_0.25_128); needed when the folder holds several")
    p.add_argument("--transfers", action="append", default=None, metavar="CSV",
                   help="transfer table; without it, hand-overs at processor changes count "
                   "0. With --devices: DEVICE=CSV, each device's own (repeatable)")
    p.add_argument("--freq", default=None, metavar="SPEC",
                   help="pick the tables measured at these levels (SPEC as in `coupprof run`; "
                   "needs the board)")
    p.add_argument("--clock", default=None, metavar="SPEC",
                   help="price each processor at this clock, e.g. G=1980 (MHz; comma-separated "
                   "per processor), where its table's rows were fitted against the clock its "
                   "rounds read (`coupprof layers` on a processor whose driver picks the "
                   "clock). Default: the tables' own figures")
    add_board_args(p)
    p.add_argument("--method", choices=METHODS, default=Method.FUSED.value,
                   help="how the mapping is executed (as `coupprof run --method`): fused, each "
                   "stage one call (default); sliced, one call per layer")
    add_queue_depth_option(p)
    p.add_argument("--frames", type=positive_int, default=None, metavar="N",
                   help="pipeline: the mean latency over a run of N frames that starts "
                   "empty, as `coupprof run --frames N` measures it (default: the steady "
                   "state, every queue before the slowest stage full)")
    add_output_options(p, csv=None, json="also write the prediction as JSON")
    d = p.add_argument_group(
        "across devices", "One model across several boards (docs/devices.md): --order "
        "names a device and its processors per run of layers, each device's part is priced "
        "on its own tables and the cuts on the links. Example: coupprof predict --devices "
        "devices.toml --order 'd0:B8 d1:G7' --mode pipeline --layers d0=d0-out/ "
        "--layers d1=d1-out/ --links coupprof-out/transfers-devices-MODEL.csv")
    add_devices_option(d, "price --order across its devices (--order 'd0:B4G3 d1:B8')")
    d.add_argument("--layers-dir", type=Path, default=None, metavar="DIR",
                   help="with --devices: each device's layer tables in DIR/DEVICE/ (as "
                   "--layers DEVICE=DIR/DEVICE)")
    d.add_argument("--links", type=Path, default=None, metavar="CSV",
                   help="with --devices: the link table of `coupprof transfer-matrix "
                   "--devices` (measured cuts as measured, others on each link's fit; "
                   "without it, a simulated link of the devices file prices them, a real "
                   "one counts 0)")
    p.set_defaults(func=run)


def _f(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def run(args: argparse.Namespace) -> int:
    from profiler.cli.common.plumbing import say
    from profiler.errors import BadInputError
    from profiler.mapping.predict import predict, priced_at_clocks, read_layer_tables
    from profiler.mapping.spec import parse_freq, parse_order
    from profiler.mapping.transfer import read_transfer_csv

    out = Output.of(args)
    if args.devices is not None:
        return _devices(args, out)
    if args.layers_dir is not None or args.links is not None:
        raise BadInputError("--layers-dir and --links price a mapping across devices",
                            "add --devices FILE")
    if not args.layers:
        raise BadInputError("--layers is required", "pass the layer tables: --layers CSV,...")
    wanted = None if args.single else [c for c in args.order.upper() if c.isalpha()]
    costs = read_layer_tables([s for s in ",".join(args.layers).split(",") if s.strip()],
                              processors=wanted, model=args.model,
                              note=lambda line: say(f"predict: {line}"))
    n_layers = int(costs.table["layer"].max()) + 1
    if args.single:
        return _single(args, costs, n_layers, out)
    if args.mode is None:
        raise BadInputError("--order needs --mode", "add --mode switch or --mode pipeline")
    board = None
    if args.freq:
        from profiler.cli.common.plumbing import choose_board

        letters = [c for c in args.order.upper() if c.isalpha()]
        board = choose_board(args, letters)
    mapping = parse_order(args.order, n_layers, board)
    missing = [p for p in mapping.processors if p not in set(costs.table["processor"])]
    if missing:
        raise BadInputError(
            f"--order uses processor(s) {', '.join(missing)} but no layer table covers them "
            f"(tables: {', '.join(sorted(set(costs.table['processor'])))})",
            f"add `coupprof layers --processor {missing[0]} --csv ...` to --layers")
    plan = parse_freq(args.freq, mapping, board) if board is not None else None
    transfers = read_transfer_csv(_one(args.transfers)) if args.transfers else None
    clock_notes: list[str] = []
    if args.clock:
        costs, clock_notes = priced_at_clocks(
            costs, _clocks(args.clock, mapping.processors),
            lambda letter: plan.level[mapping.order.index(letter)] if plan else None,
            said="the clock --clock gives")
    pred = predict(mapping, args.mode, costs, transfers, plan, Method(args.method),
                   queue_depth=args.queue_depth, frames=args.frames)
    pred.notes += clock_notes

    t = Table(title=f"{mapping.compact} in {args.mode} mode (predicted)", box=box.SIMPLE_HEAD,
              title_justify="left")
    fused = any(st.fixed_ms for st in pred.stages)  # fused tables: one fixed cost per stage
    readout = any(st.readout_ms for st in pred.stages)
    cols = ("stage", "proc", "layers", "calls", *(("fixed ms",) if fused else ()),
            *(("read-back ms",) if readout else ()), "compute ms", "hand-over ms", "stage ms")
    for col in cols:
        t.add_column(col, justify="left" if col in ("proc", "layers") else "right")
    slow = pred.bottleneck.index
    for st in pred.stages:
        mark = " *" if args.mode == "pipeline" and st.index == slow else ""
        t.add_row(str(st.index), st.processor, f"{st.layers[0]}-{st.layers[-1]}",
                  str(st.calls), *((_f(st.fixed_ms),) if fused else ()),
                  *((_f(st.readout_ms),) if readout else ()),
                  _f(st.compute_ms), _f(st.transfer_ms), _f(st.time_ms) + mark)
    out.table(t, drop=("calls", "read-back ms", "fixed ms"))
    over = f"over {args.frames} frames from empty" if args.frames else "steady state"
    lines = [f"latency {pred.latency_ms:.3f} ms"
             + (f" ({pred.queue_wait_ms:.3f} ms of it waiting in queues of "
                f"{args.queue_depth} frames; {over})" if args.mode == "pipeline" else ""),
             f"throughput {pred.throughput_fps:.2f} FPS"
             + (f" (slowest stage {slow}, {pred.stages[slow].processor})"
                if args.mode == "pipeline" else "")]
    if pred.energy_mj is not None:
        lines.append(f"energy {pred.energy_mj:.3f} mJ/frame ({1000 / pred.energy_mj:.2f} FPS/W)"
                     + (f"; {pred.energy_note}" if pred.energy_note else ""))
    else:
        lines.append(f"energy: {pred.energy_note}")
    if pred.missing:
        lines.append(f"no transfer for boundaries {', '.join(pred.missing)} (counted as 0)")
    lines += pred.notes
    for line in lines:
        out.line(line)
    if args.json:
        out.save_json({"format": PREDICT_FORMAT, **pred.to_dict(), "layers": costs.sources,
                       "transfers": str(_one(args.transfers) if args.transfers else "")},
                      args.json)
        out.line(_wrote_json(out, args.json))
    return 0


def _clocks(spec: str, letters: Sequence[str]) -> dict[str, FreqTrace | None]:
    """--clock 'G=1980,N=800' (MHz) -> letter -> that clock, as a run's trace would give it."""
    from profiler.errors import BadInputError
    from profiler.measure.freq_trace import FreqTrace

    out: dict[str, FreqTrace | None] = {}
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        letter, _, mhz = part.partition("=")
        letter = letter.strip().upper()
        try:
            khz = int(round(float(mhz) * 1000))
        except ValueError:
            khz = 0
        if khz <= 0 or letter not in letters:
            raise BadInputError(f"--clock {part!r}: give PROCESSOR=MHZ for a processor of "
                                f"--order ({', '.join(letters)})", "e.g. --clock G=1980")
        out[letter] = FreqTrace("--clock", 0, khz, khz, khz)
    return out


def _wrote_json(out: Output, path: Path) -> str:
    return "wrote the prediction to standard output" if out.json_stdout else f"wrote {path}"


def _single(args: argparse.Namespace, costs: LayerCosts, n_layers: int, out: Output) -> int:
    """Every processor the tables cover, all layers on it; the fastest named."""
    from profiler.errors import BadInputError
    from profiler.mapping.predict import predict
    from profiler.mapping.spec import parse_freq, parse_order
    from profiler.mapping.transfer import read_transfer_csv

    letters = sorted(set(costs.table["processor"]), key="LBGN".find)
    board = None
    if args.freq:
        from profiler.cli.common.plumbing import choose_board

        board = choose_board(args, letters)
    transfers = read_transfer_csv(_one(args.transfers)) if args.transfers else None
    rows = []
    for letter in letters:
        mapping = parse_order(letter * n_layers, n_layers, board)
        if any(costs.table[(costs.table["processor"] == letter)
                           & (costs.table["layer"] == k)].empty for k in range(n_layers)):
            continue  # a table that lacks some layers on this processor
        plan = parse_freq(args.freq, mapping, board) if board is not None else None
        level = None if plan is None else plan.level[0]
        rows.append((letter, level, predict(mapping, "switch", costs, transfers, plan)))
    if not rows:
        raise BadInputError("no processor has every layer in the tables", "check --layers")
    best = min(rows, key=lambda r: r[2].latency_ms)
    t = Table(title=f"{n_layers} layers on one processor (predicted)", box=box.SIMPLE_HEAD,
              title_justify="left")
    for col in ("proc", "level", "latency ms", "FPS", "mJ/frame", "FPS/W", ""):
        t.add_column(col, justify="left" if col in ("proc", "") else "right")
    for letter, level, pred in rows:
        e = pred.energy_mj
        t.add_row(letter, "-" if level is None else str(level), _f(pred.latency_ms),
                  _f(pred.throughput_fps, 2), _f(e),
                  _f(1000 / e if e else None, 2), "fastest" if letter == best[0] else "")
    out.table(t, drop=("FPS",))
    for letter, level, pred in rows:
        at = "" if level is None else f" at level {level}"
        out.line(f"{letter}{at}: latency {pred.latency_ms:.3f} ms")
    out.line(f"best single processor: {best[0]} ({best[2].latency_ms:.3f} ms)")
    if args.json:
        single = [{"processor": letter, "level": level, **pred.to_dict()}
                  for letter, level, pred in rows]
        out.save_json({"format": PREDICT_FORMAT, "single": single, "best": best[0],
                       "layers": costs.sources}, args.json)
        out.line(_wrote_json(out, args.json))
    return 0


def _one(paths: list[str]) -> Path:
    """One board's --transfers: one table."""
    from profiler.errors import BadInputError

    if len(paths) > 1:
        raise BadInputError("--transfers is given more than once",
                            "one board takes one transfer table (several: with --devices, "
                            "DEVICE=CSV each)")
    return Path(paths[0])


def _devices(args: argparse.Namespace, out: Output) -> int:
    """--devices: the mapping priced across devices (`profiler.devices.predict`)."""
    from profiler.cli.common.devices import (
        read_device_tables,
        read_device_transfers,
        read_links,
        render_device_prediction,
    )
    from profiler.devices.predict import predict_devices
    from profiler.devices.spec import parse_device_order, read_devices
    from profiler.errors import BadInputError

    if args.single or not args.order:
        raise BadInputError("--devices prices one --order across devices",
                            "give --order 'd0:B4G3 d1:B8'")
    if args.mode is None:
        raise BadInputError("--order needs --mode", "add --mode switch or --mode pipeline")
    for flag, value in (("--freq", args.freq), ("--clock", args.clock),
                        ("--frames", args.frames)):
        if value:
            raise BadInputError(f"{flag} is not taken with --devices (each device's tables "
                                "are priced as measured)", f"leave out {flag}")
    devices = read_devices(args.devices)
    used = list(dict.fromkeys(tok.partition(":")[0] for tok in args.order.split()))
    for name in used:
        devices.device(name)
    costs = read_device_tables(args.layers, args.layers_dir, devices, used, args.model)
    n_layers = max(int(c.table["layer"].max()) + 1 for c in costs.values())
    mapping = parse_device_order(args.order, n_layers, devices)
    pred = predict_devices(mapping, args.mode, costs, read_links(args.links, costs), devices,
                           transfers=read_device_transfers(args.transfers, devices),
                           method=Method(args.method))
    table, lines = render_device_prediction(pred)
    out.table(table)
    for line in lines:
        out.line(line)
    if args.json:
        out.save_json({"format": PREDICT_DEVICES_FORMAT, **pred.to_dict(),
                       "devices_file": str(args.devices),
                       "layers": {k: c.sources for k, c in costs.items()},
                       "link_table": str(args.links or "")}, args.json)
        out.line(_wrote_json(out, args.json))
    return 0
