"""GPU/NPU processors through an external TFLite delegate library (`load_delegate`).

For boards whose runtime is `tflite-runtime`, or whose vendor ships a delegate
rather than a LiteRT dispatch library (e.g. VeriSilicon's `libvx_delegate.so` on the
Khadas VIM3, Arm NN's delegate on Mali). The library path comes from the board
profile's `delegate` key; `delegate_options` are passed through.

Fallback detection: after the delegate is applied, the interpreter's node list has
one ``DELEGATE`` node per partition it took. A sub-model ran wholly on the delegate
when exactly one partition exists, it produces every sub-model output, and it reads
only sub-model inputs and constants. Anything else means some ops stayed on the CPU.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from profiler.boards.model import ProcessorSpec
from profiler.clock import Clock, perf_clock
from profiler.errors import BoardError, ModelError, RuntimeUnavailableError
from profiler.executors.base import Executor, SubModel
from profiler.executors.cpu import InterpreterSubModel
from profiler.executors.logs import native_stderr
from profiler.runtime import make_interpreter, runtime

if TYPE_CHECKING:
    from ai_edge_litert.interpreter import Delegate, Interpreter


def delegate_coverage(interp: Interpreter) -> tuple[bool, str]:
    """(fully delegated, why not) from an interpreter's node list."""
    try:
        ops = interp._get_ops_details()
    except AttributeError:
        return False, "the runtime cannot list its nodes; fallback unknown"
    delegates = [op for op in ops if op.get("op_name") == "DELEGATE"]
    if not delegates:
        return False, "the delegate took no operators"
    if len(delegates) > 1:
        return False, (f"the delegate split the layer into {len(delegates)} partitions "
                       "(the ops between them run on the CPU)")
    node = delegates[0]
    ins = {int(d["index"]) for d in interp.get_input_details()}
    outs = {int(d["index"]) for d in interp.get_output_details()}
    if not outs <= {int(t) for t in node["outputs"]}:
        return False, "some outputs are computed on the CPU after the delegate"
    # Runtime tensors are outputs of some node (the original nodes stay listed);
    # whatever no node produces and no input is, is a constant.
    made = {int(t) for op in ops if op.get("op_name") != "DELEGATE" for t in op["outputs"]}
    if any(int(t) in made for t in node["inputs"] if int(t) >= 0 and int(t) not in ins):
        return False, "the delegate reads tensors computed on the CPU before it"
    return True, ""


@contextlib.contextmanager
def _quiet_failed_delegate() -> Iterator[None]:
    """LiteRT's `Delegate.__del__` trips over the half-built object a failed
    `load_delegate` leaves ("no attribute '_library'"); collect it inside this block
    with that one complaint silenced, so the user sees our one-line error only."""
    previous = sys.unraisablehook

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        if not (isinstance(unraisable.exc_value, AttributeError)
                and "_library" in str(unraisable.exc_value)):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
        gc.collect()
    finally:
        sys.unraisablehook = previous


class DelegateExecutor(Executor):
    """Sub-models in an interpreter with an external delegate, driven from host cores."""

    kind = "delegate"

    def __init__(self, proc: ProcessorSpec, *, library: str | None = None,
                 delegate_options: dict[str, Any] | None = None,
                 cores: Sequence[int] | None = None, threads: int | None = None,
                 clock: Clock = perf_clock) -> None:
        lib = library or proc.delegate
        if not lib:
            raise BoardError(f"processor {proc.letter} names no delegate library",
                             "add `delegate = \"lib...so\"` to its board profile entry")
        self.library = lib
        self.delegate_options = dict(delegate_options or {})
        self._delegate: Delegate | None = None
        super().__init__(proc, cores=cores, threads=threads, clock=clock)

    def default_threads(self) -> int:
        return 1

    def _open_runtime(self) -> None:
        rt = runtime()
        load = getattr(rt.module, "load_delegate", None)
        if load is None:
            raise RuntimeUnavailableError(f"{rt.name} {rt.version} has no load_delegate",
                                          "install tflite-runtime or ai-edge-litert")
        failure = ""
        with _quiet_failed_delegate(), native_stderr() as log:
            try:
                self._delegate = load(self.library, self.delegate_options)
            except (ValueError, RuntimeError, OSError) as err:
                failure = str(err).strip().splitlines()[0] if str(err).strip() else "failed"
        if failure:
            extra = "; ".join(log.lines[-2:])
            raise RuntimeUnavailableError(
                f"cannot load delegate {self.library} for processor {self.proc.letter}: "
                f"{failure}{'; ' + extra if extra else ''}",
                "install the vendor's delegate library (or fix `delegate` in the board "
                "profile), or map the layers to a CPU processor")

    def _load(self, model_bytes: bytes, name: str) -> SubModel:
        with native_stderr():
            try:
                interp = make_interpreter(model_bytes, num_threads=self.threads, name=name,
                                          delegates=[self._delegate])
            except ModelError as err:
                raise ModelError(f"{err.message} (with delegate {self.library})",
                                 "map this layer to a CPU processor") from None
        sub = InterpreterSubModel(interp, name)
        full, why = delegate_coverage(interp)
        sub.fallback = not full
        sub.fallback_detail = why
        return sub

    def _close_runtime(self, subs: list[SubModel]) -> None:
        with native_stderr():
            super()._close_runtime(subs)
            self._delegate = None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "delegate": self.library}
