"""Timeline: one frame's power trace with its layer windows shaded.

Inputs, both on the host clock (`time.perf_counter_ns`, CLOCK_MONOTONIC on Linux,
shared by every process of the machine):

- a power trace: the CSV `coupprof collect` writes (`profiler.power.export`: t_us,
  host_ns, current_a, bus_v, power_w, markers; host_ns is filled in only when the
  logger clock was mapped onto the host's), or a binary trace directory — such as
  the one a `coupprof layers` run with a streaming power source keeps beside its
  CSV, whose sidecar holds the clock fit (`run_trace` finds both);
- a layer CSV written with `--raw`: its frame rows carry transfer_start_ns,
  transfer_end_ns, start_ns, end_ns per layer and frame.

The frame shown is `frame` if given, else a typical one: of the frames the trace
covers, the one whose duration is closest to their median. The lower panel shows marker line 0 as the logger saw it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from profiler.errors import BadInputError
from profiler.plots.common import new_figure, require, run_title, set_suptitle

TRACE_NEEDED = ("host_ns", "power_w")
FRAME_NEEDED = ("layer", "frame", "start_ns", "end_ns", "transfer_start_ns", "transfer_end_ns")
TRACE_PRODUCER = ("`coupprof collect` (host_ns is filled when the logger's clock is mapped onto "
                  "the host's, e.g. `coupprof collect --port virtual`)")
FRAME_PRODUCER = "`coupprof layers --raw` (frame rows with raw timestamps)"
SHADES = ("#fdd49e", "#c6dbef")  # alternate layers: orange, blue


def is_trace(df: pd.DataFrame) -> bool:
    return "power_w" in df.columns and "t_us" in df.columns


def read_trace_dir(path: str | Path, clock: dict[str, Any] | None = None) -> pd.DataFrame:
    """A binary trace directory (`DeviceTrace.save`: the collector's --trace-dir, the .trace a
    `coupprof layers` run with a streaming power source keeps) as the trace CSV's columns.

    host_ns needs the logger-to-host clock map: the trace's own, else `clock` (a
    `ClockMap.to_dict()`, e.g. the layer run's sidecar `extra.clock_map`)."""
    from profiler.power.clockmap import ClockMap
    from profiler.power.trace import DeviceTrace

    trace = DeviceTrace.load(path)
    cmap = trace.clock or (ClockMap.from_dict(clock) if clock else None)
    if cmap is None:
        raise BadInputError(f"the trace {path} has no clock map (logger clock -> host clock)",
                            "pass the layer CSV of the run that recorded it (its sidecar has the "
                            "clock map), or the trace CSV of `coupprof collect`")
    return pd.DataFrame({"t_us": np.asarray(trace.t_us), "host_ns": cmap.to_host_ns(trace.t_us),
                         "power_w": trace.power_w, "markers": np.asarray(trace.markers)})


def run_trace(layers_csv: str | Path) -> tuple[Path, pd.DataFrame] | None:
    """The power trace a `coupprof layers` run kept (sidecar `extra.trace_dir`), mapped onto
    the host clock with the run's own clock fit (`extra.clock_map`); None if it kept none."""
    from profiler.plots.common import sidecar

    csv = Path(layers_csv)
    extra = sidecar(csv).get("extra", {}) or {}
    name, clock = extra.get("trace_dir"), extra.get("clock_map")
    if not name or not clock:
        return None
    # Recorded relative to where the run was started; it sits beside the CSV.
    for cand in (Path(name), csv.parent / Path(name).name):
        if (cand / "meta.json").is_file():
            return cand, read_trace_dir(cand, clock)
    return None


def frame_rows(df: pd.DataFrame) -> pd.DataFrame:
    if "kind" in df.columns:
        df = df[df["kind"] == "frame"]
    return df.dropna(axis=1, how="all").reset_index(drop=True)


def frame_windows(frames: pd.DataFrame) -> pd.DataFrame:
    """Per frame: first transfer start and last layer end (ns)."""
    g = frames.groupby("frame")
    return pd.DataFrame({"t0_ns": g["transfer_start_ns"].min(), "t1_ns": g["end_ns"].max()})


def choose_frame(frames: pd.DataFrame, trace: pd.DataFrame, frame: int | None,
                 trace_src: str | Path, layers_src: str | Path) -> int:
    win = frame_windows(frames)
    lo, hi = int(trace["host_ns"].min()), int(trace["host_ns"].max())
    covered = win[(win["t0_ns"] >= lo) & (win["t1_ns"] <= hi)]
    if frame is not None:
        if frame not in win.index:
            raise BadInputError(f"--frame {frame}: {layers_src} has frames "
                                f"{int(win.index.min())}..{int(win.index.max())}",
                                "pick a frame in that range")
        if frame not in covered.index:
            raise BadInputError(f"--frame {frame} of {layers_src} lies outside the trace {trace_src}",
                                "pick a frame the trace covers, or record both at the same time")
        return frame
    if covered.empty:
        raise BadInputError(
            f"the trace {trace_src} (host time {lo / 1e9:.3f}..{hi / 1e9:.3f} s) covers no frame of "
            f"{layers_src} ({int(win['t0_ns'].min()) / 1e9:.3f}..{int(win['t1_ns'].max()) / 1e9:.3f} s)",
            "record the trace while the layers run (same machine, same boot)")
    # A typical frame: the one whose duration is closest to the median of those covered.
    dur = covered["t1_ns"] - covered["t0_ns"]
    return int((dur - dur.median()).abs().idxmin())


def window_energy_mj(host_ns: np.ndarray, power_w: np.ndarray, t0_ns: int, t1_ns: int) -> float:
    """Energy in [t0, t1] of the linearly interpolated trace (mJ); NaN without samples around it."""
    if host_ns.size < 2 or host_ns[0] > t0_ns or host_ns[-1] < t1_ns:
        return float("nan")
    inner = (host_ns > t0_ns) & (host_ns < t1_ns)
    t = np.concatenate([[t0_ns], host_ns[inner], [t1_ns]]).astype(np.float64)
    p = np.interp(t, host_ns.astype(np.float64), power_w)
    # np.trapezoid's sum, spelled out: NumPy < 2 (tflite-runtime's) has only np.trapz.
    dx = np.diff((t - t0_ns) / 1e9)
    return float((dx * (p[1:] + p[:-1]) / 2.0).sum()) * 1e3


def timeline_figure(trace: pd.DataFrame, layers: pd.DataFrame, frame: int | None = None,
                    trace_src: str | Path = "the trace", layers_src: str | Path = "the layer CSV",
                    pad: float = 0.15) -> Figure:
    require(trace, TRACE_NEEDED, trace_src, "timeline", TRACE_PRODUCER)
    frames = frame_rows(layers)
    require(frames, FRAME_NEEDED, layers_src, "timeline", FRAME_PRODUCER)
    trace = trace.dropna(subset=["host_ns", "power_w"]).sort_values("host_ns")
    k = choose_frame(frames, trace, frame, trace_src, layers_src)
    fr = frames[frames["frame"] == k].sort_values("start_ns")
    t0, t1 = int(fr["transfer_start_ns"].min()), int(fr["end_ns"].max())
    span = t1 - t0
    lo, hi = t0 - int(pad * span), t1 + int(pad * span)
    host = trace["host_ns"].to_numpy(dtype=np.int64)
    i0 = max(0, int(np.searchsorted(host, lo)) - 1)
    i1 = min(len(trace), int(np.searchsorted(host, hi)) + 1)
    win = trace.iloc[i0:i1]
    x_ms = (win["host_ns"].to_numpy(dtype=np.int64) - t0) / 1e6
    power = win["power_w"].to_numpy(dtype=float)
    inside = (win["host_ns"] >= t0) & (win["host_ns"] <= t1)

    has_markers = "markers" in win.columns
    fig, axes = new_figure(2 if has_markers else 1, 1, width=10.0, height=5.2 if has_markers else 4.2,
                           sharex=True, gridspec_kw={"height_ratios": [4, 1]} if has_markers else None)
    ax = axes[0, 0]
    n_layers = len(fr)
    for i, r in enumerate(fr.itertuples()):
        a, b = (r.start_ns - t0) / 1e6, (r.end_ns - t0) / 1e6
        ax.axvspan(a, b, color=SHADES[i % 2], alpha=0.8, lw=0, zorder=0)
        ax.axvspan((r.transfer_start_ns - t0) / 1e6, (r.transfer_end_ns - t0) / 1e6,
                   color="0.85", lw=0, zorder=0)
        if n_layers <= 40:
            ax.text((a + b) / 2, 1.0, str(int(r.layer)), transform=ax.get_xaxis_transform(),
                    ha="center", va="bottom", fontsize=7 if n_layers > 20 else 8)
    # Steps centred on the samples: power changes in steps at layer boundaries, and a
    # sloped line between two samples would suggest a ramp nobody measured.
    ax.plot(x_ms, power, color="black", lw=1.0, marker="." if len(x_ms) < 200 else None, ms=3,
            drawstyle="steps-mid", label="power (samples)", zorder=3)
    energy_mj = window_energy_mj(win["host_ns"].to_numpy(dtype=np.int64), power, t0, t1)
    ax.set_ylabel("power (W)")
    ax.set_xlim((lo - t0) / 1e6, (hi - t0) / 1e6)
    # From zero: the eye reads the share of power a layer adds, not noise blown up.
    ax.set_ylim(0.0, float(np.nanmax(power)) * 1.15)
    from matplotlib.patches import Patch

    fig.legend(handles=[ax.lines[0], Patch(color=SHADES[0], label="layer invoke (numbered above; colours alternate)"),
                        Patch(color="0.85", label="input hand-over")],
               loc="outside lower center", ncols=3, fontsize=8)
    bottom = ax
    if has_markers:
        m = axes[1, 0]
        m.step(x_ms, win["markers"].to_numpy(dtype=int) & 1, where="post", color="tab:purple", lw=1)
        m.set_ylim(-0.2, 1.2)
        m.set_yticks([0, 1])
        m.set_ylabel("marker 0")
        bottom = m
    bottom.set_xlabel(f"time from the frame's first hand-over (ms); frame {k}, "
                      f"{span / 1e6:.3f} ms")
    info = run_title(layers)
    proc = ""
    if "processor" in frames.columns:
        proc = f", processor {frames['processor'].iloc[0]}"
        if "freq_khz" in frames.columns and frames["freq_khz"].notna().any():
            proc += f" @ {int(frames['freq_khz'].dropna().iloc[0]) / 1000:g} MHz"
    n_in = int(inside.sum())
    sub = (f"{n_in} samples in the frame, energy {energy_mj:.3f} mJ" if n_in > 1
           else f"only {n_in} sample in the frame: the logger's rate is too low for frames this short")
    set_suptitle(fig, f"One frame's power with layer windows — {info}{proc}\n{sub}")
    return fig
