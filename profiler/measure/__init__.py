"""Measure one model's layers on one processor at one level: `layers` is the one path
every command and benchmark takes (levels set and restored, power bracketed, sliced and
fused runs, clock sampled); `hardware` builds what it drives from specs. Below them: the
sliced runner, the fused prefixes, the CPU cache state they run in, the clock trace, and
the results and tables they produce."""
