"""Peak memory of long `coupprof collect` captures, export included (issue 9, point 5).

For each ``--minutes`` value, runs what a user runs, in a child process::

    coupprof collect --port virtual --seconds 60*M --rate 20000 -o DIR/trace.csv --trace-dir DIR/trace

and reads the child's ``/proc/PID/status`` every ``--poll-s``: resident memory
(VmRSS, split into RssAnon and RssFile) and the phase: ``capture`` for the
``--seconds`` asked (from the child's start, so it ends a second or two before
the capture does), then ``export`` (STOP, clock fit, imports, writing files). It reports the peak RSS (the kernel's
high-water mark, from ``wait4``), the peak in each phase, CPU seconds and the
share of one core in each phase, wall times, file sizes, samples and lost
frames. With ``--format parquet`` the capture writes Parquet instead; with
``--format csv parquet`` the capture writes CSV and a second child exports the
kept trace directory to Parquet (``export(DeviceTrace.load(dir), ...)``), whose own
peak RSS is reported too.

    .venv/bin/python benchmarks/collect_soak.py --minutes 10 --json /tmp/soak10.json
    nice -n 19 .venv/bin/python benchmarks/collect_soak.py --minutes 60 \\
        --format csv parquet --baseline /tmp/soak10.json --json /tmp/soak60.json > /tmp/soak60.txt

``--baseline`` compares with an earlier run's JSON: issue 9 asks that an hour's
peak stays within 50 MB of ten minutes'. Files go to a temporary directory under
``--workdir`` (an hour at 20 kS/s is 0.9 GB of trace plus ~3 GB of CSV), removed
afterwards unless ``--keep``.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

LIMIT_GROWTH_MB = 50.0  # issue 9: 60 min within 50 MB of 10 min
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass
class PhaseStats:
    """One phase of a child's life, from its /proc samples."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_rss_mb: float = 0.0
    peak_rss_anon_mb: float = 0.0
    peak_rss_file_mb: float = 0.0

    @property
    def cpu_percent_of_one_core(self) -> float:
        return 100.0 * self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class ChildRun:
    """A child process watched to its end."""

    argv: list[str]
    returncode: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_rss_mb: float = 0.0  # kernel high-water mark (ru_maxrss)
    phases: dict[str, PhaseStats] = field(default_factory=dict)
    stdout: str = ""
    stderr: str = ""


@dataclass
class SoakResult:
    minutes: float
    rate_hz: int
    samples: int
    lost_frames: int
    corrupt_frames: int
    duration_s: float
    collect: ChildRun
    files_mb: dict[str, float]
    reexport: ChildRun | None = None


def _status_mb(pid: int) -> dict[str, float] | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            out[key] = int(rest.split()[0]) / 1024.0  # kB -> MB (MiB)
    return out


def _cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime + stime


def watch(argv: list[str], capture_s: float, poll_s: float, log: Any) -> ChildRun:
    """Run ``argv``; the phase is 'capture' for ``capture_s``, then 'export'."""
    run = ChildRun(argv=argv)
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True)
        phase, phase_t0, phase_cpu0 = "capture", t0, 0.0
        last_cpu = 0.0
        next_report = t0 + 60.0
        while True:
            pid_done, status, usage = os.wait4(proc.pid, os.WNOHANG)
            now = time.monotonic()
            if pid_done:
                break
            st, cpu = _status_mb(proc.pid), _cpu_s(proc.pid)
            if cpu is not None:
                last_cpu = cpu
            if phase == "capture" and now - t0 >= capture_s:
                run.phases[phase] = _close(run.phases.get(phase), now - phase_t0, last_cpu - phase_cpu0)
                phase, phase_t0, phase_cpu0 = "export", now, last_cpu
            if st:
                ps = run.phases.setdefault(phase, PhaseStats())
                ps.peak_rss_mb = max(ps.peak_rss_mb, st.get("VmRSS", 0.0))
                ps.peak_rss_anon_mb = max(ps.peak_rss_anon_mb, st.get("RssAnon", 0.0))
                ps.peak_rss_file_mb = max(ps.peak_rss_file_mb, st.get("RssFile", 0.0))
            if now >= next_report and st:
                print(f"  [{now - t0:7.0f} s] {phase}: RSS {st.get('VmRSS', 0):.1f} MB, "
                      f"CPU {last_cpu:.0f} s", file=log, flush=True)
                next_report += 60.0
            time.sleep(poll_s)
        proc.returncode = os.waitstatus_to_exitcode(status)
        run.phases[phase] = _close(run.phases.get(phase), now - phase_t0,
                                   usage.ru_utime + usage.ru_stime - phase_cpu0)
        run.returncode = proc.returncode
        run.wall_s = now - t0
        run.cpu_s = usage.ru_utime + usage.ru_stime
        run.peak_rss_mb = usage.ru_maxrss / 1024.0  # Linux: kB
        out.seek(0)
        err.seek(0)
        run.stdout, run.stderr = out.read(), err.read()
    return run


def _close(ps: PhaseStats | None, wall_s: float, cpu_s: float) -> PhaseStats:
    ps = ps or PhaseStats()
    ps.wall_s, ps.cpu_s = wall_s, cpu_s
    return ps


def soak(minutes: float, rate_hz: int, formats: list[str], workdir: Path, poll_s: float,
         keep: bool, log: Any) -> SoakResult:
    d = Path(tempfile.mkdtemp(prefix=f"soak{minutes:g}-", dir=workdir))
    try:
        first = formats[0]
        out = d / f"trace.{first}"
        argv = [sys.executable, "-m", "profiler", "collect", "--port", "virtual",
                "--seconds", str(minutes * 60), "--rate", str(rate_hz), "-o", str(out),
                "--trace-dir", str(d / "trace")]
        print(f"{minutes:g} min at {rate_hz} S/s -> {out} ({time.strftime('%H:%M:%S')})",
              file=log, flush=True)
        col = watch(argv, minutes * 60, poll_s, log)
        if col.returncode != 0:
            raise SystemExit(f"collect exited {col.returncode}: {col.stderr.strip()}")
        meta = json.loads((d / "trace.json").read_text())
        reexport = None
        if len(formats) > 1:
            other = d / f"again.{formats[1]}"
            print(f"re-exporting the trace directory to {other}", file=log, flush=True)
            reexport = watch([sys.executable, __file__, "--export-only", str(d / "trace"),
                              str(other)], 0.0, poll_s, log)
            if reexport.returncode != 0:
                raise SystemExit(f"re-export exited {reexport.returncode}: {reexport.stderr}")
        files = {p.name: p.stat().st_size / 1e6 for p in sorted(d.iterdir()) if p.is_file()}
        files["trace/samples.bin"] = (d / "trace" / "samples.bin").stat().st_size / 1e6
        c = meta["counters"]
        return SoakResult(minutes=minutes, rate_hz=rate_hz, samples=meta["samples"],
                          lost_frames=c["lost_frames"], corrupt_frames=c["corrupt_frames"],
                          duration_s=meta["duration_s"], collect=col, files_mb=files,
                          reexport=reexport)
    finally:
        if keep:
            print(f"kept {d}", file=log)
        else:
            shutil.rmtree(d, ignore_errors=True)


def describe(r: SoakResult) -> list[str]:
    lines = [f"{r.minutes:g} min at {r.rate_hz} S/s: {r.samples:,} samples over "
             f"{r.duration_s:.1f} s, {r.lost_frames} lost frames, {r.corrupt_frames} corrupt"]
    for what, run in (("collect", r.collect), ("re-export", r.reexport)):
        if run is None:
            continue
        lines.append(f"  {what}: peak RSS {run.peak_rss_mb:.1f} MB (whole process), wall "
                     f"{run.wall_s:.0f} s, CPU {run.cpu_s:.0f} s")
        for name, ps in run.phases.items():
            if ps.peak_rss_mb <= 0:
                continue  # a phase the child never reached (a re-export has no capture)
            lines.append(f"    {name:8s} peak RSS {ps.peak_rss_mb:7.1f} MB (anon "
                         f"{ps.peak_rss_anon_mb:.1f}, file {ps.peak_rss_file_mb:.1f}), "
                         f"{ps.wall_s:7.0f} s, CPU {ps.cpu_s:6.0f} s = "
                         f"{ps.cpu_percent_of_one_core:.0f} % of one core")
    lines.append("  files: " + ", ".join(f"{k} {v:,.1f} MB" for k, v in r.files_mb.items()))
    return lines


def export_only(trace_dir: str, out: str) -> int:
    from profiler.power.export import export
    from profiler.power.trace import DeviceTrace

    export(DeviceTrace.load(trace_dir), out)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, nargs="+", default=[10.0])
    ap.add_argument("--rate", type=int, default=20_000, help="logger sample rate, S/s")
    ap.add_argument("--format", nargs="+", choices=["csv", "parquet"], default=["csv"],
                    help="the capture's format, then optionally one to re-export to")
    ap.add_argument("--poll-s", type=float, default=0.2)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="an earlier run's --json: compare peaks with its first capture")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--export-only", nargs=2, metavar=("TRACE_DIR", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.export_only:
        return export_only(*args.export_only)

    log = sys.stdout
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, niceness {os.nice(0)}", file=log)
    results = []
    for m in args.minutes:
        r = soak(m, args.rate, args.format, args.workdir, args.poll_s, args.keep, log)
        results.append(r)
        print("\n".join(describe(r)), file=log, flush=True)
    base = None
    if args.baseline is not None:
        base = json.loads(args.baseline.read_text())["results"][0]
    elif len(results) > 1:
        base = asdict(results[0])
    if base is not None:
        for r in results:
            if r.minutes == base["minutes"]:
                continue
            grow = r.collect.peak_rss_mb - base["collect"]["peak_rss_mb"]
            verdict = "OK" if grow <= LIMIT_GROWTH_MB else f"OVER {LIMIT_GROWTH_MB:g} MB"
            print(f"peak RSS {r.minutes:g} min {r.collect.peak_rss_mb:.1f} MB vs "
                  f"{base['minutes']:g} min {base['collect']['peak_rss_mb']:.1f} MB: "
                  f"{grow:+.1f} MB [{verdict}]", file=log)
    if args.json:
        args.json.write_text(json.dumps({"results": [asdict(r) for r in results]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
