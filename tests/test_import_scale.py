"""Memory that does not grow with how wrong the layout is or how much of the trace is
missing (issue 25, item 1): the alignment runs per setting in a capped band with its step
costs a block of rows at a time, the reader keeps readings in compact arrays, and the
step function of the readings is built a block at a time. Each bound is a tracemalloc
peak (numpy's buffers included) on a case that took from 100 MB to 3 GB before.

The real B trace is read from ../shared/armcoup (or $COUPPROF_ARMCOUP_DIR); that case
skips when it is absent. Sizes, not times: the checks hold on a busy machine.
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

from profiler.recordings import align as align_module
from profiler.recordings import attribute, traces
from profiler.recordings.align import OK, align, segments
from profiler.recordings.attribute import StepIntegral
from profiler.recordings.console import read_console_log
from profiler.recordings.importer import console_matrix
from profiler.recordings.layout import RunLayout, Setting
from profiler.recordings.traces import armcoup_recording, read_armcoup_log
from tests.test_import_synthetic import LAYER_MS, LAYER_MW, POWER, SPEED, make_run

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("COUPPROF_ARMCOUP_DIR") or REPO.parent / "shared" / "armcoup")
B = "BBBBBBBBBBBBBB"
T = TypeVar("T")


def peak_mb(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()`` and the most memory it held at once (MB, tracemalloc)."""
    tracemalloc.start()
    try:
        got = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return got, peak / 1e6


def _cut(text: str, share: float) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[: int(len(lines) * share)])


@pytest.mark.parametrize("console", [False, True])
def test_a_truncated_recording_aligns_in_bounded_memory(console: bool, tmp_path: Path) -> None:
    """Cut at 53 % (in the middle setting): the whole trace's matches for the settings it
    covers, the rest uncovered, no fault; before, the band spanned the ~300 missing
    segments and the programme held ~100 MB (and flagged every frame of the cut setting
    when scored with console times)."""
    run, rec = make_run(31, tmp_path)
    lay = run.layout
    con = run.console_ms if console else None
    whole = align(rec, lay, con)
    short = armcoup_recording(_cut(run.text, 0.53), tmp_path / "cut.csv", "")
    al, mb = peak_mb(lambda: align(short, lay, con))
    assert mb < 12, mb
    assert al.faults == 0 and al.flagged == [] and al.uncovered_settings == [1, 2]
    closed = lay.per_setting  # setting 0 is whole in the cut trace
    assert [(m.status, m.first) for m in al.matches[:closed]] == \
        [(m.status, m.first) for m in whole.matches[:closed]]
    last = max(m.last for m in al.matches)
    assert last == len(al.segs) - 1  # every segment the cut trace has is matched


def test_a_wrong_layout_aligns_in_bounded_memory(tmp_path: Path) -> None:
    """Twice the frames the run had: the programme's memory stays that of a right layout
    (before: a band as wide as the count difference, ~260 MB), and nearly every frame
    comes out flagged or uncovered, never matched as if it fitted."""
    run, rec = make_run(32, tmp_path)
    right = run.layout
    wrong = RunLayout(right.order, 2 * right.frames + right.warmup, right.warmup, right.settings)
    _, mb_right = peak_mb(lambda: align(rec, right, None))
    al, mb = peak_mb(lambda: align(rec, wrong, None))
    assert mb < max(12, 2 * mb_right), (mb, mb_right)
    bad = {(w.setting, w.frame) for w, m in zip(wrong.windows(), al.matches, strict=True)
           if m.status != OK and w.frame is not None}
    assert len(bad) >= len(wrong.settings) * right.frames  # the frames the run never had


def test_the_band_is_capped_per_setting(tmp_path: Path) -> None:
    """A setting's band follows its own count difference: a recording with 4 settings
    missing (the layout says 7, the trace holds 3) aligns the 3 in the band of a clean
    one."""
    run, rec = make_run(33, tmp_path)
    more = RunLayout(run.layout.order, run.layout.frames, run.layout.warmup,
                     tuple(Setting(i + 1) for i in range(7)))
    al, mb = peak_mb(lambda: align(rec, more, None))
    assert al.uncovered_settings == [3, 4, 5, 6] and al.faults == 0
    assert mb < 12, mb


@pytest.mark.skipif(not (DATA / f"power_MobileV1_{B}.csv").is_file(),
                    reason=f"ARM-CO-UP's recordings are not at {DATA} (set COUPPROF_ARMCOUP_DIR)")
def test_the_real_b_trace_cut_at_53_percent(tmp_path: Path) -> None:
    """The issue's case: 3.1 GB and 71 s before. Now the four whole settings match as in
    the whole trace, the fifth as far as it goes, with the console log, no fault."""
    path = DATA / f"power_MobileV1_{B}.csv"
    text = path.read_text()
    whole = read_armcoup_log(path)
    cut = armcoup_recording(_cut(text, 0.53), tmp_path / path.name, "")
    lay = RunLayout(B, 10, 3, tuple(Setting(i + 1) for i in range(8)))
    con = console_matrix(read_console_log(DATA / f"time_MobileV1_{B}.txt"), lay)
    ref = align(whole, lay, con)
    al, mb = peak_mb(lambda: align(cut, lay, con))
    assert mb < 24, mb
    assert al.faults == 0 and al.uncovered_settings == [4, 5, 6, 7]
    n = sum(1 for m in al.matches if m.first >= 0)
    assert n == len(segments(cut)) and n > 4 * lay.per_setting
    assert [(m.status, m.first) for m in al.matches[:n]] == \
        [(m.status, m.first) for m in ref.matches[:n]]


def test_the_reader_streams_into_compact_arrays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    """A log read a few lines at a time gives what the whole text gives (lines numbered
    alike, malformed ones skipped alike), and reading ~7 minutes of readings holds about
    their arrays (25 bytes a reading) and a block of text, not a list of all lines and
    Python floats (~200 bytes a reading)."""
    rng = np.random.default_rng(4)
    n = 400_000
    ms = np.cumsum(rng.choice([1, 2, 3], n))
    lines = [f"{p},{m},{v:.2f}\n" for p, m, v in
             zip(rng.integers(0, 2, n), ms, np.round(rng.normal(3000, 200, n), -1), strict=True)]
    lines[5] = "garbage\n"
    lines[1000] = "1,xx,3\r\n"
    lines[n - 7] = "\n"
    text = "".join(lines)
    path = tmp_path / "log.csv"
    path.write_text(text)
    rec, mb = peak_mb(lambda: read_armcoup_log(path))
    assert rec.readings == n - 3 and [s.line for s in rec.skipped] == [6, 1001]
    assert mb < 25 * n / 1e6 + 12, mb  # the arrays, and a block of text and its lines
    monkeypatch.setattr(traces, "READ_BLOCK", 97)
    small = read_armcoup_log(path)
    ref = armcoup_recording(text, path, rec.sha256)
    for got in (small, ref):
        for field in ("t_ms", "power_mw", "level", "line"):
            assert np.array_equal(getattr(got, field), getattr(rec, field)), field
        assert got.sha256 == rec.sha256 and got.total_lines == rec.total_lines == n


def test_the_step_function_is_built_a_block_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same numbers as whole arrays (np.interp over all knots and one cumsum), for
    blocks of 1 to 64 readings, knots repeated (millis clocks) and queries on them; and
    2 M readings' integral held in far less than their two 16 MB arrays."""
    rng = np.random.default_rng(5)
    t = np.floor(np.cumsum(rng.choice([1.0, 2.0, 3.0], 600) + rng.uniform(-0.02, 0.02, 600)))
    p = np.round(rng.normal(3000, 300, 600), -1)
    for lag in (0.0, 2.5):
        knots = t - lag
        cum = np.r_[0.0, np.cumsum(np.diff(knots) * p[:-1])]
        x = np.sort(np.r_[rng.uniform(knots[0] - 3, knots[-1] + 3, 400),
                          knots[rng.integers(0, 600, 100)], knots[[0, -1]]])
        a, b = x[:-50], x[50:]

        def whole(q: np.ndarray, knots: np.ndarray = knots, cum: np.ndarray = cum) -> np.ndarray:
            c = np.interp(q, knots, cum)
            c = np.where(q < knots[0], (q - knots[0]) * p[0], c)
            return np.where(q > knots[-1], cum[-1] + (q - knots[-1]) * p[-1], c)

        for block in (1, 2, 7, 64):
            monkeypatch.setattr(attribute, "STEP_BLOCK", block)
            s = StepIntegral(t, p, lag)
            assert np.array_equal(s.energy(a, b), whole(b) - whole(a)), block
            assert np.array_equal(s.before(x), np.searchsorted(knots, x)), block
    monkeypatch.undo()
    big_t = np.arange(2_000_000, dtype=np.float64)
    big_p = np.full(big_t.size, 3000.0)
    e, mb = peak_mb(lambda: StepIntegral(big_t, big_p, 2.5).energy(
        np.array([10.0, 5e5]), np.array([20.0, 1.5e6])))
    assert e.tolist() == [30000.0, 3e9]
    assert mb < 8, mb


def test_an_hour_long_setting_keeps_its_first_match_cheap(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """200 frames per setting (an hour's run has ~500): the first match looks for one
    count change on a grid instead of every pair of frames (cubic: minutes), and still
    flags exactly the frame with the fault."""
    lay = RunLayout("B" * LAYER_MS.size, 197, 3, tuple(Setting(i + 1) for i in range(2)))
    from profiler.sim.ina260 import simulate_run

    run = simulate_run(lay, LAYER_MS[None, :] * SPEED[:2, None],
                       LAYER_MW[None, :] * POWER[:2, None], seed=34)
    rec = armcoup_recording(run.text, tmp_path / "long.csv", "")
    segs = segments(rec)
    i = 1 * lay.per_setting + 120 * lay.per_frame + 2 * 3 + 1  # setting 1, frame 120, layer 3
    m = (segs.start[i] + segs.stop[i]) // 2
    rec.level[m], rec.active[m] = 1, False
    calls = 0
    real = align_module._spread

    def counted(vals: np.ndarray) -> float:
        nonlocal calls
        calls += 1
        return real(vals)

    monkeypatch.setattr(align_module, "_spread", counted)
    al = align(rec, lay, None)
    assert al.flagged == [(1, 120)] and al.faults == 1
    assert calls < 2000, calls  # every pair of 200 frames: ~80,000 scores per setting

