"""Layer-to-processor mappings: their spec, their execution (switch and pipeline, a stage in
a thread or its own process), the queueing model of a pipeline, hand-over costs, and
predictions from layer tables."""
