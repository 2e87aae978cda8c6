"""The simulated board's models: layer speed, power and DVFS transition delay per processor.

Constants live in the profile (data/boards/sim.toml, table `[processors.X.sim]`).
They are models, not measurements; sim.toml says where each number comes from.

Speed: a layer that takes `t_host` on the host CPU takes

    t_sim = t_host / speed_at_max * ((1 - a) + a * f_max / f)

on processor X at frequency f, where `a` (freq_sensitivity) is the share of the
layer's time that scales with the clock (the rest is memory-bound).

A processor with a work model (``macs_per_us_at_max``, as the simulated G) does not
stretch host time: a sub-model run costs, whatever the host took (if less),

    t_sim = call_overhead + (MACs / macs_per_us_at_max + bytes / bytes_per_us_at_max)
                            * ((1 - a) + a * f_max / f)

where bytes are the runtime tensors its operators read and write. The fixed part is
paid once per call (dispatch, upload, read-back, as a GPU behind a runtime pays it),
so layers run as separate sub-models cost one overhead each and a whole model one.

Power while busy: P = P_static + C_eff * V^2 * f (p_static_mw, c_eff_nf, the level's volts_mv).

Transition delay: Table 10 of ARM-CO-UP gives the shortest and longest delay per
processor and direction; a jump of one level takes the shortest, a jump across the
whole table the longest, linear in between.
"""

from __future__ import annotations

from dataclasses import dataclass

from profiler.boards.model import ProcessorSpec
from profiler.errors import BoardError


@dataclass(frozen=True)
class SimConstants:
    p_static_mw: float
    c_eff_nf: float
    speed_at_max: float
    freq_sensitivity: float
    dvfs_delay_up_us: tuple[float, float] = (0.0, 0.0)
    dvfs_delay_down_us: tuple[float, float] = (0.0, 0.0)
    nominal_khz: int | None = None  # for processors without DVFS (the NPU)
    nominal_mv: int | None = None
    # The work model (None: stretch host time by speed_at_max instead).
    macs_per_us_at_max: float | None = None
    bytes_per_us_at_max: float | None = None
    call_overhead_us: float = 0.0

    @property
    def models_work(self) -> bool:
        return self.macs_per_us_at_max is not None


def constants(proc: ProcessorSpec) -> SimConstants:
    raw = proc.extra.get("sim")
    if not isinstance(raw, dict):
        raise BoardError(f"processor {proc.letter} has no [processors.{proc.letter}.sim] model",
                         "only the simulated board (--board sim) has power and speed models")
    return SimConstants(
        p_static_mw=float(raw["p_static_mw"]),
        c_eff_nf=float(raw["c_eff_nf"]),
        speed_at_max=float(raw["speed_at_max"]),
        freq_sensitivity=float(raw.get("freq_sensitivity", 1.0)),
        dvfs_delay_up_us=tuple(raw.get("dvfs_delay_up_us", (0.0, 0.0))),  # type: ignore[arg-type]
        dvfs_delay_down_us=tuple(raw.get("dvfs_delay_down_us", (0.0, 0.0))),  # type: ignore[arg-type]
        nominal_khz=raw.get("nominal_khz"),
        nominal_mv=raw.get("nominal_mv"),
        macs_per_us_at_max=_opt_float(raw.get("macs_per_us_at_max")),
        bytes_per_us_at_max=_opt_float(raw.get("bytes_per_us_at_max")),
        call_overhead_us=float(raw.get("call_overhead_us", 0.0)),
    )


def _opt_float(v: object) -> float | None:
    return None if v is None else float(v)  # type: ignore[arg-type]


def _operating_point(proc: ProcessorSpec, freq_khz: int | None) -> tuple[int, float]:
    """(kHz, volts) at `freq_khz` (nominal for processors without DVFS)."""
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


def stretch_factor(proc: ProcessorSpec, freq_khz: int | None) -> float:
    """t_sim / t_host for a layer on `proc` at `freq_khz` (None = top level)."""
    c = constants(proc)
    if not proc.freqs_khz:
        return 1.0 / c.speed_at_max
    f, _ = _operating_point(proc, freq_khz)
    a = c.freq_sensitivity
    return (1.0 / c.speed_at_max) * ((1.0 - a) + a * proc.freqs_khz[-1] / f)


def freq_factor(proc: ProcessorSpec, freq_khz: int | None) -> float:
    """(1 - a) + a * f_max / f: how much slower the clock-bound share runs at `freq_khz`."""
    if not proc.freqs_khz:
        return 1.0
    f, _ = _operating_point(proc, freq_khz)
    a = constants(proc).freq_sensitivity
    return (1.0 - a) + a * proc.freqs_khz[-1] / f


def work_ns(proc: ProcessorSpec, freq_khz: int | None, macs: int, nbytes: int) -> float:
    """Modelled time of the work alone (no per-call overhead) on a work-model processor."""
    c = constants(proc)
    if c.macs_per_us_at_max is None:
        raise BoardError(f"simulated processor {proc.letter} has no work model",
                         "add macs_per_us_at_max to its [processors.X.sim] table")
    us = macs / c.macs_per_us_at_max
    if c.bytes_per_us_at_max:
        us += nbytes / c.bytes_per_us_at_max
    return us * 1000.0 * freq_factor(proc, freq_khz)


def call_ns(proc: ProcessorSpec, freq_khz: int | None, macs: int, nbytes: int) -> float:
    """Modelled time of one sub-model call: the fixed per-call overhead plus its work."""
    return constants(proc).call_overhead_us * 1000.0 + work_ns(proc, freq_khz, macs, nbytes)


def power_mw(proc: ProcessorSpec, freq_khz: int | None) -> float:
    """Busy power of `proc`: P_static + C_eff * V^2 * f."""
    c = constants(proc)
    f_khz, volts = _operating_point(proc, freq_khz)
    # nF * V^2 * kHz = 1e-9 F * V^2 * 1e3 Hz = 1e-6 W = 1e-3 mW
    return c.p_static_mw + c.c_eff_nf * volts * volts * f_khz * 1e-3


def transition_delay_us(proc: ProcessorSpec, from_khz: int, to_khz: int) -> float:
    """Modelled time from the write until the new frequency is in effect."""
    if from_khz == to_khz or not proc.freqs_khz:
        return 0.0
    c = constants(proc)
    i, j = proc.freqs_khz.index(from_khz), proc.freqs_khz.index(to_khz)
    lo, hi = c.dvfs_delay_up_us if j > i else c.dvfs_delay_down_us
    span = max(1, len(proc.freqs_khz) - 2)
    return lo + (hi - lo) * (abs(j - i) - 1) / span
