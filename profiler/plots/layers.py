"""Layers: time, energy and FPS/W of every layer, processors side by side (ARM-CO-UP
Fig. 17). Input: layer rows from one or more `coupprof layers` CSVs (one per
processor) or a sweep CSV, from which one level per processor is taken
(`level`: "max" — the default, "min" or a level number).

Without power columns (a run without a power source) only the time panel is drawn
and the figure says why the other two are missing. Each series' legend gives its frame
(`series_frames`: a fused run's layers plus its fixed row, which has no bar), the figures
the run's terminal footer, sidecar and report give.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from profiler.errors import BadInputError
from profiler.measure.tables import FrameFigures, frame_figures, short_ops
from profiler.plots.common import (
    PROCESSOR_COLORS,
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

NEEDED = ("processor", "layer", "time_ms_mean")
PRODUCER = "`coupprof layers` (one CSV per processor) or `coupprof sweep`"
PANELS = (
    ("time_ms_mean", "time per frame (ms)"),
    ("energy_mj", "energy per frame (mJ)"),
    ("fps_per_w", "FPS/W (J⁻¹)"),
)


def pick_level(rows: pd.DataFrame, level: str | int | None) -> pd.DataFrame:
    """One frequency level per processor: `level` = 'max', 'min' or a level number."""
    if "freq_level" not in rows.columns or rows["freq_level"].isna().all():
        return rows
    out = []
    for letter in processors_in(rows):
        sub = rows[rows["processor"].astype(str) == letter]
        have = sorted(int(v) for v in sub["freq_level"].dropna().unique())
        if not have:
            out.append(sub)
            continue
        if level in (None, "max"):
            k = have[-1]
        elif level == "min":
            k = have[0]
        else:
            k = int(level)
            if k not in have:
                raise BadInputError(f"--level {k}: processor {letter} was measured at levels "
                                    f"{', '.join(map(str, have))} only",
                                    "pick one of those, or min / max")
        out.append(sub[sub["freq_level"] == k])
    return pd.concat(out, ignore_index=True)


def _whiskers(sub: pd.DataFrame, mean: pd.Series) -> np.ndarray | None:
    """(2, layers) whisker lengths: a fused row's 95 % interval both ways, a sliced row's
    95th percentile above its mean (std bars would dip below zero on skew)."""
    def col(name: str) -> np.ndarray:
        if name not in sub.columns:
            return np.full(len(mean), np.nan)
        return sub.groupby("layer")[name].mean().reindex(mean.index).to_numpy(dtype=float)

    ci, p95 = col("time_ms_ci95"), col("time_ms_p95")
    up = np.where(np.isfinite(ci), ci, np.clip(p95 - mean.to_numpy(dtype=float), 0.0, None))
    down = np.where(np.isfinite(ci), ci, 0.0)
    if not np.isfinite(up).any():
        return None
    return np.vstack([np.nan_to_num(down), np.nan_to_num(up)])


def _legend(label: str, frame: FrameFigures | None) -> str:
    if frame is None:
        return label
    label += "\nper frame: " + frame.text(sep="\n")
    if frame.fixed_ms is not None:
        label += f"\n(of which fixed per call {frame.fixed_ms:.3f} ms: no bar)"
    return label


def _whisker_text(rows: pd.DataFrame) -> str:
    fused = "time_ms_ci95" in rows.columns and rows["time_ms_ci95"].notna()
    if fused is False or not fused.any():
        return "\nbar mean, whisker p95"
    return "\nwhisker: 95 % interval" if fused.all() else \
        "\nwhisker: 95 % interval (fused),\np95 (sliced)"


def _series_label(sub: pd.DataFrame, letter: str) -> str:
    label = processor_label(letter)
    if "freq_khz" in sub.columns and sub["freq_khz"].notna().any():
        khz = sorted(set(int(v) for v in sub["freq_khz"].dropna()))
        mhz = "/".join(f"{k / 1000:g}" for k in khz) + " MHz"
        label += f", host cluster @ {mhz}" if letter == "N" else f" @ {mhz}"
    return label


def _series(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame, str]]:
    """(label, rows, colour) per bar series: one per processor, or one per run when the
    rows carry a `run` column (several runs of the same processor side by side)."""
    out = []
    if "run" in rows.columns and rows["run"].nunique() > 1:
        for i, (run, sub) in enumerate(rows.groupby("run", sort=False)):
            letter = str(sub["processor"].iloc[0])
            out.append((f"{run}: {_series_label(sub, letter)}", sub, f"C{i % 10}"))
        return out
    for letter in processors_in(rows):
        sub = rows[rows["processor"].astype(str) == letter]
        out.append((_series_label(sub, letter), sub, PROCESSOR_COLORS.get(letter, "grey")))
    return out


def _picked(df: pd.DataFrame, level: str | int | None) -> pd.DataFrame:
    if "run" in df.columns:
        return pd.concat([pick_level(sub, level) for _, sub in df.groupby("run", sort=False)],
                         ignore_index=True)
    return pick_level(df, level)


def series_frames(df: pd.DataFrame, level: str | int | None = "max",
                  ) -> dict[str, FrameFigures]:
    """{series label: its frame} (`profiler.measure.tables.frame_figures`) for the
    series `layers_figure` draws; a series whose frame its rows cannot give (a sweep's
    fused pair, whose fixed row is in the sidecar; a processor's runs not told apart by
    a `run` column) is left out."""
    rows = df[df["kind"].isin(["layer", "fixed"])] if "kind" in df.columns else df
    out: dict[str, FrameFigures] = {}
    for label, sub, _ in _series(_picked(rows.reset_index(drop=True), level)):
        layers = sub[sub["kind"] == "layer"] if "kind" in sub.columns else sub
        figures = None if layers["layer"].duplicated().any() else frame_figures(sub)
        if figures is not None:
            out[label] = figures
    return out


def layers_figure(df: pd.DataFrame, source: str | Path = "the CSV",
                  level: str | int | None = "max") -> Figure:
    """Bars per layer; one series per processor, or per run if `df` has a `run` column."""
    rows = with_fps_per_w(layer_rows(df))
    require(rows, NEEDED, source, "layers", PRODUCER)
    rows = _picked(rows, level)
    frames = series_frames(df, level)
    panels = [(c, label) for c, label in PANELS if c in rows.columns and rows[c].notna().any()]
    series = _series(rows)
    procs = series
    layers = sorted(int(v) for v in set(rows["layer"]))
    n = len(layers)
    fig, axes = new_figure(len(panels), 1, width=max(10.0, 0.32 * n * max(1, len(procs)) ** 0.5 + 7),
                           height=2.6 * len(panels) + 2.2, sharex=True)
    width = 0.8 / max(1, len(procs))
    x = np.arange(n)
    pos = {layer: i for i, layer in enumerate(layers)}
    for (col, ylabel), ax in zip(panels, axes[:, 0], strict=True):
        for j, (label, sub, color) in enumerate(series):
            per_layer = sub.groupby("layer")[col].mean()
            xs = np.array([pos[int(k)] for k in per_layer.index]) + (j - (len(procs) - 1) / 2) * width
            err = None
            if col == "time_ms_mean":
                err = _whiskers(sub, per_layer)
            ax.bar(xs, per_layer.to_numpy(), width=width * 0.95, yerr=err, capsize=1.5,
                   error_kw={"elinewidth": 0.6, "alpha": 0.6}, color=color,
                   label=_legend(label, frames.get(label)))
        ax.set_ylabel(ylabel + (_whisker_text(rows) if col == "time_ms_mean" else ""))
        log_if_wide(ax, rows[col], ratio=200.0)
    ops = {}
    if "op_types" in rows.columns:
        ops = {int(r.layer): short_ops(r.op_types) for r in rows.itertuples() if isinstance(r.op_types, str)}
    bottom = axes[-1, 0]
    bottom.set_xticks(x, [f"{k} {ops.get(k, '')}".strip() if n <= 30 else str(k) for k in layers],
                      rotation=60 if n <= 30 else 0, ha="right" if n <= 30 else "center", fontsize=8)
    bottom.set_xlabel("layer (index and operators)" if n <= 30 else "layer index")
    # Beside the top panel, below the title (a figure legend at the top right corner
    # shares the title's line); constrained layout makes room for it.
    axes[0, 0].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
                      title="processor" if "run" not in rows.columns else "run")
    title = f"Per-layer time{', energy and FPS/W' if len(panels) > 1 else ''} — {run_title(rows)}"
    if len(panels) == 1:
        title += "\n(no energy_mj / fps_per_w columns: the run had no power source)"
    set_suptitle(fig, title)
    return fig
