"""`coupprof zoo`: list the model zoo, or write one of its models to a .tflite file."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table

from profiler import zoo
from profiler.cli import command_help
from profiler.cli.common.options import add_wide_option, stdout_console
from profiler.cli.common.output import Output
from profiler.errors import BadInputError
from profiler.tflite.model_io import sha256_bytes
from profiler.zoo import armcoup
from profiler.zoo.registry import get_entry, resolve_params, write_atomic

if TYPE_CHECKING:
    from profiler.cli.common.options import Subparsers

EXAMPLES = """\
examples:
  coupprof zoo --list
  coupprof zoo mobilenet_v1 --alpha 0.5 --size 160 -o mobilenet_v1_0.5_160.tflite
  coupprof zoo resnet50 --param size=112 -o resnet50_112.tflite
  coupprof zoo googlenet            # build into the cache and print its path"""


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "zoo",
        help=command_help(__name__),
        description="Architecture-faithful .tflite models (MobileNetV1 FP32/int8, ResNet-50, "
        "GoogLeNet, SqueezeNet 1.0/1.1, AlexNet; VGG-19, ResNet-101 and DenseNet-121, "
        "AutoDiCE's three) with seeded weights, for profiling; "
        "--list also names the ones that build ARM-CO-UP's five CNNs, with their layer cuts.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", nargs="?", help="zoo model to build (see --list)")
    p.add_argument("--list", action="store_true", help="list the models, their parameters, "
                   "operator count and MACs at the default parameters")
    p.add_argument("-o", "--output", type=Path, metavar="FILE",
                   help="write the model here (default: build into the cache and print its path)")
    p.add_argument("--param", action="append", default=[], metavar="K=V",
                   help="set a model parameter (repeatable), e.g. --param size=160")
    p.add_argument("--alpha", type=float, help="shorthand for --param alpha=A")
    p.add_argument("--size", type=int, help="shorthand for --param size=S")
    p.add_argument("--seed", type=int, help="shorthand for --param seed=N")
    add_wide_option(p)
    p.set_defaults(func=run)


def parse_params(args: argparse.Namespace) -> dict[str, str | int | float]:
    params: dict[str, str | int | float] = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise BadInputError(f"--param {item!r} is not KEY=VALUE", "write e.g. --param size=160")
        params[key.strip()] = value.strip()
    for key in ("alpha", "size", "seed"):
        if getattr(args, key) is not None:
            params[key] = getattr(args, key)
    return params


def run(args: argparse.Namespace) -> int:
    console = stdout_console()
    if args.list:
        if args.name:
            raise BadInputError("give either --list or a model name, not both",
                                "run `coupprof zoo --list`")
        out = Output.of(args)
        out.table(list_table(), wrap={"description": 36})
        out.table(armcoup_table(), wrap={"--cuts": 30, "zoo model": 24})
        return 0
    if not args.name:
        raise BadInputError("no model name given", "run `coupprof zoo --list` to see the models")
    get_entry(args.name)
    params = resolve_params(args.name, parse_params(args))
    status = (console.status(f"building {args.name}") if console.is_terminal
              else contextlib.nullcontext())
    with status:
        if args.output is None:
            path = zoo.model_path(args.name, **params)
            data = path.read_bytes()
        else:
            data = zoo.build(args.name, **params)
            path = args.output
            try:
                write_atomic(path, data, make_parents=False)
            except OSError as err:
                raise BadInputError(f"cannot write {path}: {err.strerror or err}",
                                    "pass a writable path to -o") from None
    ops, macs, n_params = zoo.summary(args.name, **params)
    text = ", ".join(f"{k}={v}" for k, v in params.items())
    print(f"wrote {path}: {args.name} ({text}); {sum(ops.values())} ops, "
          f"{n_params / 1e6:.2f} M parameters, {macs / 1e9:.3f} GMACs, "
          f"{len(data) / 1e6:.1f} MB, sha256 {sha256_bytes(data)[:16]}")
    return 0


def list_table() -> Table:
    table = Table(title="coupprof model zoo (ops and MACs at the default parameters)")
    table.add_column("name", style="bold")
    table.add_column("description")
    table.add_column("parameters (defaults)")
    table.add_column("ops", justify="right")
    table.add_column("MACs", justify="right")
    for entry in zoo.list_models():
        ops, macs, _ = zoo.summary(entry.name)
        params = "\n".join(f"{k}={v}" for k, v in entry.default_params.items())
        table.add_row(entry.name, entry.description, params, str(sum(ops.values())),
                      f"{macs / 1e6:,.0f} M")
    return table


def armcoup_table() -> Table:
    table = Table(title="ARM-CO-UP's CNNs (their Layers.csv) as zoo models; their layers are "
                  "`coupprof layers --cuts` of these (docs/armcoup-layers.md)")
    table.add_column("graph", style="bold")
    table.add_column("zoo model")
    table.add_column("layers", justify="right")
    table.add_column("--cuts")
    for spec in armcoup.MODELS.values():
        table.add_row(spec.graph, spec.zoo_text, str(spec.n_layers),
                      ",".join(str(c) for c in armcoup.cuts(spec)))
    return table
