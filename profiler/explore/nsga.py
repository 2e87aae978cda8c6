"""NSGA-II (pymoo) over integer genes, shared by the pipeline and the device-split
searches: both encode a mapping as integer genes whose runs matter (stages, parts), so
both use two-point crossover and rounded polynomial mutation.

The encodings and why: docs/explore.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from profiler.errors import BadInputError

PYMOO_FIX = "pip install 'coupprof[explore]'   (or: pip install 'pymoo>=0.6')"


def nsga2_minimize(cost: Callable[[np.ndarray], Sequence[float]], upper: np.ndarray,
                   n_obj: int, *, pop_size: int, generations: int, seed: int,
                   what: str) -> int:
    """Minimise ``cost`` over integer genes 0..``upper`` (each gene its own bound) for
    ``generations`` of ``pop_size``; the caller keeps what it evaluated (its cost
    function's cache). Returns the number of evaluations. ``what`` names the search in
    the error when pymoo is missing."""
    try:
        from pymoo.algorithms.moo.nsga2 import NSGA2
        from pymoo.core.problem import Problem
        from pymoo.operators.crossover.pntx import TwoPointCrossover
        from pymoo.operators.mutation.pm import PM
        from pymoo.operators.repair.rounding import RoundingRepair
        from pymoo.operators.sampling.rnd import IntegerRandomSampling
        from pymoo.optimize import minimize
    except ImportError:
        raise BadInputError(f"{what} needs pymoo, which is not installed", PYMOO_FIX) from None

    class Genes(Problem):
        def __init__(self) -> None:
            super().__init__(n_var=len(upper), n_obj=n_obj, xl=0, xu=upper, vtype=int)

        def _evaluate(self, X: np.ndarray, out: dict[str, Any], *args: Any,
                      **kwargs: Any) -> None:
            out["F"] = np.array([cost(x) for x in X])

    # two-point crossover keeps runs of genes (stages, parts) together; polynomial
    # mutation, rounded, moves a gene by a step
    algorithm = NSGA2(pop_size=pop_size, sampling=IntegerRandomSampling(),
                      crossover=TwoPointCrossover(),
                      mutation=PM(prob=1.0, eta=3.0, vtype=float, repair=RoundingRepair()),
                      eliminate_duplicates=True)
    res = minimize(Genes(), algorithm, ("n_gen", generations), seed=seed, verbose=False)
    return int(res.algorithm.evaluator.n_eval)
