"""`coupprof calibrate`: fit the simulated board's per-layer model to measured layers.

    coupprof calibrate ../shared/armcoup/Layers.csv            # ARM-CO-UP's RK3399Pro
    coupprof calibrate coupprof-out/sweep-mymodel-myboard     # a sweep of a real board

Fits every processor's timing and power model (profiler/sim/perf.py, profiler/calibrate/fit.py),
prints the leave-one-model-out validation (fit on all models but one, predict that
one) and which parameters the layers set and which kept the prior, and writes a simulated
board profile with the fitted tables and their provenance. A board that is not simulated
is calibrated as its simulated twin (profiler/calibrate/twin.py), ``sim-BOARD``.
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

from profiler.cli import command_help
from profiler.cli.common.options import add_wide_option, stdout_console
from profiler.cli.common.output import Output
from profiler.cli.common.progress import step, task_progress

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import pandas as pd

    from profiler.boards.model import Board
    from profiler.calibrate.fit import Measurements, ProcessorFit
    from profiler.cli.common.options import Subparsers
    from profiler.sim.perf import TimingParams

EXAMPLES = """\
examples:
  coupprof calibrate ../shared/armcoup/Layers.csv
      ARM-CO-UP's RK3399Pro measurements (5 CNNs on L, B, G at every level; MobileNetV1
      on N), their layers mapped onto the zoo graphs they ran (docs/armcoup-layers.md);
      writes coupprof-out/calibrated-sim.toml, usable as --board coupprof-out/calibrated-sim.toml
  coupprof calibrate ../shared/armcoup/Layers.csv --models Alex,Google,ResV1_50,SqueezeV1 \\
      --no-validate -o fit-without-mobilenet.toml
      fit without MobileNetV1, to predict it
  coupprof calibrate coupprof-out/sweep-resnet50-sim --board sim
      your own sweep (coupprof sweep -o DIR); its levels must be the base board's
  coupprof calibrate rpi5-Layers.csv --board rpi5
      the simulated twin of another board (bundled or your own TOML): its processors,
      cores and levels on the sim's model, priors where the profile says nothing (said);
      writes coupprof-out/boards/sim-rpi5.toml, usable as --board sim-rpi5 from here
      (docs/boards.md, "A simulated twin of any board")
"""


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help=command_help(__name__),
        description="Fit the simulated board's per-layer timing and power model (what each "
        "layer's operators do: MACs, bytes, weights, kind; the processor's and its host's "
        "clock; the layer's activity) to measured layers, validate it leaving one model out "
        "at a time, and write a simulated board profile (TOML) with the fitted parameters "
        "and where they came from.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", type=Path, metavar="SOURCE",
                   help="ARM-CO-UP's Layers.csv, or a folder written by `coupprof sweep -o DIR`")
    p.add_argument("--board", default="sim", metavar="NAME|PATH",
                   help="the board the layers were measured on: a simulated profile is "
                   "calibrated as it is, any other (bundled or your own) as its simulated "
                   "twin sim-NAME; its levels and voltages map the measured rows, its other "
                   "settings are kept (default: sim)")
    p.add_argument("--processors", default=None, metavar="L,B,G,N",
                   help="fit only these processors (default: every one the source measured)")
    p.add_argument("--models", default=None, metavar="NAME,...",
                   help="fit only on these models (default: all; ARM-CO-UP's are Alex, Google, "
                   "MobileV1, ResV1_50, SqueezeV1)")
    p.add_argument("--no-validate", dest="validate", action="store_false",
                   help="skip the leave-one-model-out validation (one fit per model and "
                   "processor; about a minute for ARM-CO-UP's table)")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="TOML",
                   help="profile to write (default: coupprof-out/calibrated-BOARD.toml; a "
                   "twin: coupprof-out/boards/sim-BOARD.toml, or $COUPPROF_BOARDS_DIR, where "
                   "--board finds it by name)")
    add_wide_option(p)
    p.add_argument("--lomo-csv", type=Path, default=None, metavar="CSV",
                   help="also write the validation table as CSV, with a JSON sidecar "
                   "(the board, the measurements, the targets missed) that `coupprof "
                   "report` shows")
    p.add_argument("--duplicates", choices=("first", "last", "mean"), default="last",
                   help="a Layers.csv row listed more than once (two runs in one table): "
                   "keep the first or the last copy, or the mean of their Time and Power "
                   "(default: last; how many is said)")
    p.set_defaults(func=run)


def _measurements(args: argparse.Namespace, board: Board
                  ) -> tuple[dict[str, Measurements], str]:
    from profiler.calibrate.board import armcoup_measurements, sweep_measurements
    from profiler.cli.common.plumbing import say
    from profiler.errors import BadInputError
    from profiler.recordings.armcoup_tables import sniff

    src: Path = args.source
    if src.is_file() and sniff(src) == "layers":
        kind = "ARM-CO-UP Layers.csv"
        notes: list[str] = []
        ms = armcoup_measurements(src, board, _split(args.models), args.duplicates, notes)
        for note in notes:
            say(note)
    elif src.is_dir() or (src.is_file() and src.suffix == ".csv"):
        kind = "coupprof sweep"
        ms = sweep_measurements(src, board)
    else:
        raise BadInputError(f"{src} is neither ARM-CO-UP's Layers.csv nor a sweep folder",
                            "pass Layers.csv or the folder of `coupprof sweep -o DIR`")
    if args.processors:
        wanted = [p.strip().upper() for p in args.processors.split(",") if p.strip()]
        unknown = [p for p in wanted if p not in ms]
        if unknown:
            raise BadInputError(f"--processors {args.processors}: {src} has no rows of "
                                f"{', '.join(unknown)}", f"it has: {', '.join(ms)}")
        ms = {p: ms[p] for p in wanted}
    if args.models and kind != "ARM-CO-UP Layers.csv":
        ms = {p: m.subset(_split(args.models) or []) for p, m in ms.items()}
    ms = {p: m for p, m in ms.items() if len(m.rows)}
    if not ms:
        raise BadInputError(f"no measured layers left in {src} to fit",
                            "check --processors and --models")
    return ms, kind


def _split(text: str | None) -> list[str] | None:
    return [s.strip() for s in text.split(",") if s.strip()] if text else None


def _pct(v: float) -> str:
    return "-" if not math.isfinite(v) else f"{v:.1f}"


#: The validation table's columns; each header is unique, so the least wanted can be
#: left out by name to fit the terminal (`LOMO_LESSER`).
LOMO_COLUMNS = ("proc", "held out", "layers", "time median", "time p90", "whole median",
                "whole worst", "power median", "power p90")
LOMO_LESSER = ("layers", "time p90", "power p90", "whole worst")


def render_lomo(table: pd.DataFrame) -> Table:
    from profiler.calibrate.fit import TARGETS_PCT as T

    t = Table(title="leave-one-model-out: fitted on the other models, errors on the held-out "
              "one (absolute, %)", box=box.SIMPLE_HEAD)
    for col in LOMO_COLUMNS:
        t.add_column(col, justify="right", no_wrap=True)
    for proc, g in table.groupby("processor", sort=False):
        for _, r in g.iterrows():
            pooled = r["held_out"] == "pooled"
            t.add_row(proc if pooled else "", str(r["held_out"]), str(r["layers"]),
                      _pct(r["layer_time_err_median_pct"]), _pct(r["layer_time_err_p90_pct"]),
                      _pct(r["whole_time_err_median_pct"]), _pct(r["whole_time_err_max_pct"]),
                      _pct(r["power_err_median_pct"]), _pct(r["power_err_p90_pct"]),
                      style="bold" if pooled else None)
        t.add_section()
    t.caption = (f"targets: per-layer time median <= {T['layer_median_pooled']:g} % pooled, "
                 f"<= {T['layer_median_each']:g} % for every held-out model; whole model "
                 f"<= {T['whole_median_pooled']:g} % pooled, each held-out model's median "
                 f"<= {T['whole_worst']:g} %; power median <= {T['power_median']:g} %, "
                 f"90th percentile <= {T['power_p90']:g} %")
    return t


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from profiler import __version__
    from profiler.boards.profiles import user_boards_dir
    from profiler.calibrate import fit
    from profiler.calibrate.board import calibrate_board, profile_text
    from profiler.calibrate.twin import twin_of
    from profiler.platform import choose_board
    from profiler.sim.model import idle_power_w
    from profiler.tflite.model_io import sha256_bytes

    # A real board's profile is calibrated as its simulated twin (sim-<board>), with
    # priors for what the profile does not say; a simulated one as it is.
    twin = twin_of(choose_board(args.board, letters=()))
    board = twin.board
    console = stdout_console()
    if twin.made:
        # plain lines, unwrapped: parameter names and assumptions are looked for as written
        print(f"simulated twin of {twin.of}: {board.name}; assumed where its profile says "
              "nothing:\n  " + "\n  ".join(twin.assumed))
    out = args.output or (user_boards_dir() / f"{board.name}.toml" if twin.made
                          else Path("coupprof-out") / f"calibrated-{board.name}.toml")
    ms, kind = _measurements(args, board)
    rows = sum(len(m.rows) for m in ms.values())
    print(f"{kind} {args.source}: {rows} measured layers; "
          + "; ".join(f"{p}: {len(m.rows)} on {', '.join(m.models)}" for p, m in ms.items()),
          file=sys.stderr)
    held: list[fit.HeldOut] = []
    with task_progress(sys.stderr.isatty()) as bar:
        done = [0]

        def tick(what: str, total: int) -> Callable[..., None] | None:
            update = step(bar, what)
            if update is None:
                return None
            done[0] = 0

            def advance(*_: object) -> None:
                done[0] += 1
                update(done[0], total)
            return advance

        if args.validate:
            todo = [p for p, m in ms.items() if len(m.models) > 1]
            advance = tick("leave-one-model-out fits", sum(len(ms[p].models) for p in todo))
            for p in todo:
                held += fit.leave_one_model_out(ms[p], progress=advance)
        cal = calibrate_board(ms, progress=tick("fit on every model", len(ms)),
                              prior_idle_mw=idle_power_w(board) * 1000)
    table = fit.lomo_table(held) if held else None
    if table is not None:
        Output.of(args).table(render_lomo(table), drop=LOMO_LESSER, console=console)
        misses = fit.target_misses(table)
        console.print("targets met" if not misses else "targets missed:\n  " + "\n  ".join(misses))
        if args.lomo_csv:
            fit.write_lomo(table, Path(args.lomo_csv), board.name, str(args.source), misses)
    single = [p for p, m in ms.items() if len(m.models) < 2]
    if single:
        console.print(f"not validated (one model only): {', '.join(single)}")
    unmeasured = [p for p in board.processors if p not in cal.fits]
    print(render_parameters(cal.fits, ms, unmeasured))
    cal.provenance = {
        "source": str(args.source), "source_kind": kind,
        "source_sha256": sha256_bytes(Path(args.source).read_bytes())
        if Path(args.source).is_file() else "",
        "rows": rows, "processors": list(ms),
        "models": sorted({mo for m in ms.values() for mo in m.models}),
        "command": "coupprof " + " ".join(sys.argv[1:]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "coupprof_version": __version__,
    }
    if twin.made:
        cal.provenance["twin_of"] = twin.of
        cal.provenance["assumed"] = list(twin.assumed)
    cal.provenance["fitted"] = [f"{p}.{n}" for p, f in cal.fits.items() for n in f.fitted()]
    cal.provenance["kept_prior"] = [f"{p}.{n}" for p, f in cal.fits.items()
                                    for n in f.kept_prior()]
    cal.provenance["unbound"] = [f"{p}.{n}" for p, f in cal.fits.items() for n in f.unbound]
    cal.provenance["fitted_loosely"] = [f"{p}.{n}" for p, f in cal.fits.items()
                                        for n in f.loose()]
    if not cal.idle_fitted:
        cal.provenance["kept_prior"].append("board.sim.idle_power_mw")
    if unmeasured:
        cal.provenance["not_measured"] = unmeasured
    if table is not None:
        pooled = table[table["held_out"] == "pooled"].set_index("processor")
        cal.provenance["lomo_layer_time_median_pct"] = [
            round(float(pooled.loc[p, "layer_time_err_median_pct"]), 2) for p in pooled.index]
        cal.provenance["lomo_processors"] = list(pooled.index)
    text = profile_text(twin.text, cal, kept=_kept(board),
                        existing={p: board.processors[p].extra.get("sim", {})
                                  for p in board.processors})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    choose_board(str(out), letters=())  # what was written loads as a board
    fitted = pd.DataFrame([
        {"proc": p, "call ms at top": _call_ms(board, p, f.timing),
         "idle W": cal.idle_power_mw / 1000,
         "C_eff nF": f.power.power.ceff_nf if f.power else float("nan"),
         "lag ms": f.power.lag_ms if f.power else float("nan")}
        for p, f in cal.fits.items()])
    console.print(fitted.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    found = out.resolve() == (user_boards_dir() / f"{out.stem}.toml").resolve()
    print(f"wrote {out} (use it with --board {out.stem if found else out})")
    return 0


def render_parameters(fits: Mapping[str, ProcessorFit], ms: Mapping[str, Measurements],
                      unmeasured: Sequence[str]) -> str:
    """Per processor, which parameters the measured layers set and which kept the prior."""
    from profiler.calibrate.fit import LAYER_SCATTER, LOOSE_SPREAD

    lines = ["parameters: fitted (the layers set them; loosely: their spread were each "
             f"layer's time measured to {LAYER_SCATTER:.0%} is over {LOOSE_SPREAD:.0%}, so "
             "the fit's priors or a trade with another parameter set them as much), kept the "
             "prior (the layers cannot tell them apart), unbound (no measured layer depends "
             "on them: the fit's priors set them, a kind's rate by conv1x1's)"]
    for p, f in fits.items():
        m = ms[p]
        levels = m.rows[["f_ghz", "fh_ghz"]].drop_duplicates()
        lines.append(f"{p} ({len(m.rows)} layers of {len(m.models)} model"
                     f"{'s' if len(m.models) != 1 else ''} at {len(levels)} setting"
                     f"{'s' if len(levels) != 1 else ''}):")
        loose = f.loose()
        lines.append(f"  fitted: {', '.join(n for n in f.fitted() if n not in loose) or 'none'}")
        if loose:
            lines.append("  fitted loosely: " + ", ".join(
                f"{n} (+-{f.spread[n]:.0%})" if f.spread[n] < 10 else f"{n} (+->1000%)"
                for n in loose))
        why: dict[str, list[str]] = {}
        for name, reason in f.kept_prior().items():
            why.setdefault(reason, []).append(name)
        lines += [f"  kept the prior ({reason}): {', '.join(names)}"
                  for reason, names in why.items()]
        if f.unbound:
            lines.append(f"  unbound: {', '.join(f.unbound)}")
    if unmeasured:
        lines.append(f"{', '.join(unmeasured)}: not measured, every parameter kept the prior")
    return "\n".join(lines)


def _kept(board: Board) -> dict[str, dict[str, Any]]:
    keep = ("dvfs_delay_up_us", "dvfs_delay_down_us", "nominal_khz", "nominal_mv")
    return {p: {k: v for k, v in proc.extra.get("sim", {}).items() if k in keep}
            for p, proc in board.processors.items()}


def _call_ms(board: Board, letter: str, timing: TimingParams) -> float:
    from profiler.sim import model as sim_model
    from profiler.sim.perf import call_overhead_ms

    proc = board.processor(letter)
    f = sim_model.max_khz(proc) / 1e6
    host = board.processors.get(proc.host) if proc.host else None
    fh = sim_model.max_khz(host) / 1e6 if host is not None else f
    return float(call_overhead_ms(timing, f, fh))
