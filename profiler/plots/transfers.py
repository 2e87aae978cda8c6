"""Transfers: time to hand each layer boundary from processor src to dst (ARM-CO-UP
Fig. 18), one line per ordered pair, with the bytes crossing each boundary below.
Input: the long-format CSV of `coupprof transfer-matrix` (boundary, src, dst, bytes,
time_ms_mean, time_ms_p95, ...). Boundary b lies between layer b and layer b + 1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from profiler.plots.common import (
    PROCESSOR_COLORS,
    new_figure,
    processor_sort_key,
    require,
    run_title,
    set_suptitle,
)

NEEDED = ("boundary", "src", "dst", "time_ms_mean")
PRODUCER = "`coupprof transfer-matrix`"
LINESTYLES = ("-", "--", ":", "-.")


def transfers_figure(df: pd.DataFrame, source: str | Path = "the CSV",
                     include_same: bool = True) -> Figure:
    require(df, NEEDED, source, "transfers", PRODUCER)
    rows = df.dropna(subset=list(NEEDED)).copy()
    rows["src"] = rows["src"].astype(str)
    rows["dst"] = rows["dst"].astype(str)
    if not include_same:
        rows = rows[rows["src"] != rows["dst"]]
    pairs = sorted({(s, d) for s, d in zip(rows["src"], rows["dst"], strict=True)},
                   key=lambda p: (processor_sort_key(p[0]), processor_sort_key(p[1])))
    has_bytes = "bytes" in rows.columns and rows["bytes"].notna().any()
    boundaries = sorted(int(b) for b in set(rows["boundary"]))
    fig, axes = new_figure(2 if has_bytes else 1, 1, width=max(9.5, 0.3 * len(boundaries) + 6.5),
                           height=6.8 if has_bytes else 4.4, sharex=True,
                           gridspec_kw={"height_ratios": [3, 1]} if has_bytes else None)
    ax = axes[0, 0]
    dst_style = {d: LINESTYLES[i % len(LINESTYLES)]
                 for i, d in enumerate(sorted({d for _, d in pairs}, key=processor_sort_key))}
    for src, dst in pairs:
        sub = rows[(rows["src"] == src) & (rows["dst"] == dst)].sort_values("boundary")
        same = src == dst
        ax.plot(sub["boundary"], sub["time_ms_mean"], marker="o", ms=3,
                lw=0.9 if same else 1.4, alpha=0.55 if same else 1.0,
                ls=dst_style[dst], color=PROCESSOR_COLORS.get(src, "grey"),
                label=f"{src} → {dst}" + (" (same processor)" if same else ""))
        if "time_ms_p95" in sub.columns and not same:
            ax.fill_between(sub["boundary"], sub["time_ms_mean"], sub["time_ms_p95"],
                            color=PROCESSOR_COLORS.get(src, "grey"), alpha=0.12, lw=0)
    ax.set_ylabel("hand-over time (ms)")
    ax.set_title("mean per boundary; shaded up to the 95th percentile", fontsize=9)
    # Beside the top panel, not at the figure's top right corner: there it sat on the
    # title's line and covered a long title's end. Constrained layout makes room for it.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              title="src → dst\ncolour = src\nline = dst")
    bottom = ax
    if has_bytes:
        bax = axes[1, 0]
        per_b = rows.groupby("boundary")["bytes"].max()
        bax.bar(per_b.index, per_b.to_numpy() / 1024, color="0.55", width=0.7)
        bax.set_ylabel("KiB crossing")
        bottom = bax
    bottom.set_xlabel("layer boundary (b: between layer b and b+1)")
    step = max(1, int(np.ceil(len(boundaries) / 30)))
    bottom.set_xticks(boundaries[::step])
    set_suptitle(fig, f"Transfer cost per layer boundary — {run_title(rows) or Path(str(source)).name}")
    return fig
