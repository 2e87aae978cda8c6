"""Every plot kind's text shows: drawn from CSVs of short real runs on the simulated
board, no title, axis label, tick label or legend of any figure falls outside it or
overlaps another. matplotlib lays the figure out and reports each text's box;
`text_problems` compares the boxes (a rotated tick label by its own rectangle, not the
larger box around it). The figures once failed it: `plot efficiency` of one processor cut
its title at both ends, `plot transfers` put its legend over the title's end, and the
timeline's title ran 2 px past both edges at 100 dpi. A processor measured at one level is drawn
as points, and both the figure and `coupprof plot` say that it cannot be a curve."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_runs import run_coupprof
from matplotlib.artist import Artist
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from shared_runs import SharedRuns, copy_run, copy_sweep

from profiler.boards.profiles import load_board
from profiler.plots import (
    efficiency_figure,
    layers_figure,
    pareto_figure,
    read_csv,
    timeline_figure,
    transfers_figure,
)
from profiler.plots.common import STYLE
from profiler.plots.timeline import run_trace

# -- the check ------------------------------------------------------------------------


def _corners(artist: Artist, renderer: object) -> np.ndarray:
    """The artist's box as 4 corners in pixels; a text at an angle that is not a multiple
    of 90 degrees by its own rotated rectangle (rotated about its centre, matplotlib's
    default rotation mode)."""
    box = artist.get_window_extent(renderer)
    if not isinstance(artist, Text) or artist.get_rotation() % 90 == 0:
        return np.array([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1]])
    angle = artist.get_rotation()
    artist.set_rotation(0)
    flat = artist.get_window_extent(renderer)
    artist.set_rotation(angle)
    w, h, a = flat.width / 2, flat.height / 2, np.deg2rad(angle)
    u, v = np.array([np.cos(a), np.sin(a)]), np.array([-np.sin(a), np.cos(a)])
    c = np.array([(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2])
    return np.array([c - w * u - h * v, c + w * u - h * v, c + w * u + h * v, c - w * u + h * v])


def _overlap(p: np.ndarray, q: np.ndarray, tol_px: float) -> bool:
    """Two convex quadrilaterals overlap by more than tol_px (separating axis test)."""
    for poly in (p, q):
        for i in range(4):
            edge = poly[(i + 1) % 4] - poly[i]
            normal = np.array([-edge[1], edge[0]]) / np.hypot(*edge)
            a, b = p @ normal, q @ normal
            if a.max() <= b.min() + tol_px or b.max() <= a.min() + tol_px:
                return False
    return True


def _drawn_tick_labels(axis: Axis) -> Iterator[Text]:
    """The tick labels drawn: a locator's ticks beyond the view limits are not."""
    lo, hi = sorted(axis.get_transform().transform(axis.get_view_interval()))
    eps = 1e-9 * max(1.0, abs(hi - lo))
    for tick in axis.get_major_ticks() + axis.get_minor_ticks():
        loc = float(axis.get_transform().transform([tick.get_loc()])[0])
        if lo - eps <= loc <= hi + eps:
            yield from (t for t in (tick.label1, tick.label2) if t.get_visible())


def text_boxes(fig: Figure) -> list[tuple[str, np.ndarray]]:
    """(name, corners) of every title, axis label, drawn tick label and legend, as laid
    out at the figure's resolution."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    out: list[tuple[str, np.ndarray]] = []

    def add(name: str, artist: Artist | None) -> None:
        if artist is None or not artist.get_visible():
            return
        if isinstance(artist, Text) and not artist.get_text().strip():
            return
        out.append((name, _corners(artist, renderer)))

    for name in ("suptitle", "supxlabel", "supylabel"):
        add(name, getattr(fig, f"_{name}", None))
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        for where in ("title", "_left_title", "_right_title"):
            add(f"axes {i} {where.strip('_')}", getattr(ax, where, None))
        add(f"axes {i} x label", ax.xaxis.label)
        add(f"axes {i} y label", ax.yaxis.label)
        for xy, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            for t in _drawn_tick_labels(axis):
                add(f"axes {i} {xy} tick {t.get_text()!r}", t)
        add(f"axes {i} legend", ax.get_legend())
    for k, legend in enumerate(fig.legends):
        add(f"figure legend {k}", legend)
    return out


def text_problems(fig: Figure, tol_px: float = 1.0) -> list[str]:
    """Each text box outside the figure, and each pair of text boxes that overlap, at the
    figure's own resolution (a notebook shows it so) and at the one `save` writes PNGs at:
    text and figure scale alike, but glyphs are fitted to whole pixels at each size."""
    own_dpi = fig.get_dpi()
    out: list[str] = []
    for dpi in dict.fromkeys((own_dpi, float(STYLE["savefig.dpi"]))):
        fig.set_dpi(dpi)
        boxes = text_boxes(fig)
        fb = fig.bbox
        found = []
        for name, c in boxes:
            x0, y0 = c.min(axis=0)
            x1, y1 = c.max(axis=0)
            if x0 < fb.x0 - tol_px or y0 < fb.y0 - tol_px or x1 > fb.x1 + tol_px or y1 > fb.y1 + tol_px:
                found.append(f"{name} outside the figure: x {x0:.0f}..{x1:.0f}, "
                             f"y {y0:.0f}..{y1:.0f} of {fb.width:.0f} x {fb.height:.0f} px")
        for i, (a, pa) in enumerate(boxes):
            found += [f"{a} overlaps {b}" for b, pb in boxes[i + 1:] if _overlap(pa, pb, tol_px)]
        out += [f"{p} ({dpi:g} dpi)" for p in found]
    fig.set_dpi(own_dpi)
    return out


# -- the check checks what it says ----------------------------------------------------


def test_the_check_sees_text_outside_and_text_over_text() -> None:
    fig = Figure(figsize=(4, 3), layout="constrained")
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1])
    fig.suptitle("a title far too long for a figure four inches wide, cut at both of its ends")
    assert any(p.startswith("suptitle outside the figure") for p in text_problems(fig))
    fig.suptitle("short")
    assert text_problems(fig) == []
    fig.legend(["line"], loc="upper center")  # on the title's line
    assert text_problems(fig) == ["suptitle overlaps figure legend 0 (100 dpi)",
                                  "suptitle overlaps figure legend 0 (120 dpi)"]
    # Tick labels at 60 degrees sit close but apart: their own rectangles don't touch,
    # though the boxes around them would.
    fig2 = Figure(figsize=(4, 3), layout="constrained")
    ax2 = fig2.subplots()
    ax2.set_xticks(range(6), [f"{k} dwconv+conv" for k in range(6)], rotation=60, ha="right")
    assert text_problems(fig2) == []


# -- every kind, from real runs --------------------------------------------------------


def cli(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_coupprof(args, cwd, cwd / "cache", check)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, sim_runs: SharedRuns) -> dict[str, Path]:
    """Short runs on the simulated board (its virtual logger gives every run energy; the
    session's, tests/shared_runs.py): a sweep of all four processors at two levels, one of
    B at one level, a transfer matrix, a G layer table with its power trace, and explore's
    two modes on them."""
    d = tmp_path_factory.mktemp("figtext")
    copy_sweep(sim_runs.sweep_lbgn, d / "sweep")
    copy_sweep(sim_runs.sweep_b3, d / "sweep-one")
    tm = copy_run(sim_runs.transfers_lbg, d)
    g = copy_run(sim_runs.layers_g, d)
    cli("explore", "--sweep", "sweep", "--transfers", tm.name, "--mode", "pipeline",
        "--csv", "pipeline.csv", cwd=d)
    cli("explore", "--sweep", "sweep", "--transfers", tm.name, "--mode", "switch",
        "--latency-ms", "30", "--csv", "switch.csv", cwd=d)
    return {"dir": d, "sweep": d / "sweep" / "sweep.csv", "one": d / "sweep-one" / "sweep.csv",
            "tm": tm, "G": g, "pipeline": d / "pipeline.csv", "switch": d / "switch.csv"}


def figures(runs: dict[str, Path]) -> Iterator[tuple[str, Figure]]:
    """Every kind, in the shapes that change its layout: one panel or a grid, with or
    without power columns, a legend or a colour bar, both explore modes."""
    sweep = read_csv(runs["sweep"])
    yield "efficiency, L B G N", efficiency_figure(sweep, runs["sweep"])
    for letter in "BN":  # one panel: the narrowest figure, and N's longer panel title
        yield f"efficiency, {letter}", efficiency_figure(sweep[sweep["processor"] == letter])
    yield "efficiency, one level", efficiency_figure(read_csv(runs["one"]), runs["one"])
    yield "layers, sweep", layers_figure(sweep, runs["sweep"])
    yield "layers, time only", layers_figure(
        sweep.drop(columns=["energy_mj", "fps_per_w"]), runs["sweep"], level="min")
    g = read_csv(runs["G"])
    yield "layers, two runs", layers_figure(
        pd.concat([g.assign(run="G.csv"), sweep[sweep["processor"] == "B"].assign(run="sweep")]))
    tm = read_csv(runs["tm"])
    yield "transfers", transfers_figure(tm, runs["tm"])
    yield "transfers, cross only", transfers_figure(tm, runs["tm"], include_same=False)
    found = run_trace(runs["G"])
    assert found is not None
    yield "timeline", timeline_figure(found[1], g, trace_src=found[0], layers_src=runs["G"])
    for mode in ("pipeline", "switch"):
        yield f"pareto, {mode}", pareto_figure(read_csv(runs[mode]), runs[mode])


def test_every_plot_kinds_text_fits_and_does_not_overlap(runs: dict[str, Path]) -> None:
    problems = {name: text_problems(fig) for name, fig in figures(runs)}
    assert {k for k, _ in problems.items()} >= {"efficiency, B", "layers, sweep", "transfers",
                                                "timeline", "pareto, pipeline"}
    assert {k: v for k, v in problems.items() if v} == {}


def test_one_level_is_said_in_the_figure_and_on_stderr(runs: dict[str, Path]) -> None:
    fig = efficiency_figure(read_csv(runs["one"]), runs["one"])
    (ax,) = [a for a in fig.axes if a.get_visible() and a.get_label() != "<colorbar>"]
    assert ax.get_title() == "B (big CPU)\none level only: points, not curves"
    assert {len(line.get_xdata()) for line in ax.get_lines()} == {1}
    # Two levels: no such note.
    two = efficiency_figure(read_csv(runs["sweep"]), runs["sweep"])
    assert not any("one level" in a.get_title() for a in two.axes)
    r = cli("plot", "efficiency", str(runs["one"].parent), "-o", "one.png", cwd=runs["dir"])
    assert r.stdout.strip() == "wrote one.png"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    mhz = load_board("sim").processor("B").freqs_khz[2] / 1000  # --freqs 3
    assert lines[0].startswith(f"coupprof plot: warning: one level only for B ({mhz:g} MHz): ")
    assert "two or more levels" in lines[0]
    assert (runs["dir"] / "one.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = cli("plot", "efficiency", str(runs["sweep"]), "-o", "two.png", cwd=runs["dir"])
    assert "warning" not in r.stderr
