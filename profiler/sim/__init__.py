"""The simulated board: every software path real, only the silicon modelled.

One package holds everything that stands in for hardware on ``--board sim``
(README.md beside this file says how the pieces fit and where each number comes from):

- ``model``: the board's per-processor constants (from the profile's
  ``[processors.X.sim]`` tables), layer speed, busy power, DVFS transition delay;
- ``executor``: LiteRT on this machine's cores, each sub-model run paced to the
  modelled processor's time at the frequency in effect;
- ``governor``: a temporary sysfs tree the real cpufreq/devfreq governors write, and the
  kernel's side of each write (the frequency in effect lags by the transition delay);
- ``power``: the board's power over time (idle, static, the busy processors' dynamic
  power) as the virtual logger samples it, and the ground truth of any window;
- ``virtual_logger``: a Python logger that speaks the firmware's protocol over a pty;
- ``ina260``: ARM-CO-UP's INA260-on-an-Arduino logger: on a pty for ``--power sim:ina260``,
  or a whole run offline with its known truth;
- ``sources``: the ``sim`` and ``sim:ina260`` power sources (a virtual logger on a pty in
  front of the real serial back end); ``busy_loop``: `dvfs-latency`'s loop on a virtual clock;
- ``platform``: the one hook that plugs the model tables' check, the governor, the executor
  and the power sources into the role factories (imported by `profiler.platform`).

No factory imports this package, and this ``__init__`` imports nothing.
"""
