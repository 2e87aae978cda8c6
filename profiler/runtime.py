"""The inference runtime: LiteRT's interpreter, or `tflite-runtime` where a board has only that.

Back ends are tried in this order: `ai_edge_litert` (LiteRT), then `tflite_runtime`.
Runtime errors become `ModelError` here so callers never see a vendor traceback.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING

from profiler.errors import ModelError, RuntimeUnavailableError

if TYPE_CHECKING:  # tflite_runtime's classes have the same API; neither ships types
    from ai_edge_litert.interpreter import Delegate, Interpreter


@dataclass(frozen=True)
class RuntimeInfo:
    name: str  # "ai-edge-litert" or "tflite-runtime"
    version: str
    module: ModuleType  # the module that has `Interpreter` and `load_delegate`


@cache
def runtime() -> RuntimeInfo:
    try:
        from ai_edge_litert import interpreter

        return RuntimeInfo("ai-edge-litert", importlib.metadata.version("ai-edge-litert"),
                           interpreter)
    except ImportError:
        pass
    try:
        from tflite_runtime import interpreter as tflite_interpreter

        return RuntimeInfo("tflite-runtime", importlib.metadata.version("tflite-runtime"),
                           tflite_interpreter)
    except ImportError:
        pass
    raise RuntimeUnavailableError(
        "no inference runtime found (neither ai-edge-litert nor tflite-runtime)",
        "run ./setup.sh, or `pip install ai-edge-litert`",
    )


def make_interpreter(
    model_content: bytes,
    *,
    num_threads: int | None = None,
    name: str = "model",
    delegates: list[Delegate] | None = None,
) -> Interpreter:
    """Create an interpreter and allocate its tensors; the caller should already
    have set CPU affinity (worker threads inherit it when they are created here)."""
    rt = runtime()
    try:
        interp = rt.module.Interpreter(
            model_content=model_content,
            num_threads=num_threads,
            experimental_delegates=delegates,
        )
        interp.allocate_tensors()
    except (ValueError, RuntimeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelError(
            f"{rt.name} cannot run {name}: {first}",
            "check that the model uses operators this runtime supports "
            "(`coupprof slice MODEL` lists them)",
        ) from None
    return interp
