"""Executors: how a processor of a board loads and runs layer sub-models.

    from profiler.executors import make_executor
    with make_executor(board, "G") as ex:          # pins this thread to G's host cores
        sub = ex.load(layer.model_bytes, "layer 3")
        sub.set_input(0, x); sub.run(); y = sub.output(0)
        print(sub.fallback)                        # True if ops fell back to the CPU

Back ends: `cpu` (interpreter on a core set), `accelerator` (LiteRT CompiledModel on
a GPU/NPU), `delegate` (load_delegate); on the simulated board a CPU executor whose runs
are paced to the modelled processor (`PacedSubModel`, `profiler.sim.executor`, plugged
in through `register_executor_kind`).
`ProcessorWorker` owns an executor on its own pinned thread.
"""

from profiler.executors.accelerator import AcceleratorExecutor, CompiledSubModel
from profiler.executors.base import (
    Executor,
    ModelledCall,
    PacedSubModel,
    SubModel,
    SubModelInterpreter,
    TensorIO,
    fallback_flags,
    late_runs,
    pin_thread,
)
from profiler.executors.cpu import CpuExecutor, InterpreterSubModel
from profiler.executors.delegate import DelegateExecutor, delegate_coverage
from profiler.executors.factory import make_executor, register_executor_kind, with_accelerators
from profiler.executors.worker import ProcessorWorker

__all__ = [
    "AcceleratorExecutor",
    "CompiledSubModel",
    "CpuExecutor",
    "DelegateExecutor",
    "Executor",
    "InterpreterSubModel",
    "ProcessorWorker",
    "ModelledCall",
    "PacedSubModel",
    "SubModel",
    "SubModelInterpreter",
    "TensorIO",
    "delegate_coverage",
    "fallback_flags",
    "late_runs",
    "make_executor",
    "pin_thread",
    "register_executor_kind",
    "with_accelerators",
]
