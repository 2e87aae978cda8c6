"""A run directory summarised in one Markdown or HTML file, with its tables and figures.

    report = build_report(Path("coupprof-out"))      # finds the CSVs and their sidecars
    path = write_report(report, fmt="md")            # RUN_DIR/report.md + RUN_DIR/figures/*.png

What it recognises, by each CSV's JSON sidecar (same stem) and columns:

- layer runs (`coupprof layers`, sidecar format coupprof-layers/1): metadata, the
  layer table and totals, a `timeline` figure when the run kept raw rows and a power
  trace; all layer runs together in one `layers` figure;
- sweeps (`coupprof sweep`, DIR/sweep.csv + sweep.json): the pairs and their totals,
  the `efficiency` figure (when the sweep has power columns) and `layers` at the top level;
- transfer matrices (`coupprof transfer-matrix`): the src x dst summary and the
  `transfers` figure;
- power traces (`coupprof collect`): duration, rate, lost frames, and a `timeline`
  figure when a layer run with raw rows overlaps the trace.

Subdirectories are searched too (a sweep's own directory inside a run directory).
A figure that cannot be drawn is replaced by a line saying why.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import os
from dataclasses import dataclass, field
from functools import partial
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


@dataclass
class Found:
    csv: Path
    meta: dict[str, Any]
    kind: str  # layers | sweep | transfers | trace | other


def _sidecar(csv: Path) -> dict[str, Any]:
    j = csv.with_suffix(".json")
    try:
        meta = json.loads(j.read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def classify(csv: Path) -> Found:
    meta = _sidecar(csv)
    fmt = str(meta.get("format", ""))
    if fmt.startswith("coupprof-layers"):
        kind = "layers"
    elif fmt.startswith("coupprof-sweep"):
        kind = "sweep"
    elif fmt.startswith("coupprof-transfers"):
        kind = "transfers"
    elif fmt.startswith("coupprof-trace"):
        kind = "trace"
    else:
        kind = "other"
    return Found(csv, meta, kind)


def find_results(run_dir: Path) -> list[Found]:
    """Every CSV under `run_dir` (figures and edge files left out), classified."""
    out = []
    for csv in sorted(run_dir.rglob("*.csv")):
        if csv.name.endswith(".edges.csv") or FIGURES_DIR in csv.relative_to(run_dir).parts:
            continue
        out.append(classify(csv))
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
    from profiler.measure.tables import read_tables, short_ops

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
        ("cores / threads", f"{info.get('cores')} / {info.get('threads')}"), ("frequency", freq),
        ("frames (warm-up)", f"{info.get('frames')} ({info.get('warmup')})"),
        ("runtime", f"{info.get('runtime')} {info.get('runtime_version')}"),
        ("power source", info.get("power_source")), ("model sha256", info.get("model_sha256")),
    ])))
    df = t.layers
    cols = {"layer": df["layer"], "operators": [short_ops(o) for o in df["op_types"]],
            "mean ms": df["time_ms_mean"], "median ms": df["time_ms_median"],
            "p95 ms": df["time_ms_p95"], "transfer ms": df["transfer_ms_mean"],
            "KiB in": df["bytes_in"] / 1024, "KiB out": df["bytes_out"] / 1024,
            "MMAC": df["macs"] / 1e6}
    for c, label in (("power_w", "W"), ("energy_mj", "mJ"), ("fps_per_w", "FPS/W")):
        if c in df.columns:
            cols[label] = df[c]
    table = pd.DataFrame(cols)
    total = (f"Per frame: compute {tot.get('time_ms_mean', float('nan')):.3f} ms + transfer "
             f"{tot.get('transfer_ms_mean', float('nan')):.3f} ms = latency "
             f"{tot.get('latency_ms_mean', float('nan')):.3f} ms ({tot.get('fps', float('nan')):.1f} FPS)")
    if "energy_mj" in tot:
        total += f"; energy {tot['energy_mj']:.3f} mJ"
    if "fps_per_w" in tot:
        total += f", {tot['fps_per_w']:.2f} FPS/W"
    if "lost_frames" in tot:
        total += f"; logger frames lost: {int(tot['lost_frames'])}"
    report.add(TableBlock(table, total + ".", digits={"KiB in": 1, "KiB out": 1, "MMAC": 2,
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
    return t.layers.assign(run=f.csv.stem)


def _sweep_section(report: Report, f: Found) -> None:
    from profiler.plots import efficiency_figure, layers_figure
    from profiler.sweep.schema import read_sweep

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
               "compute ms": sub["time_ms_mean"].sum(),
               "latency ms": tot.get("latency_ms_mean", np.nan)}
        if "energy_mj" in sub.columns:
            energy = sub["energy_mj"].sum()
            row["energy mJ"] = energy
            row["FPS/W"] = 1000.0 / energy if energy > 0 else np.nan
        if p.get("warning"):
            row["warning"] = p["warning"]
        rows.append(row)
    report.add(TableBlock(pd.DataFrame(rows), "compute ms and energy mJ: sums of the layers' "
                          "means per frame; latency adds the hand-overs.", digits={"FPS/W": 1}))
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


# -- building and writing ----------------------------------------------------------------


def build_report(run_dir: str | Path) -> Report:
    d = Path(run_dir)
    if not d.is_dir():
        raise BadInputError(f"run directory not found: {d}",
                            "pass the directory your coupprof commands wrote into (e.g. coupprof-out)")
    found = find_results(d)
    known = [f for f in found if f.kind != "other"]
    if not known:
        raise BadInputError(
            f"no coupprof results in {d} (looked for CSVs with JSON sidecars from coupprof layers, "
            "sweep, transfer-matrix or collect)",
            "run one of those commands with its output in this directory first")
    report = Report(d, f"coupprof report: {d.resolve().name}")
    report.sources = [f.csv for f in known]
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    boards = sorted({str(f.meta.get("board") or f.meta.get("settings", {}).get("board"))
                     for f in known if f.kind != "trace"} - {"None"})
    report.add(Para(f"Generated {now} from {len(known)} result file(s)"
                    + (f" on board(s) {', '.join(boards)}" if boards else "") + "."))
    report.add(TableBlock(pd.DataFrame({
        "file": [f"`{f.csv.relative_to(d)}`" for f in known],
        "what": [f.kind for f in known],
        "written by": [{"layers": "coupprof layers", "sweep": "coupprof sweep",
                        "transfers": "coupprof transfer-matrix", "trace": "coupprof collect"}[f.kind]
                       for f in known]})))

    layer_runs = [f for f in known if f.kind == "layers"]
    if layer_runs:
        from profiler.plots import layers_figure

        report.add(Heading("Layer runs"))
        tables = [_layer_section(report, f) for f in layer_runs]
        both = pd.concat(tables, ignore_index=True)
        if len({str(t["processor"].iloc[0]) for t in tables}) == len(tables):
            both = both.drop(columns="run")  # one run per processor: colour by processor
        _figure(report, "layers", lambda: layers_figure(both, "the layer runs"),
                "time (and energy, FPS/W) per layer, the layer runs side by side")
    sweeps = [f for f in known if f.kind == "sweep"]
    if sweeps:
        report.add(Heading("Sweeps"))
        for f in sweeps:
            _sweep_section(report, f)
    transfers = [f for f in known if f.kind == "transfers"]
    if transfers:
        report.add(Heading("Transfer matrices"))
        for f in transfers:
            _transfer_section(report, f)
    traces = [f for f in known if f.kind == "trace"]
    if traces:
        report.add(Heading("Power traces"))
        raw = [f for f in layer_runs if f.meta.get("raw_rows")]
        for f in traces:
            _trace_section(report, f, raw)
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
