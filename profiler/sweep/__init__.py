"""Sweeps over processors and DVFS levels: the plan of pairs, the run that appends each
pair's rows as it finishes, and the schema of the sweep folder other commands read."""
