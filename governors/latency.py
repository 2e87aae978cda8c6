"""DVFS transition delay: from the frequency write to the moment the processor's speed changes.

The method of ARM-CO-UP's Table 10: a calibrated busy loop runs in short chunks on
the processor; each chunk's duration tells the speed. For a transition i -> j we
hold level i, timestamp the write that requests j (a plain write, as in per-layer
mode), and keep timing chunks until `CONFIRM` chunks in a row run at level j's
calibrated speed. The delay is the start of the first of those chunks minus the
write time, so it is an upper bound with a resolution of one chunk.

- `busy-loop`: the real method, for CPU clusters (the loop runs on one of the
  cluster's cores).
- `readback`: where no busy loop can run on the processor (a GPU), the time until
  the kernel *reports* the new frequency; it says nothing about the hardware itself.
- `sim-busy-loop`: on the simulated board the same calibration and detection run on
  chunks whose durations come from the simulator's speed model at the frequency in
  effect on a virtual clock (`profiler.sim.busy_loop.SimBusyLoop`, a `BusyLoop`); the
  frequency changes after the profile's modelled delay.
  The result recovers that model (ARM-CO-UP Table 10) to within one chunk; it is not a
  measurement.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from governors.base import Governor, freq_matches
from profiler.boards.model import ProcessorSpec

CONFIRM = 3  # consecutive chunks at the new speed that confirm a change
TIMEOUT_S = 0.1  # Table 10's longest delay is 4.5 ms; give up well after that
SETTLE_S = 0.02  # time at the starting level before each write
SPEED_ROUNDS = 4  # rounds of chunk medians per level, each level once a round


@dataclass(frozen=True)
class Transition:
    from_level: int
    from_khz: int
    to_level: int
    to_khz: int
    delays_us: tuple[float | None, ...]  # one per repeat; None = no change seen before timeout

    @property
    def direction(self) -> str:
        return "up" if self.to_khz > self.from_khz else "down"

    @property
    def detected(self) -> list[float]:
        return [d for d in self.delays_us if d is not None]

    @property
    def median_us(self) -> float | None:
        d = self.detected
        return statistics.median(d) if d else None


@dataclass
class LatencyRun:
    board: str
    processor: str
    method: str
    simulated: bool
    chunk_us: dict[int, float]  # calibrated chunk duration per level (1-based)
    transitions: list[Transition] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def spin(n: int) -> int:
    """The busy loop: integer work with no memory traffic, so its speed follows the clock."""
    x = 0
    for i in range(n):
        x += i ^ (x >> 3)
    return x


class BusyLoop:
    """Times chunks of `spin` on the host clock."""

    def __init__(self, clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        self.clock_ns = clock_ns
        self.n = 200

    def chunk(self) -> tuple[int, int]:
        """(start_ns, duration_ns) of one chunk."""
        t0 = self.clock_ns()
        spin(self.n)
        return t0, self.clock_ns() - t0

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)


def calibrate_n(loop: BusyLoop, target_us: float) -> int:
    """Chunk size giving about `target_us` per chunk at the current speed."""
    loop.n = 200
    for _ in range(8):
        durs = sorted(loop.chunk()[1] for _ in range(15))
        med_us = durs[len(durs) // 2] / 1000
        if med_us <= 0:
            loop.n *= 4
            continue
        loop.n = max(20, int(loop.n * target_us / med_us))
        if abs(med_us - target_us) < 0.2 * target_us:
            break
    return loop.n


def chunk_median_us(loop: BusyLoop, count: int = 200) -> float:
    return statistics.median(loop.chunk()[1] for _ in range(count)) / 1000


def detect_change(loop: BusyLoop, t_write_ns: int, dur_from_us: float, dur_to_us: float,
                  timeout_s: float = TIMEOUT_S) -> float | None:
    """Microseconds from the write until CONFIRM chunks in a row run at the new speed."""
    threshold = (dur_from_us * dur_to_us) ** 0.5  # geometric midpoint of the two speeds
    faster = dur_to_us < dur_from_us
    run_start: int | None = None
    run_len = 0
    deadline = t_write_ns + int(timeout_s * 1e9)
    while True:
        start, dur = loop.chunk()
        at_new = (dur / 1000 < threshold) if faster else (dur / 1000 > threshold)
        if at_new:
            if run_len == 0:
                run_start = start
            run_len += 1
            if run_len >= CONFIRM:
                assert run_start is not None
                return max(0.0, (run_start - t_write_ns) / 1000)
        else:
            run_len = 0
        if start + dur > deadline:
            return None


def readback_delay(gov: Governor, t_write_ns: int, to_khz: int,
                   timeout_s: float | None = None) -> float | None:
    """µs from ``t_write_ns`` until the read-back shows ``to_khz``; None after
    ``timeout_s`` (default `TIMEOUT_S`, read at call time)."""
    deadline = t_write_ns + int((TIMEOUT_S if timeout_s is None else timeout_s) * 1e9)
    while True:
        # the time after the read: the change came before it ends (read first, a thread
        # held up between the two reads gave 2.9 ms against the fake hardware's 3 ms)
        eff = gov.read_khz()
        now = gov.clock_ns()
        if eff is not None and freq_matches(to_khz, eff):
            return (now - t_write_ns) / 1000
        if now > deadline:
            return None


def follows(dur_a_us: float, dur_b_us: float, f_a_khz: int, f_b_khz: int) -> bool:
    """Does the loop's speed change with the clock? The chunk-time ratio must show at least
    half of the frequency ratio (in log terms); the loop is compute-bound, so on a real
    cluster it shows nearly all of it, and host noise alone (a few %) shows none."""
    expected = abs(math.log(f_b_khz / f_a_khz))
    seen = math.log(dur_a_us / dur_b_us) * (1 if f_b_khz > f_a_khz else -1)
    return expected > 0 and seen >= 0.5 * expected


def level_pairs(levels: list[int]) -> Iterator[tuple[int, int]]:
    for a in levels:
        for b in levels:
            if a != b:
                yield a, b


@dataclass
class LatencyPlan:
    proc: ProcessorSpec
    levels: list[int]  # 1-based levels to use
    repeats: int = 3
    chunk_target_us: float = 50.0


def measure(gov: Governor, plan: LatencyPlan, loop: BusyLoop | None, board: str,
            simulated: bool, progress: Callable[[int, int], None] | None = None) -> LatencyRun:
    """Run every ordered pair of `plan.levels`, `plan.repeats` times. The caller holds the
    RestoreGuard; `loop` None means the read-back method."""
    proc = plan.proc
    freqs = proc.freqs_khz
    method = "readback" if loop is None else ("sim-busy-loop" if simulated else "busy-loop")
    run = LatencyRun(board, proc.letter, method, simulated, {})
    wait = loop.wait if loop is not None else time.sleep
    if loop is not None:
        gov.set_khz(freqs[max(plan.levels) - 1], settle_s=0.05)
        wait(SETTLE_S)
        calibrate_n(loop, plan.chunk_target_us)
        # Each level's chunk time, in SPEED_ROUNDS rounds taken in turn with the other
        # levels': on a loaded 2-core VM a 10 ms median moved up to 1.8x on its own, for
        # one window or for phases of a few hundred ms (docs/measure.md), as much as a
        # fake tree would need to pass for a real cluster in one comparison.
        rounds: dict[int, list[float]] = {lvl: [] for lvl in plan.levels}
        for _ in range(SPEED_ROUNDS):
            for lvl in plan.levels:
                gov.set_khz(freqs[lvl - 1], settle_s=0.05)
                wait(SETTLE_S)
                rounds[lvl].append(chunk_median_us(loop))
        run.chunk_us = {lvl: statistics.median(v) for lvl, v in rounds.items()}
        run.notes.append(f"chunk of {loop.n} loop iterations: "
                         + ", ".join(f"L{k} {v:.1f} us" for k, v in sorted(run.chunk_us.items()))
                         + f"; resolution about one chunk; change confirmed by {CONFIRM} chunks")
    pairs = list(level_pairs(plan.levels))
    if loop is not None:
        lo, hi = min(plan.levels), max(plan.levels)
        # A real cluster's clock shows in every round; noise, in one round at a time.
        if not all(follows(a, b, freqs[lo - 1], freqs[hi - 1])
                   for a, b in zip(rounds[lo], rounds[hi], strict=True)):
            run.notes.append(
                f"the busy loop's speed does not follow the frequency (chunk {run.chunk_us[lo]:.1f}"
                f" us at level {lo}, {run.chunk_us[hi]:.1f} us at level {hi}; the clocks differ"
                f" {freqs[hi - 1] / freqs[lo - 1]:.2f}x): the writes do not reach this CPU's clock"
                " (a fake tree, firmware-managed clocks, or the wrong cluster); nothing measured")
            pairs = []
    total = len(pairs) * plan.repeats
    done = 0
    for a, b in pairs:
        if loop is not None:
            da, db = run.chunk_us[a], run.chunk_us[b]
            if not follows(da, db, freqs[a - 1], freqs[b - 1]):
                run.notes.append(f"levels {a} and {b} cannot be told apart by the loop "
                                 f"({da:.1f} vs {db:.1f} us): transition skipped")
                done += plan.repeats
                continue
        delays: list[float | None] = []
        for _ in range(plan.repeats):
            gov.set_khz(freqs[a - 1], settle_s=0.05)
            if loop is None and readback_delay(gov, gov.clock_ns(), freqs[a - 1]) is None:
                # The starting level never read back: the read-back would still show the
                # last target, and b would seem reached at once. Not timed.
                run.notes.append(f"level {a} did not read back within {TIMEOUT_S * 1000:g} "
                                 f"ms: a transition from it was not timed")
                delays.append(None)
                done += 1
                continue
            wait(SETTLE_S)
            if loop is not None:
                loop.chunk()  # warm: the first chunk after a sleep runs cold
            t_write = gov.clock_ns() if loop is None else loop.clock_ns()
            gov.request_khz(freqs[b - 1])
            if loop is None:
                delays.append(readback_delay(gov, t_write, freqs[b - 1]))
            else:
                delays.append(detect_change(loop, t_write, run.chunk_us[a], run.chunk_us[b]))
            done += 1
            if progress is not None:
                progress(done, total)
        run.transitions.append(Transition(a, freqs[a - 1], b, freqs[b - 1], tuple(delays)))
    return run


def pin_to_cores(cores: tuple[int, ...]) -> set[int] | None:
    """Run this thread on one of `cores` (the cluster being measured); returns the old set."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    old = os.sched_getaffinity(0)
    usable = [c for c in cores if c in old]
    if not usable:
        return None
    os.sched_setaffinity(0, {usable[0]})
    return old


def summary(run: LatencyRun) -> list[dict[str, object]]:
    """Table 10's layout: per direction the shortest and longest (median) delay and where."""
    rows: list[dict[str, object]] = []
    for direction in ("up", "down"):
        ts = [t for t in run.transitions if t.direction == direction and t.median_us is not None]
        if not ts:
            continue
        lo = min(ts, key=lambda t: t.median_us or 0.0)
        hi = max(ts, key=lambda t: t.median_us or 0.0)
        rows.append({"direction": direction, "processor": run.processor,
                     "min_delay_us": lo.median_us, "min_from": lo.from_level, "min_to": lo.to_level,
                     "max_delay_us": hi.median_us, "max_from": hi.from_level, "max_to": hi.to_level,
                     "transitions": len(ts)})
    return rows
