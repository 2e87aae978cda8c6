"""Measure one model's layers on one processor at one level: the one path `coupprof
layers`, `coupprof sweep`, the tables `run` and `predict` measure first, and the
benchmarks take.

    m = measure_layers(board, "G", ModelUnderTest.of(path, data, sliced),
                       LayerSettings(frames=60, fused=FusedSettings()), level=(4, 600_000),
                       power=session)
    m.tables()   # the layer table (`profiler.measure.tables`), fused figures included

In this order: the processor's level is set and held (`Levels`: restored when the
measurement ends, also on errors, Ctrl-C and SIGTERM); the power source measures its idle
baseline before the layers compile (a GPU stays clocked up for seconds after work); the
sliced frames run with the marker high around each layer, and their energy is
attributed (an error there aborts the stream); then, for the fused method, the prefixes'
rounds and each prefix's power (`profiler.measure.fused`). The clock is sampled while the
figures the table reports are measured: the frames, or the rounds.

`ProcessorLayers` is the processor's half, for callers that measure one processor at
several levels or need its executor: its interpreters and prefixes are built once (after
the first baseline) and only the frequency changes between levels (with the fused method,
the sliced interpreters are closed before the rounds and built again for the next level,
and prefixes measured in blocks are loaded again: docs/fused.md, "Memory").
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, ExitStack
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from governors import RestoreGuard, writable_governor
from governors.host import HostLevel, read_host_level
from profiler.boards.host import format_cpu_list
from profiler.clock import Clock, perf_clock
from profiler.errors import ProfilerError
from profiler.executors import fallback_flags, late_runs
from profiler.executors.base import SubModelInterpreter, return_freed_memory
from profiler.executors.factory import make_executor
from profiler.markers.hooks import LayerHooks
from profiler.measure.clock_fit import ClockFit, VisitClocks, fit_clock, with_clock_fit
from profiler.measure.freq_trace import (
    FreqReader,
    FreqSampler,
    FreqTrace,
    clock_while,
    open_freq_reader,
)
from profiler.measure.fused import (
    FusedEnergy,
    FusedProfiler,
    FusedResult,
    FusedSettings,
    energy_by_prefix,
    fused_profiler,
    hold_for,
    settings_for,
)
from profiler.measure.hardware import host_governor
from profiler.measure.method import Method
from profiler.measure.results import LayerInfo, LayerRun, RunInfo, environment
from profiler.measure.runner import LayerRunner
from profiler.measure.tables import RunTables, run_tables, with_fused
from profiler.tflite.model_io import sha256_bytes

if TYPE_CHECKING:
    from governors.base import Governor, SetResult
    from profiler.boards.model import Board, ProcessorSpec
    from profiler.executors.base import Executor
    from profiler.power.session import PowerResult, PowerSession
    from profiler.slicing.specs import SlicedModel

#: ``progress(what, done, total)``: what is "frames", "energy per layer", "fused rounds"
#: or "energy per prefix" (a command's `TaskProgress` takes it as it is).
Progress = Callable[[str, int, int], None]
Note = Callable[[str], None]
ExecutorFactory = Callable[[], AbstractContextManager["Executor"]]


def _quiet(_text: str) -> None:
    """Where nobody listens for notes."""


def _step(progress: Progress | None, what: str) -> Callable[[int, int], None] | None:
    return (lambda done, total: progress(what, done, total)) if progress else None


@dataclass(frozen=True)
class LayerSettings:
    """How a processor's layers are measured at each level."""

    frames: int = 30
    warmup: int = 3
    seed: int = 0  # of the random input
    threads: int | None = None  # interpreter threads (None: the processor's core count)
    fused: FusedSettings | None = None  # the fused method's rounds; None: sliced only
    settle_s: float = 0.05  # how long a level's read-back may take to match
    # a `fallback` column where an accelerator ran layers (partly) on the CPU; a sweep's
    # one CSV for every processor has none
    fallback_column: bool = True

    @property
    def method(self) -> Method:
        return Method.SLICED if self.fused is None else Method.FUSED


@dataclass(frozen=True)
class ModelUnderTest:
    """The model whose layers are measured: its slices, its file's bytes (the fused
    method cuts its prefixes from them) and what the sidecar names it by."""

    sliced: SlicedModel
    data: bytes | None = None
    path: str = "model"  # RunInfo.model_path
    name: str = "model"  # in the interpreters' names
    sha256: str = ""

    @classmethod
    def of(cls, path: Path, data: bytes, sliced: SlicedModel) -> ModelUnderTest:
        return cls(sliced, data, str(Path(path).resolve()), Path(path).name, sha256_bytes(data))


@dataclass
class LayerMeasurement:
    """One processor at one level, measured: the layer run (sliced frames, with the power,
    executor and host columns) and, for the fused method, the rounds and their energies."""

    run: LayerRun
    fused: FusedResult | None = None
    fused_energy: FusedEnergy | None = None
    power: PowerResult | None = None  # None: no power source
    level: SetResult | None = None  # the processor's level as set (None: left alone)
    host: HostLevel | None = None  # its host cluster's level (None: no separate host)
    freq: FreqSampler | None = None  # what sampled its clock (None: it cannot be read)
    # the fused rows against the clock read at each visit (`profiler.measure.clock_fit`)
    clock_fit: ClockFit | None = None

    @property
    def power_error(self) -> ProfilerError | None:
        """A power failure (the timings are kept; the power columns are what survived)."""
        return self.power.error if self.power is not None else None

    @property
    def freq_trace(self) -> FreqTrace | None:
        return self.freq.trace() if self.freq is not None else None

    def tables(self, raw: bool = False) -> RunTables:
        """The layer table, with the fused figures beside the sliced ones where measured."""
        tables = run_tables(self.run, raw=raw)
        if self.fused is not None and self.clock_fit is not None:
            return with_clock_fit(with_fused(tables, self.fused, self.fused_energy),
                                  self.clock_fit)
        return tables if self.fused is None else with_fused(tables, self.fused,
                                                            self.fused_energy)


# -- levels -------------------------------------------------------------------------


def set_level(gov: Governor, level: tuple[int, int], settle_s: float = 0.05) -> SetResult:
    """Set ``level`` (1-based level, kHz) and wait until it is in effect: where a governor
    models the transition delay (the simulated board's ``effective_khz``, ARM-CO-UP Table
    10: up to ~4.5 ms), so that no frame, even without warm-up, runs at the old one."""
    res = gov.set_khz(level[1], settle_s, level=level[0])
    gov.wait_in_effect(res.requested_khz, settle_s)
    return res


class Levels:
    """The governors a measurement sets, each restored when it ends: on success, errors,
    Ctrl-C and SIGTERM (`governors.RestoreGuard`). `set` notes a read-back that differs."""

    def __init__(self, governors: Iterable[Governor | None], note: Note = _quiet,
                 settle_s: float = 0.05) -> None:
        self._guard = RestoreGuard([g for g in governors if g is not None])
        self.note = note
        self.settle_s = settle_s

    def __enter__(self) -> Levels:
        self._guard.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._guard.__exit__(*exc)

    def set(self, gov: Governor, level: tuple[int, int], what: str = "") -> SetResult:
        """Set ``level`` on ``gov`` (one of this bracket's); ``what`` prefixes a warning."""
        res = set_level(gov, level, self.settle_s)
        if res.warning:
            self.note(f"warning: {what}{res.warning}")
        return res

    def setup(self, setup: Mapping[str, tuple[int, int]],
              govs: Mapping[str, Governor]) -> list[SetResult]:
        """Per-processor levels (`FreqPlan.setup`: DVFS domain -> (level, kHz)), each
        domain set once and read back."""
        return [self.set(govs[dom], level) for dom, level in setup.items()]


# -- one processor --------------------------------------------------------------------


class _Chain(LayerHooks):
    """Two sets of hooks, the first one's calls first (the marker's nearest the invoke)."""

    def __init__(self, first: LayerHooks, second: LayerHooks) -> None:
        self.first, self.second = first, second

    def before_frame(self, frame: int, warmup: bool) -> None:
        self.first.before_frame(frame, warmup)
        self.second.before_frame(frame, warmup)

    def after_frame(self, frame: int, warmup: bool) -> None:
        self.second.after_frame(frame, warmup)
        self.first.after_frame(frame, warmup)

    def before_layer(self, layer: int) -> None:
        self.first.before_layer(layer)
        self.second.before_layer(layer)

    def after_layer(self, layer: int) -> None:
        self.second.after_layer(layer)
        self.first.after_layer(layer)


def chain_hooks(first: LayerHooks | None, second: LayerHooks | None) -> LayerHooks | None:
    """``first`` and ``second`` as one set of hooks (either may be None)."""
    if first is None or second is None:
        return first or second
    return _Chain(first, second)


@dataclass(eq=False)
class ProcessorLayers:
    """One processor's interpreters (the sliced runner) and fused prefixes, built once on
    first use and measured at one level after another (`measure`).

    ``executor``: an open one (its caller closes it), or ``open_executor`` to open one on
    first use, after the power source's first idle baseline (default: the board's for the
    processor, `profiler.executors.factory.make_executor`). ``governor`` sets the
    processor's levels, inside ``levels`` (held by the caller). ``hooks`` run around every
    layer, before the power marker's. ``freq_reader``: the processor's clock frequency,
    sampled while the table's figures are measured (`profiler.measure.freq_trace.
    open_freq_reader`). ``host_set``: the host cluster's level was set by the caller (the
    sidecar says so). ``env``: the RunInfo's versions and command (default: `environment()`
    at each measurement). ``clock``: the timestamps' (`profiler.clock`).
    """

    board: Board
    letter: str
    model: ModelUnderTest
    settings: LayerSettings
    _: KW_ONLY
    executor: Executor | None = None
    open_executor: ExecutorFactory | None = None
    governor: Governor | None = None
    levels: Levels | None = None
    host_set: bool = False
    freq_reader: FreqReader | None = None
    hooks: LayerHooks | None = None
    sysfs_root: Path | None = None
    env: Mapping[str, str] | None = None
    clock: Clock = perf_clock
    proc: ProcessorSpec = field(init=False)
    _stack: ExitStack = field(default_factory=ExitStack, init=False, repr=False)
    _runner: LayerRunner | None = field(default=None, init=False, repr=False)
    _prefixes: FusedProfiler | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.governor is not None and self.levels is None:
            raise ValueError("a governor is set inside Levels, which restore it")
        if self.settings.fused is not None and self.model.data is None:
            raise ValueError("the fused method needs the model's bytes")
        self.proc = self.board.processor(self.letter)

    def __enter__(self) -> ProcessorLayers:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def open(self) -> Executor:
        """The processor's executor, opened on first use."""
        if self.executor is None:
            if self.open_executor is None:
                cm: AbstractContextManager[Executor] = make_executor(
                    self.board, self.letter, threads=self.settings.threads)
            else:
                cm = self.open_executor()
            self.executor = self._stack.enter_context(cm)
        return self.executor

    @property
    def runner(self) -> LayerRunner:
        """The sliced runner: one interpreter per layer, built on first use."""
        if self._runner is None:
            self._runner = LayerRunner(self.model.sliced, self.open(), clock=self.clock,
                                       seed=self.settings.seed, model_name=self.model.name)
        return self._runner

    @property
    def prefixes(self) -> FusedProfiler:
        """The fused method's prefixes, loaded on first use (`profiler.measure.fused`)."""
        if self._prefixes is None:
            fused = self.settings.fused or FusedSettings()
            self._prefixes = fused_profiler(self.open(), self.model.data or b"",
                                            self.model.sliced, fused, seed=self.settings.seed,
                                            clock=self.clock, model_name=self.model.name,
                                            sysfs_root=self.sysfs_root)
        return self._prefixes

    def release_runner(self) -> None:
        """Close the sliced runner's sub-models now (it is built again when next wanted):
        a deep model's fused prefixes need that memory (docs/fused.md, "Memory")."""
        runner, self._runner = self._runner, None
        if runner is None or self.executor is None:
            return
        subs = [i.sub for i in runner.interpreters if isinstance(i, SubModelInterpreter)]
        del runner  # a CPU's raw interpreters go with it
        for sub in subs:
            self.executor.unload(sub)
        del subs
        gc.collect()
        return_freed_memory()

    def measure(self, level: tuple[int, int] | None = None, *,
                power: PowerSession | None = None, progress: Progress | None = None,
                host_columns: bool = False,
                on_power_error: Callable[[ProfilerError], None] | None = None,
                extra: Mapping[str, Any] | None = None) -> LayerMeasurement:
        """The layers at ``level`` (level, kHz): set by ``governor`` when there is one,
        else already in force (or None: left alone). ``power``: an open session.
        ``host_columns``: the host's columns even where there is no host (blank: one CSV
        for every processor). ``on_power_error`` hears a power failure before the fused
        rounds; raising there stops the measurement. ``extra``: more for the sidecar."""
        s = self.settings
        proc = self.proc
        set_result = None
        if level is not None and self.governor is not None:
            assert self.levels is not None
            set_result = self.levels.set(self.governor, level)
        host = read_host_level(self.board, proc.letter, self.sysfs_root,
                               requested=self.host_set)
        if power is not None:
            # The idle baseline comes first: compiling layers for an accelerator is work
            # too, and a GPU stays clocked up for seconds after it.
            power.begin()
        runner = self.runner
        n = len(runner.layers)
        late_before = _late_runs(runner)
        runner.hooks = chain_hooks(self.hooks, power.hooks(s.frames, n)
                                   if power is not None else None)
        # The clock (where it can be read) while the figures the table reports are
        # measured: the frames, or the fused rounds.
        freq = FreqSampler(self.freq_reader) if self.freq_reader is not None else None
        try:
            with clock_while(freq if s.fused is None else None):
                timings = runner.run(s.frames, s.warmup, progress=_step(progress, "frames"))
        except BaseException:
            if power is not None:
                power.abort()
            raise
        energy = None
        if power is not None:
            # The fused method's energies come from its prefixes (each run back to back
            # while the source resolves its power), not from the sliced layers' windows,
            # which hold each sliced call's own fixed cost.
            calls = [] if s.fused is not None and not power.streaming else \
                [runner.layer_call(i) for i in range(n)]
            energy = power.finish(timings, calls, progress=_step(progress, "energy per layer"))
            if energy.error is not None and on_power_error is not None:
                on_power_error(energy.error)
        columns: dict[str, Any] = dict(energy.columns) if energy is not None else {}
        columns.update(self._executor_columns(late_before))
        if host is not None:
            columns.update(host.columns(n))
        elif host_columns:
            columns.update(dict.fromkeys(("host_level", "host_freq_khz"), [None] * n))
        fused = fused_energy = clock_fit = None
        if s.fused is not None:
            self.release_runner()  # its layers are measured; the prefixes want the memory
            # A source that failed in the frames (a logger unplugged) prices no prefix:
            # the rounds still time the layers, and the run keeps what it measured.
            failed = energy is not None and energy.error is not None
            powers = None if power is None or failed else (lambda calls: power.call_powers(
                calls, _step(progress, "energy per prefix")))
            # the clock at each visit too, outside its timed calls: the rows are fitted
            # against it (`profiler.measure.clock_fit`)
            visits = VisitClocks(self.freq_reader) if self.freq_reader is not None else None
            with clock_while(freq):
                fused = self.prefixes.measure(hold_for(settings_for(s.fused, proc.kind),
                                                       self.freq_reader),
                                              _step(progress, "fused rounds"), hooks=visits)
                fused_energy = None if powers is None else \
                    energy_by_prefix(fused, self.prefixes.column_powers(powers))
            clock_fit = fit_clock(fused, visits) if visits is not None else None
            if len(self.prefixes.blocks) > 1:
                self.prefixes.unload()  # the next level's sliced runner comes first
        info = self._info(level, power, set_result, freq, energy, host, extra)
        run = LayerRun(info, [LayerInfo.from_layer(layer) for layer in self.model.sliced.layers],
                       timings, layer_extras=columns,
                       total_extras=dict(energy.totals) if energy is not None else {})
        return LayerMeasurement(run, fused, fused_energy, energy, set_result, host, freq,
                                clock_fit)

    def _executor_columns(self, late_before: list[tuple[int, int]]) -> dict[str, Any]:
        """``fallback`` where an accelerator ran a layer (partly) on the CPU, and on the
        simulated board ``sim_late_runs``: per layer, the runs of this measurement
        (warm-up included) in which this machine took longer than the modelled
        processor, so the layer took the host's time instead of the model's."""
        out: dict[str, Any] = {}
        flags = fallback_flags(self.runner.interpreters)
        if self.settings.fallback_column and any(f is not None for f in flags):
            out["fallback"] = ["" if f is None else ("yes" if f else "no") for f in flags]
        after = _late_runs(self.runner)
        if any(runs for runs, _ in after):
            out["sim_late_runs"] = [a[1] - b[1] for b, a in zip(late_before, after, strict=True)]
        return out

    def _info(self, level: tuple[int, int] | None, power: PowerSession | None,
              set_result: SetResult | None, freq: FreqSampler | None,
              energy: PowerResult | None, host: HostLevel | None,
              more: Mapping[str, Any] | None) -> RunInfo:
        ex, proc, s = self.open(), self.proc, self.settings
        cores = tuple(ex.cores)
        extra: dict[str, Any] = {"board_description": self.board.description, "seed": s.seed,
                                 "cores_text": format_cpu_list(cores),
                                 "executor": ex.describe()}
        if self.board.simulated and proc.cores and tuple(proc.cores) != cores:
            # the profile's cores, which this machine's stand in for (the title says both)
            extra["board_cores"] = list(proc.cores)
        if set_result is not None and self.governor is not None and level is not None:
            extra["governor"] = {"kind": self.governor.kind, "requested_khz": level[1],
                                 "effective_khz": set_result.effective_khz,
                                 "warning": set_result.warning}
        if freq is not None:
            trace = freq.trace()
            extra["freq_trace"] = trace.to_dict() if trace is not None else None
            if freq.error:
                extra["freq_trace_error"] = freq.error
        if energy is not None:
            extra.update(energy.info)
            if energy.error is not None:
                extra["power_error"] = str(energy.error)
        if host is not None:
            extra["host"] = host.to_dict()
        extra.update(more or {})
        sliced = self.model.sliced
        return RunInfo(
            board=self.board.name, simulated=self.board.simulated,
            model_path=self.model.path, model_sha256=self.model.sha256,
            processor=proc.letter, processor_name=proc.name, cores=cores,
            threads=ex.threads,
            frames=s.frames, warmup=s.warmup,
            granularity=sliced.granularity, cuts=tuple(sliced.cuts),
            freq_level=level[0] if level else None, freq_khz=level[1] if level else None,
            power_source=power.source.spec if power is not None else "none",
            method=s.method, extra=extra,
            **(dict(self.env) if self.env is not None else environment()),
        )


def _late_runs(runner: LayerRunner) -> list[tuple[int, int]]:
    return late_runs(runner.interpreters)


# -- the whole measurement --------------------------------------------------------------


def measure_layers(board: Board, letter: str, model: ModelUnderTest, settings: LayerSettings,
                   *, level: tuple[int, int] | None = None,
                   host_level: tuple[int, int] | None = None,
                   power: PowerSession | None = None, sysfs_root: Path | None = None,
                   open_executor: ExecutorFactory | None = None,
                   hooks: LayerHooks | None = None, sample_freq: bool = True,
                   note: Note = _quiet, progress: Progress | None = None,
                   env: Mapping[str, str] | None = None,
                   extra: Mapping[str, Any] | None = None,
                   clock: Clock = perf_clock) -> LayerMeasurement:
    """``model``'s layers on processor ``letter`` of ``board`` (see the module docstring).

    ``level`` (level, kHz) of the processor's DVFS domain and ``host_level`` of its host
    cluster (`profiler.measure.hardware.host_level`) are set and restored (None: left
    alone). ``power``: a session not yet opened (opened and closed here). ``sample_freq``:
    sample the processor's clock frequency where it can be read. ``note`` hears warnings
    (a level that reads back otherwise, a clock that cannot be read). A power failure does
    not raise: the timings are kept and `LayerMeasurement.power_error` says what failed.
    Other arguments: `ProcessorLayers` and its `measure`."""
    gov = writable_governor(board, letter, sysfs_root) if level is not None else None
    host_gov = host_governor(board, letter, sysfs_root) if host_level is not None else None
    with ExitStack() as stack:
        levels = stack.enter_context(Levels([gov, host_gov], note, settings.settle_s))
        if power is not None:
            stack.enter_context(power)
        if host_gov is not None and host_level is not None:
            levels.set(host_gov, host_level, "host ")
        reader = open_freq_reader(stack, board, board.processor(letter), sysfs_root, note) \
            if sample_freq else None
        proc = stack.enter_context(ProcessorLayers(
            board, letter, model, settings, open_executor=open_executor, governor=gov,
            levels=levels, host_set=host_gov is not None, freq_reader=reader, hooks=hooks,
            sysfs_root=sysfs_root, env=env, clock=clock))
        return proc.measure(level, power=power, progress=progress, extra=extra)


__all__ = ["LayerMeasurement", "LayerSettings", "Levels", "ModelUnderTest", "ProcessorLayers",
           "chain_hooks", "measure_layers", "set_level"]
