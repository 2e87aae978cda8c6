"""Running a sweep: every planned (processor, DVFS level) pair measured into one CSV.

    plan = plan_pairs(board, ["B", "G"], parse_freqs("all"))  # profiler.sweep.plan
    sweep = Sweep(board, model_path, plan, out_dir, SweepSettings(frames=30))
    result = sweep.run(progress)

What it costs: the model is sliced once; for each processor the executor (core
affinity) and the runner's interpreters are built once, and between the levels
of that processor only the frequency changes (through the board's governor,
restored afterwards by `governors.RestoreGuard`, also on Ctrl-C and SIGTERM).
A sweep therefore costs close to the sum of the frames it runs
(`benchmarks/sweep.py` measures the ratio).

Per pair: set the level and wait until it is in effect, run the frames (with the
power session's markers, if any), for a processor measured with the fused method
(`profiler.measure.fused`, the default for G and N) also the interleaved prefix rounds (the
prefixes are loaded once per processor), append the layer rows to ``sweep.csv`` and
rewrite ``sweep.json`` (a fused pair's entry holds its fixed per-call row, rounds and
budget). Which pairs are left to do is `profiler.sweep.plan`; the
files and reading them back, `profiler.sweep.schema`.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler.boards.model import Board, ProcessorSpec
from profiler.errors import BadInputError
from profiler.jsonfile import write_json_atomic
from profiler.measure.freq_trace import FreqSampler, FreqTrace, clock_while, open_freq_reader
from profiler.measure.fused import (
    FusedProfiler,
    FusedSettings,
    default_method,
    energy_by_prefix,
    fused_profiler,
)
from profiler.measure.results import (
    LAYER_END,
    TRANSFER_START,
    LayerInfo,
    LayerRun,
    LayerTimings,
    RunInfo,
)
from profiler.measure.runner import LayerHooks
from profiler.measure.tables import RunTables, layer_table, totals, with_fused
from profiler.sweep.plan import Pair, ResumeState, resume_state
from profiler.sweep.schema import CSV_NAME, JSON_NAME, make_output_dir, sidecar_key

# Columns a fused pair adds; a sliced pair of a sweep that has fused pairs leaves them blank.
FUSED_COLUMNS = ("time_ms_fused", "time_ms_fused_ci95", "below_resolution")

# -- settings and results ------------------------------------------------------------


@dataclass(frozen=True)
class SweepSettings:
    """How each pair is run (recorded in the sidecar; `RESUME_KEYS` must match to resume)."""

    frames: int = 30
    warmup: int = 3
    threads: int | None = None
    granularity: str = "layer"
    cuts: str | None = None
    seed: int = 0
    settle_s: float = 0.05  # how long set_level waits for the read-back to match
    method: str | None = None  # fused | sliced; None: fused for G and N, sliced for CPUs
    host_freq: str | None = None  # G's host cluster level (--host-freq); None: left alone
    fused: FusedSettings = field(default_factory=FusedSettings)

    def method_for(self, proc: ProcessorSpec) -> str:
        return self.method or default_method(proc.kind)


@dataclass
class PairResult:
    pair: Pair
    effective_khz: int | None
    warning: str | None
    totals: dict[str, float]
    rows: int
    measured_ns: int  # sum over recorded frames of (last layer end - first transfer start)
    wall_ns: int  # setting the level, warm-up and recorded frames, writing the rows

    def to_dict(self) -> dict[str, Any]:
        return {"processor": self.pair.processor, "level": self.pair.level,
                "freq_khz": self.pair.freq_khz, "effective_khz": self.effective_khz,
                "warning": self.warning, "rows": self.rows, "measured_ns": self.measured_ns,
                "wall_ns": self.wall_ns, "totals": self.totals}


@dataclass
class SweepResult:
    csv_path: Path
    json_path: Path
    done: list[PairResult] = field(default_factory=list)
    skipped: list[Pair] = field(default_factory=list)  # already in the CSV (--resume)
    wall_ns: int = 0  # from the start of slicing to the last row written

    @property
    def measured_ns(self) -> int:
        return sum(r.measured_ns for r in self.done)


class SweepProgress:
    """Told what the sweep does; override what you need (the CLI draws bars or lines)."""

    def start(self, todo: Sequence[Pair], skipped: Sequence[Pair], frames_per_pair: int) -> None:
        """Before slicing, with the pairs still to measure and those already done."""

    def note(self, text: str) -> None:
        """Something the user should know (governor method, read-back warnings)."""

    def pair_started(self, index: int, pair: Pair) -> None:
        """Pair `index` (0-based among `todo`) is about to be measured."""

    def frame(self, done: int, total: int) -> None:
        """Frames done within the current pair (warm-up included)."""

    def pair_done(self, index: int, result: PairResult) -> None:
        """The pair's rows are on disk."""


def frame_time_ns(timings: LayerTimings) -> int:
    """Sum over frames of (last layer's end - first layer's transfer start)."""
    ts = timings.ts_ns
    return int((ts[:, -1, LAYER_END] - ts[:, 0, TRANSFER_START]).sum())


# -- running -----------------------------------------------------------------------


ExecutorFactory = Callable[[ProcessorSpec, "int | None"], Any]


@dataclass
class _Job:
    """One `Sweep.run`'s state, shared by its steps."""

    sliced: Any
    sha: str  # of the model file
    output: ResumeState  # the CSV and sidecar being written
    progress: SweepProgress
    result: SweepResult
    env: dict[str, str] = field(default_factory=dict)
    layer_infos: list[LayerInfo] = field(default_factory=list)
    index: int = 0  # pairs measured so far in this run
    told: set[str] = field(default_factory=set)  # processors whose governor method was said


class Sweep:
    """Measures `pairs` on `board` into `out_dir`/sweep.csv (see the module docstring).

    `power` (a `PowerSession`, opened and closed here) adds the energy columns: per pair
    the stream is started, the idle baseline measured, the frames run with its marker
    hooks and the energy attributed (on the simulated board, the power source holds the
    board's power model, which the simulated executor tells what each layer draws).
    `hooks` are passed to every runner too (tests watch the frequency in force);
    `executor_factory(proc, threads)` returns an executor context manager (default:
    `profiler.executors.factory.make_executor`: CPU sets, accelerators, delegates, and the
    simulated board's paced processors); `sliced` skips slicing when given.
    """

    def __init__(
        self,
        board: Board,
        model_path: Path,
        pairs: Sequence[Pair],
        out_dir: Path,
        settings: SweepSettings = SweepSettings(),
        *,
        resume: bool = False,
        sysfs_root: Path | None = None,
        hooks: LayerHooks | None = None,
        executor_factory: ExecutorFactory | None = None,
        sliced: Any = None,
        argv: list[str] | None = None,
        power: Any = None,
    ) -> None:
        if not pairs:
            raise BadInputError("the sweep has no (processor, level) pairs",
                                "name processors with --processors and levels with --freqs")
        self.board = board
        self.model_path = Path(model_path)
        self.pairs = list(pairs)
        self.out_dir = Path(out_dir)
        self.settings = settings
        self.resume = resume
        self.sysfs_root = sysfs_root
        self.hooks = hooks
        self.executor_factory = executor_factory
        self.sliced = sliced
        self.argv = argv
        self.power = power  # a profiler.power.session.PowerSession (opened here) or None
        self.csv_path = self.out_dir / CSV_NAME
        self.json_path = self.out_dir / JSON_NAME

    def run(self, progress: SweepProgress | None = None) -> SweepResult:
        """Slice, find what is left to do, and measure it pair by pair."""
        t_start = time.perf_counter_ns()
        job = self._prepare(progress or SweepProgress())
        todo = job.output.todo(self.pairs)
        job.progress.start(todo, job.result.skipped, self.settings.warmup + self.settings.frames)
        if todo:
            self._run_pairs(job, todo)
        job.result.wall_ns = time.perf_counter_ns() - t_start
        return job.result

    # ---- set-up ------------------------------------------------------------------

    def _prepare(self, progress: SweepProgress) -> _Job:
        from profiler.slicing.slicer import slice_model
        from profiler.tflite.model_io import read_model_bytes, sha256_bytes

        sha = sha256_bytes(read_model_bytes(self.model_path))
        s = self.settings
        sliced = self.sliced or slice_model(self.model_path, s.granularity, s.cuts)
        make_output_dir(self.out_dir)
        output = resume_state(self.csv_path, self.json_path, self._settings_dict(sha, sliced),
                              self.resume)
        result = SweepResult(self.csv_path, self.json_path, skipped=output.skipped(self.pairs))
        return _Job(sliced, sha, output, progress, result)

    def _settings_dict(self, sha: str, sliced: Any) -> dict[str, Any]:
        s = self.settings
        return {
            "board": self.board.name, "simulated": self.board.simulated,
            "model_path": str(self.model_path.resolve()), "model_sha256": sha,
            "granularity": s.granularity, "cuts": s.cuts, "frames": s.frames,
            "warmup": s.warmup, "threads": s.threads, "seed": s.seed,
            "layers": len(sliced.layers), "slice_cuts": list(sliced.cuts),
            "power_source": self.power.source.spec if self.power is not None else "none",
            "method": s.method or "fused for G and N, sliced for CPU clusters",
            "fused": s.fused.to_dict(), "host_freq": s.host_freq,
        }

    def _governors(self, todo: Sequence[Pair]) -> dict[str, Any]:
        """processor letter -> governor, for the letters that have levels to set."""
        from governors import writable_governor

        govs: dict[str, Any] = {}
        by_domain: dict[str, Any] = {}
        for pair in todo:
            if pair.level is None or pair.processor in govs:
                continue
            domain = self.board.dvfs_domain(pair.processor).letter
            if domain not in by_domain:
                by_domain[domain] = writable_governor(
                    self.board, pair.processor, self.sysfs_root,
                    none_fix="use --freqs current to sweep at the current frequency")
            govs[pair.processor] = by_domain[domain]
        return govs

    def _host_governors(self, todo: Sequence[Pair]) -> dict[str, tuple[Any, tuple[int, int]]]:
        """G letter -> (its host's governor, the --host-freq level) when one is asked."""
        from governors import writable_governor
        from governors.host import host_domain
        from profiler.boards.model import resolve_level

        out: dict[str, tuple[Any, tuple[int, int]]] = {}
        if self.settings.host_freq is None:
            return out
        for letter in dict.fromkeys(p.processor for p in todo):
            host = host_domain(self.board, letter)
            if host is not None:
                out[letter] = (writable_governor(self.board, host.letter, self.sysfs_root),
                               resolve_level(host, self.settings.host_freq, self.board.name))
        return out

    def _executor(self, proc: ProcessorSpec) -> Any:
        if self.executor_factory is not None:
            return self.executor_factory(proc, self.settings.threads)
        from profiler.executors.factory import make_executor

        return make_executor(self.board, proc.letter, threads=self.settings.threads)

    # ---- the pairs ---------------------------------------------------------------

    def _run_pairs(self, job: _Job, todo: Sequence[Pair]) -> None:
        from governors import RestoreGuard
        from profiler.measure.results import environment

        job.env = environment(self.argv)
        job.output.meta.setdefault("environment", {}).update(job.env)
        job.layer_infos = [LayerInfo.from_layer(layer) for layer in job.sliced.layers]
        govs = self._governors(todo)
        hosts = self._host_governors(todo)
        # The runner collects garbage before each run's timed frames; with everything
        # alive so far frozen, that collection scans only what each pair adds (a full
        # one costs tens of ms per pair with pandas and LiteRT loaded).
        gc.collect()
        gc.freeze()
        guarded = list(dict.fromkeys([*govs.values(), *(g for g, _ in hosts.values())]))
        with RestoreGuard(guarded), _unfreeze_after(), ExitStack() as power_stack:
            if self.power is not None:
                power_stack.enter_context(self.power)
            for letter in dict.fromkeys(p.processor for p in todo):
                if letter in hosts:
                    host_gov, (level, khz) = hosts[letter]
                    host_gov.set_khz(khz, level=level)
                self._run_processor(job, letter, [p for p in todo if p.processor == letter],
                                    govs.get(letter))

    def _run_processor(self, job: _Job, letter: str, pairs: list[Pair], gov: Any) -> None:
        """One executor and one runner for all of a processor's pairs."""
        from governors.host import host_domain, read_host_level
        from profiler.executors import late_runs
        from profiler.measure.runner import LayerRunner

        proc = self.board.processor(letter)
        any_fused = any(self.settings.method_for(self.board.processor(p.processor)) == "fused"
                        for p in self.pairs)
        any_host = any(host_domain(self.board, p.processor) is not None for p in self.pairs)
        with self._executor(proc) as executor, ExitStack() as stack:
            runner = LayerRunner(job.sliced, executor, hooks=self.hooks, seed=self.settings.seed,
                                 model_name=self.model_path.name)  # hooks: per pair
            prof = self._fused_profiler(proc, executor, job)
            reader = open_freq_reader(stack, self.board, proc, self.sysfs_root,
                                      job.progress.note)
            for pair in pairs:
                job.progress.pair_started(job.index, pair)
                t0 = time.perf_counter_ns()
                effective, warning = self._set_level(job, pair, gov)
                host = read_host_level(self.board, letter, self.sysfs_root,
                                       requested=self.settings.host_freq is not None)
                late_before = late_runs(runner.interpreters)
                # the clock while the figures the pair's rows report are measured
                sampler = FreqSampler(reader) if reader is not None else None
                with clock_while(sampler if prof is None else None):
                    timings, energy = self._measure(runner, proc, pair, job.progress,
                                                    prefix_energy=prof is not None)
                info = self._info(pair, proc, executor, job)
                columns = dict(energy.columns) if energy is not None else {}
                if host is not None:
                    columns.update(host.columns(len(job.layer_infos)))
                elif any_host:  # one CSV: a CPU's rows leave the host columns blank
                    columns.update(dict.fromkeys(("host_level", "host_freq_khz"),
                                                 [None] * len(job.layer_infos)))
                if self.board.simulated:  # runs of this pair the host could not keep up with
                    columns["sim_late_runs"] = [
                        after[1] - before[1] for before, after in
                        zip(late_before, late_runs(runner.interpreters), strict=True)]
                run = LayerRun(info, job.layer_infos, timings, columns,
                               dict(energy.totals) if energy is not None else {})
                rows, tot, fused_info = layer_table(run), totals(run), None
                if prof is not None:
                    with clock_while(sampler):
                        fused = prof.measure(self.settings.fused)
                    # The fused energies come from the prefixes (profiler.measure.fused).
                    f_energy = energy_by_prefix(fused, self.power.call_powers(prof.calls)) \
                        if self.power is not None else None
                    tables = with_fused(RunTables(rows, None, info.to_dict(), tot), fused,
                                        f_energy)
                    rows, tot, fused_info = tables.layers, tables.totals, fused.info()
                elif any_fused:
                    rows = rows.assign(**{c: float("nan") for c in FUSED_COLUMNS})
                    if "energy_mj" in rows.columns:  # a sliced pair's energy is the sliced one
                        rows["energy_mj_sliced"] = rows["energy_mj"]
                job.output.csv.append(rows)
                self._record(job, PairResult(pair, effective, warning, tot, len(rows),
                                             frame_time_ns(timings), time.perf_counter_ns() - t0),
                             energy, fused_info, sampler.trace() if sampler else None)

    def _fused_profiler(self, proc: ProcessorSpec, executor: Any, job: _Job,
                        ) -> FusedProfiler | None:
        """The processor's prefixes, loaded once for all its pairs (None: sliced)."""
        if self.settings.method_for(proc) != "fused":
            return None
        from profiler.tflite.model_io import read_model_bytes

        return fused_profiler(executor, read_model_bytes(self.model_path), job.sliced,
                              self.settings.fused, seed=self.settings.seed,
                              model_name=self.model_path.name)

    def _set_level(self, job: _Job, pair: Pair, gov: Any) -> tuple[int | None, str | None]:
        """Set the pair's level (if it has one) and wait until it is in effect: the
        read-back frequency and a warning when it differs."""
        if pair.level is None:
            return None, None
        assert gov is not None
        settle_s = self.settings.settle_s
        res = gov.set_level(pair.level, settle_s)
        _wait_in_effect(gov, res.requested_khz, settle_s)
        if pair.processor not in job.told:  # the method is known once the first level is set
            job.progress.note(f"{pair.processor}: frequencies set via {gov.describe()}")
            job.told.add(pair.processor)
        if res.warning:
            job.progress.note(f"warning: {res.warning}")
        return res.effective_khz, res.warning

    def _measure(self, runner: Any, proc: ProcessorSpec, pair: Pair,
                 prog: SweepProgress, prefix_energy: bool = False) -> tuple[LayerTimings, Any]:
        """Run the pair's frames; with a power session, also its per-layer energy (with a
        counter and the fused method, ``prefix_energy``: from the prefixes, afterwards).

        A power failure raises before the pair's rows are written, so --resume measures
        it again; the pairs before it are on disk."""
        s = self.settings
        if self.power is None:
            runner.hooks = self.hooks
            return runner.run(s.frames, s.warmup, progress=prog.frame), None
        marker = self.power.hooks(s.frames, len(runner.layers))
        runner.hooks = _Chain(self.hooks, marker) if self.hooks and marker else self.hooks or marker
        self.power.begin()
        try:
            timings = runner.run(s.frames, s.warmup, progress=prog.frame)
        except BaseException:
            self.power.abort()
            raise
        calls = [] if prefix_energy and not self.power.streaming else \
            [runner.layer_call(i) for i in range(len(runner.layers))]
        energy = self.power.finish(timings, calls)
        if energy.error is not None:
            prog.note(f"power failed during {pair.label()}; its rows are not written")
            raise energy.error
        return timings, energy

    def _info(self, pair: Pair, proc: ProcessorSpec, executor: Any, job: _Job) -> RunInfo:
        return RunInfo(
            board=self.board.name, simulated=self.board.simulated,
            model_path=str(self.model_path.resolve()), model_sha256=job.sha,
            processor=proc.letter, processor_name=proc.name,
            cores=tuple(getattr(executor, "cores", proc.cores)),
            threads=int(getattr(executor, "threads", self.settings.threads or len(proc.cores))),
            frames=self.settings.frames, warmup=self.settings.warmup,
            granularity=job.sliced.granularity, cuts=tuple(job.sliced.cuts),
            freq_level=pair.level, freq_khz=pair.freq_khz,
            power_source=self.power.source.spec if self.power is not None else "none", **job.env,
        )

    def _record(self, job: _Job, pr: PairResult, energy: Any,
                fused_info: dict[str, Any] | None = None,
                freq_trace: FreqTrace | None = None) -> None:
        """The pair's rows are on disk: note it in the sidecar, the result and progress."""
        entry = pr.to_dict()
        if energy is not None:
            entry["power"] = energy.info
        if fused_info is not None:
            entry["fused"] = fused_info
        if freq_trace is not None:
            entry["freq_trace"] = freq_trace.to_dict()
        job.output.meta["pairs"][sidecar_key(pr.pair.processor, pr.pair.level)] = entry
        write_json_atomic(self.json_path, job.output.meta)
        job.result.done.append(pr)
        job.progress.pair_done(job.index, pr)
        job.index += 1


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


def _wait_in_effect(gov: Any, freq_khz: int, timeout_s: float) -> None:
    """Where a governor models the transition delay (the simulated board's
    `effective_khz`, ARM-CO-UP Table 10: up to ~4.5 ms), wait until the new frequency
    is in effect so no recorded frame, even without warm-up, runs at the old one."""
    effective = getattr(gov, "effective_khz", None)
    if effective is None:
        return
    deadline = time.monotonic() + timeout_s
    while effective() != freq_khz and time.monotonic() < deadline:
        time.sleep(0.0002)


@contextmanager
def _unfreeze_after() -> Iterator[None]:
    try:
        yield
    finally:
        gc.unfreeze()


__all__ = [
    "PairResult", "Sweep", "SweepProgress", "SweepResult", "SweepSettings", "frame_time_ns",
]
