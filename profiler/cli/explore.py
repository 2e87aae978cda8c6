"""`coupprof explore`: the mapping and DVFS levels to use, searched over saved tables.

    coupprof explore --sweep DIR [--transfers CSV] [--delays CSV,...] --mode switch
                     [--latency-ms X | --objective latency]
    coupprof explore --sweep DIR --transfers CSV --mode pipeline [--min-fps X]
    ... [--measure K [--cluster HOST:PORT]]

Searching lives in profiler.explore.switch / explore_pipeline over the tables of
profiler.explore.tables; measuring in profiler.explore.measure. This module parses,
calls and renders: a table of the top candidates with the command that runs each, a
Pareto CSV and its JSON sidecar.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

from profiler.cli import command_help
from profiler.cli.common.devices import add_devices_option
from profiler.cli.common.options import (
    add_board_args,
    add_output_options,
    positive_float,
    positive_int,
)
from profiler.cli.common.output import Output
from profiler.cli.common.plumbing import say

if TYPE_CHECKING:
    from profiler.cli.common.options import Subparsers
    from profiler.explore.space import CostTables, Evaluation

SIDECAR_FORMAT = "coupprof-explore/1"
MEASURED_FORMAT = "coupprof-explore-measured/1"  # explore --measure's CSV
DEVICES_FORMAT = "coupprof-explore-devices/1"  # explore --devices' CSV
DEVICES_MEASURED_FORMAT = "coupprof-explore-devices-measured/1"


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "explore",
        help=command_help(__name__),
        description="Search which processor runs each layer and at which DVFS level, from a "
        "sweep's layer table, a transfer-matrix table and dvfs-latency tables. Switch mode "
        "(a level per layer, a level change costs its transition delay): the least energy "
        "per frame under --latency-ms, or the least latency, found exactly by dynamic "
        "programming (the output says how it is proven). Pipeline mode (contiguous stages on "
        "distinct processors, a level per processor): the throughput / FPS/W Pareto front, "
        "exact where the space is small, else NSGA-II (pymoo). Prints the top candidates "
        "with the `coupprof run` line for each, writes a Pareto CSV; --measure K runs the "
        "top K and prints measured beside predicted.",
    )
    p.add_argument("--sweep", default=None, type=Path, metavar="DIR",
                   help="directory written by `coupprof sweep -o DIR` (or its sweep.csv)")
    p.add_argument("--transfers", type=Path, default=None, metavar="CSV",
                   help="`coupprof transfer-matrix` CSV (without it: hand-overs between "
                   "processors count 0 and are listed)")
    p.add_argument("--delays", default=None, metavar="CSV[,CSV...]",
                   help="`coupprof dvfs-latency` CSVs (without them: level changes cost nothing)")
    p.add_argument("--mode", choices=("switch", "pipeline"), default=None,
                   help="switch (default) or pipeline (default with --devices)")
    p.add_argument("--latency-ms", type=positive_float, default=None, metavar="MS",
                   help="switch: the latency bound for the least-energy search")
    p.add_argument("--objective", choices=("energy", "latency", "fps-per-w", "fps"),
                   default=None, help="switch: energy (default) or latency; pipeline: "
                   "fps-per-w (default) or fps, picked from the front")
    p.add_argument("--min-fps", type=positive_float, default=None, metavar="FPS",
                   help="pipeline: pick only points with at least this throughput")
    p.add_argument("--processors", default=None, metavar="L,B,G,N",
                   help="processors to consider (default: every one in the tables)")
    p.add_argument("--levels", default=None, metavar="I,J,...|min|max",
                   help="levels to consider, or max / min: each processor's top / lowest "
                   "level in the tables (default: every one in the tables)")
    p.add_argument("--compare", action="append", default=[], metavar="ORDER[@FREQ]",
                   help="also cost this mapping on the same tables, e.g. G2B4N2@max or "
                   "B3G5@5/4 (repeatable; FREQ as `coupprof run --freq`, default max)")
    add_board_args(p)
    s = p.add_argument_group("search")
    s.add_argument("--bins", type=positive_int, default=1000,
                   help="switch: latency bins of the bounded search, doubled until proven "
                   "(default 1000)")
    s.add_argument("--method", choices=("auto", "exact", "nsga2"), default="auto",
                   help="pipeline: exact enumeration, NSGA-II, or auto (exact up to "
                   "--exact-limit points)")
    s.add_argument("--exact-limit", type=positive_int, default=None, metavar="N",
                   help="pipeline: largest space enumerated exactly (default 2,000,000; "
                   "with --devices, splits: 50,000)")
    s.add_argument("--population", type=positive_int, default=100,
                   help="NSGA-II population (default 100)")
    s.add_argument("--generations", type=positive_int, default=100,
                   help="NSGA-II generations (default 100)")
    s.add_argument("--seed", type=int, default=0, help="NSGA-II seed (default 0)")
    o = p.add_argument_group("output")
    o.add_argument("--top", type=positive_int, default=5, help="candidates shown (default 5)")
    add_output_options(o, csv="./coupprof-out/explore-MODEL-MODE.csv")
    m = p.add_argument_group("measuring")
    m.add_argument("--measure", type=positive_int, default=None, metavar="K",
                   help="run the top K with `coupprof run`'s machinery, measured beside predicted")
    m.add_argument("--cluster", default=None, metavar="ADDRESS",
                   help="Dask scheduler (tcp://HOST:PORT) whose workers each drive one board")
    m.add_argument("--model", type=Path, default=None,
                   help="model to run for --measure (default: the sweep's)")
    d = p.add_argument_group(
        "across devices", "AutoDiCE's search (docs/devices.md): one cut per device boundary "
        "and one processor per part, for throughput, the most energy per frame on one "
        "device and the most memory on one device; the whole space where it is small "
        "(--exact-limit), else NSGA-II (--population, --generations, --seed). Example: "
        "coupprof explore --devices devices.toml --layers-dir tables/ --links "
        "coupprof-out/transfers-devices-MODEL.csv [--measure 2 --model MODEL]")
    add_devices_option(d, "search split points across its devices, from per-device layer "
                       "tables (instead of --sweep)")
    d.add_argument("--layers", action="append", default=None, metavar="DEVICE=CSV|DIR[,...]",
                   help="with --devices: a device's layer tables (repeatable, one per device)")
    d.add_argument("--layers-dir", type=Path, default=None, metavar="DIR",
                   help="with --devices: each device's layer tables in DIR/DEVICE/")
    d.add_argument("--links", type=Path, default=None, metavar="CSV",
                   help="with --devices: `coupprof transfer-matrix --devices`'s link table "
                   "(without it, the devices file's simulated links price the cuts)")
    m.add_argument("--frames", type=positive_int, default=60,
                   help="measured frames per candidate (default 60: a short pipeline run measures its fill)")
    p.set_defaults(func=run)


def _levels(text: str | None) -> list[int] | str | None:
    from profiler.errors import BadInputError

    if not text:
        return None
    if text.strip().lower() in ("max", "min"):
        return text.strip().lower()
    try:
        return sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise BadInputError(f"--levels {text!r} is not a list of level numbers",
                            "e.g. --levels 1,3,5") from None


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from profiler.errors import BadInputError
    from profiler.explore.tables import load_tables
    from profiler.measure.results import environment
    from profiler.platform import choose_board
    from profiler.sweep.schema import read_sweep

    out = Output.of(args)
    if args.devices is not None:
        return _devices(args, out)
    if args.sweep is None:
        raise BadInputError("explore needs --sweep (or --devices with per-device tables)",
                            "pass --sweep DIR written by `coupprof sweep -o DIR`")
    args.mode = args.mode or "switch"
    if args.cluster and not args.measure:
        raise BadInputError("--cluster spreads --measure over Dask workers, but no --measure "
                            "was given", "add --measure K")
    meta = read_sweep(args.sweep).meta.get("settings", {})
    procs = [v.strip().upper() for v in args.processors.split(",")] if args.processors else None
    board = choose_board(args.board or meta.get("board") or "sim", letters=procs)
    delays = [d for d in args.delays.split(",") if d] if args.delays else []
    tables = load_tables(args.sweep, board, args.transfers, delays, procs, _levels(args.levels))
    for note in tables.notes:
        say(f"note: {note}")
    model_path = str(args.model or meta.get("model_path") or "")
    if args.mode == "switch":
        ranked, proof, info = _switch(args, tables)
    else:
        ranked, proof, info = _pipeline(args, tables)
    rows = [_row(tables, ev, i, board.name, model_path, "pick" if i == 1 else "front")
            for i, ev in enumerate(ranked, 1)]
    shown = {r["order"] + r["freq"] for r in rows}
    for spec in args.compare:
        from profiler.explore.space import candidate_for, evaluate

        order, _, freq = spec.partition("@")
        ev = evaluate(tables, candidate_for(tables, order, freq or "max", args.mode))
        rows.append(_row(tables, ev, len(rows) + 1, board.name, model_path, "given"))
    for ev in _singles(tables, args):
        r = _row(tables, ev, len(rows) + 1, board.name, model_path, "single")
        if r["order"] + r["freq"] not in shown:
            rows.append(r)
    top = rows[:args.top] + [r for r in rows[args.top:] if r["kind"] in ("single", "given")]
    out.table(_render(top, tables, args.mode, board.name, proof), drop=LESSER_COLUMNS,
              wrap={"command": 40, "order": 16})
    default_csv = Path("coupprof-out") / f"explore-{tables.model}-{args.mode}.csv"
    doc = {"format": SIDECAR_FORMAT, "csv": None, "board": board.name, "model": tables.model,
           "model_path": model_path, "mode": args.mode, "proof": proof,
           "inputs": tables.sources, **info, **environment()}
    written = out.save(pd.DataFrame(rows), doc, default_csv)
    out.wrote(written, f"{len(rows)} candidates")
    if args.measure:
        _measure(args, rows[:args.measure], board.name, model_path, meta,
                 written.csv or default_csv, out)
    return 0


def _row(tables: CostTables, ev: Evaluation, rank: int, board: str, model: str, kind: str
         ) -> dict[str, Any]:
    from profiler.explore.space import row

    return row(tables, ev, rank, board, model, kind)


def _singles(tables: CostTables, args: argparse.Namespace) -> list[Evaluation]:
    """The best whole-model-on-one-processor mapping of each processor, by the objective
    (those meeting --latency-ms / --min-fps first): what the pick must beat."""
    from profiler.explore.space import single_processor

    best: dict[int, tuple[tuple[bool, float], Evaluation]] = {}
    for ev in single_processor(tables, args.mode):
        u = ev.candidate.units[0]
        if args.mode == "switch":
            ok = args.latency_ms is None or ev.latency_ms <= args.latency_ms
            key = (not ok, ev.latency_ms if args.objective == "latency" else ev.energy_mj or 0)
        else:
            ok = args.min_fps is None or ev.throughput_fps >= args.min_fps
            key = (not ok, -(ev.throughput_fps if args.objective == "fps" else
                             ev.fps_per_w or 0.0))
        if u not in best or key < best[u][0]:
            best[u] = (key, ev)
    return [ev for _, ev in sorted(best.values(), key=lambda kv: kv[0])]


def _switch(args: argparse.Namespace, tables: CostTables
            ) -> tuple[list[Evaluation], str, dict[str, Any]]:
    from profiler.errors import BadInputError
    from profiler.explore.switch import ranked, search_switch

    objective = args.objective or "energy"
    if objective not in ("energy", "latency"):
        raise BadInputError(f"--objective {objective} is a pipeline objective",
                            "use --objective energy or latency in switch mode")
    res = search_switch(tables, args.latency_ms, objective, bins=args.bins, front=True)
    for note in res.notes:
        say(note)
    info = {"objective": objective, "latency_bound_ms": args.latency_ms,
            "optimal": res.optimal, "lower_bound": res.lower_bound, "bins": res.bins,
            "bin_ms": res.delta_ms, "states_per_layer": res.states,
            "search_seconds": res.seconds, "notes": res.notes}
    if res.best is None:
        raise BadInputError(res.proof(), "allow more latency with --latency-ms")
    return ranked(res), f"{res.proof()} ({res.seconds:.2f} s)", info


def _pipeline(args: argparse.Namespace, tables: CostTables
              ) -> tuple[list[Evaluation], str, dict[str, Any]]:
    from profiler.errors import BadInputError
    from profiler.explore.pipeline import pick, ranked, search_pipeline

    objective = {"fps": "fps", "fps-per-w": "fps_per_w", None: "fps_per_w"}.get(args.objective)
    if objective is None:
        raise BadInputError(f"--objective {args.objective} is a switch objective",
                            "use --objective fps-per-w or fps in pipeline mode")
    res = search_pipeline(tables, args.exact_limit or 2_000_000, args.population,
                          args.generations, args.seed, args.method)
    best = pick(res.front, args.min_fps, objective)
    if best is None:
        top = max(e.throughput_fps for e in res.front)
        raise BadInputError(f"no pipeline reaches {args.min_fps:g} FPS (the fastest on the "
                            f"front: {top:.1f} FPS)", "lower --min-fps")
    info = {"objective": objective, "min_fps": args.min_fps, "method": res.method,
            "evaluations": res.evaluations, "space": res.space, "search_seconds": res.seconds,
            "front_size": len(res.front), "notes": res.notes}
    return ranked(res.front, best, objective), f"{res.describe()} ({res.seconds:.2f} s)", info


def _f(v: float | None, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}"


def _render(rows: list[dict[str, Any]], tables: CostTables, mode: str, board: str, proof: str
            ) -> Table:
    t = Table(title=f"explore {tables.model} on {board}, {mode} mode: top {len(rows)}",
              caption=proof, box=box.SIMPLE_HEAD, title_justify="left", caption_justify="left")
    for col in ("#", "kind", "order", "--freq", "latency ms", "FPS", "mJ/frame", "FPS/W",
                "command"):
        t.add_column(col, justify="left" if col in ("order", "--freq", "command") else "right",
                     overflow="fold")
    for r in rows:
        t.add_row(str(r["rank"]), r["kind"], r["order"], r["freq"],
                  _f(r["latency_ms"]), _f(r["throughput_fps"], 1), _f(r["energy_mj"]),
                  _f(r["fps_per_w"], 1), r["command"])
    return t


#: The candidates table's columns a narrow terminal may leave out, least wanted first
#: (`profiler.cli.common.fit`); the command column wraps instead.
LESSER_COLUMNS = ("kind", "--freq")


def _write(rows: list[dict[str, Any]], csv_path: Path, json_path: Path,
           meta: dict[str, Any], fmt: str = SIDECAR_FORMAT) -> None:
    import pandas as pd

    from profiler.errors import BadInputError
    from profiler.measure.results import environment

    try:
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(csv_path, index=False)
        doc = {"format": fmt, "csv": csv_path.name, **meta, **environment()}
        json_path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    except OSError as err:
        raise BadInputError(f"cannot write {err.filename or csv_path}: {err.strerror}",
                            "choose a writable path with --csv") from None


def _measure(args: argparse.Namespace, rows: list[dict[str, Any]], board: str, model: str,
             meta: dict[str, Any], path: Path, out: Output) -> None:
    from profiler.errors import BadInputError
    from profiler.explore.measure import MeasureJob, measure_all
    from profiler.mapping.accuracy import ERROR_DEFINITION, ERROR_UNIT, error_pct

    if not model:
        raise BadInputError("the sweep names no model to measure", "pass --model")
    jobs = [MeasureJob(r["rank"], board, model, r["order"], r["mode"], r["freq"],
                       frames=args.frames, granularity=meta.get("granularity") or "layer",
                       cuts=meta.get("cuts"), sysfs_root=args.sysfs_root) for r in rows]
    where = f"on the Dask cluster at {args.cluster}" if args.cluster else "here, one by one"
    say(f"measuring the top {len(jobs)} {where}")
    done = measure_all(jobs, args.cluster,
                       on_result=lambda m: say(f"measured #{m.job.rank} {m.job.order} "
                                               f"on {m.worker} in {m.seconds:.1f} s"))
    from profiler.explore.space import row_latency_ms

    by_rank = {r["rank"]: dict(r, latency_ms=row_latency_ms(r, args.frames)) for r in rows}
    t = Table(title=f"measured beside predicted ({ERROR_DEFINITION})", box=box.SIMPLE_HEAD,
              title_justify="left")
    for col in ("#", "order", "latency ms", "pred", "err %", "FPS", "pred", "err %", "mJ/frame",
                "pred", "err %", "worker"):
        t.add_column(col, justify="left" if col in ("order", "worker") else "right")
    for m in sorted(done, key=lambda m: m.job.rank):
        r = by_rank[m.job.rank]
        t.add_row(str(m.job.rank), m.job.order, _f(m.latency_ms), _f(r["latency_ms"]),
                  _err(r["latency_ms"], m.latency_ms), _f(m.throughput_fps, 1),
                  _f(r["throughput_fps"], 1), _err(r["throughput_fps"], m.throughput_fps),
                  _f(m.energy_mj), _f(r["energy_mj"]), _err(r["energy_mj"], m.energy_mj),
                  m.worker)
    out.table(t)
    mpath = path.with_name(path.stem + "-measured.csv")
    measured = []
    for m in sorted(done, key=lambda m: m.job.rank):
        r = by_rank[m.job.rank]
        measured.append({
            "rank": m.job.rank, "order": m.job.order, "freq": m.job.freq, "mode": m.job.mode,
            "latency_ms": m.latency_ms, "throughput_fps": m.throughput_fps,
            "energy_mj": m.energy_mj, "predicted_latency_ms": r["latency_ms"],
            "predicted_throughput_fps": r["throughput_fps"],
            "predicted_energy_mj": r["energy_mj"],
            "latency_error_pct": error_pct(r["latency_ms"], m.latency_ms),
            "throughput_error_pct": error_pct(r["throughput_fps"], m.throughput_fps),
            "energy_error_pct": error_pct(r["energy_mj"], m.energy_mj),
            "worker": m.worker, "seconds": m.seconds})
    # its own sidecar, so `coupprof report` knows it: measured beside the search's predictions
    _write(measured, mpath, mpath.with_suffix(".json"),
           {"board": board, "model_path": model, "mode": args.mode, "frames": args.frames,
            "explore_csv": path.name, "units": {"*_error_pct": ERROR_UNIT}},
           fmt=MEASURED_FORMAT)
    out.line(f"wrote {mpath} and {mpath.with_suffix('.json')}")


def _err(pred: float | None, meas: float | None) -> str:
    from profiler.mapping.accuracy import error_pct

    e = error_pct(pred, meas)
    return "-" if math.isnan(e) else f"{e:.1f}"


def _devices(args: argparse.Namespace, out: Output) -> int:
    """--devices: split points and processors across devices (`profiler.devices.explore`)."""
    import pandas as pd

    from profiler.cli.common.devices import read_device_tables, read_links, render_splits
    from profiler.devices.explore import DeviceSearch, search_splits, single_devices, split_row
    from profiler.devices.spec import read_devices
    from profiler.errors import BadInputError
    from profiler.measure.results import environment

    for flag, value in (("--sweep", args.sweep), ("--transfers", args.transfers),
                        ("--delays", args.delays), ("--levels", args.levels),
                        ("--compare", args.compare), ("--cluster", args.cluster),
                        ("--latency-ms", args.latency_ms), ("--objective", args.objective),
                        ("--min-fps", args.min_fps)):
        if value:
            raise BadInputError(f"{flag} is not taken with --devices", f"leave out {flag}")
    devices = read_devices(args.devices)
    mode = args.mode or "pipeline"
    costs = read_device_tables(args.layers, args.layers_dir, devices, devices.names,
                               str(args.model.stem) if args.model else None)
    procs = [v.strip().upper() for v in args.processors.split(",")] if args.processors else None
    search = DeviceSearch(devices, devices.names, costs, read_links(args.links, costs), mode,
                          {n: list(procs) for n in devices.names} if procs else {})
    # a split costs ~0.1 ms (a pipeline point far less): 50,000 is seconds
    res = search_splits(search, args.method, args.exact_limit or 50_000, args.population,
                        args.generations, args.seed)
    for note in res.notes:
        say(note)
    model = str(args.model or "")
    rows = [split_row(ev, i, "front", mode, str(args.devices), model)
            for i, ev in enumerate(res.front, 1)]
    shown = {r["order"] for r in rows}
    for ev in sorted(single_devices(search), key=lambda e: -e.throughput_fps):
        if ev.order not in shown:
            rows.append(split_row(ev, len(rows) + 1, "single", mode, str(args.devices), model))
    top = rows[:args.top] + [r for r in rows[args.top:] if r["kind"] == "single"]
    out.table(render_splits(top, f"explore across {len(devices.names)} devices, {mode} mode",
                            f"{res.describe()} ({res.seconds:.2f} s)"),
              wrap={"order": 28})
    fastest = max(res.front, key=lambda e: e.throughput_fps)
    single = max((r for r in rows if r["kind"] == "single"),
                 key=lambda r: r["throughput_fps"], default=None)
    line = f"fastest split: {fastest.order} at {fastest.throughput_fps:.2f} FPS"
    if single is not None:
        line += (f"; the fastest single device: {single['order']} at "
                 f"{single['throughput_fps']:.2f} FPS")
    out.line(line)
    stem = Path(model).stem if model else "devices"
    default_csv = Path("coupprof-out") / f"explore-devices-{stem}-{mode}.csv"
    doc = {"format": DEVICES_FORMAT, "devices_file": str(args.devices), "mode": mode,
           "method": res.method, "evaluations": res.evaluations, "space": res.space,
           "search_seconds": res.seconds, "proof": res.describe(),
           "layers": {k: c.sources for k, c in costs.items()},
           "link_table": str(args.links or ""), **environment()}
    written = out.save(pd.DataFrame(rows), doc, default_csv)
    out.wrote(written, f"{len(rows)} candidates")
    if args.measure:
        _measure_devices(args, rows[:args.measure], mode, written.csv or default_csv, out)
    return 0


def _measure_devices(args: argparse.Namespace, rows: list[dict[str, Any]], mode: str,
                     path: Path, out: Output) -> None:
    """The top K measured with `coupprof run --devices`'s machinery, beside predicted."""
    from profiler.cli.common.devices import render_measured_splits
    from profiler.devices.run import DevicesRunConfig, part_rows, run_devices
    from profiler.errors import BadInputError

    if args.model is None:
        raise BadInputError("--measure runs the model across the devices", "pass --model")
    measured = []
    for r in rows:
        say(f"measuring #{r['rank']} {r['order']} across devices")
        run = run_devices(DevicesRunConfig(args.devices, r["order"], mode, args.model,
                                           path.parent / f"{path.stem}-run{r['rank']}",
                                           frames=args.frames))
        if run.exit_code != 0:
            raise run.error or BadInputError(f"measuring {r['order']} failed (exit "
                                             f"{run.exit_code})", "see the ranks' lines")
        measured.append((r, part_rows(run)))
    table, doc_rows = render_measured_splits(measured)
    out.table(table)
    mpath = path.with_name(path.stem + "-measured.csv")
    _write(doc_rows, mpath, mpath.with_suffix(".json"),
           {"devices_file": str(args.devices), "model_path": str(args.model), "mode": mode,
            "frames": args.frames, "explore_csv": path.name}, fmt=DEVICES_MEASURED_FORMAT)
    out.line(f"wrote {mpath} and {mpath.with_suffix('.json')}")
