"""Power: from the logger's bytes (or a counter) to energy per window.

Where a sample enters and where it becomes a window:

- ``protocol``: the logger's binary protocol (frames, CRC, commands, numpy decoder).
- ``collector``: pyserial capture from a logger (real, simavr rig, or virtual) into
  a ``trace.DeviceTrace`` (samples, edges, gaps, counters) on the logger's clock.
- ``clockmap``: logger clock -> host clock from matched marker edges.
- ``host_trace``: ``HostTrace``, the capture on the host clock, and integrating it
  over windows.
- ``sources``: one base class per kind of power hardware (``StreamSource``,
  ``ReadingSource``, ``CounterSource``), picked by spec (``arduino:PORT``,
  ``ina260:PORT``, ``nvml``, ...).
- ``session``: ``PowerSession``, the one measuring facade: opens a source and a
  marker, takes the idle baseline, brackets windows (``StreamCapture``,
  ``MarkerHooks``) and returns their ``profiler.power.attribution.Attribution``.
- ``repeat``: per-call energy from a counter (repeat until it resolves).
- ``export``: a capture to CSV or Parquet in chunks.
- ``rig``: a stand-in for the Arduino (the real firmware under simavr); the other,
  a Python logger on a pty, is the simulated board's (``profiler.sim.virtual_logger``).
"""
