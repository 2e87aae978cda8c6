"""`coupprof collect`: capture a raw trace from the power logger.

Opens the logger's serial port, identifies it, records for ``--seconds``, and
writes the samples as CSV (``t_us, host_ns, current_a, bus_v, power_w,
markers``) or, for ``-o NAME.parquet``, as Parquet (the ``parquet`` extra), the
marker edges beside it (``<stem>.edges.csv`` / ``.edges.parquet``) and a JSON
sidecar with the logger's identity and the frame counters. Samples stream to a
binary trace directory while recording and are exported from it in chunks, so
memory does not grow with ``--seconds``. ``--port virtual``
starts the Python virtual logger, toggles its marker 0 every 50 ms and maps
its clock onto the host's, so ``host_ns`` is filled in.

If the port vanishes or the logger falls silent mid-run, what was measured is
still written and the command exits 4; on Ctrl-C (SIGTERM, SIGHUP) it is written
too and the command exits 130 (143, 129).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from profiler.cli import command_help
from profiler.cli.common.options import positive_float, positive_int
from profiler.cli.common.progress import timed_progress
from profiler.clock import perf_clock
from profiler.errors import BadInputError, PowerSourceError
from profiler.power.collector import Collector
from profiler.power.export import export, export_files, require_pyarrow
from profiler.power.trace import CaptureCounters, DeviceTrace

if TYPE_CHECKING:
    from types import FrameType

    import numpy as np

    from profiler.cli.common.options import Subparsers
    from profiler.sim.virtual_logger import VirtualLogger

VIRTUAL_PORT = "virtual"


class _Signalled(Exception):
    """SIGTERM or SIGHUP arrived during the capture."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def register(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "collect",
        help=command_help(__name__),
        description="Record the power logger's samples and marker edges for a while and write "
        "them as CSV (samples), <stem>.edges.csv (edges) and <stem>.json (logger identity, "
        "frame counters, lost-frame gaps); -o NAME.parquet writes Parquet instead (needs "
        "pip install 'coupprof[parquet]'). Exit codes: 3 if the port cannot be opened, 4 if "
        "the logger does not answer or fails mid-run, 130 on Ctrl-C (what was measured until "
        "then is written in both cases), 2 for bad arguments.",
    )
    p.add_argument("--port", required=True, metavar="URL",
                   help="serial port or pyserial URL of the logger (/dev/ttyACM0, /dev/pts/N "
                   "of the simavr rig, loop://), or `virtual` for the built-in virtual logger")
    p.add_argument("--seconds", type=positive_float, required=True, help="how long to record")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="FILE",
                   help="samples file to write: NAME.parquet (or .pq) for Parquet, anything "
                   "else CSV; edges and metadata go beside it")
    p.add_argument("--rate", type=positive_int, default=None, metavar="HZ",
                   help="ask the logger for this sample rate (default: its current one)")
    p.add_argument("--baud", type=positive_int, default=2_000_000,
                   help="serial baud rate (default: 2000000, the firmware's)")
    p.add_argument("--timeout", type=positive_float, default=3.0, metavar="S",
                   help="how long to wait for the logger to answer (default: 3 s)")
    p.add_argument("--trace-dir", type=Path, default=None, metavar="DIR",
                   help="also keep the binary trace directory here, the most compact form "
                   "(13 bytes a sample; re-readable with profiler.power.trace.DeviceTrace.load); by "
                   "default a temporary one is removed")
    p.add_argument("--raw", action="store_true",
                   help="keep the raw serial bytes in the trace directory (raw.bin)")
    p.set_defaults(func=run)


class _DemoMarkers:
    """Toggles marker 0 of the virtual logger every ``period_s`` and keeps host times."""

    def __init__(self, logger: VirtualLogger, period_s: float = 0.05) -> None:
        self.logger = logger
        self.period_s = period_s
        # 8 and 1 bytes an entry (Python ints in a list take ~36): 20 toggles/s for hours
        self.host_ns = array("q")
        self.levels = array("B")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        level = 0
        while not self._stop.wait(self.period_s):
            level ^= 1
            t = perf_clock()
            self.logger.set_markers(level)
            self.host_ns.append(t)
            self.levels.append(level)

    def __enter__(self) -> _DemoMarkers:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _demo_power_w(t_s: np.ndarray, markers: np.ndarray) -> np.ndarray:
    import numpy as np

    # 2.5 W idle, +1.5 W while marker 0 is high, a little 7 Hz ripple
    return 2.5 + 1.5 * (markers & 1) + 0.1 * np.sin(2 * np.pi * 7.0 * t_s)


def run(args: argparse.Namespace) -> int:
    out: Path = args.output
    if out.exists() and out.is_dir():
        raise BadInputError(f"--output {out} is a directory", fix="give a file name like trace.csv")
    if not out.parent.exists():
        raise BadInputError(f"--output directory {out.parent} does not exist",
                            fix="create it first or choose another path")
    if export_files(out).format == "parquet":
        require_pyarrow()  # say so now, not after the whole capture
    import shutil
    import tempfile

    tmp = None
    trace_dir = args.trace_dir
    if trace_dir is None:
        tmp = tempfile.mkdtemp(prefix="coupprof-collect-")
        trace_dir = Path(tmp) / "trace"
    try:
        if args.port == VIRTUAL_PORT:
            return _collect_virtual(args, trace_dir)
        with Collector(args.port, baudrate=args.baud, out_dir=trace_dir, keep_raw=args.raw,
                       timeout_s=args.timeout) as col:
            return _collect(col, args, None)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _collect_virtual(args: argparse.Namespace, trace_dir: Path) -> int:
    from profiler.sim.virtual_logger import VirtualLogger

    with VirtualLogger(_demo_power_w, rate_hz=10_000) as logger, \
         Collector(logger.port, baudrate=args.baud, out_dir=trace_dir, keep_raw=args.raw,
                   timeout_s=args.timeout) as col:
        return _collect(col, args, logger)


def _collect(col: Collector, args: argparse.Namespace, virtual: VirtualLogger | None) -> int:
    info = col.open()
    if args.rate:
        info = col.set_rate(args.rate)
        if info.rate_hz != args.rate:
            print(f"note: the logger runs at {info.rate_hz} S/s, the nearest it can do to {args.rate}")
    failure: BaseException | None = None
    demo = _DemoMarkers(virtual) if virtual is not None else None
    with timed_progress(sys.stderr.isatty(), "collecting", args.seconds) as bar, \
            _signals_raise():
        progress = None if bar is None else (lambda t_s, c: bar(t_s, counters_text(c)))
        try:
            if demo is not None:
                with demo:
                    trace = col.record(args.seconds, progress=progress)
            else:
                trace = col.record(args.seconds, progress=progress)
        except PowerSourceError as err:
            failure = err
            trace = err.trace
        except (KeyboardInterrupt, _Signalled) as err:
            # Stopped by the user: finish and write what was measured, then exit 130/128+sig.
            failure = err
            trace = _finish_interrupted(col, err)
    if demo is not None and trace.edges.size:
        from profiler.power.clockmap import fit_clock_map

        fit = fit_clock_map(trace.edges["t_us"], demo.host_ns[: len(demo.host_ns)],
                            device_levels=trace.edges["markers"] & 1,
                            host_levels=demo.levels[: len(demo.host_ns)],
                            tol_ns=demo.period_s * 0.4e9)
        trace = trace.with_clock(fit.clock)
    if args.trace_dir is not None and trace.path is not None:
        trace.save_meta()  # the kept directory gets the clock map (and why it ended early)
    files = export(trace, args.output) if trace.info is not None else []
    _summary(trace, info.front_end_name, info.fw_version, files)
    if isinstance(failure, _Signalled):
        print(f"coupprof collect: stopped by {failure}", file=sys.stderr)
        return 128 + failure.signum
    if failure is not None:
        raise failure
    return 0


def counters_text(c: CaptureCounters) -> str:
    return f"{c.samples} samples, {c.lost_frames} lost, {c.corrupt_frames} corrupt"


@contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM/SIGHUP raise _Signalled (SIGINT already raises KeyboardInterrupt)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Signalled(signum)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def _finish_interrupted(col: Collector, err: BaseException) -> DeviceTrace:
    name = "Ctrl-C" if isinstance(err, KeyboardInterrupt) else str(err)
    # Ignore further signals while the partial trace is finished, so it is not lost too.
    with _signals_ignored():
        trace = col.stop(send=True, raise_on_error=False) if col.recording else \
            DeviceTrace(info=col.info, port=col.port)
    trace.error = trace.error or f"interrupted by {name}"
    return trace


@contextmanager
def _signals_ignored() -> Iterator[None]:
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in sigs}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def _summary(trace: DeviceTrace, front_end: str, fw: str, files: list[Path]) -> None:
    c = trace.counters
    rate = trace.rate_hz
    print(f"collected {trace.duration_s:.2f} s from {trace.port} ({front_end} logger, fw {fw}): "
          f"{c.samples} samples at {rate:.0f} S/s, {c.edges} edges, {c.frames_ok} frames, "
          f"{c.lost_frames} lost, {c.corrupt_frames} corrupt, "
          f"{c.device_samples_dropped} samples dropped by the logger")
    if trace.clock is not None:
        cm = trace.clock
        bent = f" (piecewise, {len(cm.knots_us) - 1} segments)" if cm.knots_us else ""
        print(f"clock map: {cm.matched} edges matched, drift {cm.drift_ppm:+.1f} ppm{bent}, "
              f"residual rms {cm.residual_rms_ns / 1000:.1f} us")
    if trace.error:
        print(f"capture ended early: {trace.error}")
    if files:
        print("wrote " + ", ".join(str(f) for f in files))
