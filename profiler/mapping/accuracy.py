"""How far a prediction is from a measurement, defined once for every output.

    error % = (predicted - measured) / measured x 100

Positive means the prediction is too high: a latency predicted longer than measured, or a
throughput predicted higher. `coupprof run`, `explore --measure`, `report`, the validation
benchmarks and the docs' tables use this one sign, and the tables name it in their header
(``ERROR_HEADER``) so a reader never has to guess which way it goes.
"""

from __future__ import annotations

import math

#: The definition, as the tables' titles and the docs spell it.
ERROR_DEFINITION = "err % = (predicted - measured) / measured"
#: A table column holding `error_pct`: its name, and the definition under it.
ERROR_HEADER = "err %\n(pred-meas)/meas"
#: The CSVs' column description (sidecars' ``units``).
ERROR_UNIT = "%, (predicted - measured) / measured x 100: positive = prediction too high"


def error_pct(predicted: float | None, measured: float | None) -> float:
    """(predicted - measured) / measured in %; NaN where either is missing or not a number,
    or measured is 0 (no relative error exists)."""
    if predicted is None or measured is None:
        return math.nan
    p, m = float(predicted), float(measured)
    if math.isnan(p) or math.isnan(m) or m == 0.0:
        return math.nan
    return (p - m) / m * 100.0
