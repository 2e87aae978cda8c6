"""Rig benchmark: the logger firmware under simavr, measured in simulated time.

For each front end (INA226 shunt + bus, A0 amplifier) the firmware streams for
``--seconds`` of simulated time (default 60) at 2,000,000 baud while the rig
drives marker 0 through layer-like windows (1 to 20 ms) over a known waveform.
Printed per front end, against the issue's targets:

- achieved sample rate (samples / device-clock span)      >= 3.5 kS/s INA226, >= 10 kS/s A0
- lost frames (sequence gaps) and corrupt frames           0
- samples the firmware dropped (its STATUS counter)        0
- edge timestamp resolution: |EDGE time - rig time| after
  removing the constant boot offset (p50, p99, max)        <= 4 us
- attribution error: per-window energy from
  profiler.power.attribution vs the rig's exact integral,
  windows >= 1 ms not flagged for lost samples
  (median, p99, max |error|; flagged windows counted)      <= 1 %

The A0 front end measures current only and reports power at the logger's nominal
bus voltage, so its truth is the exact charge times that voltage; the INA226's is
the exact energy (its bus voltage follows the waveform).

``--layers`` instead runs the paced end-to-end path of ``pytest -m rig``
(tests/rig/test_rig_layers.py): the real layer runner on the simulated board drives
the marker through PowerSession, ArduinoSource reads the firmware over the rig's pty,
and each layer's attributed energy per frame is compared with the mean of the rig's
exact marker windows (per-layer error, median and max over the layers), plus the
per-window errors. A run in which the busy host starved the paced rig (a marker
change applied > 150 us off the wall clock) is repeated, up to ``--attempts``.

Run: ``.venv/bin/python benchmarks/rig.py [--seconds 60] [--front-end ina226|a0|both]
[--json out.json]`` or ``benchmarks/rig.py --layers [--frames 15]``. Needs the rig and
the firmware built (``make -C firmware all sim``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from profiler.power import protocol as P  # noqa: E402
from profiler.power.attribution import attribute  # noqa: E402
from profiler.power.host_trace import HostTrace
from profiler.power.rig import A0_ELF, INA226_ELF, Waveform, missing, run_fast  # noqa: E402

TARGET_RATE = {"ina226": 3500.0, "a0": 10_000.0}
ELF = {"ina226": INA226_ELF, "a0": A0_ELF}
# the window each sample stands for (INA226: one 140 us shunt conversion; A0: its whole
# sample period, k back-to-back conversions: see ArduinoSource.sample_window_ns)
SAMPLE_WINDOW_NS = {"ina226": 140_000}

WAVE = Waveform(points=((0, 0.10, 5.00), (3_000, 0.35, 4.90), (7_000, 0.20, 4.95),
                        (10_000, 0.10, 5.00)),
                period_us=10_000, state_current_a={1: 0.25})


@dataclass
class Result:
    front_end: str
    sim_seconds: float
    wall_seconds: float
    rate_hz: float
    ident_rate_hz: int
    samples: int
    samples_total: int
    samples_dropped: int
    samples_out_of_order: int
    lost_frames: int
    corrupt_frames: int
    line_use_pct: float
    edges_expected: int
    edges_seen: int
    edges_matched: int
    edge_dev_p50_us: float
    edge_dev_p99_us: float
    edge_dev_max_us: float
    windows: int
    windows_flagged: int
    attribution_err_median_pct: float
    attribution_err_p99_pct: float
    attribution_err_max_pct: float


def layer_script(seconds: float, rng: np.random.Generator) -> list[tuple[int, int]]:
    """(t_us, level) of marker 0: windows of 1..20 ms with 0.3..2 ms gaps."""
    out = []
    t = 100_000 + int(rng.integers(0, 1000))
    end = int(seconds * 1e6) - 120_000
    while True:
        length = int(rng.uniform(1_000, 20_000))
        if t + length > end:
            break
        out += [(t, 1), (t + length, 0)]
        t += length + int(rng.uniform(300, 2_000))
    return out


def match_edges_to_pins(edge_us: np.ndarray, pin_us: np.ndarray) -> tuple[float, np.ndarray, int]:
    """Pair logger edges with the rig's pin changes by time, not by count (an edge
    the firmware lost must not shift the rest). Returns the boot offset (device
    clock minus simulated time), |error| of each matched edge, and how many matched."""
    if not len(edge_us) or not len(pin_us):
        return 0.0, np.array([np.nan]), 0
    # coarse offset: the most common edge - pin difference among nearby pairs
    head = edge_us[:50]
    diffs = (head[:, None] - pin_us[None, :]).ravel()
    diffs = diffs[np.abs(diffs) < 100_000]
    hist, bins = np.histogram(diffs, bins=np.arange(-100_000, 100_001, 20))
    coarse = bins[np.argmax(hist)] + 10
    idx = np.clip(np.searchsorted(pin_us, edge_us - coarse), 1, len(pin_us) - 1)
    near = np.where(np.abs(pin_us[idx - 1] - (edge_us - coarse)) <
                    np.abs(pin_us[idx] - (edge_us - coarse)), idx - 1, idx)
    d = edge_us - pin_us[near]
    ok = np.abs(d - coarse) < 200  # within 200 us of the boot offset
    if not ok.any():
        return float(coarse), np.array([np.nan]), 0
    off = float(np.median(d[ok]))
    return off, np.abs(d[ok] - off), int(ok.sum())


def bench(fe: str, seconds: float, seed: int) -> Result:
    rng = np.random.default_rng(seed)
    marks = layer_script(seconds, rng)
    cmd = {c: P.encode_command(c).hex() for c in P.Command}
    script = [f"20000 send {cmd[P.Command.IDENTIFY]}", f"50000 send {cmd[P.Command.START]}"]
    script += [f"{t} pin 0 {lv}" for t, lv in marks]
    script.append(f"{int(seconds * 1e6) - 60_000} send {cmd[P.Command.STOP]}")
    t0 = time.monotonic()
    run = run_fast(ELF[fe], seconds, script, WAVE, timeout_s=3600)
    wall = time.monotonic() - t0

    dec = P.StreamDecoder()
    out = dec.feed(run.uart)
    info = [m.info for m in out.messages if isinstance(m, P.Ident)][-1]
    status = [m for m in out.messages if isinstance(m, P.Status)]
    s, e = out.samples, out.edges
    n_samples = len(s)
    span_s = (s["t_us"][-1] - s["t_us"][0]) * 1e-6 if len(s) > 1 else float("nan")

    changes = run.truth.changes()
    pin_t = np.array([c.t_us for c in changes])
    off, dev, matched = match_edges_to_pins(e["t_us"].astype(float), pin_t)

    # attribution on the rig's time axis (device clock minus the boot offset); a
    # sample whose time does not increase (a firmware fault) is counted and left out
    keep = np.ones(len(s), bool)
    if len(s) > 1:
        keep[1:] = s["t_us"][1:] > np.maximum.accumulate(s["t_us"])[:-1]
    out_of_order = int((~keep).sum())
    s = s[keep]
    if len(s) < 2:
        raise RuntimeError(f"only {len(s)} samples: the firmware did not stream")
    current = info.current_a(s["current"])
    power = current * info.bus_v(s["bus"])
    gaps = out.gaps
    trace = HostTrace(
        t_ns=np.round((s["t_us"] - off) * 1000).astype(np.int64), power_w=power,
        edge_t_ns=np.round((e["t_us"] - off) * 1000).astype(np.int64),
        edge_markers=e["markers"], edge_changed=e["changed"], markers=s["markers"],
        lost_start_ns=np.round((gaps["t_before_us"] - off) * 1000).astype(np.int64),
        lost_end_ns=np.round((gaps["t_after_us"] - off) * 1000).astype(np.int64),
        lost_frames=gaps["missing"].astype(np.int64),
        sample_window_ns=SAMPLE_WINDOW_NS.get(fe, int(1e9 / info.rate_hz)),
        corrupt_frames=dec.counters.corrupt_frames,
        source=f"rig-{fe}")
    wins = run.truth.windows(0)
    start = np.array([[round(w.start_us * 1000) for w in wins]], dtype=np.int64)
    end = np.array([[round(w.end_us * 1000) for w in wins]], dtype=np.int64)
    att = attribute(start, end, trace, levels=(1, 0), level_mask=1)
    if info.bus_measured:
        truth_mj = np.array([w.energy_j * 1e3 for w in wins])
    else:  # current only: power at the nominal bus voltage is what it can measure
        truth_mj = np.array([w.charge_c * info.bus_nominal_mv for w in wins])
    long = np.array([w.duration_us >= 1000 for w in wins])
    flagged = att.window_flagged[0] & long
    err = np.abs(att.window_energy_mj[0] - truth_mj) / truth_mj * 100
    err = err[long & ~att.window_flagged[0]]

    return Result(
        front_end=fe, sim_seconds=seconds, wall_seconds=round(wall, 2),
        rate_hz=round(n_samples / span_s, 1),
        ident_rate_hz=info.rate_hz, samples=n_samples,
        samples_total=status[-1].samples_total if status else -1,
        samples_dropped=status[-1].samples_dropped if status else -1,
        samples_out_of_order=out_of_order,
        lost_frames=dec.counters.lost_frames, corrupt_frames=dec.counters.corrupt_frames,
        line_use_pct=round(len(run.uart) * 10 / (2_000_000 * seconds) * 100, 1),
        edges_expected=len(changes), edges_seen=len(e), edges_matched=matched,
        edge_dev_p50_us=round(float(np.percentile(dev, 50)), 2),
        edge_dev_p99_us=round(float(np.percentile(dev, 99)), 2),
        edge_dev_max_us=round(float(np.max(dev)), 2),
        windows=int(err.size), windows_flagged=int(flagged.sum()),
        attribution_err_median_pct=round(float(np.median(err)), 3),
        attribution_err_p99_pct=round(float(np.percentile(err, 99)), 3),
        attribution_err_max_pct=round(float(np.max(err)), 3),
    )


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def report(r: Result) -> list[tuple[str, str, str, str]]:
    return [
        ("sample rate (S/s, simulated)", f"{r.rate_hz:.0f} (IDENT {r.ident_rate_hz})",
         f">= {TARGET_RATE[r.front_end]:.0f}", verdict(r.rate_hz >= TARGET_RATE[r.front_end])),
        ("lost / corrupt frames", f"{r.lost_frames} / {r.corrupt_frames}", "0",
         verdict(r.lost_frames == 0 and r.corrupt_frames == 0)),
        ("samples dropped by firmware", f"{r.samples_dropped} of {r.samples_total}", "0",
         verdict(r.samples_dropped == 0)),
        ("samples with non-increasing time", f"{r.samples_out_of_order}", "0",
         verdict(r.samples_out_of_order == 0)),
        ("line use at 2 Mbaud", f"{r.line_use_pct} %", "", ""),
        ("edges seen / matched to pin changes",
         f"{r.edges_seen} / {r.edges_matched} of {r.edges_expected}", "all",
         verdict(r.edges_seen == r.edges_matched == r.edges_expected)),
        ("edge time error p50 / p99 / max (us)",
         f"{r.edge_dev_p50_us} / {r.edge_dev_p99_us} / {r.edge_dev_max_us}", "<= 4",
         verdict(r.edge_dev_max_us <= 4.0)),
        (f"attribution error, {r.windows} windows >= 1 ms (%)"
         f"{f' ({r.windows_flagged} flagged)' if r.windows_flagged else ''}",
         f"{r.attribution_err_median_pct} / {r.attribution_err_p99_pct} / "
         f"{r.attribution_err_max_pct}", "<= 1", verdict(r.attribution_err_max_pct <= 1.0)),
        ("wall time (s)", f"{r.wall_seconds} for {r.sim_seconds} s simulated", "", ""),
    ]


@dataclass
class LayersResult:
    front_end: str
    frames: int
    layers: int
    attempts: int
    pacing_max_us: float  # of the run reported: how far the rig strayed off the wall clock
    window_ms_min: float
    window_ms_median: float
    layer_err_pct: list[float]  # per layer, |attributed - exact| / exact
    layer_err_median_pct: float
    layer_err_max_pct: float
    windows: int  # clean windows >= 1 ms
    windows_flagged: int
    window_err_median_pct: float
    window_err_p99_pct: float
    window_err_max_pct: float
    edges_missed: int
    edges_spurious: int
    sample_holes: int
    samples_dropped: int  # the firmware's STATUS counter


def bench_layers(fe: str, frames: int, attempts: int) -> LayersResult:
    """The paced end-to-end run of tests/rig/test_rig_layers.py, measured."""
    from tests.rig.test_rig_layers import PACING_LIMIT_US, device_gaps, run_layers_on_rig

    tried = 0
    while True:
        run = run_layers_on_rig(fe, frames=frames)
        tried += 1
        if run.pacing_us.max() <= PACING_LIMIT_US or tried >= attempts:
            break
    if run.result.error is not None:
        raise RuntimeError(f"{run.result.error} (rig {run.pacing_us.max() / 1e3:.2f} ms off the "
                           f"wall clock at worst, in {tried} attempts)")
    att, truth = run.att, run.truth_mj
    used = ~att.window_flagged
    used |= ~used.any(axis=0)  # a layer with only flagged windows uses them all
    per_layer = np.array([layer.energy_mj for layer in att.layers])
    want = np.array([truth[used[:, j], j].mean() for j in range(truth.shape[1])])
    layer_err = np.abs(per_layer - want) / want * 100
    dur = np.diff(run.truth_us, axis=-1)[..., 0]
    ok = ~att.window_flagged & att.start_matched & att.end_matched & (dur >= 1000)
    werr = (np.abs(att.window_energy_mj - truth) / truth * 100)[ok]
    return LayersResult(
        front_end=fe, frames=frames, layers=truth.shape[1], attempts=tried,
        pacing_max_us=round(float(run.pacing_us.max()), 1),
        window_ms_min=round(float(dur.min()) / 1e3, 2),
        window_ms_median=round(float(np.median(dur)) / 1e3, 2),
        layer_err_pct=[round(float(x), 3) for x in layer_err],
        layer_err_median_pct=round(float(np.median(layer_err)), 3),
        layer_err_max_pct=round(float(layer_err.max()), 3),
        windows=int(ok.sum()), windows_flagged=int(att.window_flagged.sum()),
        window_err_median_pct=round(float(np.median(werr)), 3),
        window_err_p99_pct=round(float(np.percentile(werr, 99)), 3),
        window_err_max_pct=round(float(werr.max()), 3),
        edges_missed=att.edges_missed, edges_spurious=att.edges_spurious,
        sample_holes=int(device_gaps(run)[0].size),
        samples_dropped=int(run.result.info.get("device_samples_dropped", 0)))


def report_layers(r: LayersResult) -> list[tuple[str, str, str, str]]:
    paced = r.pacing_max_us <= 150
    return [
        ("run", f"{r.frames} frames x {r.layers} layers, windows {r.window_ms_min} to "
         f"median {r.window_ms_median} ms", "", ""),
        ("rig pacing: worst change off the wall (us)", f"{r.pacing_max_us} "
         f"(attempt {r.attempts})", "<= 150", "ok" if paced else "HOST TOO BUSY"),
        ("per-layer error median / max (%)",
         f"{r.layer_err_median_pct} / {r.layer_err_max_pct}", "<= 1",
         verdict(r.layer_err_max_pct <= 1.0)),
        ("  per layer (%)", " ".join(f"{x:g}" for x in r.layer_err_pct), "", ""),
        (f"window error, {r.windows} clean windows >= 1 ms (%)",
         f"{r.window_err_median_pct} / {r.window_err_p99_pct} / {r.window_err_max_pct}",
         "<= 1", verdict(r.window_err_max_pct <= 1.0)),
        ("windows flagged / edges missed / spurious",
         f"{r.windows_flagged} / {r.edges_missed} / {r.edges_spurious}", "0", verdict(
             r.windows_flagged == r.edges_missed == r.edges_spurious == 0)),
        ("sample holes / STATUS dropped", f"{r.sample_holes} / {r.samples_dropped}", "0",
         verdict(r.sample_holes == r.samples_dropped == 0)),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="simulated seconds per front end")
    ap.add_argument("--front-end", choices=("ina226", "a0", "both"), default="both")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--layers", action="store_true",
                    help="paced end to end: layer runner + PowerSession + ArduinoSource")
    ap.add_argument("--frames", type=int, default=15, help="--layers: measured frames")
    ap.add_argument("--attempts", type=int, default=3,
                    help="--layers: runs to try while the host starves the paced rig")
    args = ap.parse_args(argv)
    fes = ["ina226", "a0"] if args.front_end == "both" else [args.front_end]
    why = missing(*(ELF[fe] for fe in fes))
    if why:
        print(f"rig benchmark: {why}", file=sys.stderr)
        return 2
    if args.layers:
        return run_all(fes, lambda fe: bench_layers(fe, args.frames, args.attempts), report_layers,
                       lambda fe: f"{fe} front end, layer runner driving the markers "
                                  f"({ELF[fe].name})", args.json)
    return run_all(fes, lambda fe: bench(fe, args.seconds, args.seed), report,
                   lambda fe: f"{fe} front end ({ELF[fe].name})", args.json)


def run_all(fes: list[str], measure: Any, rows: Any, title: Any, json_path: Path | None) -> int:
    """Measure each front end, print its report; one that fails is reported and skipped
    (exit 1 at the end)."""
    results = []
    for fe in fes:
        try:
            r = measure(fe)
        except Exception as err:  # report the front end that failed, go on with the next
            print(f"{fe}: FAILED: {err}", file=sys.stderr)
            continue
        results.append(r)
        print(f"\n{title(fe)}")
        for name, value, target, v in rows(r):
            print(f"  {name:<44} {value:<28} {target:<8} {v}")
    if json_path:
        json_path.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0 if len(results) == len(fes) else 1


if __name__ == "__main__":
    sys.exit(main())
