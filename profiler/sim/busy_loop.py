"""`dvfs-latency`'s busy loop on the simulated board, timed on a virtual clock.

The detection in `governors.latency` runs unchanged; only the chunks' durations come
from the speed model (`profiler.sim.model`) at the frequency the sim governor has in
effect, so the result recovers the profile's modelled transition delay.
"""

from __future__ import annotations

import statistics
import time

from governors.latency import BusyLoop, spin
from profiler.sim import model as sim_model
from profiler.sim.governor import SimGovernor


class VirtualClock:
    """A clock that moves only when told: the loop's chunks and waits advance it."""

    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns


class SimBusyLoop(BusyLoop):
    """The busy loop on the simulated board, on a virtual clock the simulated kernel shares.

    A chunk lasts n iterations at the host's measured speed, slowed by f_max / f at the
    frequency in effect when it starts (a busy loop is clock-bound). Durations are
    deterministic, so the detection recovers the modelled delay to within one chunk.
    """

    def __init__(self, gov: SimGovernor, clock: VirtualClock) -> None:
        super().__init__(clock)
        self.gov = gov
        self.vclock = clock
        runs = []
        for _ in range(9):
            t0 = time.perf_counter_ns()
            spin(2000)
            runs.append((time.perf_counter_ns() - t0) / 2000)
        self.host_ns_per_iter = statistics.median(runs)

    def chunk(self) -> tuple[int, int]:
        t0 = self.vclock.now_ns
        factor = sim_model.compute_slowdown(self.gov.proc, self.gov.effective_khz(t0))
        dur = max(1, int(self.n * self.host_ns_per_iter * factor))
        self.vclock.now_ns += dur
        return t0, dur

    def wait(self, seconds: float) -> None:
        self.vclock.now_ns += int(seconds * 1e9)
