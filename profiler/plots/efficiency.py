"""Efficiency: FPS/W of every layer against frequency, one panel per processor
(ARM-CO-UP Fig. 16). Input: the layer rows of a sweep (`coupprof sweep` on a board
with a power source), one row per (processor, level, layer) with fps_per_w.

FPS/W of a layer = 1 / (its energy per frame in J). The NPU has no DVFS of its own;
its x axis is its host cluster's frequency, as in the paper's Fig. 16d.

A processor measured at one level has no curve to show: its panel shows each layer
as a point and says so, and `one_level_note` gives the sentence for a command to print.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from profiler.plots.common import (
    LAYER_CMAP,
    layer_colors,
    layer_rows,
    log_if_wide,
    new_figure,
    processor_label,
    processors_in,
    require,
    run_title,
    set_suptitle,
    with_fps_per_w,
)

NEEDED = ("processor", "freq_khz", "layer", "fps_per_w")
PRODUCER = ("`coupprof sweep` on a board with a power source (e.g. `coupprof sweep --board sim`); "
            "a host run without a power source has no energy columns")
MAX_LEGEND_LAYERS = 12


def _rows(df: pd.DataFrame, source: str | Path) -> pd.DataFrame:
    rows = with_fps_per_w(layer_rows(df))
    require(rows, NEEDED, source, "efficiency", PRODUCER)
    return rows.dropna(subset=list(NEEDED))


def one_level(df: pd.DataFrame, source: str | Path = "the CSV") -> dict[str, float]:
    """Processor -> the frequency (MHz) of its only level, for those measured at one level."""
    rows = _rows(df, source)
    out = {}
    for letter in processors_in(rows):
        khz = set(rows.loc[rows["processor"].astype(str) == letter, "freq_khz"].astype(float))
        if len(khz) == 1:
            out[letter] = khz.pop() / 1000
    return out


def one_level_note(df: pd.DataFrame, source: str | Path = "the CSV") -> str | None:
    """One sentence when some processor has a single level (no curve to draw), else None."""
    single = one_level(df, source)
    if not single:
        return None
    which = ", ".join(f"{p} ({mhz:g} MHz)" for p, mhz in single.items())
    return (f"one level only for {which}: each layer is a point, not a curve; a curve needs "
            "two or more levels (`coupprof sweep` measures every level unless --freqs says "
            "otherwise, e.g. --freqs 1,3,5)")


def efficiency_figure(df: pd.DataFrame, source: str | Path = "the CSV") -> Figure:
    rows = _rows(df, source)
    single = one_level(rows, source)
    procs = processors_in(rows)
    ncols = min(len(procs), 2)
    nrows = (len(procs) + ncols - 1) // ncols
    fig, axes = new_figure(nrows, ncols, width=6.0 * ncols + 1.2,
                           height=3.6 * nrows + 0.6)
    layers = sorted(int(v) for v in set(rows["layer"]))
    colors = dict(zip(layers, layer_colors(len(layers)), strict=True))
    for ax in axes.flat[len(procs):]:
        ax.set_visible(False)
    for ax, letter in zip(axes.flat, procs, strict=False):
        sub = rows[rows["processor"].astype(str) == letter]
        for layer in layers:
            one = sub[sub["layer"] == layer].sort_values("freq_khz")
            if one.empty:
                continue
            ax.plot(one["freq_khz"].astype(float) / 1000, one["fps_per_w"], marker="o", ms=3,
                    lw=1.2, color=colors[layer], label=f"layer {layer}")
        levels = sorted(set(sub["freq_khz"].astype(float) / 1000))
        ax.set_xticks(levels, [f"{v:g}" for v in levels], rotation=45 if len(levels) > 5 else 0)
        title = processor_label(letter)
        if letter == "N":
            title += ": x is its host cluster's frequency"
        if letter in single:
            title += "\none level only: points, not curves"
        ax.set_title(title)
        ax.set_xlabel("frequency (MHz)")
        ax.set_ylabel("FPS/W (1 / energy per frame, J⁻¹)")
        if log_if_wide(ax, sub["fps_per_w"]):
            ax.set_ylabel("FPS/W, log scale (J⁻¹)")
    if len(layers) <= MAX_LEGEND_LAYERS:
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right center", title="layer")
    else:
        sm = ScalarMappable(norm=Normalize(min(layers), max(layers)), cmap=LAYER_CMAP)
        fig.colorbar(sm, ax=[a for a in axes.flat if a.get_visible()], label="layer index",
                     shrink=0.9)
    set_suptitle(fig, f"Per-layer energy efficiency vs DVFS level — {run_title(rows)}")
    return fig
