"""CPU core sets: LiteRT's interpreter (XNNPACK) with its threads on the processor's cores.

The CPU executor behind the `Executor`
interface: the same pinning rule (pin first, then build the interpreter so its
worker threads inherit the cores) and `make_interpreter` for the runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from profiler.executors.base import Executor, SubModel, SubModelInterpreter, TensorIO
from profiler.executors.logs import native_stderr
from profiler.runtime import make_interpreter

if TYPE_CHECKING:
    from ai_edge_litert.interpreter import Interpreter


class InterpreterSubModel(SubModel):
    """A sub-model in a LiteRT (or tflite-runtime) interpreter.

    Inputs are copied straight into the interpreter's tensor memory and outputs are
    numpy views of it, taken fresh per call and never held across `invoke` (LiteRT
    refuses to run while a view is alive)."""

    def __init__(self, interp: Interpreter, name: str) -> None:
        self.interp = interp
        self.name = name
        ins, outs = interp.get_input_details(), interp.get_output_details()
        self.inputs = [_io(d) for d in ins]
        self.outputs = [_io(d) for d in outs]
        self._in_views: list[Callable[[], np.ndarray]] = [interp.tensor(d["index"]) for d in ins]
        self._out_views: list[Callable[[], np.ndarray]] = [interp.tensor(d["index"]) for d in outs]
        self._invoke = interp.invoke

    def set_input(self, i: int, value: np.ndarray) -> None:
        np.copyto(self._in_views[i](), value, casting="no")

    def run(self) -> None:
        self._invoke()

    def output(self, i: int) -> np.ndarray:
        return self._out_views[i]()

    def close(self) -> None:
        # the bound invoke holds the interpreter too: drop it, or nothing is freed
        self._in_views = self._out_views = []
        self._invoke = _closed
        self.interp = None


def _closed() -> None:
    raise RuntimeError("the sub-model was closed")


def _io(detail: dict[str, Any]) -> TensorIO:
    return TensorIO(str(detail.get("name", "")), tuple(int(d) for d in detail["shape"]),
                    np.dtype(detail["dtype"]))


class CpuExecutor(Executor):
    """A CPU core set; threads default to its core count."""

    kind = "cpu"

    def _load(self, model_bytes: bytes, name: str) -> SubModel:
        return InterpreterSubModel(self._make(model_bytes, name), name)

    def _make(self, model_bytes: bytes, name: str) -> Interpreter:
        with native_stderr():  # "INFO: Created TensorFlow Lite XNNPACK delegate for CPU."
            return make_interpreter(model_bytes, num_threads=self.threads, name=name)

    def interpreter(self, model_bytes: bytes, name: str = "model"
                    ) -> Interpreter | SubModelInterpreter:
        """The raw interpreter when nothing wraps it (the runner's fast view-copy path)."""
        if self.modelled is not None:
            return super().interpreter(model_bytes, name)
        if not self.is_open:
            raise RuntimeError("CpuExecutor.interpreter() called before open()")
        return self._make(model_bytes, name)
