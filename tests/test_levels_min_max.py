"""``min`` and ``max`` wherever a command takes a level (issue 25, item 2): ``--freq``,
``--host-freq`` and ``plot --level`` took them already, ``import --levels`` maps them
through the board profile (tests/test_import_layout.py); here the two that took only
numbers, or only ``max``: ``dvfs-latency --levels`` and ``explore --levels``."""

from __future__ import annotations

import pandas as pd
import pytest

from profiler.boards.profiles import load_board
from profiler.cli.dvfs_latency import parse_levels
from profiler.errors import BadInputError
from profiler.explore.tables import from_frames

BOARD = load_board("rk3399pro")


def test_dvfs_latency_levels_take_min_and_max() -> None:
    assert parse_levels("min,max", 8, "B") == [1, 8]
    assert parse_levels("3, MAX", 6, "L") == [3, 6]
    assert parse_levels("min,1,4", 6, "L") == [1, 4]  # min is level 1: one level, not two
    with pytest.raises(BadInputError, match="not a comma-separated list"):
        parse_levels("top", 6, "L")


def test_explore_levels_take_min_as_they_take_max() -> None:
    """Each processor's lowest (or top) level in its own table."""
    rows = [{"processor": p, "freq_level": lv, "layer": k, "time_ms_mean": 10.0 / lv,
             "transfer_ms_mean": 0.0, "energy_mj": 1.0}
            for p, top in (("B", 8), ("L", 6)) for lv in range(1, top + 1) for k in range(2)]
    for which, want in (("min", {"B": 1, "L": 1}), ("max", {"B": 8, "L": 6})):
        t = from_frames(pd.DataFrame(rows), BOARD, None, None, 0.0, levels=which)
        got = {u.letter: lv for u, lv in zip(t.units, t.levels, strict=True)}
        assert got == {p: (lv,) for p, lv in want.items()}, which
