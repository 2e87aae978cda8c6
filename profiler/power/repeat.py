"""Per-call energy from a counter source: repeat the call until the counter resolves it.

Counter sources (RAPL, NVML, hwmon) refresh every few milliseconds to 100 ms, far
slower than a layer; `measure_repeated` runs a call back to back until the
counter window spans enough refreshes, then divides.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from profiler.power.attribution import fps_per_w
from profiler.power.sources.base import CounterSource


@dataclass(frozen=True)
class RepeatedEnergy:
    """Energy of one call, from a counter window over ``repeats`` calls."""

    repeats: int
    window_ns: int
    energy_mj: float  # per call
    time_ns: float  # per call (window / repeats)
    power_w: float  # mean over the window
    dynamic_energy_mj: float  # per call, above the baseline
    fps_per_w: float
    counter_updates: int  # counter refresh intervals the window spans (resolution ~ 1/this)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure_repeated(call: Callable[[], object], source: CounterSource, *,
                     min_window_ns: int | None = None, min_updates: int = 100,
                     baseline_power_w: float = 0.0, max_repeats: int = 1_000_000,
                     ) -> RepeatedEnergy:
    """Run ``call`` enough times back to back that the counter window spans at least
    ``min_updates`` counter refreshes (so quantisation is under 1/min_updates) and
    ``min_window_ns``, then divide. The window starts right after a counter update
    (`CounterSource.wait_for_tick`), so only the end is quantised. Times come from
    the source's clock.
    """
    clock = source.clock
    need_ns = max(int(min_window_ns or 0), min_updates * int(source.update_interval_ns))
    t0 = clock()
    call()  # probe: also warms caches, as the timed calls will be
    probe_ns = max(clock() - t0, 1)
    repeats = int(min(max(1, math.ceil(need_ns / probe_ns)), max_repeats))
    t_start, e_start = source.wait_for_tick()
    for _ in range(repeats):
        call()
    e_end = source.read_energy_mj()
    t_end = clock()
    window = t_end - t_start
    if window < need_ns and repeats < max_repeats:
        # The probe was slower than the calls: extend with a second pass.
        more = int(min(math.ceil((need_ns - window) * repeats / max(window, 1)),
                       max_repeats - repeats))
        for _ in range(more):
            call()
        e_end = source.read_energy_mj()
        t_end = clock()
        window = t_end - t_start
        repeats += more
    energy = (e_end - e_start) / repeats
    time_ns = window / repeats
    return RepeatedEnergy(
        repeats=repeats,
        window_ns=int(window),
        energy_mj=energy,
        time_ns=time_ns,
        power_w=(e_end - e_start) * 1e6 / window if window > 0 else float("nan"),
        dynamic_energy_mj=energy - baseline_power_w * time_ns * 1e-6,
        fps_per_w=fps_per_w(energy),
        counter_updates=int(window // max(int(source.update_interval_ns), 1)),
    )
