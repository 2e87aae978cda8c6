"""What every plot kind shares: the style, reading CSVs, column checks, labels.

Each plot kind is a module with a function that takes DataFrames and returns a
matplotlib `Figure` (no files, no global state), so notebooks and `coupprof plot`
draw the same figures. `save(fig, path)` writes a PNG. Figures are made without
pyplot, so no backend is chosen here: importing coupprof leaves matplotlib's global
backend as the caller set it (a notebook's inline one, a GUI's), and saving needs
none.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.textpath import TextToPath

from profiler.errors import BadInputError
from profiler.measure.tables import upgrade_v1_columns

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.font_manager import FontProperties
    from matplotlib.text import Text
    from matplotlib.typing import RcKeyType

PROCESSOR_NAMES = {"L": "little CPU", "B": "big CPU", "G": "GPU", "N": "NPU"}
PROCESSOR_ORDER = ("L", "B", "G", "N")
# One colour per processor, the same in every figure.
PROCESSOR_COLORS = {"L": "#1f77b4", "B": "#d62728", "G": "#2ca02c", "N": "#9467bd"}

STYLE: dict[RcKeyType, float] = {
    "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 8,
    "figure.titlesize": 12, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
    "axes.spines.right": False, "savefig.dpi": 120,
}


def processor_label(letter: str) -> str:
    return f"{letter} ({PROCESSOR_NAMES.get(letter, letter)})"


def processor_sort_key(letter: str) -> tuple[int, str]:
    return (PROCESSOR_ORDER.index(letter) if letter in PROCESSOR_ORDER else 99, letter)


def new_figure(nrows: int = 1, ncols: int = 1, *, width: float = 8.0, height: float = 4.5,
               **kw: Any) -> tuple[Figure, np.ndarray]:
    """A figure with the project's style and a 2-D array of axes."""
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


# The share of the figure's width a title may take: constrained layout keeps a small pad
# at either edge, and a line that fills the width exactly loses its ends there.
TITLE_WIDTH_SHARE = 0.94


def _text_width_pt(text: str, prop: FontProperties) -> float:
    width, _, _ = TextToPath().get_text_width_height_descent(text, prop, ismath=False)
    return float(width)


def wrap_to_width(text: str, prop: FontProperties, width_pt: float) -> str:
    """`text` with each line broken at spaces so that no line is wider than `width_pt`
    in font `prop` (a single word wider than that stays whole)."""
    out: list[str] = []
    for line in text.split("\n"):
        current = ""
        for word in line.split(" "):
            trial = f"{current} {word}" if current else word
            if current and _text_width_pt(trial, prop) > width_pt:
                out.append(current)
                current = word
            else:
                current = trial
        out.append(current)
    return "\n".join(out)


def set_suptitle(fig: Figure, text: str, **kw: Any) -> Text:
    """The figure's title, wrapped to the figure's width: matplotlib centres a suptitle
    and never wraps it, so a long model or board name cut both ends off."""
    with matplotlib.rc_context(STYLE):
        title = fig.suptitle(text, **kw)
    width_pt = fig.get_figwidth() * 72.0 * TITLE_WIDTH_SHARE
    title.set_text(wrap_to_width(text, title.get_fontproperties(), width_pt))
    return title


def save(fig: Figure, path: str | Path) -> Path:
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with matplotlib.rc_context(STYLE):
            fig.savefig(p, format="png")
    except OSError as err:
        raise BadInputError(f"cannot write {p}: {err.strerror}", "choose a writable -o path") from None
    return p


def read_csv(path: str | Path) -> pd.DataFrame:
    """Any CSV; a missing or unreadable file is bad input naming the file."""
    p = Path(path)
    if not p.is_file():
        raise BadInputError(f"CSV not found: {p}", "pass a CSV written by coupprof")
    try:
        df = pd.read_csv(p, dtype={"freq_level": "Int64", "freq_khz": "Int64"})
    except (ValueError, OSError, pd.errors.ParserError) as err:
        raise BadInputError(f"cannot read {p} as CSV: {err}", "pass a CSV written by coupprof") from None
    return with_sidecar_ids(upgrade_v1_columns(df), p)  # an older fused CSV: today's columns


def sidecar(csv_path: str | Path) -> dict[str, Any]:
    """The JSON sidecar beside a CSV (same stem), or {} if there is none or it is unreadable."""
    j = Path(csv_path).with_suffix(".json")
    try:
        meta = json.loads(j.read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def with_sidecar_ids(df: pd.DataFrame, csv_path: str | Path) -> pd.DataFrame:
    """Fill board / simulated / model from the sidecar where the CSV lacks them (transfer tables,
    traces), so figure titles say what was measured."""
    meta = sidecar(csv_path)
    meta = {**meta.get("settings", {}), **meta}  # sweep sidecars keep them under "settings"
    fill = {"board": meta.get("board"), "simulated": meta.get("simulated"),
            "model": Path(str(meta["model_path"])).stem if meta.get("model_path") else None}
    missing = {k: v for k, v in fill.items() if k not in df.columns and v is not None}
    return df.assign(**missing) if missing else df


def layer_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The per-layer aggregate rows of a layers or sweep CSV (frame rows dropped)."""
    if "kind" in df.columns:
        df = df[df["kind"] == "layer"]
    return df.dropna(axis=1, how="all").reset_index(drop=True)


def require(df: pd.DataFrame, columns: Iterable[str], source: str | Path, plot: str,
            producer: str) -> None:
    """Bad input (exit 2) naming the missing columns and the command that writes them."""
    missing = [c for c in columns if c not in df.columns or df[c].isna().all()]
    if missing:
        raise BadInputError(
            f"{source} has no {', '.join(missing)} column{'s' if len(missing) > 1 else ''} "
            f"(needed by the {plot} plot)",
            f"these are written by {producer}",
        )


def with_fps_per_w(df: pd.DataFrame) -> pd.DataFrame:
    """fps_per_w from energy_mj where only the energy is there (FPS/W = 1 / energy in J)."""
    if "fps_per_w" not in df.columns and "energy_mj" in df.columns:
        df = df.copy()
        df["fps_per_w"] = 1000.0 / df["energy_mj"]
    return df


def run_title(df: pd.DataFrame) -> str:
    """'mobilenet_v1_0.25_128 on board sim [SIMULATED]' from the ID columns, where present."""
    parts = []
    if "model" in df.columns and df["model"].notna().any():
        parts.append(", ".join(sorted(set(df["model"].dropna().astype(str)))))
    if "board" in df.columns and df["board"].notna().any():
        parts.append("on board " + ", ".join(sorted(set(df["board"].dropna().astype(str)))))
    text = " ".join(parts)
    if "simulated" in df.columns and df["simulated"].astype(str).str.lower().eq("true").any():
        text += " [SIMULATED]"
    return text


def processors_in(df: pd.DataFrame, column: str = "processor") -> list[str]:
    return sorted(set(df[column].astype(str)), key=processor_sort_key)


# Layers by depth: viridis without its palest yellow (hard to see on white).
LAYER_CMAP = ListedColormap(matplotlib.colormaps["viridis"](np.linspace(0.0, 0.9, 256)),
                            name="layers")


def layer_colors(n: int) -> list[tuple[float, float, float, float]]:
    """n colours ordered by depth (early layers dark blue, late ones green-yellow)."""
    return [LAYER_CMAP(x) for x in (np.linspace(0.0, 1.0, n) if n > 1 else [0.0])]


def log_if_wide(ax: Axes, values: Sequence[float] | np.ndarray, ratio: float = 50.0) -> bool:
    """Log y axis when the positive values span more than `ratio`."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size and v.max() / v.min() > ratio:
        ax.set_yscale("log")
        return True
    return False
