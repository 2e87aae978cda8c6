"""`coupprof` command line: one module per subcommand, registered below.

Each subcommand module exposes ``register(subparsers) -> None``, which adds its
parser and sets ``func`` (``func(args) -> int``) as the parser default. Measuring
lives in the library; these modules only parse, call and render.

No command module imports another (tests/test_layering.py checks it). What several
share lives beside this package, in modules no command owns: ``profiler.cli.common.options``
(argument types and option groups), ``profiler.cli.common.plumbing`` (board choice, --freq,
governors, model loading, opening power) and ``profiler.cli.common.progress`` (progress bars).
Every command's --help ends with examples from ``profiler.cli.common.examples``, attached
below as its parser is built.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from profiler import __version__
from profiler.cli.common.examples import START_HERE, KeepLinesFormatter, with_examples
from profiler.errors import ProfilerError

# Subcommand modules -> (command, one-line summary), in the order `coupprof --help`
# lists them. The summaries live here so that `coupprof --help` and a command's own
# start-up import only that command's module, not every one (pandas, LiteRT, rich).
COMMANDS: dict[str, tuple[str, str]] = {
    "layers": ("layers", "time every layer of a model on one processor"),
    "transfer_matrix": ("transfer-matrix", "cost of handing each layer boundary from processor X to Y"),
    "run": ("run", "execute a layer-to-processor mapping (switch or pipeline) and measure it"),
    "predict": ("predict", "predict a mapping's latency, throughput and energy from layer/transfer tables"),
    "sweep": ("sweep", "time every layer at every (processor, DVFS level) pair"),
    "calibrate": ("calibrate", "fit the simulated board's per-layer timing and power model to measured layers"),
    "explore": ("explore", "search the mapping and DVFS levels to use (switch: exact; pipeline: Pareto front)"),
    "plot": ("plot", "draw a figure (efficiency, layers, transfers, timeline, pareto) from CSVs"),
    "report": ("report", "summarise a run directory (tables and figures) as Markdown or HTML"),
    "slice": ("slice", "cut a .tflite model into one sub-model per layer"),
    "zoo": ("zoo", "list the model zoo or write one of its .tflite models"),
    "collect": ("collect", "capture a raw power trace from the logger"),
    "import_recording": ("import", "attribute another logger's trace per layer (ARM-CO-UP's, generic CSV), or import ARM-CO-UP's tables"),
    "boards": ("boards", "list board profiles, or show one with its DVFS levels"),
    "pin": ("pin", "hold a processor at a DVFS level while a command runs"),
    "dvfs_latency": ("dvfs-latency", "measure DVFS transition delays between levels (ARM-CO-UP Table 10)"),
    "doctor": ("doctor", "check runtime, accelerators, board, governors, GPIO and serial ports"),
}


def command_help(module: str) -> str:
    """The one-line help of a subcommand module (``__name__`` or its last part)."""
    return COMMANDS[module.rsplit(".", 1)[-1]][1]


EPILOG = START_HERE + """

exit codes: 0 ok, 1 a check failed, 2 bad input, 3 hardware/permission problem,
4 power logger failed mid-run (partial results kept), 130 interrupted.
Run `coupprof COMMAND --help` for the options of each command."""


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error on one line and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand argv names: its first word that is not an option (the top level
    takes no option with a value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; given ``argv``, only the command it names is loaded in full and
    the others are listed by name and summary."""
    parser = OneLineParser(
        prog="coupprof",
        description="Per-layer time, energy and transfer profiling of .tflite models "
        "on heterogeneous embedded SoCs (CPU clusters, GPU, NPU) at chosen DVFS levels.",
        epilog=EPILOG,
        formatter_class=KeepLinesFormatter,
    )
    parser.add_argument("--version", action="version", version=f"coupprof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    wanted = _command_in(argv) if argv is not None else None
    for module, (command, text) in COMMANDS.items():
        if argv is None or command == wanted:
            importlib.import_module(f"profiler.cli.{module}").register(sub)
            with_examples(sub.choices[command], command)
        else:
            sub.add_parser(command, help=text)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = int(args.func(args) or 0)
    except ProfilerError as err:
        print(f"coupprof {args.command}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        from profiler.cli.common.interrupt import interrupt_line

        print(interrupt_line(args.command), file=sys.stderr)
        return 130
    if code == 0 and "profiler.cli.common.plumbing" in sys.modules:
        # the board notice a command held back (never in front of an error)
        sys.modules["profiler.cli.common.plumbing"].flush_board_notice()
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
