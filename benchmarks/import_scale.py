"""Time and peak memory of `coupprof import` on long recordings (issue 25, item 1).

For each ``--minutes`` value, writes an ARM-CO-UP-style recording with the simulated
INA260 logger (`profiler.sim.ina260.simulate_run`: readings 1 ms apart, i.e. 1 kS/s,
10 mW steps; 8 settings x 14 layers of 14-70 ms, slowest setting 2x the fastest; 3
warm-up frames and as many measured frames as fill the duration; ~11 s waits between
settings, as ARM-CO-UP's, a quarter of a setting in short runs), and imports it in a
child process three ways:

- ``whole``: ``coupprof import power_Sim_<ORDER>.csv -o DIR``, no layout flags;
- ``truncated``: the same recording cut at 53 % of its lines, in the middle of a line
  (a logger that died mid-reading: that line is dropped and said), no flags;
- ``wrong layout``: the whole recording with ARM-CO-UP's layout given (``--frames 10
  --warmup 3 --levels 1-8``), which must end with exit status 1 and one line naming the
  layout the trace shows.

Per case it prints the exit status, wall time, the child's peak RSS (the kernel's
high-water mark, from ``wait4``), and the verdict against the issue's bounds (60 s,
300 MB). The recordings are written once per duration (an hour's is ~65 MB, written
in about 5 s) under a temporary directory, removed afterwards unless ``--keep``.

    .venv/bin/python benchmarks/import_scale.py [--minutes 1 10 60] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from profiler.recordings.layout import RunLayout, Setting  # noqa: E402
from profiler.sim.ina260 import simulate_run  # noqa: E402

COUPPROF = str(Path(sys.executable).with_name("coupprof"))
LIMIT_S, LIMIT_MB = 60.0, 300.0
ORDER = "B" * 14
LAYER_MS = np.array([14.0, 37.0, 26.0, 42.0, 23.5, 35.5, 25.0, 45.0, 44.5, 46.5, 44.5, 44.5,
                     70.0, 18.0])
LAYER_MW = 3300.0 + 60.0 * np.arange(LAYER_MS.size)
SPEED = np.linspace(2.0, 1.0, 8)  # level 1 (slowest) .. 8
WARMUP = 3
IDLE_MS = 11_000.0  # ARM-CO-UP's wait for the next setting
CUT = 0.53
WRONG = ["--frames", "10", "--warmup", "3", "--levels", "1-8"]


@dataclass
class Case:
    minutes: float
    case: str
    lines: int
    exit_status: int
    wall_s: float
    peak_rss_mb: float
    last_line: str  # the child's last line of output (stderr for an error)

    @property
    def within(self) -> bool:
        return self.wall_s < LIMIT_S and self.peak_rss_mb < LIMIT_MB


def write_recording(minutes: float, path: Path) -> tuple[RunLayout, int, float]:
    """The recording of about ``minutes``: its layout, lines, seconds to write it."""
    t0 = time.perf_counter()
    frame_ms = float(np.mean(SPEED)) * LAYER_MS.sum() + LAYER_MS.size * 8.0 + 40.0
    idle_ms = min(IDLE_MS, minutes * 60_000.0 / SPEED.size / 4)  # short runs: shorter waits
    per_setting_ms = minutes * 60_000.0 / SPEED.size - idle_ms
    runs = max(WARMUP + 1, int(round(per_setting_ms / frame_ms)))
    layout = RunLayout(ORDER, runs - WARMUP, WARMUP,
                       tuple(Setting(i + 1) for i in range(SPEED.size)))
    run = simulate_run(layout, LAYER_MS[None, :] * SPEED[:, None],
                       LAYER_MW[None, :] * SPEED[:, None] ** -0.3, seed=1, idle_ms=idle_ms,
                       gaps_ms=(1.0,), gap_p=(1.0,))
    path.write_text(run.text)
    return layout, run.text.count("\n"), time.perf_counter() - t0


def import_once(trace: Path, out: Path, extra: list[str]) -> tuple[int, float, float, str]:
    """(exit status, wall s, peak RSS MB, last output line) of one import in a child."""
    log = out.with_suffix(".log")
    with open(log, "w") as f:
        t0 = time.perf_counter()
        proc = subprocess.Popen([COUPPROF, "import", str(trace), "-o", str(out), *extra],
                                stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, "COLUMNS": "160"})
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
    return proc.returncode, wall, usage.ru_maxrss / 1024.0, lines[-1] if lines else ""


def run_minutes(minutes: float, workdir: Path, log: TextIO) -> list[Case]:
    d = workdir / f"{minutes:g}min"
    d.mkdir(parents=True, exist_ok=True)
    whole = d / f"power_Sim_{ORDER}.csv"
    # Written by a child: a child forked from a parent that held the recording would
    # count the parent's pages in its peak RSS until it execs.
    got = json.loads(subprocess.run([sys.executable, __file__, "--write", f"{minutes:g}",
                                     str(whole)], check=True, capture_output=True,
                                    text=True).stdout)
    lines = got["lines"]
    print(f"{minutes:g} min: {got['settings']} settings x ({got['warmup']} + "
          f"{got['frames']} frames) x {got['layers']} layers, {got['windows']} marker windows, "
          f"{lines} lines ({whole.stat().st_size / 1e6:.1f} MB) written in {got['s']:.1f} s",
          file=log, flush=True)
    cut_dir = d / "cut"
    cut_dir.mkdir(exist_ok=True)
    cut = cut_dir / whole.name
    with open(whole) as src, open(cut, "w") as dst:
        keep = int(lines * CUT)
        for i, line in enumerate(src):
            if i >= keep:
                dst.write(line[: len(line) // 2])  # stopped mid-reading: no newline
                break
            dst.write(line)
    out = []
    for case, trace, extra, n in (("whole", whole, [], lines),
                                  ("truncated", cut, [], int(lines * CUT)),
                                  ("wrong layout", whole, WRONG, lines)):
        status, wall, rss, last = import_once(trace, d / case.replace(" ", "_"), extra)
        out.append(Case(minutes, case, n, status, wall, rss, last))
    return out


def describe(c: Case) -> str:
    verdict = "OK" if c.within else f"OVER {LIMIT_S:g} s / {LIMIT_MB:g} MB"
    return (f"  {c.minutes:>4g} min  {c.case:<13} {c.lines:>9} lines  exit {c.exit_status}  "
            f"{c.wall_s:6.1f} s  peak RSS {c.peak_rss_mb:6.1f} MB  [{verdict}]")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, nargs="+", default=[1.0, 10.0, 60.0])
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--keep", action="store_true", help="keep the recordings and outputs")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--write", nargs=2, metavar=("MINUTES", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.write:
        layout, lines, s = write_recording(float(args.write[0]), Path(args.write[1]))
        print(json.dumps({"settings": len(layout.settings), "warmup": layout.warmup,
                          "frames": layout.frames, "layers": layout.layers,
                          "windows": layout.total, "lines": lines, "s": s}))
        return 0
    log = sys.stdout
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, load {os.getloadavg()[0]:.2f}", file=log)
    work = Path(tempfile.mkdtemp(prefix="import-scale-", dir=args.workdir))
    results: list[Case] = []
    try:
        for m in args.minutes:
            cases = run_minutes(m, work, log)
            results += cases
            for c in cases:
                print(describe(c), file=log, flush=True)
                if c.exit_status != 0:
                    print(f"      {c.last_line}", file=log, flush=True)
    finally:
        if args.keep:
            print(f"kept {work}", file=log)
        else:
            shutil.rmtree(work, ignore_errors=True)
    wrong_ok = all(c.exit_status == 1 for c in results if c.case == "wrong layout")
    rest_ok = all(c.exit_status == 0 for c in results if c.case != "wrong layout")
    bounds_ok = all(c.within for c in results)
    print(f"bounds ({LIMIT_S:g} s, {LIMIT_MB:g} MB): {'all within' if bounds_ok else 'EXCEEDED'}; "
          f"whole and truncated exit 0: {rest_ok}; wrong layout exits 1: {wrong_ok}", file=log)
    if args.json:
        args.json.write_text(json.dumps({"results": [asdict(c) | {"within": c.within}
                                                     for c in results]}, indent=2))
    return 0 if bounds_ok and wrong_ok and rest_ok else 1


if __name__ == "__main__":
    sys.exit(main())
