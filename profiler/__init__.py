"""coupprof: per-layer time and energy profiling of CNN inference on embedded SoCs.

One measurement, end to end:

- ``slicing`` cuts a model into layer sub-models; ``executors`` load them on a
  processor; ``measure.runner.LayerRunner`` runs frames and stamps every layer (host ns).
- ``governors`` (beside this package) set the DVFS level; ``markers`` raise a GPIO
  line around each layer.
- ``power`` is where a sample enters: the logger's bytes become a ``DeviceTrace``
  (``power.collector``), mapped onto the host clock as a ``HostTrace``;
  ``power.session.PowerSession`` brackets the layers' windows and asks
  ``power.attribution`` to integrate each window (matched to the logger's edges).
- ``measure.tables`` turns layer timings and attributed energy into rows (CSV + JSON
  sidecar); ``plots``, ``report`` and the notebooks read those.
- ``cli`` only parses, calls the above and renders; ``cli.common`` holds what several
  commands share.

``docs/architecture.md`` maps every package and what flows between them.
"""

__version__ = "0.1.0"

# Package data (boards, default model) and the source checkout (firmware/, benchmarks/)
# are found through profiler.resources, which works from a wheel as well as a checkout.
