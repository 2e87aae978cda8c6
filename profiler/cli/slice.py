"""`coupprof slice MODEL`: cut a model into per-layer sub-models, list them, optionally verify."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from profiler.cli import command_help
from profiler.cli.common.options import add_model_options, stdout_console
from profiler.cli.common.progress import step, task_progress
from profiler.errors import BadInputError, VerificationError

if TYPE_CHECKING:
    from rich.console import JustifyMethod

    from profiler.cli.common.options import Subparsers
    from profiler.slicing.specs import SlicedModel


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "slice",
        help=command_help(__name__),
        description="Cut a .tflite model into chained per-layer sub-models (cached by model "
        "sha256 and cut points) and print the layer table. Default grouping: a layer starts at "
        "each conv / fully-connected / matmul op; a depthwise conv joins the 1x1 conv after it; "
        "activations, pooling, reshape and element-wise ops join their producer "
        "(docs/slicing.md). With --verify, run the whole model and the chained sub-models on the "
        "same random inputs and exit 1 if any output differs.",
    )
    p.add_argument("model", type=Path, metavar="MODEL", help="the .tflite model to slice")
    add_model_options(p, model=False)
    p.add_argument("--verify", action="store_true",
                   help="check that the chained sub-models reproduce the whole model's outputs")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs for --verify")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="DIR",
                   help="write layer_000.tflite ... and manifest.json to DIR")
    p.set_defaults(func=run)


# Short names keep the table inside 80 columns.
SHORT_NAMES = {
    "CONV_2D": "CONV", "DEPTHWISE_CONV_2D": "DWCONV", "FULLY_CONNECTED": "FC",
    "TRANSPOSE_CONV": "TCONV", "BATCH_MATMUL": "MATMUL", "MAX_POOL_2D": "MAXPOOL",
    "AVERAGE_POOL_2D": "AVGPOOL", "CONCATENATION": "CONCAT", "DEQUANTIZE": "DEQUANT",
    "LOCAL_RESPONSE_NORMALIZATION": "LRN", "RESIZE_BILINEAR": "RESIZE",
    "RESIZE_NEAREST_NEIGHBOR": "RESIZE_NN",
}


def _op_summary(types: list[str], limit: int = 4) -> str:
    short = [SHORT_NAMES.get(t, t) for t in types]
    if len(short) <= limit:
        return " ".join(short)
    return " ".join(short[:limit]) + f" …{len(short) - limit} more"


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from profiler.slicing import slice_model, verify
    from profiler.tflite.model_io import read_model_bytes

    if args.cuts is not None and args.granularity != "layer":
        raise BadInputError("--cuts and --granularity op exclude each other", "give one of them")
    data = read_model_bytes(args.model)
    with task_progress(sys.stderr.isatty()) as bar:
        sliced = slice_model(data, args.granularity, cuts=args.cuts, name=str(args.model),
                             progress=step(bar, "slicing"))

    if args.output is not None:
        _write(sliced, args.output)

    console = stdout_console()
    mode = f"cuts {','.join(map(str, sliced.cuts))}" if sliced.granularity == "cuts" else sliced.granularity
    table = Table(title=f"{args.model.name}: {len(sliced.layers)} layers ({mode}), "
                  f"sha256 {sliced.source_sha256[:12]}")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("layer", "right"), ("ops", "right"), ("op types", "left"), ("MACs", "right"),
        ("param bytes", "right"), ("in bytes", "right"), ("out bytes", "right"))
    for col, justify in columns:
        table.add_column(col, justify=justify)
    for layer in sliced.layers:
        ops = layer.op_indices
        span = str(ops[0]) if len(ops) == 1 else f"{ops[0]}-{ops[-1]}"
        table.add_row(str(layer.index), span, _op_summary(layer.op_types), f"{layer.macs:,}",
                      f"{layer.param_bytes:,}", f"{layer.input_bytes:,}", f"{layer.output_bytes:,}")
    table.add_section()
    table.add_row("total", "", "", f"{sum(la.macs for la in sliced.layers):,}",
                  f"{sum(la.param_bytes for la in sliced.layers):,}", "", "")
    console.print(table)
    where = args.output if args.output is not None else sliced.cache_dir
    if where is not None:
        console.print(f"sub-models: {where}" + (" (from cache)" if sliced.from_cache else ""),
                      soft_wrap=True, highlight=False)

    if not args.verify:
        return 0
    with task_progress(sys.stderr.isatty()) as bar:
        result = verify(sliced, data, seed=args.seed,
                        progress=step(bar, "verifying"))
    if not result.ok:
        raise VerificationError(result.summary(), "the sub-models in the cache or -o DIR "
                                "are not faithful; report the model and this message")
    console.print(result.summary(), soft_wrap=True, highlight=False)
    return 0


def _write(sliced: SlicedModel, out: Path) -> None:
    from profiler.slicing.cache import MANIFEST, layer_file

    if out.exists() and not out.is_dir():
        raise BadInputError(f"-o {out} exists and is not a directory", "pass a directory path")
    try:
        out.mkdir(parents=True, exist_ok=True)
        for stale in out.glob("layer_[0-9][0-9][0-9].tflite"):  # from an earlier slicing
            if int(stale.stem[6:]) >= len(sliced.layers):
                stale.unlink()
        for layer in sliced.layers:
            (out / layer_file(layer.index)).write_bytes(layer.model_bytes)
        if sliced.cache_dir is not None and (sliced.cache_dir / MANIFEST).exists():
            shutil.copyfile(sliced.cache_dir / MANIFEST, out / MANIFEST)
    except OSError as err:
        raise BadInputError(f"cannot write sub-models to {out}: {err.strerror}",
                            "pass a writable directory with -o") from None
