"""Measure one model's layers on one processor at one level: the sliced runner, the fused
prefixes, the CPU cache state they run in, the clock trace, and the results and tables
they produce."""
