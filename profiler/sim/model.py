"""The simulated board's constants per processor, read from its profile.

`data/boards/sim.toml` holds, per processor, ``[processors.X.sim]``:

- ``dvfs_delay_up_us`` / ``dvfs_delay_down_us``: ARM-CO-UP Table 10, [shortest, longest]
  transition delay per direction; a jump of one level takes the shortest, a jump across
  the whole table the longest, linear in between;
- ``nominal_khz`` / ``nominal_mv``: the operating point of a processor without DVFS (N);
- ``[processors.X.sim.timing]`` and ``[processors.X.sim.power]``: the per-layer timing and
  power model (`profiler.sim.perf`), fitted by ``coupprof calibrate`` (`profiler.calibrate.fit`).

The board's own ``[board.sim]`` table gives its idle power (``idle_power_mw``) and the
calibration's provenance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from profiler.boards.model import Board, ProcessorSpec
from profiler.boards.profiles import ProfileChecker
from profiler.errors import BoardError
from profiler.sim.perf import CUT_EFFECTS, PowerParams, TimingParams
from profiler.sim.work import COMPUTE_KINDS

# timing keys that a runtime fixes rather than a fit (perf.TimingParams says what they default to)
OPTIONAL_TIMING = {"winograd_min_in_channels", *CUT_EFFECTS}


@dataclass(frozen=True)
class SimConstants:
    timing: TimingParams
    power: PowerParams
    dvfs_delay_up_us: tuple[float, float] = (0.0, 0.0)
    dvfs_delay_down_us: tuple[float, float] = (0.0, 0.0)
    nominal_khz: int | None = None  # for processors without DVFS (the NPU)
    nominal_mv: int | None = None


def check_model_tables(c: ProfileChecker, key: str, s: dict[str, Any]) -> None:
    """A profile's per-layer timing and power model (`profiler.sim.perf`): every number a
    finite, non-negative float; the kinds' MACs per cycle positive. Registered with the
    profile loader by `profiler.sim.platform`."""
    timing = c.table(s["timing"], f"{key}.timing")
    power = c.table(s["power"], f"{key}.power")
    t_names = set(TimingParams.__dataclass_fields__)
    c.keys(timing, f"{key}.timing", t_names)
    c.keys(power, f"{key}.power", set(PowerParams.__dataclass_fields__))
    for k in sorted(t_names - {"macs_per_cycle"}):
        if k not in timing:
            if k in OPTIONAL_TIMING:
                continue
            raise c.fail(f"{key}.timing.{k}", "missing")
        c.number(timing, f"{key}.timing", k, 0, 1e9)
    if timing["roofline_p"] < 1:
        raise c.fail(f"{key}.timing.roofline_p", "must be at least 1")
    if timing["memory_clock_share"] > 1:
        raise c.fail(f"{key}.timing.memory_clock_share", "must be in [0, 1]")
    if timing.get("fuse_share", 0) > 1:
        raise c.fail(f"{key}.timing.fuse_share", "must be in [0, 1]")
    for k in ("act_gb_s", "weight_gb_s", "stream_gb_s"):
        if timing[k] <= 0:
            raise c.fail(f"{key}.timing.{k}", "must be positive")
    mpc = c.table(timing.get("macs_per_cycle"), f"{key}.timing.macs_per_cycle")
    c.keys(mpc, f"{key}.timing.macs_per_cycle", set(COMPUTE_KINDS))
    for k in COMPUTE_KINDS:
        if k not in mpc:
            raise c.fail(f"{key}.timing.macs_per_cycle.{k}", "missing")
        c.number(mpc, f"{key}.timing.macs_per_cycle", k, 1e-9, 1e6)
    for k in power:
        c.number(power, f"{key}.power", k, 0, 1e9)


def constants(proc: ProcessorSpec) -> SimConstants:
    raw = proc.extra.get("sim")
    if not isinstance(raw, dict):
        raise BoardError(f"processor {proc.letter} has no [processors.{proc.letter}.sim] model",
                         "only the simulated board (--board sim) has power and speed models")
    try:
        timing = TimingParams.from_table(raw["timing"])
        power = PowerParams.from_table(raw["power"])
    except (KeyError, ValueError) as err:
        raise BoardError(f"processor {proc.letter}'s sim model is incomplete: {err}",
                         "run `coupprof calibrate` to write one") from None
    return SimConstants(
        timing=timing, power=power,
        dvfs_delay_up_us=tuple(raw.get("dvfs_delay_up_us", (0.0, 0.0))),  # type: ignore[arg-type]
        dvfs_delay_down_us=tuple(raw.get("dvfs_delay_down_us", (0.0, 0.0))),  # type: ignore[arg-type]
        nominal_khz=raw.get("nominal_khz"),
        nominal_mv=raw.get("nominal_mv"),
    )


def idle_power_w(board: Board) -> float:
    """The board's power with every processor idle."""
    return float(board.extra.get("sim", {}).get("idle_power_mw", 0.0)) / 1000


def operating_point(proc: ProcessorSpec, freq_khz: int | None) -> tuple[int, float]:
    """(kHz, volts) at `freq_khz` (None: the top level; nominal without DVFS)."""
    c = constants(proc)
    if not proc.freqs_khz:
        if c.nominal_khz is None or c.nominal_mv is None:
            raise BoardError(f"processor {proc.letter} has no DVFS table and no nominal_khz/nominal_mv")
        return c.nominal_khz, c.nominal_mv / 1000
    f = proc.freqs_khz[-1] if freq_khz is None else freq_khz
    if f not in proc.freqs_khz:
        raise BoardError(f"{f / 1000:g} MHz is not a level of simulated processor {proc.letter}",
                         f"valid levels: {proc.levels_text()}")
    mv = proc.volts_mv[proc.freqs_khz.index(f)]
    if mv is None:
        raise BoardError(f"simulated processor {proc.letter} lacks a voltage for {f / 1000:g} MHz")
    return f, mv / 1000


def max_khz(proc: ProcessorSpec) -> int:
    return proc.freqs_khz[-1] if proc.freqs_khz else operating_point(proc, None)[0]


def compute_slowdown(proc: ProcessorSpec, freq_khz: int | None) -> float:
    """How much longer clock-bound work (a busy loop) takes at `freq_khz` than at the top."""
    if not proc.freqs_khz or freq_khz is None:
        return 1.0
    return proc.freqs_khz[-1] / operating_point(proc, freq_khz)[0]


def transition_delay_us(proc: ProcessorSpec, from_khz: int, to_khz: int) -> float:
    """Modelled time from the write until the new frequency is in effect."""
    if from_khz == to_khz or not proc.freqs_khz:
        return 0.0
    c = constants(proc)
    i, j = proc.freqs_khz.index(from_khz), proc.freqs_khz.index(to_khz)
    lo, hi = c.dvfs_delay_up_us if j > i else c.dvfs_delay_down_us
    span = max(1, len(proc.freqs_khz) - 2)
    return lo + (hi - lo) * (abs(j - i) - 1) / span
