"""benchmarks/slicing_overhead.py with one CPU thread's prefixes ending as a cluster's do
(a corner of each output, joined, its end measured and taken out: `prefix_end` "corner"
instead of "keep"): a trial, not the product's setting (README.md here)."""

import runpy
import sys
from pathlib import Path

import profiler.measure.fused as fused

fused.prefix_end = lambda settings, executor: "corner" if settings.end_cost else "keep"
root = Path(__file__).resolve().parents[3]
sys.argv = ["slicing_overhead.py", *sys.argv[1:]]
runpy.run_path(str(root / "benchmarks" / "slicing_overhead.py"), run_name="__main__")
