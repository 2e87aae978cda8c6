"""Search the mappings and DVFS levels to use: the cost space built from measured tables,
the exact switch search, the pipeline front (exact or NSGA-II), and measuring the picks."""
