"""One object measures power around work: `PowerSession`.

It opens a power source and a marker (use it as a context manager), measures the idle
baseline, brackets windows of work and returns an `Attribution`. What it can do follows
from the source's type: a `StreamSource` (samples and marker edges on the logger's clock,
attributed per window), a `ReadingSource` (readings that carry the marker pin, aligned to
the run's windows) or a `CounterSource` (a polled energy counter, each layer repeated
until the counter resolves it); any other source measures nothing. A source that fails
mid-run keeps the timings and what was measured (`PowerResult.error`, exit 4).

A layer run step by step, and why: docs/power.md ("A measuring session").
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

from profiler.clock import Clock, perf_clock
from profiler.errors import BadInputError, PowerSourceError, ProfilerError
from profiler.markers.base import Marker
from profiler.markers.hooks import LayerHooks
from profiler.power.attribution import Attribution, attribute, fps_per_w
from profiler.power.clockmap import local_offset
from profiler.power.host_trace import HostTrace, idle_baseline_w
from profiler.power.repeat import measure_repeated
from profiler.power.sources.base import CounterSource, PowerSource, ReadingSource, StreamSource
from profiler.power.trace import DeviceTrace
from profiler.recordings.traces import Recording

if TYPE_CHECKING:
    from profiler.measure.results import LayerTimings

T = TypeVar("T")


@dataclass
class PowerResult:
    """What a run's power measurement produced, ready for `LayerRun` extras and the sidecar."""

    columns: dict[str, np.ndarray] = field(default_factory=dict)  # per layer
    totals: dict[str, float] = field(default_factory=dict)  # per frame
    info: dict[str, Any] = field(default_factory=dict)  # for the JSON sidecar
    attribution: Attribution | None = None
    error: ProfilerError | None = None  # a mid-run failure; the rest is what survived


class MarkerLog:
    """The marker changes the host made around its work: `mark(level)` moves the marker
    and keeps the clock reads around the change."""

    def __init__(self, session: PowerSession) -> None:
        self.session = session
        self.clock = session.clock
        self._marker = session.marker
        self._t: list[int] = []  # middle of each marker change's bracket
        self._lv: list[int] = []
        self._hw: list[int] = []  # half each bracket: how far off the middle the change may be
        self._level = 0
        self._baseline_window: tuple[int, int] | None = None

    def _baseline(self) -> None:
        """The session's first capture holds the marker low, nothing running, for the
        idle baseline."""
        if self._marker is not None:
            self._marker.set(0)
        if self.session.baseline_w is None and self.session.baseline_s > 0:
            t0 = self.clock()
            time.sleep(self.session.baseline_s)
            self._baseline_window = self.session.baseline_window_ns = (t0, self.clock())

    def mark(self, level: int) -> tuple[int, int]:
        """Drive the marker to ``level``; (clock before, clock after) the change."""
        t0 = self.clock()
        if self._marker is not None:
            self._marker.set(level)
        t1 = self.clock()
        if level != self._level:
            self._level = level
            self._t.append((t0 + t1) // 2)
            self._lv.append(level)
            self._hw.append((t1 - t0) // 2)
        return t0, t1

    def host_events(self) -> tuple[np.ndarray, np.ndarray]:
        """The marker changes so far: host times (ns, sorted) and the level after each."""
        t = np.asarray(self._t, dtype=np.int64)
        lv = np.asarray(self._lv, dtype=np.int64)
        order = np.argsort(t, kind="stable")
        return t[order], lv[order]

    def host_halfwidths(self) -> np.ndarray:
        """Half of each marker change's bracket (ns), in `host_events`' order: a thread
        held up inside the change (a GIL switch, a busy logger thread) widens it, and
        the change may lie anywhere in it."""
        order = np.argsort(np.asarray(self._t, dtype=np.int64), kind="stable")
        return np.asarray(self._hw, dtype=np.int64)[order]


class ReadingCapture(MarkerLog):
    """One recording of a `ReadingSource`, with the marker changes made during it."""

    def __init__(self, session: PowerSession, source: ReadingSource) -> None:
        super().__init__(session)
        self.source = source

    def start(self) -> ReadingCapture:
        self.source.start()
        self._baseline()
        return self

    def stop(self) -> Recording:
        if self._marker is not None and self._level != 0:
            self.mark(0)
        return self.source.stop_recording()


class StreamCapture(MarkerLog):
    """One capture of a streaming source: the marker changes the host made around its
    work (the host-side windows), then the trace on the host clock.

    `start()` starts the stream; the session's first capture also measures the idle
    baseline (marker low, nothing running). `mark(level)` moves the marker and returns
    the clock reads around the change. `stop()` maps the capture onto the host clock.
    Windows are then integrated on the logger's edges (`windows_on_edges`: windows that
    start and end at marker changes, as layers do) or between host times through the
    fitted clock (`windows_on_host`: e.g. between frame completions)."""

    def __init__(self, session: PowerSession, source: StreamSource) -> None:
        super().__init__(session)
        self.source = source
        self.trace: HostTrace | None = None
        self.error: PowerSourceError | None = None  # a mid-run failure; trace is partial
        self.info: dict[str, Any] = {}

    def start(self) -> StreamCapture:
        self.source.start()
        self._baseline()
        return self

    def stop(self) -> HostTrace:
        """Stop the stream; the trace on the host clock, fitted over the marker changes.

        A mid-run failure that left a partial capture is kept in ``error`` and the part
        is mapped; with nothing to map, or no clock fit, the error is raised."""
        if self._marker is not None and self._level != 0:
            self.mark(0)
        t, lv = self.host_events()
        self.info["marker_changes"] = int(t.size)
        try:
            capture = self.source.stop_capture()
        except PowerSourceError as err:
            if err.trace is None or err.trace.samples.size == 0:
                raise
            capture = err.trace
            self.error = err
        try:
            trace = self.source.map_clock(capture, t, lv,
                                          host_halfwidth_ns=self.host_halfwidths())
        finally:  # what was captured goes to the sidecar even if it cannot be mapped
            self.info.update(capture_info(capture, self.source))
        self.trace = trace
        if self._baseline_window is not None:
            self.session.baseline_w = idle_baseline_w(trace, *self._baseline_window)
        self.info.update({"lost_frames": trace.total_lost_frames,
                          "corrupt_frames": trace.corrupt_frames})
        return trace

    def abort(self) -> None:
        """Stop the stream after a failure elsewhere, ignoring its own errors."""
        with contextlib.suppress(ProfilerError):
            self.source.stop_capture()

    def _trace(self) -> HostTrace:
        if self.trace is None:
            raise RuntimeError("StreamCapture: stop() first")
        return self.trace

    def windows_on_edges(self, start_ns: npt.ArrayLike, end_ns: npt.ArrayLike,
                         start_lo_ns: npt.ArrayLike | None = None,
                         end_hi_ns: npt.ArrayLike | None = None, *,
                         follow_clock: bool = False) -> Attribution:
        """Windows (frames, items) that the marker went high at (start) and low at (end).
        ``follow_clock``: look for each boundary's edge where the clock map's neighbours
        say it is (`profiler.power.clockmap.local_offset`), for long runs whose logger
        clock wanders off the fitted line."""
        if follow_clock:
            local = local_offset(self.source.fit, self.host_events()[0],
                                 halfwidth_ns=self.host_halfwidths())
            if local is not None:
                def shifted(v: npt.ArrayLike) -> np.ndarray:
                    t = np.asarray(v)
                    return t - local(t)

                start_ns, end_ns = shifted(start_ns), shifted(end_ns)
                start_lo_ns = None if start_lo_ns is None else shifted(start_lo_ns)
                end_hi_ns = None if end_hi_ns is None else shifted(end_hi_ns)
        return attribute(start_ns, end_ns, self._trace(),
                         baseline_power_w=self.session.baseline_w or 0.0, levels=(1, 0),
                         start_lo_ns=start_lo_ns, end_hi_ns=end_hi_ns)

    def windows_on_host(self, start_ns: npt.ArrayLike, end_ns: npt.ArrayLike) -> Attribution:
        """Windows between host timestamps, through the fitted clock (no edge matching)."""
        return attribute(start_ns, end_ns, self._trace(),
                         baseline_power_w=self.session.baseline_w or 0.0, use_edges=False)


class MarkerHooks(LayerHooks):
    """Runner hooks: the marker high for each layer's invoke in measured frames (none
    without a capture; subclasses add their own per-layer work around it).

    ``rise``/``fall`` have shape (frames, layers, 2): clock reads just before and just
    after each marker change, so the change happened inside that bracket. ``gap_s``:
    how long the marker stays idle after each layer (a slow logger's need)."""

    def __init__(self, capture: MarkerLog | None, frames: int, layers: int,
                 on_layer: Callable[[int], None] | None = None, gap_s: float = 0.0) -> None:
        self.capture = capture
        self.on_layer = on_layer
        self.gap_s = gap_s
        self.rise = np.zeros((frames, layers, 2), dtype=np.int64)
        self.fall = np.zeros((frames, layers, 2), dtype=np.int64)
        self._frame: int | None = None

    def before_frame(self, frame: int, warmup: bool) -> None:
        self._frame = None if warmup else frame

    def before_layer(self, layer: int) -> None:
        if self.on_layer is not None:
            self.on_layer(layer)
        if self._frame is not None and self.capture is not None:
            self.rise[self._frame, layer] = self.capture.mark(1)

    def after_layer(self, layer: int) -> None:
        if self._frame is not None and self.capture is not None:
            self.fall[self._frame, layer] = self.capture.mark(0)
            if self.gap_s > 0:
                time.sleep(self.gap_s)


class PowerSession:
    """A power source and its marker, measured around work; see docs/power.md.

    counter_updates: a counter window must span this many counter updates (error about
    1/N). baseline_s: how long the idle baseline is measured."""

    def __init__(self, source: PowerSource, marker: Marker | None = None, *,
                 baseline_s: float = 0.5, counter_updates: int = 20,
                 clock: Clock = perf_clock) -> None:
        self.source = source
        self.marker = marker
        self.baseline_s = baseline_s
        self.counter_updates = counter_updates
        self.clock = clock
        self.baseline_w: float | None = None  # idle power, once measured
        self.baseline_window_ns: tuple[int, int] | None = None  # when it was measured
        self._capture: StreamCapture | None = None  # the layer run's (begin .. finish)
        self._recording: ReadingCapture | None = None  # the same, for a ReadingSource
        self._hooks: MarkerHooks | None = None

    # -- opening -------------------------------------------------------------------------
    def __enter__(self) -> PowerSession:
        self.source.open()
        try:
            if self.marker is not None:
                self.marker.open()
        except BaseException:
            self.source.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.marker is not None:
                self.marker.close()  # driven low before the source goes
        finally:
            self.source.close()

    @property
    def streaming(self) -> bool:
        return isinstance(self.source, StreamSource)

    @property
    def name(self) -> str:
        return self.source.spec

    @property
    def window_ns(self) -> int:
        """Shortest span worth measuring: ``counter_updates`` counter updates (0 when
        streaming: any window the marker brackets)."""
        if isinstance(self.source, CounterSource):
            return int(self.counter_updates * int(self.source.update_interval_ns))
        return 0

    # -- spans of work -------------------------------------------------------------------
    def capture(self) -> StreamCapture:
        """A new capture of the streaming source (not started)."""
        if isinstance(self.source, ReadingSource):
            raise BadInputError(
                f"power source {self.name} records readings milliseconds apart: it measures "
                "layer runs (coupprof layers, sweep) only",
                fix="use --power sim (or arduino:PORT, this project's logger) for this command")
        if not isinstance(self.source, StreamSource):
            raise BadInputError(f"power source {self.name} does not stream")
        return StreamCapture(self, self.source)

    def span(self, work: Callable[[], T],
             busy: Callable[[], object] | None = None) -> tuple[T, float, int, int]:
        """Run ``work`` once; (its result, energy_mj, t0_ns, t1_ns): the energy of
        [t0, t1], which holds ``work``. A counter's window starts at one of its updates,
        awaited while ``busy`` runs (`CounterSource.wait_for_tick`): t0 is then up to one
        ``busy`` call before ``work`` starts, and the caller scales the energy to its own
        part of the window."""
        src = self.source
        if isinstance(src, CounterSource):
            t0, e0 = src.wait_for_tick(busy=busy)
            result = work()
            e1 = src.read_energy_mj()
            return result, float(e1 - e0), t0, self.clock()
        cap = self.capture().start()
        try:
            lo, t0 = cap.mark(1)
            result = work()
            t1, hi = cap.mark(0)
        finally:
            cap.stop()
        att = cap.windows_on_edges([[t0]], [[t1]], [[lo]], [[hi]])
        return result, float(att.layers[0].energy_mj), t0, t1

    def per_call(self, call: Callable[[], object], min_calls: int = 20) -> float:
        """Mean energy of one ``call`` in mJ, from a window long enough to resolve it."""
        if isinstance(self.source, CounterSource):
            return float(measure_repeated(call, self.source,
                                          min_updates=self.counter_updates).energy_mj)

        def many() -> None:
            for _ in range(min_calls):
                call()

        _, energy, _, _ = self.span(many)
        return energy / min_calls

    def call_powers(self, calls: Sequence[Callable[[], object]],
                    progress: Callable[[int, int], None] | None = None,
                    min_window_ms: float = 50.0) -> list[float]:
        """Each call's mean power (W) while it runs back to back: the fused method's
        prefix energies. A counter: a window of repeats long enough to resolve it
        (`measure_repeated`). A stream: one capture, in which each call repeats until
        ``min_window_ms`` have passed (three times at least) inside its own marked window:
        the clock fit then rests on every window's two edges, not on one span's."""
        src = self.source
        if isinstance(src, CounterSource):
            out = []
            for i, call in enumerate(calls):
                out.append(float(measure_repeated(call, src,
                                                  baseline_power_w=self.baseline_w or 0.0,
                                                  min_updates=self.counter_updates).power_w))
                if progress:
                    progress(i + 1, len(calls))
            return out
        if not isinstance(src, StreamSource):
            raise BadInputError(f"power source {self.name} measures no call's power")
        bounds: list[tuple[int, int, int, int]] = []
        cap = self.capture().start()
        try:
            window_ns = min_window_ms * 1e6
            for i, call in enumerate(calls):
                call()  # warm, and keeps the windows apart (the marker low for one call)
                lo, a = cap.mark(1)
                reps = 0
                while reps < 3 or self.clock() - a < window_ns:
                    call()
                    reps += 1
                b, hi = cap.mark(0)
                bounds.append((lo, a, b, hi))
                if progress:
                    progress(i + 1, len(calls))
        finally:
            cap.stop()
        lo_, a_, b_, hi_ = (np.asarray([[w[k] for w in bounds]]) for k in range(4))
        att = cap.windows_on_edges(a_, b_, lo_, hi_)
        return [float(layer.power_w) for layer in att.layers]  # over the logger's edges

    # -- a layer run ---------------------------------------------------------------------
    def hooks(self, frames: int, layers: int,
              on_layer: Callable[[int], None] | None = None) -> MarkerHooks | None:
        """The runner's hooks for a streaming or reading source with a marker."""
        if isinstance(self.source, ReadingSource) and self.marker is not None:
            self._recording = self._recording or ReadingCapture(self, self.source)
            self._hooks = MarkerHooks(self._recording, frames, layers, on_layer=on_layer,
                                      gap_s=self.source.gap_ns / 1e9)
            return self._hooks
        if not isinstance(self.source, StreamSource) or self.marker is None:
            return None
        self._capture = self._capture or self.capture()
        self._hooks = MarkerHooks(self._capture, frames, layers, on_layer=on_layer)
        return self._hooks

    def begin(self) -> None:
        """Start the stream and measure the idle baseline (marker low, nothing running).

        Before the run, not after it: a GPU stays clocked up for seconds after work."""
        src = self.source
        if isinstance(src, ReadingSource):
            self._recording = (self._recording or ReadingCapture(self, src)).start()
        elif isinstance(src, StreamSource):
            self._capture = (self._capture or self.capture()).start()
        elif isinstance(src, CounterSource):
            # The counter window must span many updates to resolve the idle power.
            t0, e0 = src.wait_for_tick()
            time.sleep(max(self.baseline_s, 20 * src.update_interval_ns / 1e9))
            t1 = self.clock()
            self.baseline_w = (src.read_energy_mj() - e0) * 1e6 / max(t1 - t0, 1)
            self.baseline_window_ns = (t0, t1)

    def finish(self, timings: LayerTimings,
               layer_calls: Sequence[Callable[[], object]] | None = None,
               progress: Callable[[int, int], None] | None = None) -> PowerResult:
        """The layer run's energy: per layer columns, per frame totals, sidecar info.
        On a counter source a layer's in-frame time is its mean over ``timings``' frames."""
        info: dict[str, Any] = {"power_source": self.source.info().to_dict()}
        if self._capture is not None:
            return self._finish_stream(timings, self._capture, info)
        if self._recording is not None:
            return self._finish_readings(timings, self._recording, info)
        if isinstance(self.source, CounterSource):
            in_frame_ms = np.asarray(timings.time_ns, dtype=np.float64).mean(axis=0) / 1e6
            return self._finish_counter(self.source, layer_calls or [], progress, info,
                                        in_frame_ms)
        return PowerResult(info=info)

    def abort(self) -> None:
        """Stop a stream after a failure elsewhere, ignoring its own errors."""
        if self._capture is not None:
            self._capture.abort()
            self._capture = None
        if self._recording is not None:
            with contextlib.suppress(ProfilerError):
                self._recording.stop()
            self._recording = None

    def _finish_stream(self, timings: LayerTimings, cap: StreamCapture, info: dict[str, Any],
                       ) -> PowerResult:
        self._capture = None
        cap.source.keep_trace_on_disk()  # (from the next capture on)
        try:
            trace = cap.stop()
        except ProfilerError as err:
            # Nothing to attribute (e.g. the edges never reached the logger): keep timings.
            info.update(cap.info)
            return PowerResult(info=info, error=cap.error or err)
        info.update(cap.info)
        error = cap.error
        assert self._hooks is not None
        ts = np.asarray(timings.ts_ns)  # (frames, layers, 4)
        if error is not None:
            # A partial capture: only the frames whose windows it covers.
            covered = ts[:, -1, 3] <= (trace.t_ns[-1] if trace.t_ns.size else 0)
            ts = ts[covered]
            info["frames_attributed"] = int(covered.sum())
            if not covered.any():
                return PowerResult(info=info, error=error)
        frames = ts.shape[0]
        att = cap.windows_on_edges(ts[:, :, 2], ts[:, :, 3], self._hooks.rise[:frames, :, 0],
                                   self._hooks.fall[:frames, :, 1], follow_clock=True)
        info.update({
            "baseline_power_w": self.baseline_w or 0.0,
            "baseline_s": self.baseline_s,
            "edges_missed": att.edges_missed,
            "edges_spurious": att.edges_spurious,
            "edge_offset_ns": list(att.edge_offset_ns),
        })
        return PowerResult(columns=att.columns(), totals=att.totals(), info=info,
                           attribution=att, error=error)

    def _finish_readings(self, timings: LayerTimings, cap: ReadingCapture, info: dict[str, Any],
                         ) -> PowerResult:
        """The layer run through a reading logger (`profiler.recordings.live`)."""
        from profiler.recordings.live import attribute_live

        self._recording = None
        try:
            rec = cap.stop()
        except PowerSourceError as err:
            return PowerResult(info=info, error=err)
        info["power_source"] = cap.source.info().to_dict()
        info["readings_file"] = str(rec.path)
        info["readings_sha256"] = rec.sha256
        info["readings"] = rec.readings
        if rec.skipped:
            info["skipped_lines"] = [[x.line, x.reason] for x in rec.skipped]
        ts = np.asarray(timings.ts_ns)  # (frames, layers, 4)
        marks, levels = cap.host_events()
        try:
            live = attribute_live(rec, marks, levels, ts[:, :, 2], ts[:, :, 3],
                                  cap.session.baseline_window_ns)
        except BadInputError as err:  # the recording cannot be matched to the run
            return PowerResult(info=info, error=PowerSourceError(
                f"the readings of {cap.source.spec} do not match the run: {err.message}",
                fix="check that the marker line reaches the logger's pin"))
        info.update(live.sidecar())
        if live.baseline_mw is not None:  # measured in this recording (the session's first)
            self.baseline_w = live.baseline_mw / 1000.0
        baseline_w = self.baseline_w or 0.0
        t_ms = np.asarray(timings.time_ns, dtype=np.float64).mean(axis=0) / 1e6  # the table's
        power = live.power_mw / 1000.0
        energy = power * t_ms
        cols = {
            "power_w": power,
            "energy_mj": energy,
            "dynamic_energy_mj": (power - baseline_w) * t_ms,
            "fps_per_w": np.array([fps_per_w(e) if np.isfinite(e) else np.nan for e in energy]),
            "samples": live.samples,
            "flagged_windows": live.set_aside,
            "armcoup_power_w": live.armcoup_power_mw / 1000.0,
        }
        ok = np.isfinite(energy)
        total = float(energy[ok].sum())
        time_ms = float(t_ms[ok].sum())
        totals = {
            "power_w": total / time_ms if time_ms > 0 else float("nan"),
            "energy_mj": total,
            "dynamic_energy_mj": float(cols["dynamic_energy_mj"][ok].sum()),
            "fps_per_w": fps_per_w(total),
            "samples": float(live.samples.sum()),
            "flagged_windows": float(live.set_aside.sum()),
            "baseline_power_w": baseline_w,
        }
        info["baseline_power_w"] = baseline_w
        info["baseline_s"] = self.baseline_s
        return PowerResult(columns=cols, totals=totals, info=info, error=cap.source.error)

    def _finish_counter(self, src: CounterSource, calls: Sequence[Callable[[], object]],
                        progress: Callable[[int, int], None] | None, info: dict[str, Any],
                        in_frame_ms: np.ndarray) -> PowerResult:
        """Per layer: power from its repeat window, energy = power x ``in_frame_ms``.
        No calls (the fused method measures prefix energies instead): the baseline only."""
        baseline = self.baseline_w or 0.0
        if not calls:
            info.update({"baseline_power_w": baseline,
                         "counter_update_interval_ns": int(src.update_interval_ns)})
            return PowerResult(totals={"baseline_power_w": baseline}, info=info)
        try:
            reps = []
            for i, call in enumerate(calls):
                reps.append(measure_repeated(call, src, baseline_power_w=baseline,
                                             min_updates=self.counter_updates))
                if progress:
                    progress(i + 1, len(calls))
        except PowerSourceError as err:
            return PowerResult(info=info, error=err)
        power = np.array([r.power_w for r in reps])
        t_ms = np.asarray(in_frame_ms, dtype=np.float64)[:len(reps)]
        energy_mj = power * t_ms  # W x ms = mJ
        cols = {
            "power_w": power,
            "energy_mj": energy_mj,
            "dynamic_energy_mj": (power - baseline) * t_ms,
            "fps_per_w": np.array([fps_per_w(e) for e in energy_mj]),
            "samples": np.array([r.counter_updates for r in reps]),
            "lost_frames": np.zeros(len(reps), dtype=np.int64),
            "repeats": np.array([r.repeats for r in reps]),
            "repeat_time_ms": np.array([r.time_ns / 1e6 for r in reps]),
        }
        energy = float(energy_mj.sum())
        time_ms = float(t_ms.sum())
        totals = {
            "power_w": energy / time_ms if time_ms > 0 else float("nan"),
            "energy_mj": energy,
            "dynamic_energy_mj": float(cols["dynamic_energy_mj"].sum()),
            "fps_per_w": fps_per_w(energy),
            "samples": float(cols["samples"].sum()),
            "lost_frames": 0.0,
        }
        info.update({"baseline_power_w": baseline,
                     "method": "repeat-to-resolve power x in-frame time",
                     "counter_update_interval_ns": int(src.update_interval_ns)})
        return PowerResult(columns=cols, totals=totals, info=info)


def capture_info(capture: DeviceTrace, source: StreamSource) -> dict[str, Any]:
    """What the sidecar records of a capture on the logger's clock."""
    c = capture.counters
    out: dict[str, Any] = {
        "sample_rate_hz": round(float(capture.rate_hz), 1),
        "samples": int(capture.samples.size),
        "frames_ok": c.frames_ok,
        "device_samples_dropped": c.device_samples_dropped,
        "trace_dir": str(capture.path) if capture.path else None,
    }
    if source.fit is not None:
        out["clock_map"] = source.fit.clock.to_dict()
    return out
