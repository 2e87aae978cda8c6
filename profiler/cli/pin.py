"""`coupprof pin`: hold one processor at a DVFS level while a command runs.

    coupprof pin --processor B --freq 3 [--board NAME] -- COMMAND [ARGS...]

Saves the governor state, sets the level (reading the effective frequency back),
runs COMMAND, and restores every file afterwards: when COMMAND ends, fails, or
coupprof receives SIGINT/SIGTERM/SIGHUP (forwarded to COMMAND, whose exit ends the
pin). The exit code is COMMAND's (128 + signal when a signal ended it).
"""

from __future__ import annotations

import argparse
import subprocess
from typing import TYPE_CHECKING

from governors import RestoreGuard, make_governor
from profiler.boards.model import resolve_level
from profiler.cli import command_help
from profiler.cli.common.options import add_board_args
from profiler.cli.common.plumbing import hold_board_notice, say, sysfs_root
from profiler.errors import BadInputError
from profiler.platform import choose_board

if TYPE_CHECKING:
    from profiler.cli.common.options import Subparsers


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "pin",
        help=command_help(__name__),
        description="Set processor LETTER to DVFS level K, run COMMAND, then restore the "
        "original governor and limits (also on failure, Ctrl-C and SIGTERM, which are "
        "forwarded to COMMAND). Exit code: COMMAND's.",
        usage="coupprof pin --processor LETTER --freq K [--board NAME] -- COMMAND [ARGS...]",
    )
    p.add_argument("--processor", "-p", required=True, metavar="LETTER",
                   help="L little CPU, B big CPU, G GPU, N NPU (N sets its host cluster)")
    p.add_argument("--freq", required=True, metavar="K",
                   help="1-based level of the processor's frequency table, or min / max")
    add_board_args(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                   help="the command to run while the level is held")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise BadInputError("no COMMAND given",
                            "put the command after --, e.g. `coupprof pin -p B --freq 3 -- sleep 5`")
    root = sysfs_root(args)
    board = choose_board(args.board, root, letters=[args.processor],
                        announce=hold_board_notice)
    target = board.dvfs_domain(args.processor)
    level = resolve_level(target, args.freq, board.name)
    assert level is not None
    idx, freq_khz = level
    gov = make_governor(board, target, root)

    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int) -> None:
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    with RestoreGuard([gov], on_signal=forward) as guard:
        result = gov.set_level(idx)
        via = gov.describe()
        note = f" for {args.processor.upper()}" if target.letter != args.processor.upper() else ""
        say(f"pinned {target.letter}{note} at level {idx} ({freq_khz / 1000:g} MHz) via {via}"
            + (f"; reads {result.effective_khz / 1000:g} MHz" if result.effective_khz else ""))
        for n in gov.notes:
            say(f"note: {n}")
        if result.warning:
            say(f"warning: {result.warning}")
        if guard.signalled is not None:  # signalled while setting: do not start COMMAND
            return 128 + guard.signalled
        try:
            child = subprocess.Popen(cmd)
        except OSError as err:
            raise BadInputError(f"cannot run {cmd[0]!r}: {err.strerror}",
                                "check the command after --") from None
        if guard.signalled is not None:  # arrived while starting it: pass it on now
            child.send_signal(guard.signalled)
        say(f"running: {' '.join(cmd)} (pid {child.pid})")
        rc = child.wait()
    say(f"restored {target.letter}'s governor state")
    return 128 - rc if rc < 0 else rc

