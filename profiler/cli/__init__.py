"""`coupprof` command line: one module per subcommand, registered below.

Each subcommand module exposes ``register(subparsers) -> None``, which adds its
parser and sets ``func`` (``func(args) -> int``) as the parser default. Measuring
lives in the library; these modules only parse, call and render.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from profiler import __version__
from profiler.errors import ProfilerError

# Subcommand modules, in the order `coupprof --help` lists them.
COMMANDS: list[str] = [
    "layers",
    "transfer_matrix",
    "run",
    "predict",
    "sweep",
    "plot",
    "report",
    "slice",
    "zoo",
    "collect",
    "boards",
    "pin",
    "dvfs_latency",
    "doctor",
]

EPILOG = """\
exit codes: 0 ok, 1 a check failed, 2 bad input, 3 hardware/permission problem,
4 power logger failed mid-run (partial results kept), 130 interrupted.
Run `coupprof COMMAND --help` for the options of each command."""


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error on one line and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="coupprof",
        description="Per-layer time, energy and transfer profiling of .tflite models "
        "on heterogeneous embedded SoCs (CPU clusters, GPU, NPU) at chosen DVFS levels.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"coupprof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name in COMMANDS:
        importlib.import_module(f"profiler.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ProfilerError as err:
        print(f"coupprof {args.command}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"coupprof {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
