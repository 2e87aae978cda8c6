"""`coupprof boards`: list the board profiles; `coupprof boards show NAME|PATH`: print one;
`coupprof boards --devices FILE`: the devices of a devices file and the links between them.

`show` prints the processors (cores, host, governor, accelerator) and the DVFS
levels in MHz (with mV where known), laid out like ARM-CO-UP's Table 9. Showing a
profile by path validates it: an invalid file fails with the key and the problem.
`--devices` only reads (no host is contacted): `coupprof doctor --devices` checks them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.markup import escape
from rich.table import Table

from profiler.boards.host import format_cpu_list
from profiler.boards.model import Board
from profiler.boards.profiles import (
    GENERATED,
    bundled_profiles,
    detect_board,
    load_profile,
    read_model_string,
    user_profiles,
)
from profiler.cli import command_help
from profiler.cli.common.devices import add_devices_option
from profiler.cli.common.options import add_board_args, add_wide_option
from profiler.cli.common.output import Output
from profiler.cli.common.plumbing import sysfs_root
from profiler.errors import BadInputError, ProfilerError
from profiler.platform import choose_board

if TYPE_CHECKING:
    from profiler.cli.common.options import Subparsers
    from profiler.devices.spec import DeviceSet


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "boards",
        help=command_help(__name__),
        description="Without arguments: list the bundled board profiles (and `host`, read "
        "from this machine's /sys), marking the detected one. `coupprof boards show NAME|PATH` "
        "prints a board's processors and DVFS levels in MHz; a PATH is validated. "
        "`coupprof boards --devices FILE` lists a devices file's devices and links.",
    )
    p.add_argument("action", nargs="?", choices=("list", "show"), default="list",
                   help="list (default) or show")
    p.add_argument("name", nargs="?", default=None, metavar="NAME|PATH",
                   help="board to show (default: the detected board, else sim)")
    add_devices_option(p, "list its devices (host, board, processors, power, marker, "
                       "cores) and the links between them")
    add_board_args(p)
    add_wide_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    root = sysfs_root(args)
    out = Output.of(args)
    if args.devices is not None:
        from profiler.devices.spec import read_devices

        if args.action != "list" or args.name:
            raise BadInputError("--devices lists a devices file's devices: give no "
                                "list/show NAME with it", "run `coupprof boards --devices FILE`")
        devices = read_devices(args.devices)
        out.table(devices_table(devices), drop=("sysfs root", "marker"), wrap={"board": 24})
        out.table(links_table(devices))
        return 0
    if args.action == "list":
        if args.name:
            raise BadInputError(f"`boards list` takes no NAME (got {args.name!r})",
                                f"use `coupprof boards show {args.name}`")
        out.table(list_table(root), drop=("profile",), wrap={"description": 28})
        return 0
    name = args.name or args.board or detect_board(root) or "sim"
    board = choose_board(name, root, letters=())  # the profile as written
    for table in board_tables(board):
        out.table(table, drop=LESSER_COLUMNS, wrap={"name": 16, "accelerator / delegate": 14})
    return 0


#: `boards show`'s columns a narrow terminal may leave out, least wanted first
#: (`profiler.cli.common.fit`): the profile file holds them all.
LESSER_COLUMNS = ("delay down us", "delay up us", "host kcyc", "call kcyc", "fc GB/s",
                  "act GB/s", "C_eff nF", "governor", "accelerator / delegate")


def shown_path(path: Path) -> str:
    """Where the user finds the file: relative to the working directory when inside it
    (a checkout), else in full (an installed package's site-packages)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def list_table(root: Path) -> Table:
    detected = detect_board(root)
    model = read_model_string(root)
    t = Table(title="board profiles", box=box.SIMPLE_HEAD,
              caption=(f"* detected from device tree model '{model}'" if detected else
                       f"no bundled board matches {'the model ' + repr(model) if model else 'this machine'}"
                       "; commands use 'sim' unless --board is given"))
    for col in ("board", "description", "processors", "profile"):
        t.add_column(col)
    # the bundled profiles, then the user's own (`--board NAME` finds those too)
    for name, path in [*bundled_profiles().items(), *user_profiles().items()]:
        try:
            b = load_profile(path)
            procs = " ".join(b.processors)
            desc = b.description + (" [simulated]" if b.simulated else "")
        except ProfilerError as err:
            procs, desc = "-", f"INVALID: {err}"
        mark = "*" if name == detected else ""
        t.add_row(f"{name}{mark}", escape(desc), procs, shown_path(path))  # "[simulated]"
    for name in GENERATED:
        t.add_row(name, "this machine's CPU clusters, read from /sys at run time",
                  "(from /sys)", "generated")
    return t


def board_tables(board: Board) -> list[Table]:
    src = str(board.source) if board.source else "generated"
    head = Table(title=f"{board.name}: {board.description}"
                 + (" (simulated board)" if board.simulated else ""),
                 caption=f"profile: {src}", box=box.SIMPLE_HEAD)
    for col in ("proc", "kind", "name", "cores", "host", "governor", "accelerator / delegate"):
        head.add_column(col, no_wrap=col == "governor")
    for p in board.processors.values():
        gov = f"{p.governor.kind} {p.governor.path}".strip() if p.governor else \
            (f"none (uses {p.host}'s levels)" if p.host else "none")
        accel = p.accelerator or ""
        if p.delegate:
            accel = f"{accel} delegate {p.delegate}".strip()
        head.add_row(p.letter, str(p.kind), p.name, format_cpu_list(p.cores) if p.cores else "",
                     p.host or "", gov, accel or ("CPU (LiteRT)" if p.kind.is_cpu else ""))
    tables = [head]
    dvfs = [p for p in board.processors.values() if p.freqs_khz]
    if dvfs:
        levels = Table(title="DVFS levels (--freq K): MHz / mV", box=box.SIMPLE_HEAD)
        levels.add_column("K", justify="right")
        for p in dvfs:
            levels.add_column(f"{p.letter} ({p.name})", justify="right")
        for k in range(max(len(p.freqs_khz) for p in dvfs)):
            row = [str(k + 1)]
            for p in dvfs:
                if k < len(p.freqs_khz):
                    mv = p.volts_mv[k] if k < len(p.volts_mv) else None
                    row.append(f"{p.freqs_khz[k] / 1000:g}" + (f" / {mv}" if mv else ""))
                else:
                    row.append("")
            levels.add_row(*row)
        tables.append(levels)
    if board.simulated:
        cal = board.extra.get("sim", {}).get("calibration", {})
        title = "simulation model per processor (profiler/sim/perf.py)"
        if cal:
            title += f"; fitted on {cal.get('source', '?')}"
        sim = Table(title=title, box=box.SIMPLE_HEAD)
        for col in ("proc", "call us", "call kcyc", "host kcyc", "MAC/cycle 1x1", "3x3s1",
                    "dw", "act GB/s", "fc GB/s", "C_eff nF", "delay up us", "delay down us"):
            sim.add_column(col, justify="right")
        for p in board.processors.values():
            s = p.extra.get("sim", {})
            t = s.get("timing", {})
            mpc = t.get("macs_per_cycle", {})
            sim.add_row(p.letter, *(f"{t.get(k, 0):.4g}" for k in
                                    ("call_us", "call_kcycles", "host_call_kcycles")),
                        *(f"{mpc.get(k, 0):.3g}" for k in ("conv1x1", "conv3x3s1", "depthwise")),
                        *(f"{t.get(k, 0):.3g}" for k in ("act_gb_s", "stream_gb_s")),
                        f"{s.get('power', {}).get('ceff_nf', 0):.3g}",
                        "-".join(f"{v:g}" for v in s.get("dvfs_delay_up_us", ())),
                        "-".join(f"{v:g}" for v in s.get("dvfs_delay_down_us", ())))
        tables.append(sim)
    return tables


def devices_table(devices: DeviceSet) -> Table:
    """A row per device, in rank order; a board that does not load says why."""
    from profiler.devices.check import default_specs, load_device_board

    t = Table(title=f"devices in {devices.path}", box=box.SIMPLE_HEAD,
              caption="`coupprof doctor --devices FILE` checks that each can be reached")
    roots = any(d.sysfs_root for d in devices.devices)
    for col in ("device", "host", "board", "processors", "power", "marker", "cores",
                *(("sysfs root",) if roots else ())):
        t.add_column(col)
    for d in devices.devices:
        try:
            b = load_device_board(d)
            procs = " ".join(b.processors)
            board = b.name + (" [simulated]" if b.simulated else "")
            simulated = b.simulated
        except ProfilerError as err:
            procs, board, simulated = "-", f"{d.board}: INVALID: {err.message}", False
        power, marker = default_specs(d, simulated)
        power += "" if d.power else " (default)"
        marker += "" if d.marker else " (default)"
        t.add_row(d.name, d.host + (" (local)" if d.local else ""), escape(board), procs,
                  escape(power), escape(marker),
                  format_cpu_list(list(d.cores)) if d.cores else "any",
                  *((d.sysfs_root or "",) if roots else ()))
    return t


def links_table(devices: DeviceSet) -> Table:
    """Every pair of devices and the link between them (its own, else the default)."""
    t = Table(title="links (a simulated link adds latency + bytes / bandwidth to the real "
              "hand-over)", box=box.SIMPLE_HEAD)
    for col in ("link", "latency ms", "bandwidth MB/s", "from"):
        t.add_column(col, justify="right" if col in ("latency ms", "bandwidth MB/s") else "left")
    names = devices.names
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            link = devices.link(a, b)
            if link.simulated:
                lat = f"{link.latency_ms:g}"
                bw = "unlimited" if link.bandwidth_mb_s is None else f"{link.bandwidth_mb_s:g}"
                source = ("its own [[link]]" if frozenset((a, b)) in devices.links
                          else "the default [[link]]")
            else:
                lat = bw = "as measured"
                source = "no simulated link: the real one"
            t.add_row(f"{a} - {b}", lat, bw, escape(source))
    if len(names) < 2:
        t.add_row("(one device: no links)", "", "", "")
    return t
