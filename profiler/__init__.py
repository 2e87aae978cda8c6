"""coupprof: per-layer time and energy profiling of CNN inference on embedded SoCs."""

__version__ = "0.1.0"

# Package data (boards, default model) and the source checkout (firmware/, benchmarks/)
# are found through profiler.resources, which works from a wheel as well as a checkout.
