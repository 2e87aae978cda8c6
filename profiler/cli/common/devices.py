"""CLI plumbing of the across-devices branches of `predict`, `transfer-matrix` and
`explore`: per-device table flags (``--layers d0=CSV,... | --layers-dir DIR``,
``--transfers d0=CSV``), reading them, and rendering a device prediction."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

from profiler.errors import BadInputError

if TYPE_CHECKING:
    import pandas as pd

    from profiler.devices.linkfit import FittedLinks, LinkTable
    from profiler.devices.predict import DevicePrediction
    from profiler.devices.spec import DeviceSet
    from profiler.mapping.predict import LayerCosts

PER_DEVICE_FIX = ("give one --layers DEVICE=CSV|DIR[,...] per device of the devices file, "
                  "e.g. --layers d0=d0/B.csv,d0/G.csv --layers d1=d1/, or --layers-dir DIR "
                  "with a folder DIR/DEVICE per device")


def per_device(values: Sequence[str], devices: DeviceSet, flag: str) -> dict[str, list[str]]:
    """``['d0=a.csv,b.csv', 'd1=dir']`` -> device -> paths; each device once."""
    out: dict[str, list[str]] = {}
    for v in values:
        name, sep, rest = v.partition("=")
        name = name.strip()
        if not sep or not rest.strip():
            raise BadInputError(f"{flag} {v!r} is not DEVICE=PATH[,PATH...] (with --devices, "
                                "tables are per device)", PER_DEVICE_FIX)
        devices.device(name)
        if name in out:
            raise BadInputError(f"{flag} gives device {name!r} twice",
                                "list its tables in one DEVICE=PATH,PATH")
        out[name] = [s.strip() for s in rest.split(",") if s.strip()]
    return out


def read_device_tables(layers: Sequence[str] | None, layers_dir: Path | None,
                       devices: DeviceSet, used: Sequence[str], model: str | None
                       ) -> dict[str, LayerCosts]:
    """Each used device's layer tables (`profiler.mapping.predict.read_layer_tables`)."""
    from profiler.cli.common.plumbing import say
    from profiler.mapping.predict import read_layer_tables

    given = per_device(layers or [], devices, "--layers")
    if layers_dir is not None:
        for name in used:
            if name not in given:
                folder = layers_dir / name
                if not folder.is_dir():
                    raise BadInputError(f"--layers-dir {layers_dir}: no folder {folder} for "
                                        f"device {name}", PER_DEVICE_FIX)
                given[name] = [str(folder)]
    missing = [n for n in used if n not in given]
    if missing:
        raise BadInputError(f"no layer tables for device(s) {', '.join(missing)}",
                            PER_DEVICE_FIX)
    def noter(name: str) -> Callable[[str], None]:
        return lambda line: say(f"{name}: {line}")

    return {name: read_layer_tables(given[name], model=model, note=noter(name))
            for name in used}


def read_device_transfers(values: Sequence[str] | None, devices: DeviceSet
                          ) -> dict[str, pd.DataFrame]:
    """``--transfers d0=CSV``: each device's own transfer matrix."""
    from profiler.mapping.transfer import read_transfer_csv

    out = {}
    for name, paths in per_device(values or [], devices, "--transfers").items():
        if len(paths) != 1:
            raise BadInputError(f"--transfers {name}=...: give one CSV per device",
                                "e.g. --transfers d0=transfers-d0.csv")
        out[name] = read_transfer_csv(Path(paths[0]))
    return out


def read_links(path: Path | None, costs: dict[str, LayerCosts]) -> LinkTable | None:
    """The link table; measured for another model than the layer tables' (their
    sidecars' model_sha256), its fits only."""
    import json

    from profiler.cli.common.plumbing import say
    from profiler.devices.linkfit import read_link_table

    if path is None:
        return None
    table = read_link_table(path)
    shas = set()
    for c in costs.values():
        for src in c.sources:
            side = Path(src).with_suffix(".json")
            try:
                sha = json.loads(side.read_text()).get("model_sha256")
            except (OSError, ValueError, AttributeError):
                sha = None
            if sha:
                shas.add(str(sha))
    if table.model_sha256 and shas and table.model_sha256 not in shas:
        say(f"note: {path} was measured on another model than the layer tables, so its "
            "cuts are priced on its links' fits at this model's bytes")
        return table.fits_only()
    return table


def _f(v: float | None, digits: int = 3) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.{digits}f}"


def _mib(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**20:.2f}"


def render_device_prediction(p: DevicePrediction) -> tuple[Table, list[str]]:
    """A row per device part and per link, then the whole's lines."""
    t = Table(title=f"{p.mapping} in {p.mode} mode across devices (predicted)",
              box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("part", "layers", "order", "cycle ms", "latency ms", "mJ/frame", "MiB"):
        t.add_column(col, justify="left" if col in ("part", "order") else "right")
    slow = p.bottleneck
    hands = {h.boundary: h for h in p.handovers}
    for part in p.parts:
        mark = " *" if p.mode == "pipeline" and part.device == slow else ""
        t.add_row(part.device, f"{part.first}-{part.last}", part.prediction.order,
                  _f(part.cycle_ms) + mark, _f(part.latency_ms), _f(part.energy_mj),
                  _mib(None if part.memory is None else part.memory.total_bytes))
        h = hands.get(part.last)
        if h is not None:
            name = f"{h.src}->{h.dst}"
            mark = " *" if p.mode == "pipeline" and name == slow else ""
            kib = "" if h.nbytes is None else f"{h.nbytes / 1024:.1f} KiB, "
            t.add_row(f"  link {name}", f"cut {h.boundary}", f"{kib}{h.source}",
                      _f(h.time_ms) + mark, _f(h.time_ms), "", "")
    lines = [f"throughput {p.throughput_fps:.2f} FPS"
             + (f" (slowest: {slow})" if p.mode == "pipeline" else ""),
             f"latency {p.latency_ms:.3f} ms (one frame alone: parts + links)"]
    if p.max_energy_mj is not None:
        lines.append(f"energy per frame, the most on one device: {p.max_energy_mj:.3f} mJ "
                     "(its part, and its idle power while it waits)")
    if p.max_memory_bytes is not None:
        lines.append(f"memory, the most on one device: {p.max_memory_bytes / 2**20:.2f} MiB "
                     "(weights + output buffers + received inputs)")
    return t, lines + p.notes


def render_links(rows: pd.DataFrame, fitted: FittedLinks, devices: DeviceSet, model: str
                 ) -> list[Table]:
    """The fitted links (and what a simulated link added, beside its model), then the
    hand-overs per boundary."""
    t = Table(title=f"{model}: links between devices, fitted (time = latency + bytes / "
              "bandwidth)", box=box.SIMPLE_HEAD, title_justify="left",
              caption="+-: 95 % intervals; added: the fit less the same hand-overs with the "
              "simulated link off", caption_justify="left")
    for col in ("link", "latency ms", "MB/s", "rms ms", "points", "added: latency ms",
                "added: MB/s", "modelled"):
        t.add_column(col, justify="left" if col in ("link", "modelled") else "right")
    for key, f in fitted.fits.items():
        add = fitted.added.get(key)
        m = devices.link(f.a, f.b)
        t.add_row(f"{f.a}-{f.b}", _pm(f.latency_ms, f.latency_ci95_ms),
                  _bw(f.bandwidth_mb_s), f"{f.residual_ms:.4f}", str(f.points),
                  "" if add is None else _pm(add.latency_ms, add.latency_ci95_ms),
                  "" if add is None else _bw(add.bandwidth_mb_s),
                  "" if not m.simulated else
                  f"{m.latency_ms:g} ms, {_bw(m.bandwidth_mb_s or math.inf)} MB/s")
    t2 = Table(title="per boundary (median ms per hand-over)", box=box.SIMPLE_HEAD,
               title_justify="left", caption="b: between layer b and b+1",
               caption_justify="left")
    pairs = list(dict.fromkeys(f"{s}->{d}" for s, d in zip(rows["src"], rows["dst"],
                                                           strict=True)))
    passes = list(dict.fromkeys(rows["pass"])) if "pass" in rows.columns else ["link"]
    for col in ("b", "KiB", *[f"{p} ({w})" for p in pairs for w in passes]):
        t2.add_column(col, justify="right")
    for b, grp in rows.groupby("boundary", sort=True):
        what = grp["pass"] if "pass" in grp.columns else ["link"] * len(grp)
        cell = {(f"{s}->{d}", w): ms for s, d, w, ms in zip(
            grp["src"], grp["dst"], what, grp["time_ms_median"], strict=True)}
        t2.add_row(str(b), f"{int(grp['bytes'].iloc[0]) / 1024:.1f}",
                   *[_f(cell.get((p, w))) for p in pairs for w in passes])
    tables = [t, t2]
    linked = rows[rows["pass"] == "link"] if "pass" in rows.columns else rows
    if "energy_mj_src" in rows.columns and linked["energy_mj_src"].notna().any():
        t3 = Table(title="energy per hand-over (mJ, mean), on the sending and the receiving "
                   "device, each from its own power source", box=box.SIMPLE_HEAD,
                   title_justify="left", caption="over each hand-over's window: from the "
                   "sends' posting to the receiver letting the tensors through",
                   caption_justify="left")
        for col in ("b", "KiB", *[f"{p} {side}" for p in pairs for side in ("src", "dst")]):
            t3.add_column(col, justify="right")
        for b, grp in linked.groupby("boundary", sort=True):
            got = {f"{s}->{d}": (es, ed) for s, d, es, ed in zip(
                grp["src"], grp["dst"], grp["energy_mj_src"], grp["energy_mj_dst"],
                strict=True)}
            t3.add_row(str(b), f"{int(grp['bytes'].iloc[0]) / 1024:.1f}",
                       *[_f(got.get(p, (None, None))[k]) for p in pairs for k in (0, 1)])
        tables.append(t3)
    return tables


def _pm(v: float, ci: float) -> str:
    return f"{v:.4f}" if math.isnan(ci) else f"{v:.4f} +- {ci:.4f}"


def _bw(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.1f}"


def render_splits(rows: Sequence[dict[str, Any]], title: str, caption: str) -> Table:
    """`explore --devices`' candidates: the front, then the single devices."""
    t = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, title_justify="left",
              caption_justify="left")
    for col in ("#", "kind", "order", "FPS", "latency ms", "max mJ/frame", "max MiB",
                "link ms"):
        t.add_column(col, justify="left" if col in ("kind", "order") else "right",
                     overflow="fold")
    for r in rows:
        mem = r["max_memory_bytes"]
        t.add_row(str(r["rank"]), r["kind"], r["order"], _f(r["throughput_fps"], 2),
                  _f(r["latency_ms"]), _f(r["max_energy_mj"]),
                  _mib(None if mem is None else int(mem)), r["link_ms"] or "-")
    return t


def render_measured_splits(measured: Sequence[tuple[dict[str, Any], list[dict[str, Any]]]]
                           ) -> tuple[Table, list[dict[str, Any]]]:
    """Measured (`coupprof run --devices`' rows) beside predicted, per candidate."""
    from profiler.mapping.accuracy import ERROR_DEFINITION, error_pct

    t = Table(title=f"measured beside predicted ({ERROR_DEFINITION})", box=box.SIMPLE_HEAD,
              title_justify="left")
    for col in ("#", "order", "FPS", "pred", "err %", "max mJ/frame", "pred", "err %",
                "max tensor MB", "pred", "max RSS MB"):
        t.add_column(col, justify="left" if col == "order" else "right")
    out = []
    for r, parts in measured:
        total = next(p for p in parts if p["kind"] == "total")
        dev = [p for p in parts if p["kind"] == "device"]
        fps = total.get("throughput_fps")
        es = [p["energy_mj"] for p in dev]
        e = None if not es or any(math.isnan(x) for x in es) else max(es)
        rss = max(p["peak_rss_mb"] for p in dev) if dev else None
        tensor = max(p["tensor_mb"] for p in dev) if dev else None
        pred_mb = None if r["max_memory_bytes"] is None else r["max_memory_bytes"] / 1e6
        ef, ee = error_pct(r["throughput_fps"], fps), error_pct(r["max_energy_mj"], e)
        t.add_row(str(r["rank"]), r["order"], _f(fps, 2), _f(r["throughput_fps"], 2),
                  _f(ef, 1), _f(e), _f(r["max_energy_mj"]), _f(ee, 1), _f(tensor, 2),
                  _f(pred_mb, 2), _f(rss, 1))
        out.append({"rank": r["rank"], "order": r["order"], "throughput_fps": fps,
                    "max_energy_mj": e, "max_peak_rss_mb": rss, "max_tensor_mb": tensor,
                    "predicted_throughput_fps": r["throughput_fps"],
                    "predicted_max_energy_mj": r["max_energy_mj"],
                    "predicted_max_memory_bytes": r["max_memory_bytes"],
                    "throughput_error_pct": ef, "energy_error_pct": ee})
    return t, out


def add_devices_option(p: argparse.ArgumentParser | argparse._ArgumentGroup, what: str) -> None:
    p.add_argument("--devices", type=Path, default=None, metavar="FILE",
                   help=f"devices file (docs/devices.md): {what}")
