"""The layout a trace shows, found from its marker segments (`profiler.recordings.infer`), and
what `coupprof import` does with it: a layout flag not given comes from the trace; a
layout that does not fit writes nothing and exits 1 with one line naming the layout the
trace shows and the flags for it; ``--levels max``/``min`` through the board profile.

Truth: ARM-CO-UP's own recordings (8, 6 and 8 settings x 13 frames x 14 layers, 2 closing
segments; skipped when ../shared/armcoup is absent), the simulated INA260 logger's runs of
known layouts (`simulate_run`), and a recording coupprof's own layer run made through it.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.boards.profiles import load_board
from profiler.errors import BadInputError
from profiler.recordings.align import Segments, segments
from profiler.recordings.importer import parse_levels, resolve_levels
from profiler.recordings.infer import InferredLayout, infer_layout
from profiler.recordings.layout import RunLayout, Setting
from profiler.recordings.traces import Recording, read_armcoup_log
from profiler.sim.ina260 import SimulatedRun, simulate_run
from tests.models.topologies import long_layers

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("COUPPROF_ARMCOUP_DIR") or REPO.parent / "shared" / "armcoup")
COUPPROF = str(Path(sys.executable).with_name("coupprof"))
REAL = {"BBBBBBBBBBBBBB": 8, "LLLLLLLLLLLLLL": 6, "NBNBNBNBNBNBNB": 8}
needs_real = pytest.mark.skipif(
    not (DATA / "Layers.csv").is_file(),
    reason=f"ARM-CO-UP's recordings are not at {DATA} (set COUPPROF_ARMCOUP_DIR)")


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COUPPROF, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "160"})


def exit_1(r: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 1, one error line on stderr (notes start 'coupprof: '), holding ``needles``."""
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    err = [ln for ln in r.stderr.splitlines() if not ln.startswith("coupprof: ")]
    assert len(err) == 1 and err[0].startswith("coupprof import: error: "), r.stderr
    for n in needles:
        assert n in err[0], (n, err[0])
    return err[0]


def simulated(settings: int, runs: int, layers: int, seed: int, tmp: Path,
              letter: str = "B") -> tuple[SimulatedRun, Path]:
    """An ARM-CO-UP-style run (3 warm-up frames, a blip and a long wait after each
    setting) of layers 5-40 ms, slower at the lower levels, as power_Sim_<ORDER>.csv."""
    rng = np.random.default_rng(seed)
    layout = RunLayout(letter * layers, frames=runs - 3, warmup=3,
                       settings=tuple(Setting(i + 1) for i in range(settings)))
    ms = rng.uniform(5.0, 40.0, layers)[None, :] * np.linspace(2.0, 1.0, settings)[:, None]
    mw = rng.uniform(3300.0, 4200.0, layers)[None, :] * np.linspace(0.9, 1.0, settings)[:, None]
    run = simulate_run(layout, ms, mw, seed=seed)
    path = tmp / f"power_Sim_{layout.order}.csv"
    path.write_text(run.text)
    return run, path


def cut(rec: Recording, readings: int) -> Recording:
    """The first ``readings`` of a recording (a logger that stopped there)."""
    out = copy.copy(rec)
    for name in ("t_ms", "power_mw", "level", "active", "line"):
        setattr(out, name, getattr(rec, name)[:readings])
    return out


def spurious(rec: Recording, segs: Segments, at: list[int]) -> Recording:
    """A one-reading pulse of the other level in the middle of each segment ``at``."""
    out = copy.deepcopy(rec)
    for i in at:
        m = (segs.start[i] + segs.stop[i]) // 2
        out.level[m], out.active[m] = 1 - out.level[m], ~out.active[m]
    return out


def missed(rec: Recording, segs: Segments, gap: int) -> Recording:
    """Segment ``gap`` (a gap between two layers) vanishes: the marker stays active."""
    out = copy.deepcopy(rec)
    a, b = segs.start[gap], segs.stop[gap]
    out.level[a:b], out.active[a:b] = out.level[segs.start[gap - 1]], True
    return out


def expect(inf: InferredLayout, settings: int, runs: int, layers: int, trailing: int,
           closed: bool = True, last_runs: int | None = None) -> None:
    got = (inf.settings, inf.runs, inf.layers, inf.trailing, inf.closed, inf.last_runs)
    assert got == (settings, runs, layers, trailing, closed, last_runs), inf.describe()
    assert inf.sure, inf.describe()


# -- inference --------------------------------------------------------------------------


@needs_real
@pytest.mark.parametrize("order", sorted(REAL))
def test_armcoups_recordings_show_their_layout(order: str) -> None:
    rec = read_armcoup_log(DATA / f"power_MobileV1_{order}.csv")
    inf = infer_layout(rec)
    expect(inf, REAL[order], 13, 14, 2)
    assert inf.counts == (2 * 14 * 13 + 2,) * REAL[order] and inf.odd_settings == ()
    assert inf.describe() == (f"the trace shows {REAL[order]} settings x 13 frames x 14 layers "
                              "(warm-up included), 2 closing segments per setting")
    # cut where a logger that died mid-run would leave it: the settings it began, and the
    # whole frames of the last one
    n = rec.readings * 53 // 100
    per = 2 * 14 * 13 + 2
    segs = len(segments(cut(rec, n)))
    begun, rest = -(-segs // per), segs - (-(-segs // per) - 1) * per
    expect(infer_layout(cut(rec, n)), begun, 13, 14, 2,
           last_runs=None if rest >= per - 2 else rest // 28)


@pytest.mark.parametrize("settings,runs,layers", [
    (11, 33, 5),  # a second board's: 30 frames at 11 levels
    (3, 13, 8), (1, 13, 14), (2, 5, 3), (6, 20, 1), (4, 13, 75),
])
def test_simulated_runs_show_their_layout(settings: int, runs: int, layers: int,
                                          tmp_path: Path) -> None:
    _, path = simulated(settings, runs, layers, 1, tmp_path)
    expect(infer_layout(read_armcoup_log(path)), settings, runs, layers, 2)


def test_a_cut_short_last_setting_is_said(tmp_path: Path) -> None:
    _, path = simulated(11, 33, 5, 2, tmp_path)
    rec = read_armcoup_log(path)
    per = 2 * 5 * 33 + 2
    for share in (0.3, 0.6, 0.97):
        short = cut(rec, int(rec.readings * share))
        n = len(segments(short))
        begun = -(-n // per)
        rest = n - (begun - 1) * per
        inf = infer_layout(short)
        expect(inf, begun, 33, 5, 2, last_runs=None if rest >= per - 2 else rest // 10)
        if inf.last_runs is not None:
            assert f"the last setting is cut short after {inf.last_runs} frames" in inf.describe()


def test_one_setting_ending_with_one_idle_segment(tmp_path: Path) -> None:
    """coupprof's own recordings: one setting, closed by one idle segment, no long wait."""
    _, path = simulated(1, 13, 6, 3, tmp_path)
    rec = read_armcoup_log(path)
    segs = segments(rec)
    inf = infer_layout(cut(rec, int(segs.start[-1])))  # the long wait never came
    expect(inf, 1, 13, 6, 1, closed=False)
    assert inf.warmup == 0 and "no long close (1 closing segment after the last frame)" in \
        inf.describe()


def test_spurious_and_missed_edges_are_outvoted_and_said(tmp_path: Path) -> None:
    _, path = simulated(11, 33, 5, 4, tmp_path)
    rec = read_armcoup_log(path)
    segs = segments(rec)
    per = 2 * 5 * 33 + 2
    # pulses inside layer windows of settings 3 and 8 (two in 8), a lost gap in setting 6
    bad = spurious(rec, segs, [2 * per + 101, 7 * per + 51, 7 * per + 203])
    bad = missed(bad, segments(bad), 5 * per + 40 + 2)  # (indices after setting 3's +2)
    inf = infer_layout(bad)
    expect(inf, 11, 33, 5, 2)
    assert inf.odd_settings == ((2, 2), (5, -2), (7, 4))
    line = inf.describe()
    for part in ("setting 3 has 2 segments more (1 spurious pulse?)",
                 "setting 6 has 2 segments fewer (1 missed edge?)",
                 "setting 8 has 4 segments more (2 spurious pulses?)"):
        assert part in line, line


@pytest.mark.parametrize("settings,runs,layers", [(2732, 13, 14), (1, 100_000, 5)])
def test_a_million_segments(settings: int, runs: int, layers: int) -> None:
    """An hour or more of marker segments: inferred per setting and by FFT, not by trying
    every period on every pair (an hour's trace is 10^5-10^6 segments)."""
    rng = np.random.default_rng(5)
    frame = np.full(2 * layers, 8.0)
    frame[0] = 48.0
    frame[1::2] = rng.uniform(5.0, 40.0, layers)
    one = np.r_[np.tile(frame, runs), 17.0, 11_000.0]
    d = np.tile(one, settings) * rng.uniform(0.95, 1.05, one.size * settings)
    t1 = np.cumsum(d)
    z = np.zeros(d.size, dtype=np.int64)
    segs = Segments(start=z, stop=z, t0_ms=t1 - d, t1_ms=t1,
                    active=np.arange(d.size) % 2 == 1, level=z)
    assert len(segs) >= 999_000
    expect(infer_layout(segs), settings, runs, layers, 2)


# -- import -----------------------------------------------------------------------------


def test_a_wrong_layout_writes_nothing_and_names_the_right_one(tmp_path: Path) -> None:
    """A second board's shape (30 frames, 11 levels of its L) imported with the defaults
    (rk3399pro: L has 6 levels) or a wrong --frames: exit 1, one line, no file."""
    _, path = simulated(11, 33, 5, 6, tmp_path, letter="L")
    for flags in ([], ["--frames", "10"], ["--frames", "10", "--warmup", "3", "--levels",
                                            "1-6", "--trailing", "2"]):
        r = cli("import", path.name, "-o", "out", *flags, cwd=tmp_path)
        line = exit_1(r, "the trace shows 11 settings x 33 frames x 5 layers",
                      "--frames 30 --warmup 3 --levels 1-11",
                      "--board <one whose L has 11 levels: rk3399pro's L has 6>")
        assert "not 6 x" in line and "11 settings, not 6" in line
        assert "the trace shows 11 settings x 33 frames x 5 layers" in r.stdout
        assert not (tmp_path / "out").exists()
    # the flags it names, on a board whose L has 11 levels, import every row
    r = cli("import", path.name, "-o", "out", "--frames", "30", "--warmup", "3", "--levels",
            "1-11", "--board", "khadas-vim3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "no missed or spurious edges" in r.stdout
    table = pd.read_csv(tmp_path / "out/Sim_LLLLL.csv")
    assert len(table) == 11 * 5 and (table["frames"] == 30).all()


def test_no_flags_take_the_layout_the_trace_shows(tmp_path: Path) -> None:
    """Not ARM-CO-UP's shape (20 frames of 6 layers at rk3399pro's 6 L levels), no layout
    flag: the trace's layout is used, and every layer's power is its own."""
    run, path = simulated(6, 20, 6, 7, tmp_path, letter="L")
    r = cli("import", path.name, "-o", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "the trace shows 6 settings x 20 frames x 6 layers" in r.stdout
    assert "no missed or spurious edges" in r.stdout
    table = pd.read_csv(tmp_path / "out/Sim_LLLLLL.csv")
    assert len(table) == 6 * 6 and (table["frames"] == 17).all()
    truth = run.truth_power_mw[table["freq_level"] - 1, table["layer"]]
    long_ = table["time_ms_mean"] >= 10.0
    assert long_.sum() >= 20
    np.testing.assert_allclose(table["power_w"][long_] * 1000, truth[long_], rtol=0.03)
    meta = json.loads((tmp_path / "out/Sim_LLLLLL.json").read_text())
    lay = meta["layout"]
    assert (lay["settings"], lay["frames"], lay["warmup"], lay["layers"], lay["trailing"]) == \
        ([1, 2, 3, 4, 5, 6], 17, 3, 6, 2)
    assert meta["inferred"]["sure"] and meta["inferred"]["frames"] == 20


def test_a_recording_that_stops_in_a_wait_imports_what_it_holds(tmp_path: Path) -> None:
    """A logger that died 100 ms into the wait after setting 4 of rk3399pro's 6 L levels:
    four whole settings and a short close, which is a run cut short, not a run of four
    levels (it exited 1 asking for --levels 1-4). The four settings are imported, the
    last two said to be uncovered."""
    _, path = simulated(6, 13, 5, 9, tmp_path, letter="L")
    rec = read_armcoup_log(path)
    segs = segments(rec)
    closes = np.flatnonzero(segs.duration_ms[1:] > 300.0) + 1  # the waits: ~400 ms here
    assert closes.size == 6
    end = int(np.searchsorted(rec.t_ms, segs.t0_ms[closes[3]] + 100.0))
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:end]))
    inf = infer_layout(read_armcoup_log(path))
    assert inf.stopped_in_close and inf.cut_short and inf.settings == 4, inf.describe()
    assert "stops inside the last setting's close" in inf.describe()
    r = cli("import", path.name, "-o", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    table = pd.read_csv(tmp_path / "out/Sim_LLLLL.csv")
    assert sorted(table["freq_level"].unique()) == [1, 2, 3, 4]
    assert "does not cover setting(s) 4, 5" in r.stdout


def test_fewer_settings_than_the_boards_levels_asks_which(tmp_path: Path) -> None:
    _, path = simulated(4, 20, 6, 8, tmp_path)
    exit_1(cli("import", path.name, "-o", "out", cwd=tmp_path),
           "the trace shows 4 settings x 20 frames x 6 layers, rk3399pro's B has 8 levels",
           "--levels 1-4")
    assert not (tmp_path / "out").exists()
    r = cli("import", path.name, "-o", "out", "--levels", "5-max", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    table = pd.read_csv(tmp_path / "out/Sim_BBBBBB.csv")
    b = load_board("rk3399pro").processors["B"].freqs_khz
    assert sorted(table["freq_khz"].unique()) == list(b[4:8])


def test_too_many_flagged_frames_write_nothing(tmp_path: Path) -> None:
    """The counts fit, but pulses in 4 of a setting's 13 frames (more than 2, and 5 % of
    39): exit 1; in 2 frames: imported, those frames flagged."""
    _, path = simulated(3, 13, 8, 9, tmp_path)
    rec = read_armcoup_log(path)
    segs = segments(rec)
    per = 2 * 8 * 13 + 2
    lines = path.read_text().splitlines(keepends=True)
    for frames, ok in (((2, 7), True), ((2, 5, 7, 10), False)):
        bad = spurious(rec, segs, [per + f * 16 + 5 for f in frames])
        flipped = np.flatnonzero(bad.level != rec.level)
        out = list(lines)
        for i in flipped:  # the readings' lines, their pin flipped
            pin, rest = out[int(rec.line[i]) - 1].split(",", 1)
            out[int(rec.line[i]) - 1] = f"{1 - int(pin)},{rest}"
        name = f"f{len(frames)}" / Path(path.name)
        (tmp_path / name).parent.mkdir()
        (tmp_path / name).write_text("".join(out))
        r = cli("import", str(name), "--levels", "1-3", "-o", f"out{len(frames)}", cwd=tmp_path)
        if ok:
            assert r.returncode == 0, r.stderr
            assert f"flagged frames (setting, frame): {[(1, f) for f in frames]}" in r.stdout
        else:
            line = exit_1(r, "of 39 frames hold missed or spurious edges against the layout "
                          "3 x 13 x 8")
            assert int(line.split(" of 39 frames")[0].rsplit(" ", 1)[1]) >= 4, line
            assert not (tmp_path / f"out{len(frames)}").exists()


def test_a_recording_coupprof_made_needs_no_layout_flags(tmp_path: Path) -> None:
    """`layers --power sim:ina260` at B's top level: one setting, warm-up frames unmarked,
    one closing idle segment. Imported with --levels max and no other layout flag, it
    gives the table the explicit flags give."""
    (tmp_path / "long.tflite").write_bytes(long_layers())
    r = cli("layers", "--board", "sim", "-p", "B", "--freq", "max", "--model", "long.tflite",
            "--frames", "12", "--warmup", "2", "--power", "sim:ina260", "--csv", "out.csv",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rec = Path(json.loads((tmp_path / "out.json").read_text())["extra"]["readings_file"])
    rec = rec if rec.is_absolute() else tmp_path / rec
    common = ["import", str(rec), "--active-level", "1", "--order", "BBBBB", "--model", "long",
              "--board", "sim"]
    r = cli(*common, "--frames", "12", "--warmup", "0", "--levels", "8", "--trailing", "1",
            "-o", "explicit", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = cli(*common, "--levels", "max", "-o", "inferred", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "the trace shows 1 setting x 12 frames x 5 layers (warm-up not marked), 1 " \
        "closing segment per setting" in r.stdout
    assert not r.stderr
    a = pd.read_csv(tmp_path / "explicit/long_BBBBB.csv")
    b = pd.read_csv(tmp_path / "inferred/long_BBBBB.csv")
    assert list(b["freq_khz"]) == [load_board("sim").processors["B"].freqs_khz[-1]] * 5
    pd.testing.assert_frame_equal(a, b)


def test_a_console_log_of_other_layers_is_said(tmp_path: Path) -> None:
    """The console log beside the trace lists 7 layers a setting; the trace's frames have
    8: said in one note, the layout still the trace's (the console log scores 7 of them)."""
    run, path = simulated(3, 13, 8, 11, tmp_path)
    lines = []
    for s, times in enumerate(run.console_ms):
        lines.append(f"{s} Running Graph with {'-'.join(['0'] * 7)} LW DVFS")
        lines += [f"Layer Number: {k}   time: {t:.4f}" for k, t in enumerate(times[:7])]
    (tmp_path / "time_Sim_BBBBBBBB.txt").write_text("\n".join(lines) + "\n")
    r = cli("import", path.name, "--levels", "1-3", "-o", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stderr.splitlines() if "console log has" in ln]
    assert notes == ["coupprof: the console log has 7 layers per setting, the trace 8 per "
                     "frame"], r.stderr
    assert len(pd.read_csv(tmp_path / "out/Sim_BBBBBBBB.csv")) == 3 * 8


# -- levels -----------------------------------------------------------------------------


def test_levels_min_max_through_the_board() -> None:
    rk = load_board("rk3399pro")
    assert resolve_levels(parse_levels("max"), rk, "BBB") == [8]
    assert resolve_levels(parse_levels("min,max"), rk, "LL") == [1, 6]
    assert resolve_levels(parse_levels("3-max"), rk, "NB") == [3, 4, 5, 6, 7, 8]  # N: host B
    assert resolve_levels(parse_levels("1-3, 5"), None, "B") == [1, 2, 3, 5]
    with pytest.raises(BadInputError, match="--levels max needs a board profile's levels"):
        resolve_levels(parse_levels("max"), None, "B")
    with pytest.raises(BadInputError, match="rk3399pro's L has levels 1-6, not 7"):
        resolve_levels(parse_levels("1-7"), rk, "L")
    for bad in ("0-3", "top", "3-1"):
        with pytest.raises(BadInputError):
            resolve_levels(parse_levels(bad), rk, "B")


def test_levels_max_on_the_command_line(tmp_path: Path) -> None:
    _, path = simulated(1, 13, 4, 10, tmp_path)
    b = load_board("rk3399pro").processors["B"].freqs_khz
    for spec, khz in (("max", b[-1]), ("min", b[0])):
        r = cli("import", path.name, "--levels", spec, "-o", spec, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert (pd.read_csv(tmp_path / spec / "Sim_BBBB.csv")["freq_khz"] == khz).all()
    csv = tmp_path / "export.csv"
    csv.write_text("t,P,D0\n" + "".join(f"{i},{1000 + i % 7},{(i // 5) % 2}\n"
                                          for i in range(200)))
    r = cli("import", "export.csv", "--time-col", "t", "--time-unit", "ms", "--power-col", "P",
            "--power-unit", "mW", "--marker-col", "D0", "--order", "B", "--levels", "max",
            cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    err = [ln for ln in r.stderr.splitlines() if not ln.startswith("coupprof: ")]
    assert len(err) == 1 and "--levels max needs a board profile's levels" in err[0], r.stderr


def test_a_pause_inside_a_setting_does_not_overrule_the_layout_given(tmp_path: Path) -> None:
    """coupprof's own recording of one setting (no long wait after it) in which the host
    stalled for 3 s in an idle segment half-way through, as a loaded host can: the trace reads
    as two settings, the last cut short, but the layout given (1 x 13 frames, every flag)
    holds exactly its frames, so it is kept, with a note, where it used to exit 1."""
    from profiler.errors import LayoutMismatchError
    from profiler.recordings.importer import LayoutFlags, choose_layout

    _, path = simulated(1, 13, 6, 3, tmp_path)
    rec = read_armcoup_log(path)
    segs = segments(rec)
    rec = cut(rec, int(segs.start[-1]))  # the long wait never came
    segs = segments(rec)
    idle = np.flatnonzero(~np.asarray(segs.active, bool))
    gap = int(idle[np.searchsorted(idle, len(segs) // 2)])  # an idle segment mid-run
    stalled = copy.copy(rec)
    stalled.t_ms = rec.t_ms.copy()
    stalled.t_ms[segs.start[gap] + 1:] += 3000.0
    inf = infer_layout(stalled)
    assert inf.settings == 2 and inf.cut_short, inf.describe()  # what the stall looks like
    given = LayoutFlags(order="B" * 6, frames=10, warmup=3, levels=(("1", "1"),), trailing=1)
    layout, notes = choose_layout(inf, given, "B" * 6, None)
    assert (len(layout.settings), layout.runs, layout.layers) == (1, 13, 6)
    assert any("pause" in n for n in notes), notes
    # a layout whose frames the trace does not hold is still refused
    with pytest.raises(LayoutMismatchError, match="the trace shows"):
        choose_layout(inf, LayoutFlags(order="B" * 6, frames=20, warmup=3,
                                       levels=(("1", "1"),), trailing=1), "B" * 6, None)
