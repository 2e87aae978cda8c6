"""A simulated board calibrated on measured layers: fit every processor, write the profile.

`calibrate_board` fits `profiler.sim.fit` per processor and gives a `Calibration`;
`profile_text` writes it into a board profile (TOML): the base profile's text with its
``[processors.X.sim.timing]`` / ``.power`` tables and ``[board.sim]`` replaced by the
fitted ones, the transition delays and operating points kept, and the provenance (source
file, its sha256, models, rows, command, date) in ``[board.sim.calibration]``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiler.sim import fit
from profiler.sim.perf import PowerParams, TimingParams


@dataclass
class Calibration:
    fits: dict[str, fit.ProcessorFit]
    idle_power_mw: float
    sensor_lag_ms: float | None
    provenance: dict[str, Any] = field(default_factory=dict)


def calibrate_board(measurements: Mapping[str, fit.Measurements],
                    progress: Callable[[str], None] | None = None) -> Calibration:
    """Fit every processor of `measurements`; the board's idle power is the median of
    the processors' fitted idle powers (each fit sees the board idle between layers)."""
    fits: dict[str, fit.ProcessorFit] = {}
    for letter, m in measurements.items():
        fits[letter] = fit.fit_processor(m)
        if progress is not None:
            progress(letter)
    powered = [f.power for f in fits.values() if f.power is not None]
    idle = float(np.median([p.idle_mw for p in powered])) if powered else 0.0
    lag = float(np.median([p.lag_ms for p in powered])) if powered else None
    return Calibration(fits, idle, lag)


# ---- TOML --------------------------------------------------------------------------------

def _num(v: float) -> str:
    if not math.isfinite(v):
        raise ValueError(f"cannot write {v!r} into a profile")
    return repr(float(f"{v:.6g}"))


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        return _num(float(v))
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} into a profile")


def _table(header: str, values: Mapping[str, Any]) -> list[str]:
    return [f"[{header}]", *(f"{k} = {_value(v)}" for k, v in values.items()), ""]


def timing_tables(letter: str, p: TimingParams) -> list[str]:
    d = p.to_table()
    rates = d.pop("macs_per_cycle")
    return [*_table(f"processors.{letter}.sim.timing", d),
            *_table(f"processors.{letter}.sim.timing.macs_per_cycle", rates)]


def power_table(letter: str, p: PowerParams) -> list[str]:
    return _table(f"processors.{letter}.sim.power", {
        "ceff_nf": p.ceff_nf, "static_mw_per_v2": p.static_mw_per_v2,
        "activity_memory": p.activity_memory, "activity_overhead": p.activity_overhead,
        "host_ceff_nf": p.host_ceff_nf})


_HEADER = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]\s*(#.*)?$")


def _drop_tables(text: str, drop: Callable[[str], bool]) -> str:
    """`text` without the tables whose header `drop` selects (their keys included)."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            skipping = drop(m.group(1))
        if not skipping:
            out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out) + "\n"


def profile_text(base_text: str, cal: Calibration, *, kept: Mapping[str, Any] | None = None,
                 existing: Mapping[str, Any] | None = None) -> str:
    """The base profile with the calibration in place of its simulated-board model.

    `kept`: per processor, the keys of its old ``[processors.X.sim]`` table to keep
    (transition delays, a nominal operating point); `existing`: the old processors'
    power/timing tables, used for a processor the calibration has no fit for."""
    def drop(header: str) -> bool:
        parts = header.split(".")
        return (parts[:2] == ["board", "sim"]) or (
            len(parts) >= 3 and parts[0] == "processors" and parts[2] == "sim")

    lines = [_drop_tables(base_text, drop).rstrip(), ""]
    board_sim: dict[str, Any] = {"idle_power_mw": cal.idle_power_mw}
    if cal.sensor_lag_ms is not None:
        board_sim["sensor_lag_ms"] = cal.sensor_lag_ms
    board_sim["notes"] = ("FITTED by coupprof calibrate (see [board.sim.calibration]): the "
                          "board's idle power while a processor waits between layers")
    lines += _table("board.sim", board_sim)
    if cal.provenance:
        lines += _table("board.sim.calibration", cal.provenance)
    letters = list(dict.fromkeys([*(kept or {}), *cal.fits]))
    for letter in letters:
        lines += _table(f"processors.{letter}.sim", dict((kept or {}).get(letter, {})))
        f = cal.fits.get(letter)
        old = (existing or {}).get(letter, {})
        if f is not None:
            lines += timing_tables(letter, f.timing)
        elif "timing" in old:
            lines += timing_tables(letter, TimingParams.from_table(old["timing"]))
        if f is not None and f.power is not None:
            lines += power_table(letter, f.power.power)
        elif "power" in old:
            lines += power_table(letter, PowerParams.from_table(old["power"]))
    return "\n".join(lines).rstrip() + "\n"
