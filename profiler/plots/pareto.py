"""Pareto: the candidates `coupprof explore` wrote, the pick marked (ARM-CO-UP Table 4 /
Fig. 14b). Input: explore's CSV (rank, kind, mode, order, freq, latency_ms,
throughput_fps, energy_mj, fps_per_w).

Pipeline mode: throughput against FPS/W (both up is better). Switch mode: latency
against energy per frame (both down is better), with the latency bound from the
sidecar as a line. Single-processor baselines are grey squares; each point is labelled
with its order string.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from profiler.errors import BadInputError
from profiler.plots.common import new_figure, require, set_suptitle, sidecar

NEEDED = ("kind", "mode", "order", "latency_ms", "throughput_fps", "energy_mj", "fps_per_w")
PRODUCER = "`coupprof explore --sweep DIR ... --csv FILE`"


def pareto_figure(df: pd.DataFrame, source: str | Path = "the CSV") -> Figure:
    require(df, NEEDED, source, "pareto", PRODUCER)
    modes = set(df["mode"].astype(str))
    if len(modes) != 1:
        raise BadInputError(f"{source} mixes modes {', '.join(sorted(modes))}",
                            "pass one explore CSV (one mode)")
    mode = modes.pop()
    x, y = ("throughput_fps", "fps_per_w") if mode == "pipeline" else ("latency_ms", "energy_mj")
    labels = {"throughput_fps": "throughput (FPS)", "fps_per_w": "FPS/W (1 / energy per frame, J⁻¹)",
              "latency_ms": "latency per frame (ms)", "energy_mj": "energy per frame (mJ)"}
    fig, axes = new_figure(width=8.0, height=5.0)
    ax = axes[0, 0]
    front = df[df["kind"].isin(["pick", "front"])].sort_values(x)
    single = df[df["kind"] == "single"]
    pick = df[df["kind"] == "pick"]
    ax.plot(front[x], front[y], "-o", ms=4, lw=1, color="tab:blue", label="front (predicted)")
    ax.scatter(single[x], single[y], marker="s", color="0.55", label="one processor", zorder=3)
    ax.scatter(pick[x], pick[y], marker="*", s=220, color="tab:red", label="pick", zorder=4)
    for r in df.itertuples():
        ax.annotate(f"{r.order} @ {r.freq}" if len(str(r.freq)) <= 12 else str(r.order),
                    (getattr(r, x), getattr(r, y)), fontsize=7, xytext=(4, 3),
                    textcoords="offset points")
    meta = sidecar(source) if isinstance(source, (str, Path)) else {}
    bound = meta.get("latency_bound_ms")
    if mode == "switch" and bound:
        ax.axvline(float(bound), color="tab:red", ls="--", lw=1, label=f"--latency-ms {bound:g}")
    ax.set_xlabel(labels[x])
    ax.set_ylabel(labels[y])
    if x == "latency_ms" and df[x].max() > 50 * df[x].min() > 0:
        ax.set_xscale("log")
    if y in ("energy_mj", "fps_per_w") and df[y].max() > 50 * df[y].min() > 0:
        ax.set_yscale("log")
    ax.legend(loc="best", fontsize=8)
    what = meta.get("proof", "")
    title = f"explore, {mode} mode — {meta.get('model', '')} on {meta.get('board', '')}"
    set_suptitle(fig, title + (f"\n{what}" if what else ""), fontsize=9)
    return fig
