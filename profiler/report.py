"""A run directory summarised in one Markdown or HTML file, with its tables and figures.

    report = build_report(Path("coupprof-out"))      # finds the CSVs and their sidecars
    path = write_report(report, fmt="md")            # RUN_DIR/report.md + RUN_DIR/figures/*.png

Every file a coupprof command writes gets its section, told by the ``format`` of its JSON
sidecar (same stem; `KINDS` lists them):

- layer runs (`coupprof layers`): metadata, the layer table and totals (a fused table's
  whole model in one call, its fixed row and intervals), a `timeline` figure when the run
  kept raw rows and a power trace; all layer runs together in one `layers` figure;
- mapped runs (`coupprof run`): each stage and the summary, measured beside predicted;
- predictions (`coupprof predict --json`, a JSON with no CSV): latency, throughput,
  energy and the stages;
- sweeps (`coupprof sweep`, DIR/sweep.csv + sweep.json): the pairs and their totals,
  the `efficiency` figure (when the sweep has power columns) and `layers` at the top level;
- transfer matrices (`coupprof transfer-matrix`): the src x dst summary and the
  `transfers` figure;
- searches (`coupprof explore`, and the measured top of `explore --measure`);
- DVFS transition delays (`coupprof dvfs-latency`);
- imported tables (`coupprof import`);
- board profiles `coupprof calibrate` wrote (a TOML with [board.sim.calibration]);
- power traces (`coupprof collect`): duration, rate, lost frames, and a `timeline`
  figure when a layer run with raw rows overlaps the trace; the binary trace folders
  (NAME.trace/) that layer runs and mapped runs keep are listed.

Errors of a prediction are signed as everywhere (`profiler.mapping.accuracy`):
(predicted - measured) / measured, and the tables say so in their header.
Subdirectories are searched too (a sweep's own directory inside a run directory). A CSV
with no coupprof sidecar is listed as such. A figure that cannot be drawn is replaced by a
line saying why.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import os
from dataclasses import dataclass, field
from functools import partial
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from profiler.errors import BadInputError, ProfilerError

if TYPE_CHECKING:
    from collections.abc import Callable

    from matplotlib.figure import Figure

FIGURES_DIR = "figures"


# -- the document, independent of its output format ----------------------------------


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Para:
    text: str


@dataclass
class TableBlock:
    df: pd.DataFrame
    caption: str = ""
    digits: dict[str, int] = field(default_factory=dict)  # decimals per column (default 3)

    def cells(self) -> list[list[str]]:
        cols = [str(c) for c in self.df.columns]
        return [[_num(v, self.digits.get(c, 3)) for c, v in zip(cols, row, strict=True)]
                for row in self.df.itertuples(index=False)]


@dataclass
class Image:
    path: Path  # relative to the run directory
    alt: str


Block = Heading | Para | TableBlock | Image


@dataclass
class Report:
    run_dir: Path
    title: str
    blocks: list[Block] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    sources: list[Path] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)


# -- finding results -----------------------------------------------------------------


#: Sidecar format (before its "/version") -> (kind, the command that writes it).
KINDS: dict[str, tuple[str, str]] = {
    "coupprof-layers": ("layers", "coupprof layers"),
    "coupprof-run": ("run", "coupprof run"),
    "coupprof-predict": ("predict", "coupprof predict --json"),
    "coupprof-sweep": ("sweep", "coupprof sweep"),
    "coupprof-transfers": ("transfers", "coupprof transfer-matrix"),
    "coupprof-explore": ("explore", "coupprof explore"),
    "coupprof-explore-measured": ("explore-measured", "coupprof explore --measure"),
    "coupprof-dvfs-latency": ("dvfs-latency", "coupprof dvfs-latency"),
    "coupprof-import": ("import", "coupprof import"),
    "coupprof-trace": ("trace", "coupprof collect"),
    "coupprof-lomo": ("lomo", "coupprof calibrate --lomo-csv"),
    "coupprof-run-devices": ("run-devices", "coupprof run --devices"),
    "coupprof-device-links": ("device-links", "coupprof transfer-matrix --devices"),
    "coupprof-explore-devices": ("explore-devices", "coupprof explore --devices"),
    "coupprof-predict-devices": ("predict-devices", "coupprof predict --devices --json"),
}
PROFILE = ("profile", "coupprof calibrate")  # a board profile (TOML) it fitted
TRACE_DIR = "trace-dir"  # NAME.trace/, kept by the command that wrote NAME.csv


@dataclass
class Found:
    csv: Path  # the CSV; for a prediction its JSON, a profile its TOML, a trace its folder
    meta: dict[str, Any]
    kind: str  # a KINDS kind, profile, trace-dir, or other (no coupprof sidecar)
    by: str = ""  # the command that wrote it, where its kind does not say

    @property
    def written_by(self) -> str:
        return self.by or {k: by for k, by in (*KINDS.values(), PROFILE)}.get(self.kind, "")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _sidecar(csv: Path) -> dict[str, Any]:
    return _read_json(csv.with_suffix(".json"))


def _kind(meta: dict[str, Any]) -> str:
    fmt = str(meta.get("format", "")).split("/")[0]
    return KINDS[fmt][0] if fmt in KINDS else "other"


def classify(csv: Path) -> Found:
    meta = _sidecar(csv)
    return Found(csv, meta, _kind(meta))


def _profile(path: Path) -> Found | None:
    """A board profile `coupprof calibrate` wrote (its [board.sim.calibration]), else None."""
    import tomllib

    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, ValueError):
        return None
    board: dict[str, Any] = doc["board"] if isinstance(doc.get("board"), dict) else {}
    sim = board.get("sim")
    cal = sim.get("calibration") if isinstance(sim, dict) else None
    if not isinstance(cal, dict):
        return None
    return Found(path, {"board": board.get("name", ""), **cal}, PROFILE[0])


def find_results(run_dir: Path) -> list[Found]:
    """Every CSV under `run_dir` (figures and edge files left out), classified; the
    predictions (JSON with no CSV), calibrated board profiles and binary trace folders
    beside them."""
    out = []
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir).parts
        if FIGURES_DIR in rel or any(part.endswith(".trace") for part in rel[:-1]):
            continue
        if path.is_dir():
            if path.suffix == ".trace" and (path / "meta.json").is_file():
                beside = classify(path.with_suffix(".csv")).written_by
                out.append(Found(path, _read_json(path / "meta.json"), TRACE_DIR,
                                 by=beside or "a measuring command"))
        elif path.suffix == ".csv" and not path.name.endswith(".edges.csv"):
            out.append(classify(path))
        elif path.suffix == ".json" and not path.with_suffix(".csv").exists():
            meta = _read_json(path)
            if _kind(meta) in ("predict", "predict-devices"):
                out.append(Found(path, meta, _kind(meta)))
        elif path.suffix == ".toml" and (found := _profile(path)) is not None:
            out.append(found)
    return out


# -- formatting helpers ----------------------------------------------------------------


def _num(v: object, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)) or (not isinstance(v, str) and pd.isna(v)):
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.{digits}f}"
    return str(v)


def _mhz(khz: float | None) -> str:
    return "" if khz is None or pd.isna(khz) else f"{int(khz) / 1000:g}"


def _meta_table(pairs: list[tuple[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame({"": [k for k, _ in pairs], "value": [_num(v) for _, v in pairs]})


# -- sections ----------------------------------------------------------------------------


def _figure(report: Report, name: str, make: Callable[[], Figure], alt: str) -> None:
    """Render `make()` to figures/NAME.png and add it, or a line saying why it was skipped."""
    from profiler.plots import save

    try:
        fig = make()
    except ProfilerError as err:
        report.add(Para(f"*Figure {name} skipped: {err}*"))
        return
    rel = Path(FIGURES_DIR) / f"{name}.png"
    save(fig, report.run_dir / rel)
    report.figures.append(report.run_dir / rel)
    report.add(Image(rel, alt))


def _layer_section(report: Report, f: Found) -> pd.DataFrame:
    from profiler.measure.tables import fixed_row, read_tables, short_ops

    t = read_tables(f.csv)
    info, tot = t.info, t.totals
    rel = f.csv.relative_to(report.run_dir)
    freq = (f"level {info.get('freq_level')} = {_mhz(info.get('freq_khz'))} MHz"
            if info.get("freq_khz") else "left as it was")
    report.add(Heading(f"Layer run: {Path(str(info.get('model_path', ''))).name} on "
                       f"{info.get('board')} processor {info.get('processor')}", 3))
    report.add(Para(f"From `{rel}`" + (" — **simulated board**" if info.get("simulated") else "")
                    + f"; command `{info.get('command', '')}`."))
    report.add(TableBlock(_meta_table([
        ("board", info.get("board")), ("processor", f"{info.get('processor')} — "
                                                    f"{info.get('processor_name', '')}"),
        ("cores / threads", f"{_cores(info)} / {info.get('threads')}"), ("frequency", freq),
        ("frames (warm-up)", f"{info.get('frames')} ({info.get('warmup')})"),
        ("runtime", f"{info.get('runtime')} {info.get('runtime_version')}"),
        ("power source", info.get("power_source")), ("model sha256", info.get("model_sha256")),
    ])))
    df = t.layers
    fused = "time_ms_ci95" in df.columns and "fixed_ms" in tot
    cols: dict[str, Any] = {"layer": df["layer"],
                            "operators": [short_ops(o) for o in df["op_types"]]}
    if fused:  # the layer inside one call of the whole model; sliced beside it
        cols.update({"fused ms": df["time_ms_mean"], "±95% ms": df["time_ms_ci95"],
                     "sliced ms": df["time_ms_sliced_mean"]})
    else:
        cols.update({"mean ms": df["time_ms_mean"], "median ms": df["time_ms_median"],
                     "p95 ms": df["time_ms_p95"]})
    cols.update({"transfer ms": df["transfer_ms_mean"], "KiB in": df["bytes_in"] / 1024,
                 "KiB out": df["bytes_out"] / 1024, "MMAC": df["macs"] / 1e6})
    for c, label in (("power_w", "W"), ("energy_mj", "mJ"), ("fps_per_w", "FPS/W")):
        if c in df.columns:
            cols[label] = df[c]
    table = pd.DataFrame(cols)
    if fused:  # the fixed cost every call pays once, as the CLI's table shows it
        fixed: dict[str, Any] = {c: None for c in table.columns}
        fixed.update({"layer": "fixed", "operators": "per call",
                      "fused ms": tot.get("fixed_ms"), "±95% ms": tot.get("fixed_ms_ci95")})
        if "mJ" in table.columns and "fixed_energy_mj" in tot:
            fixed["mJ"] = tot["fixed_energy_mj"]
            fixed["W"] = tot["fixed_energy_mj"] / tot["fixed_ms"] if tot["fixed_ms"] > 0 \
                else None
        table = pd.concat([table.astype(object), pd.DataFrame([fixed]).astype(object)],
                          ignore_index=True)
    total = _layer_totals(tot, fused)
    report.add(TableBlock(table, total, digits={"KiB in": 1, "KiB out": 1, "MMAC": 2,
                                                 "FPS/W": 1}))
    if t.frames is not None:
        from profiler.plots import timeline_figure
        from profiler.plots.timeline import run_trace

        found = run_trace(f.csv)  # the power trace the run kept, with its clock fit
        if found is not None:
            trace_path, trace = found
            layers = pd.concat([t.layers.assign(kind="layer"), t.frames.assign(kind="frame")],
                               ignore_index=True)
            _figure(report, f"{f.csv.stem}-timeline", lambda: timeline_figure(
                trace, layers, trace_src=trace_path, layers_src=rel),
                "one frame's power trace with the layer windows shaded")
    rows = t.layers.assign(kind="layer")
    fixed_cost = fixed_row(t)  # a fused run's frame holds it (`plot layers` gives the frame)
    if fixed_cost is not None:
        rows = pd.concat([rows, fixed_cost], ignore_index=True)
    return rows.assign(run=f.csv.stem)


def _cores(info: dict[str, Any]) -> str:
    """'0-1', or on the simulated board 'board 4-5, this machine's 0-1'."""
    from profiler.boards.host import format_cpu_list

    here = format_cpu_list(info.get("cores") or [])
    board = (info.get("extra") or {}).get("board_cores")
    return f"board {format_cpu_list(board)}, this machine's {here}" if board else here


def _layer_totals(tot: dict[str, float], fused: bool) -> str:
    """The caption under a layer table: per frame, the sidecar's totals (a fused table's
    one call of the whole model, as the CLI's footer gives it), then a fused table's
    sliced frames' sums."""
    nan = float("nan")
    if fused:
        text = (f"Per frame, one call of the whole model: {tot['time_ms_mean']:.3f} ± "
                f"{tot.get('time_ms_ci95', nan):.3f} ms ({tot['fps']:.1f} FPS) = fixed "
                f"{tot.get('fixed_ms', nan):.3f} ms + layers "
                f"{tot.get('fused_layer_sum_ms', nan):.3f} ms")
    else:
        text = (f"Per frame: compute {tot.get('time_ms_mean', nan):.3f} ms + transfer "
                f"{tot.get('transfer_ms_mean', nan):.3f} ms = latency "
                f"{tot.get('latency_ms_mean', nan):.3f} ms ({tot.get('fps', nan):.1f} FPS)")
    if "energy_mj" in tot:
        text += (f"; energy {tot['energy_mj']:.3f} mJ = {tot.get('power_w', nan):.3f} W, "
                 f"{tot.get('fps_per_w', nan):.2f} FPS/W")
    if fused and "rounds" in tot:
        text += f"; {int(tot['rounds'])} rounds"
    if fused and "time_ms_sliced_mean" in tot:
        text += (f". Sliced (each layer called on its own, with its per-call cost): compute "
                 f"{tot['time_ms_sliced_mean']:.3f} ms + transfer "
                 f"{tot.get('transfer_ms_sliced_mean', nan):.3f} ms = "
                 f"{tot.get('latency_ms_sliced_mean', nan):.3f} ms")
        if "energy_mj_sliced" in tot:
            text += f"; energy {tot['energy_mj_sliced']:.3f} mJ"
    if "lost_frames" in tot:
        text += f"; logger frames lost: {int(tot['lost_frames'])}"
    return text + "."


def _sweep_section(report: Report, f: Found) -> None:
    from profiler.plots import efficiency_figure, layers_figure
    from profiler.sweep.schema import FRAME_MS_MEANING, frame_ms, read_sweep

    data = read_sweep(f.csv)
    s = data.meta.get("settings", {})
    rel = f.csv.relative_to(report.run_dir)
    report.add(Heading(f"Sweep: {Path(str(s.get('model_path', ''))).name} on board "
                       f"{s.get('board', '?')}", 3))
    report.add(Para(f"From `{rel}`: {len(data.pairs())} (processor, level) pairs, "
                    f"{s.get('frames', '?')} frames after {s.get('warmup', '?')} warm-up each"
                    + (" — **simulated board**" if s.get("simulated") else "") + "."))
    rows = []
    pairs = data.meta.get("pairs", {})
    df = data.layers
    for proc, level in data.pairs():
        sub = df[(df["processor"] == proc) & (df["freq_level"].isna() if level is None
                                              else df["freq_level"] == level)]
        p = pairs.get(f"{proc}@{level if level is not None else 'current'}", {})
        tot = p.get("totals", {})
        row = {"processor": proc, "level": "" if level is None else level,
               "MHz": _mhz(sub["freq_khz"].iloc[0]) if len(sub) else "",
               "read back MHz": _mhz(p.get("effective_khz")),
               "method": "fused" if "fixed_ms" in tot else "sliced",
               "ms/frame": frame_ms(tot) if "latency_ms_mean" in tot else np.nan}
        if "energy_mj" in tot:  # the pair's totals: W x ms = mJ, FPS/W = 1 / J
            row["energy mJ"] = tot["energy_mj"]
            row["W"] = tot.get("power_w", np.nan)
            row["FPS/W"] = tot.get("fps_per_w", np.nan)
        if p.get("warning"):
            row["warning"] = p["warning"]
        rows.append(row)
    report.add(TableBlock(pd.DataFrame(rows), f"{FRAME_MS_MEANING}; energy, W and FPS/W of "
                          "the same frame.", digits={"FPS/W": 2}))
    stem = f.csv.parent.name if f.csv.name == "sweep.csv" else f.csv.stem
    _figure(report, f"{stem}-efficiency", lambda: efficiency_figure(df, rel),
            "FPS/W per layer against frequency, one panel per processor")
    _figure(report, f"{stem}-layers", lambda: layers_figure(df, rel, level="max"),
            "time, energy and FPS/W per layer at each processor's top level")


def _transfer_section(report: Report, f: Found) -> None:
    from profiler.plots import read_csv, transfers_figure

    df = read_csv(f.csv)
    rel = f.csv.relative_to(report.run_dir)
    report.add(Heading(f"Transfer matrix: {Path(str(f.meta.get('model_path', ''))).name} on "
                       f"board {f.meta.get('board', '?')}", 3))
    report.add(Para(f"From `{rel}`: {df['boundary'].nunique()} boundaries, "
                    f"{len(df.groupby(['src', 'dst']))} ordered processor pairs."))
    pivot = df.pivot_table(index="src", columns="dst", values="time_ms_mean", aggfunc="mean")
    pivot = pivot.reset_index().rename(columns={"src": "src \\ dst"})
    report.add(TableBlock(pivot, "Mean hand-over time (ms) over all boundaries, src row to dst column."))
    _figure(report, f"{f.csv.stem}-transfers", lambda: transfers_figure(df, rel),
            "hand-over time per boundary and processor pair")


def _trace_section(report: Report, f: Found, raw_layers: list[Found]) -> None:
    from profiler.plots import read_csv, timeline_figure

    m = f.meta
    rel = f.csv.relative_to(report.run_dir)
    report.add(Heading(f"Power trace `{rel}`", 3))
    c = m.get("counters", {})
    report.add(TableBlock(_meta_table([
        ("logger", (m.get("logger") or {}).get("front_end_name", m.get("front_end", ""))),
        ("samples", m.get("samples")), ("duration s", m.get("duration_s")),
        ("rate S/s", m.get("rate_hz")), ("edges", m.get("edges")),
        ("lost frames", c.get("lost_frames")), ("corrupt frames", c.get("corrupt_frames")),
        ("clock map", "yes" if m.get("clock") else "no (host_ns empty)"),
    ])))
    if not raw_layers:
        report.add(Para("*No layer run with raw rows (`coupprof layers --raw`) to draw a timeline.*"))
        return
    trace = read_csv(f.csv)
    for lf in raw_layers:
        layers = read_csv(lf.csv)
        try:
            timeline_figure(trace, layers)
        except ProfilerError:
            continue
        _figure(report, f"{f.csv.stem}-timeline", partial(
            timeline_figure, trace, layers, trace_src=rel,
            layers_src=lf.csv.relative_to(report.run_dir)),
            "one frame's power trace with the layer windows shaded")
        return
    report.add(Para("*The trace overlaps no frame of the layer runs here (timeline skipped).*"))


def _error_col(df: pd.DataFrame, predicted: str, measured: str) -> list[float]:
    """`profiler.mapping.accuracy.error_pct` of each row, recomputed from the CSV's figures
    (one definition, whichever version wrote the file)."""
    from profiler.mapping.accuracy import error_pct

    return [error_pct(_float(p), _float(m))
            for p, m in zip(df[predicted], df[measured], strict=True)]


def _float(v: object) -> float | None:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if np.isnan(f) else f


def _err_header() -> str:
    from profiler.mapping.accuracy import ERROR_HEADER

    return ERROR_HEADER.replace("\n", " ")


def _run_section(report: Report, f: Found) -> None:
    """A mapped run: each stage and the summary, measured beside predicted."""
    m = f.meta
    df = pd.read_csv(f.csv)
    rel = f.csv.relative_to(report.run_dir)
    report.add(Heading(f"Mapped run: {m.get('compact', m.get('order', '?'))} in "
                       f"{m.get('mode', '?')} mode ({Path(str(m.get('model_path', ''))).name} "
                       f"on {m.get('board', '?')})", 3))
    report.add(Para(f"From `{rel}`" + (" — **simulated board**" if m.get("simulated") else "")
                    + f": {m.get('frames', '?')} frames after {m.get('warmup', '?')} warm-up, "
                    f"method {m.get('method', '?')}, {m.get('freq_plan', '')}; command "
                    f"`{m.get('command', '')}`."))
    err = _err_header()
    stages = df[df["kind"] == "stage"]
    if len(stages):
        report.add(TableBlock(pd.DataFrame({
            "stage": stages["stage"].astype(int), "processor": stages["processor"],
            "layers": [f"{int(a)}-{int(b)}" for a, b in
                       zip(stages["first_layer"], stages["last_layer"], strict=True)],
            "measured ms": stages["time_ms_mean"], "p95 ms": stages["time_ms_p95"],
            "predicted ms": stages["predicted_ms"],
            err: _error_col(stages, "predicted_ms", "time_ms_mean"),
        }), "Each stage's busy time per frame.", digits={err: 1}))
    summ = df[df["kind"] == "summary"]
    if len(summ):
        report.add(TableBlock(pd.DataFrame({
            "metric": summ["metric"], "measured": summ["measured"],
            "predicted": summ["predicted"], err: _error_col(summ, "predicted", "measured"),
        }), "; ".join(str(n) for n in m.get("notes") or []), digits={err: 1}))


def _predict_section(report: Report, f: Found) -> None:
    """`coupprof predict --json`: a mapping's prediction, or each single processor's."""
    m = f.meta
    rel = f.csv.relative_to(report.run_dir)
    tables = ", ".join(f"`{s}`" for s in m.get("layers") or [])
    if "single" in m:
        report.add(Heading("Prediction: the whole model on one processor", 3))
        report.add(Para(f"From `{rel}` (layer tables {tables}); fastest: {m.get('best')}."))
        report.add(TableBlock(pd.DataFrame([{
            "processor": r.get("processor"), "level": r.get("level"),
            "latency ms": r.get("latency_ms"), "FPS": r.get("throughput_fps"),
            "mJ/frame": r.get("energy_mj")} for r in m["single"]]), digits={"FPS": 2}))
        return
    order = "".join(f"{k}{len(list(g))}" for k, g in groupby(str(m.get("order", "?"))))
    report.add(Heading(f"Prediction: {order} in {m.get('mode', '?')} mode", 3))
    energy = m.get("energy_mj")
    report.add(Para(
        f"From `{rel}` (layer tables {tables}"
        + (f", transfers `{m['transfers']}`" if m.get("transfers") else ", no transfer table")
        + f"): latency {m.get('latency_ms', float('nan')):.3f} ms, throughput "
        f"{m.get('throughput_fps', float('nan')):.2f} FPS"
        + (f", energy {energy:.3f} mJ/frame" if energy is not None else "") + "."))
    stages = m.get("stages") or []
    if stages:
        report.add(TableBlock(pd.DataFrame([{
            "stage": s.get("stage"), "processor": s.get("processor"),
            "layers": "-".join(str(v) for v in s.get("layers", [])[:1] + s.get("layers", [])[-1:]),
            "compute ms": s.get("compute_ms"), "hand-over ms": s.get("transfer_ms"),
            "stage ms": s.get("time_ms")} for s in stages])))


def _explore_section(report: Report, f: Found, top: int = 10) -> None:
    """`coupprof explore`: what it searched and its best candidates."""
    m = f.meta
    df = pd.read_csv(f.csv)
    rel = f.csv.relative_to(report.run_dir)
    report.add(Heading(f"Search: {m.get('model', '?')} in {m.get('mode', '?')} mode on "
                       f"{m.get('board', '?')}", 3))
    report.add(Para(f"From `{rel}`: {len(df)} candidates, objective "
                    f"{m.get('objective', '?')}; {m.get('proof', '')}."))
    shown = df[(df["rank"] <= top) | df["kind"].isin(["single", "given"])]
    cols = [c for c in ("rank", "kind", "order", "freq", "latency_ms", "throughput_fps",
                        "energy_mj", "fps_per_w") if c in shown.columns]
    table = shown[cols].rename(columns={"latency_ms": "latency ms", "throughput_fps": "FPS",
                                        "energy_mj": "mJ/frame", "fps_per_w": "FPS/W"})
    pick = df[df["kind"] == "pick"]
    report.add(TableBlock(table, (f"To run the pick: `{pick['command'].iloc[0]}`."
                                  if len(pick) and "command" in pick else ""),
                          digits={"FPS": 1, "FPS/W": 1}))


def _explore_measured_section(report: Report, f: Found) -> None:
    """`coupprof explore --measure`: the top candidates run, beside their predictions."""
    df = pd.read_csv(f.csv)
    rel = f.csv.relative_to(report.run_dir)
    report.add(Heading(f"Search, measured: {len(df)} candidates run", 3))
    report.add(Para(f"From `{rel}` ({f.meta.get('frames', '?')} frames each, beside the "
                    f"predictions of `{f.meta.get('explore_csv', '')}`)."))
    err = _err_header()
    out: dict[str, Any] = {"rank": df["rank"], "order": df["order"]}
    for col, label in (("latency_ms", "latency ms"), ("throughput_fps", "FPS"),
                       ("energy_mj", "mJ/frame")):
        out[f"{label} measured"] = df[col]
        out[f"{label} predicted"] = df[f"predicted_{col}"]
        out[f"{label} {err}"] = _error_col(df, f"predicted_{col}", col)
    report.add(TableBlock(pd.DataFrame(out), digits={k: 1 for k in out if err in k}))


def _devices_run_section(report: Report, f: Found) -> None:
    """`coupprof run --devices`: each device's part, its energy and memory, and the whole."""
    m = f.meta
    df = pd.read_csv(f.csv)
    rel = f.csv.relative_to(report.run_dir)
    dev, tot = df[df["kind"] == "device"], df[df["kind"] == "total"]
    report.add(Heading(f"Across devices: {m.get('order', '?')} in {m.get('mode', '?')} mode "
                       f"({Path(str(m.get('model_path', ''))).name} on {len(dev)} device(s) "
                       f"of `{Path(str(m.get('devices_file', ''))).name}`)", 3))
    report.add(Para(f"From `{rel}`: {m.get('frames', '?')} frames after {m.get('warmup', '?')} "
                    f"warm-up, method {m.get('method', '?')}, freq {m.get('freq') or 'as set'}."))
    report.add(TableBlock(pd.DataFrame({
        "device": dev["device"], "layers": [f"{int(a)}-{int(b)}" for a, b in
                                            zip(dev["first_layer"], dev["last_layer"],
                                                strict=True)],
        "stages ms": dev["stage_ms"], "mJ/frame": dev["energy_mj"],
        "peak RSS MB": dev["peak_rss_mb"], "tensor MB": dev["tensor_mb"],
        "B in/frame": dev["bytes_in"], "B out/frame": dev["bytes_out"],
        "link ms": dev["link_real_ms"], "ended": dev["ended"]}),
        "Each device's part: its stages' busy time, energy from its own power source, "
        "memory, and the bytes it takes and hands on.", digits={"B in/frame": 0,
                                                               "B out/frame": 0}))
    if len(tot):
        t = tot.iloc[0]
        report.add(Para(f"Throughput {_num(t['throughput_fps'], 2)} FPS, latency "
                        f"{_num(t['latency_ms_mean'])} ms mean ({_num(t['latency_ms_p95'])} ms "
                        f"p95), energy {_num(t['energy_mj'])} mJ a frame over all devices, "
                        f"{int(t['frames_done'])} frames out."))


def _device_links_section(report: Report, f: Found) -> None:
    """`coupprof transfer-matrix --devices`: each link's fit and each hand-over."""
    m = f.meta
    df = pd.read_csv(f.csv)
    rel = f.csv.relative_to(report.run_dir)
    report.add(Heading(f"Links between devices of `{Path(str(m.get('devices_file', ''))).name}`"
                       f" ({Path(str(m.get('model_path', ''))).name})", 3))
    report.add(Para(f"From `{rel}`: {m.get('reps', '?')} hand-overs of each boundary after "
                    f"{m.get('warmup', '?')} warm-up; {m.get('model', '')}."))
    report.add(TableBlock(pd.DataFrame([{
        "link": f"{x['a']}-{x['b']}", "latency ms": x["latency_ms"],
        "+- ms": x["latency_ci95_ms"], "MB/s": x["bandwidth_mb_s"],
        "rms ms": x["residual_ms"], "points": x["points"],
        "added: latency ms": (x.get("added") or {}).get("latency_ms"),
        "added: MB/s": (x.get("added") or {}).get("bandwidth_mb_s")}
        for x in m.get("links") or []]), "The fit per link (95 % intervals); added: the "
        "fit less the same hand-overs with the simulated link off.", digits={"MB/s": 1,
                                                                              "added: MB/s": 1}))
    link = df[df["pass"] == "link"] if "pass" in df.columns else df
    cols = {"boundary": "b", "src": "src", "dst": "dst", "bytes": "bytes",
            "time_ms_median": "median ms", "energy_mj_src": "mJ src", "energy_mj_dst": "mJ dst"}
    report.add(TableBlock(link[[c for c in cols if c in link.columns]].rename(columns=cols),
                          "Each hand-over over the link: its median time and the mean energy "
                          "on the sending and the receiving device.", digits={"bytes": 0}))


def _explore_devices_section(report: Report, f: Found, top: int = 10) -> None:
    """`coupprof explore --devices`: the front of splits and the single devices."""
    m = f.meta
    df = pd.read_csv(f.csv)
    rel = f.csv.relative_to(report.run_dir)
    report.add(Heading(f"Search across devices: {m.get('mode', '?')} mode on "
                       f"`{Path(str(m.get('devices_file', ''))).name}`", 3))
    report.add(Para(f"From `{rel}`: {m.get('proof', '')}."))
    shown = df[(df["rank"] <= top) | (df["kind"] == "single")]
    cols = {"rank": "rank", "kind": "kind", "order": "order", "throughput_fps": "FPS",
            "latency_ms": "latency ms", "max_energy_mj": "max mJ/frame"}
    report.add(TableBlock(shown[[c for c in cols if c in shown.columns]].rename(columns=cols),
                          digits={"FPS": 2}))


def _predict_devices_section(report: Report, f: Found) -> None:
    """`coupprof predict --devices --json`: a device mapping's parts and cuts, priced."""
    m = f.meta
    rel = f.csv.relative_to(report.run_dir)
    report.add(Heading(f"Prediction across devices: {m.get('mapping', '?')} in "
                       f"{m.get('mode', '?')} mode", 3))
    report.add(Para(f"From `{rel}`: throughput {_num(m.get('throughput_fps'), 2)} FPS, "
                    f"latency {_num(m.get('latency_ms'))} ms, the most energy on one device "
                    f"{_num(m.get('max_energy_mj'))} mJ a frame."))
    report.add(TableBlock(pd.DataFrame([{
        "device": d.get("device"), "layers": "-".join(str(v) for v in d.get("layers", [])),
        "cycle ms": d.get("cycle_ms"), "latency ms": d.get("latency_ms"),
        "mJ/frame": d.get("energy_mj"),
        "MiB": (d.get("memory") or {}).get("total_bytes", float("nan")) / 2**20}
        for d in m.get("devices") or []]), digits={"MiB": 2}))


def _dvfs_section(report: Report, f: Found) -> None:
    """`coupprof dvfs-latency`: the shortest and longest transition each way."""
    m = f.meta
    rel = f.csv.relative_to(report.run_dir)
    report.add(Heading(f"DVFS transition delays: {m.get('board', '?')} processor "
                       f"{m.get('processor', '?')}", 3))
    report.add(Para(f"From `{rel}`: {m.get('title', '')}."))
    rows = [{"direction": r.get("direction"), "transitions": r.get("transitions"),
             "shortest µs": r.get("min_delay_us"),
             "shortest at levels": f"{r.get('min_from')} → {r.get('min_to')}",
             "longest µs": r.get("max_delay_us"),
             "longest at levels": f"{r.get('max_from')} → {r.get('max_to')}"}
            for r in m.get("summary") or []]
    if rows:
        report.add(TableBlock(pd.DataFrame(rows), "; ".join(m.get("notes") or []),
                              digits={"shortest µs": 1, "longest µs": 1}))


def _lomo_section(report: Report, f: Found) -> None:
    """`coupprof calibrate --lomo-csv`: the leave-one-model-out errors, and the targets."""
    m = f.meta
    rel = f.csv.relative_to(report.run_dir)
    missed = m.get("targets_missed") or []
    report.add(Heading(f"Leave-one-model-out validation: board {m.get('board', '?')}", 3))
    report.add(Para(f"From `{rel}`, fitted on `{m.get('source', '?')}`: each model's layers "
                    "predicted by a fit on the other models, errors in %. "
                    + ("Targets met." if not missed else
                       "Targets missed: " + "; ".join(missed) + ".")))
    df = pd.read_csv(f.csv)
    report.add(TableBlock(df, digits={c: 1 for c in df.columns if c.endswith("_pct")}))


def _import_section(report: Report, found: list[Found]) -> None:
    """`coupprof import`: the tables it wrote, one row each."""
    rows = []
    for f in found:
        df = pd.read_csv(f.csv)
        procs = sorted(set(df["processor"].astype(str)), key="LBGN".find) \
            if "processor" in df.columns else []
        src = f.meta.get("source")
        rows.append({"file": f"`{f.csv.relative_to(report.run_dir)}`",
                     "kind": f.meta.get("kind", ""), "model": f.meta.get("model", ""),
                     "board": f.meta.get("board", ""), "rows": len(df),
                     "processors": ", ".join(procs),
                     "source": Path(str(src.get("path", ""))).name
                     if isinstance(src, dict) else ""})
    report.add(TableBlock(pd.DataFrame(rows), "Tables `coupprof import` wrote from another "
                          "logger's recording or ARM-CO-UP's tables; `coupprof predict "
                          "--layers` reads its layer tables."))


def _profile_section(report: Report, found: list[Found]) -> None:
    """Board profiles `coupprof calibrate` fitted: from what, and how to use them."""
    rows = [{"file": f"`{f.csv.relative_to(report.run_dir)}`", "board": f.meta.get("board"),
             "fitted from": f.meta.get("source"), "rows": f.meta.get("rows"),
             "processors": ", ".join(f.meta.get("processors") or []),
             "models": ", ".join(f.meta.get("models") or []),
             "parameters fitted": len(f.meta.get("fitted") or [])} for f in found]
    report.add(TableBlock(pd.DataFrame(rows), "Use one with `--board FILE.toml`."))


def _trace_dirs_section(report: Report, found: list[Found]) -> None:
    """The binary power traces runs kept (NAME.trace/ beside NAME.csv)."""
    rows = []
    for f in found:
        m = f.meta
        logger: dict[str, Any] = m["logger"] if isinstance(m.get("logger"), dict) else {}
        counters: dict[str, Any] = m["counters"] if isinstance(m.get("counters"), dict) else {}
        start, stop = m.get("host_start_ns"), m.get("host_stop_ns")
        beside = f.csv.with_suffix(".csv")
        rows.append({"folder": f"`{f.csv.relative_to(report.run_dir)}/`",
                     "beside": f"`{beside.relative_to(report.run_dir)}`" if beside.exists()
                     else "", "rate S/s": logger.get("rate_hz"),
                     "seconds": (stop - start) / 1e9 if isinstance(start, int)
                     and isinstance(stop, int) else None,
                     "lost frames": counters.get("lost_frames")})
    report.add(TableBlock(pd.DataFrame(rows), "The power logger's raw samples and marker "
                          "edges behind a run's energy figures (binary; "
                          "`profiler.power.trace.DeviceTrace.load` reads one).",
                          digits={"seconds": 2}))


# -- building and writing ----------------------------------------------------------------


def build_report(run_dir: str | Path) -> Report:
    d = Path(run_dir)
    if not d.is_dir():
        raise BadInputError(f"run directory not found: {d}",
                            "pass the directory your coupprof commands wrote into (e.g. coupprof-out)")
    found = find_results(d)
    known = [f for f in found if f.kind != "other"]
    results = [f for f in known if f.kind != TRACE_DIR]  # a trace folder goes with its run
    if not results:
        raise BadInputError(
            f"no coupprof results in {d} (looked for CSVs with JSON sidecars from coupprof layers, "
            "run, sweep, transfer-matrix, explore (also with --devices), dvfs-latency, import "
            "or collect, predict --json files and calibrated board profiles)",
            "run one of those commands with its output in this directory first")
    report = Report(d, f"coupprof report: {d.resolve().name}")
    report.sources = [f.csv for f in results]
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    boards = sorted({str(f.meta.get("board") or f.meta.get("settings", {}).get("board"))
                     for f in results if f.kind != "trace"} - {"None", ""})
    report.add(Para(f"Generated {now} from {len(results)} result file(s)"
                    + (f" on board(s) {', '.join(boards)}" if boards else "") + "."))
    report.add(TableBlock(pd.DataFrame({
        "file": [f"`{f.csv.relative_to(d)}`" for f in known],
        "what": [f.kind for f in known],
        "written by": [f.written_by for f in known]})))

    def of(kind: str) -> list[Found]:
        return [f for f in known if f.kind == kind]

    layer_runs = of("layers")
    if layer_runs:
        from profiler.plots import layers_figure

        report.add(Heading("Layer runs"))
        tables = [_layer_section(report, f) for f in layer_runs]
        both = pd.concat(tables, ignore_index=True)
        if len({str(t["processor"].iloc[0]) for t in tables}) == len(tables):
            both = both.drop(columns="run")  # one run per processor: colour by processor
        _figure(report, "layers", lambda: layers_figure(both, "the layer runs"),
                "time (and energy, FPS/W) per layer, the layer runs side by side")
    sections: list[tuple[str, str, Callable[[Report, Found], None]]] = [
        ("run", "Mapped runs", _run_section),
        ("predict", "Predictions", _predict_section),
        ("sweep", "Sweeps", _sweep_section),
        ("transfers", "Transfer matrices", _transfer_section),
        ("explore", "Searches", _explore_section),
        ("explore-measured", "Searches, measured", _explore_measured_section),
        ("dvfs-latency", "DVFS transition delays", _dvfs_section),
        ("lomo", "Calibration, validated", _lomo_section),
        ("run-devices", "Runs across devices", _devices_run_section),
        ("device-links", "Links between devices", _device_links_section),
        ("predict-devices", "Predictions across devices", _predict_devices_section),
        ("explore-devices", "Searches across devices", _explore_devices_section),
    ]
    for kind, heading, section in sections:
        if of(kind):
            report.add(Heading(heading))
            for f in of(kind):
                section(report, f)
    for kind, heading, listing in (("import", "Imported tables", _import_section),
                                   ("profile", "Calibrated board profiles", _profile_section)):
        if of(kind):
            report.add(Heading(heading))
            listing(report, of(kind))
    traces = of("trace")
    if traces:
        report.add(Heading("Power traces"))
        raw = [f for f in layer_runs if f.meta.get("raw_rows")]
        for f in traces:
            _trace_section(report, f, raw)
    if of(TRACE_DIR):
        report.add(Heading("Binary power traces kept"))
        _trace_dirs_section(report, of(TRACE_DIR))
    other = [f for f in found if f.kind == "other"]
    if other:
        report.add(Para("Other CSVs here (no coupprof sidecar): "
                        + ", ".join(f"`{f.csv.relative_to(d)}`" for f in other) + "."))
    return report


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(report: Report, base: str = ".") -> str:
    """`base`: the run directory relative to where the file is written (image links)."""
    out = [f"# {report.title}", ""]
    for b in report.blocks:
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Para):
            out += [b.text, ""]
        elif isinstance(b, TableBlock):
            cols = [str(c) for c in b.df.columns]
            out.append("| " + " | ".join(cols) + " |")
            out.append("|" + "|".join("---:" if pd.api.types.is_numeric_dtype(b.df[c]) else "---"
                                      for c in b.df.columns) + "|")
            for cells in b.cells():
                out.append("| " + " | ".join(_md_cell(v) for v in cells) + " |")
            out.append("")
            if b.caption:
                out += [b.caption, ""]
        elif isinstance(b, Image):
            out += [f"![{b.alt}]({_link(base, b.path)})", ""]
    return "\n".join(out)


def _inline_md(text: str) -> str:
    """The few inline marks the report uses (`code`, **bold**, *italic*) as HTML."""
    import re

    t = html.escape(text)
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    t = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", t)
    return re.sub(r"\*([^*]+)\*", r"<em>\1</em>", t)


def _link(base: str, rel: Path) -> str:
    return rel.as_posix() if base in ("", ".") else f"{base}/{rel.as_posix()}"


def to_html(report: Report, base: str = ".") -> str:
    out = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\">",
           f"<title>{html.escape(report.title)}</title>",
           "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
           "table{border-collapse:collapse;margin:.5em 0;font-size:90%}"
           "td,th{border:1px solid #ccc;padding:2px 6px}td.n{text-align:right}"
           "img{max-width:100%}code{background:#f4f4f4}</style></head><body>",
           f"<h1>{html.escape(report.title)}</h1>"]
    for b in report.blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{_inline_md(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            out.append(f"<p>{_inline_md(b.text)}</p>")
        elif isinstance(b, TableBlock):
            numeric = [pd.api.types.is_numeric_dtype(b.df[c]) for c in b.df.columns]
            out.append("<table><tr>" + "".join(f"<th>{_inline_md(str(c))}</th>" for c in b.df.columns)
                       + "</tr>")
            for cells in b.cells():
                out.append("<tr>" + "".join(
                    f"<td{' class=n' if n else ''}>{_inline_md(v)}</td>"
                    for v, n in zip(cells, numeric, strict=True)) + "</tr>")
            out.append("</table>")
            if b.caption:
                out.append(f"<p>{_inline_md(b.caption)}</p>")
        elif isinstance(b, Image):
            out.append(f"<p><img src=\"{html.escape(_link(base, b.path))}\" "
                       f"alt=\"{html.escape(b.alt)}\"></p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_report(report: Report, fmt: str = "md", path: str | Path | None = None) -> Path:
    if fmt not in ("md", "html"):
        raise BadInputError(f"unknown report format {fmt!r}", "use --format md or --format html")
    p = Path(path) if path is not None else report.run_dir / f"report.{fmt}"
    base = Path(os.path.relpath(report.run_dir.resolve(), p.resolve().parent)).as_posix()
    text = to_markdown(report, base) if fmt == "md" else to_html(report, base)
    try:
        p.write_text(text, encoding="utf-8")
    except OSError as err:
        raise BadInputError(f"cannot write {p}: {err.strerror}", "choose a writable -o path") from None
    return p
