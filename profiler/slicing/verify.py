"""Check that chained sub-models reproduce the whole model.

The whole model and the chain of sub-models run on the same seeded random
inputs through `profiler.runtime.make_interpreter` (the runtime coupprof
measures with). An output matches when

* float: max |chained - whole| <= 1e-4 * max |whole|;
* int8 / uint8 / int16 (quantized): they differ by at most one quantum (1);
* other integers and bools: they are equal.

To name the first layer that differs, every tensor that crosses a layer
boundary is also read from the whole model (a copy of it whose subgraph outputs
include those tensors). Each sub-model is run once on those reference inputs
(so an error is not blamed on a layer that merely received bad inputs) and
once in the chain; the first layer whose outputs miss the tolerance in either
run is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiler.errors import BadInputError, ModelError
from profiler.runtime import make_interpreter
from profiler.slicing.specs import Layer, SlicedModel, TensorSpec
from profiler.tflite.model_io import parse_model, serialize_model, sha256_bytes

FLOAT_RTOL = 1e-4
QUANTIZED_DTYPES = frozenset({"int8", "uint8", "int16", "uint16"})


@dataclass
class VerifyResult:
    ok: bool
    first_bad_layer: int | None
    max_abs_diff: dict[str, float]  # per model output (by tensor name)
    tolerance: dict[str, float]  # per model output, same keys
    seed: int = 0
    layers_checked: int = 0
    problems: list[str] = field(default_factory=list)  # what differs in the first bad layer

    def summary(self) -> str:
        if self.ok:
            worst = max(self.max_abs_diff.values(), default=0.0)
            return (f"chained sub-models match the whole model: {len(self.max_abs_diff)} output(s), "
                    f"{self.layers_checked} layers, max abs diff {worst:.3g} (seed {self.seed})")
        where = f"layer {self.first_bad_layer}" if self.first_bad_layer is not None else "outputs"
        detail = "; ".join(self.problems[:3])
        return f"chained sub-models differ from the whole model at {where}: {detail} (seed {self.seed})"


def compare(got: np.ndarray, want: np.ndarray, dtype: str) -> tuple[float, float]:
    """(max abs diff, tolerance) of `got` against the reference `want`."""
    if got.shape != want.shape:
        return float("inf"), 0.0
    if got.size == 0:
        return 0.0, 0.0
    if np.issubdtype(want.dtype, np.floating) or np.issubdtype(want.dtype, np.complexfloating):
        a, b = got.astype(np.complex128 if np.iscomplexobj(want) else np.float64), want.astype(
            np.complex128 if np.iscomplexobj(want) else np.float64)
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        diff = np.where(same, 0.0, np.abs(a - b))
        finite = np.abs(b[np.isfinite(b)])
        tol = FLOAT_RTOL * float(finite.max()) if finite.size else 0.0
        return float(np.nan_to_num(diff, nan=np.inf).max()), tol
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    return float(diff.max()), 1.0 if dtype in QUANTIZED_DTYPES else 0.0


def random_input(detail: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
    dtype = np.dtype(detail["dtype"])
    shape = tuple(int(d) for d in detail["shape"])
    if np.issubdtype(dtype, np.floating):
        return rng.uniform(-1.0, 1.0, shape).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        if dtype.itemsize <= 2:  # quantized activations: the full range
            info = np.iinfo(dtype)
            return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)
        return rng.integers(0, 2, shape).astype(dtype)  # indices / sizes: keep them small
    raise ModelError(f"cannot make random values for input {detail['name']!r} of type {dtype}",
                     "verify models whose inputs are numeric")


class _Runner:
    """One interpreter with helpers to feed arrays by position and read outputs."""

    def __init__(self, model_bytes: bytes, name: str) -> None:
        self.name = name
        self.interp = make_interpreter(model_bytes, name=name)
        self.inputs = self.interp.get_input_details()
        self.outputs = self.interp.get_output_details()

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(arrays) != len(self.inputs):
            raise ModelError(f"{self.name} has {len(self.inputs)} inputs, got {len(arrays)}",
                             "slice the model again (the cached sub-models may be stale)")
        resized = False
        for d, arr in zip(self.inputs, arrays, strict=True):
            if tuple(d["shape"]) != arr.shape:
                self.interp.resize_tensor_input(d["index"], arr.shape)
                resized = True
        if resized:
            self.interp.allocate_tensors()
            self.inputs = self.interp.get_input_details()
            self.outputs = self.interp.get_output_details()
        try:
            for d, arr in zip(self.inputs, arrays, strict=True):
                self.interp.set_tensor(d["index"], np.ascontiguousarray(arr, dtype=d["dtype"]))
            self.interp.invoke()
        except (ValueError, RuntimeError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ModelError(f"running {self.name} failed: {first}",
                             "check the model with `coupprof slice MODEL --verify`") from None
        return [self.interp.get_tensor(d["index"]) for d in self.outputs]


def _tapped_model(model_bytes: bytes, taps: Sequence[int]) -> bytes:
    """The whole model with `taps` added to its subgraph outputs."""
    model = parse_model(model_bytes)
    sg = model.subgraphs[0]
    outs = [int(t) for t in (sg.outputs if sg.outputs is not None else [])]
    sg.outputs = outs + [t for t in dict.fromkeys(taps) if t not in outs]
    return serialize_model(model)


def _label(t: TensorSpec) -> str:
    return t.name or f"tensor {t.index}"


def _check_layer(layer: Layer, got: Sequence[np.ndarray], ref: dict[int, np.ndarray],
                 how: str) -> list[str]:
    problems = []
    for spec, arr in zip(layer.outputs, got, strict=True):
        if spec.index not in ref:
            continue
        diff, tol = compare(arr, ref[spec.index], spec.dtype)
        if not diff <= tol:
            problems.append(f"{_label(spec)} max abs diff {diff:.3g} > tolerance {tol:.3g} ({how})")
    return problems


def verify(sliced: SlicedModel, model_bytes: bytes, seed: int = 0, *,
           progress: Callable[[int, int], None] | None = None) -> VerifyResult:
    """Run the whole model and the chained sub-models on the same random inputs and compare."""
    if sha256_bytes(model_bytes) != sliced.source_sha256:
        raise BadInputError("the model given to verify is not the model that was sliced",
                            "pass the same .tflite bytes to slice_model and verify")
    rng = np.random.default_rng(seed)
    whole = _Runner(model_bytes, "the whole model")
    feeds = [random_input(d, rng) for d in whole.inputs]
    inputs = {int(d["index"]): arr for d, arr in zip(whole.inputs, feeds, strict=True)}
    want = dict(zip((int(d["index"]) for d in whole.outputs), whole.run(feeds), strict=True))

    taps = [t.index for layer in sliced.layers for t in layer.outputs]
    tapped = _Runner(_tapped_model(model_bytes, taps), "the whole model with boundary outputs")
    ref = dict(inputs)
    ref.update(zip((int(d["index"]) for d in tapped.outputs), tapped.run(feeds), strict=True))

    chain = dict(inputs)
    first_bad: int | None = None
    problems: list[str] = []
    for layer in sliced.layers:
        runner = _Runner(layer.model_bytes, f"layer {layer.index} sub-model")
        missing = [t for t in layer.inputs if t.index not in ref]
        if missing:
            raise ModelError(f"layer {layer.index} reads {_label(missing[0])}, which no earlier "
                             "layer produces", "slice the model again")
        alone = runner.run([ref[t.index] for t in layer.inputs])
        chained = runner.run([chain[t.index] for t in layer.inputs])
        chain.update((spec.index, arr) for spec, arr in zip(layer.outputs, chained, strict=True))
        if first_bad is None:
            bad = (_check_layer(layer, alone, ref, "on reference inputs")
                   + _check_layer(layer, chained, ref, "in the chain"))
            if bad:
                first_bad, problems = layer.index, bad
        if progress:
            progress(layer.index + 1, len(sliced.layers))

    max_abs: dict[str, float] = {}
    tols: dict[str, float] = {}
    outputs_ok = True
    for spec in sliced.model_outputs:
        key = _label(spec) if _label(spec) not in max_abs else f"{_label(spec)}#{spec.index}"
        got = chain.get(spec.index)
        if got is None or spec.index not in want:
            max_abs[key], tols[key] = float("inf"), 0.0
            outputs_ok = False
            problems.append(f"model output {key} is produced by no sub-model")
            continue
        max_abs[key], tols[key] = compare(got, want[spec.index], spec.dtype)
        if not max_abs[key] <= tols[key]:
            outputs_ok = False
            if first_bad is None:
                problems.append(f"model output {key} max abs diff {max_abs[key]:.3g} > "
                                f"tolerance {tols[key]:.3g}")
    return VerifyResult(ok=outputs_ok and first_bad is None, first_bad_layer=first_bad,
                        max_abs_diff=max_abs, tolerance=tols, seed=seed,
                        layers_checked=len(sliced.layers), problems=problems)
