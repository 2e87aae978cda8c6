"""The sensor's update period, estimated from a recording's readings alone.

Readings repeat a value while they fall in one conversion, but two conversions also read
the same by chance (10 mW steps, 15 mW of noise: ~1 in 5). Counting repeats alone put the
simulated 2.7 ms sensor at 3.1 ms, which over-corrected every window's edge spread.
Ground truth: `profiler.sim.ina260.sample` at a known update period.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from profiler.recordings.attribute import update_period_ms
from profiler.recordings.traces import Recording
from profiler.sim.ina260 import TruePiece, sample


def recording(update_ms: float, gaps_ms: tuple[float, ...], gap_p: tuple[float, ...],
              seed: int) -> Recording:
    """~8 s of 12 ms layers at 3.5 W between 8 ms gaps at 2 W, read by the sensor."""
    pieces, t = [], 0.0
    for _ in range(400):
        pieces.append(TruePiece(t, t + 12.0, 3500.0, True))
        pieces.append(TruePiece(t + 12.0, t + 20.0, 2000.0, False))
        t += 20.0
    text = sample(pieces, np.random.default_rng(seed), update_ms=update_ms, gaps_ms=gaps_ms,
                  gap_p=gap_p)
    a = np.array([[float(x) for x in ln.split(",")] for ln in text.splitlines()])
    pin = a[:, 0].astype(np.int8)
    return Recording(path=Path("x"), sha256="", fmt="armcoup", t_ms=a[:, 1], power_mw=a[:, 2],
                     level=pin, active=pin == 0, line=np.arange(1, a.shape[0] + 1),
                     total_lines=a.shape[0])


@pytest.mark.parametrize("update_ms", [1.1, 2.2, 2.7, 4.0])
@pytest.mark.parametrize("gaps", [((1.0, 2.0, 3.0), (0.56, 0.42, 0.02)), ((1.0,), (1.0,))],
                         ids=["armcoup-loop", "1kS/s"])
@pytest.mark.parametrize("seed", [11, 12])
def test_the_update_period_is_found_despite_chance_repeats(
        update_ms: float, gaps: tuple[tuple[float, ...], tuple[float, ...]],
        seed: int) -> None:
    rec = recording(update_ms, gaps[0], gaps[1], seed=seed)
    naive = rec.readings / (np.count_nonzero(np.diff(rec.power_mw)) + 1) * np.mean(
        np.diff(rec.t_ms))
    if update_ms < 3.0:  # the chance repeats matter here, and the old count missed them
        assert naive > 1.08 * update_ms
    # 4 ms: 12 ms layers leave too few settled pairs to measure the chance; the count's
    # bound is kept, 3-4 % high there. Otherwise millis are whole, so each gap is off by up
    # to 1 ms: seen within 2.5 %.
    assert update_period_ms(rec) == pytest.approx(update_ms, rel=0.04)
