"""`ModelView`: the slicer's read-only view of a loaded model's primary subgraph (op
names, producers, consumers, constants). The zoo builds models with another type,
`profiler.zoo.graph.GraphBuilder`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import SupportsInt

from profiler.errors import ModelError
from profiler.tflite import schema_py_generated as schema
from profiler.tflite.model_io import op_name


@dataclass
class ModelView:
    """Subgraph 0 of a loaded `ModelT` with the indices the slicer needs."""

    model: schema.ModelT
    subgraph: schema.SubGraphT
    op_names: list[str]
    producer: dict[int, int]  # tensor index -> index of the op that writes it
    consumers: dict[int, list[int]]  # tensor index -> ops that read it, in op order
    inputs: list[int]  # subgraph inputs
    outputs: list[int]  # subgraph outputs

    @classmethod
    def of(cls, model: schema.ModelT) -> ModelView:
        sg = model.subgraphs[0]
        ops = sg.operators or []
        names = [op_name(model, op) for op in ops]
        producer: dict[int, int] = {}
        consumers: dict[int, list[int]] = {}
        for i, op in enumerate(ops):
            if op.largeCustomOptionsSize:
                raise ModelError(f"operator {i} ({names[i]}) keeps its options outside the flatbuffer",
                                 "slicing models over 2 GB is not supported; export a smaller model")
            for t in _ints(op.inputs):
                if t >= 0:
                    lst = consumers.setdefault(t, [])
                    if not lst or lst[-1] != i:
                        lst.append(i)
            for t in _ints(op.outputs):
                if t >= 0:
                    producer[t] = i
        return cls(model, sg, names, producer, consumers, _ints(sg.inputs), _ints(sg.outputs))

    @property
    def num_ops(self) -> int:
        return len(self.op_names)

    def op(self, i: int) -> schema.OperatorT:
        return self.subgraph.operators[i]

    def tensor(self, t: int) -> schema.TensorT:
        return self.subgraph.tensors[t]

    def is_constant(self, t: int) -> bool:
        """True for tensors whose value is stored in the model (weights, biases, shapes)."""
        buf_index = self.subgraph.tensors[t].buffer
        if not buf_index:
            return False
        buf = self.model.buffers[buf_index]
        if buf.offset and buf.offset > 1:
            return True
        return buf.data is not None and len(buf.data) > 0

    def is_runtime(self, t: int) -> bool:
        """True for tensors computed while the model runs or fed from outside.

        Constants, variables (state kept by the interpreter) and tensors nobody
        writes are copied into a sub-model instead of being passed between them.
        """
        if self.is_constant(t) or self.subgraph.tensors[t].isVariable:
            return False
        return t in self.producer or t in self.inputs

    def op_inputs(self, i: int) -> list[int]:
        return [t for t in _ints(self.op(i).inputs) if t >= 0]

    def op_outputs(self, i: int) -> list[int]:
        return [t for t in _ints(self.op(i).outputs) if t >= 0]


def _ints(values: Iterable[SupportsInt] | None) -> list[int]:
    return [] if values is None else [int(v) for v in values]
