"""Running a sweep: every planned (processor, DVFS level) pair measured into one CSV.

    plan = plan_pairs(board, ["B", "G"], parse_freqs("all"))  # profiler.sweep.plan
    sweep = Sweep(board, model_path, plan, out_dir, SweepSettings(frames=30))
    result = sweep.run(progress)

What it costs: the model is sliced once; for each processor the executor (core
affinity) and the runner's interpreters are built once, and between the levels
of that processor only the frequency changes (through the board's governor,
restored afterwards, also on Ctrl-C and SIGTERM): each processor is one
`profiler.measure.layers.ProcessorLayers`, measured at one level after another.
A sweep therefore costs close to the sum of the frames it runs
(`benchmarks/sweep.py` measures the ratio).

Per pair: set the level and wait until it is in effect, run the frames (with the
power session's markers, if any), for a processor measured with the fused method
(`profiler.measure.fused`, the default for G and N) also the interleaved prefix rounds (the
prefixes are loaded once per processor), append the layer rows (a sliced pair of a sweep
with fused pairs in their columns, `profiler.measure.tables.in_fused_layout`) to ``sweep.csv`` and
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
from typing import TYPE_CHECKING, Any

from profiler.boards.model import Board, ProcessorSpec
from profiler.errors import BadInputError, ProfilerError
from profiler.jsonfile import write_json_atomic
from profiler.markers.hooks import LayerHooks
from profiler.measure.freq_trace import FreqTrace, open_freq_reader
from profiler.measure.fused import FusedSettings
from profiler.measure.hardware import governors_for, host_governor, host_level
from profiler.measure.layers import LayerSettings, Levels, ModelUnderTest, ProcessorLayers
from profiler.measure.method import Method
from profiler.measure.results import LAYER_END, TRANSFER_START, LayerTimings
from profiler.measure.tables import in_fused_layout
from profiler.sweep.plan import Pair, ResumeState, resume_state
from profiler.sweep.schema import CSV_NAME, JSON_NAME, make_output_dir, sidecar_key

if TYPE_CHECKING:
    from governors import Governor
    from profiler.executors.base import Executor
    from profiler.power.session import PowerResult, PowerSession
    from profiler.slicing.specs import SlicedModel

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
    method: Method | None = None  # None: Method.default_for each processor's kind
    host_freq: str | None = None  # G's host cluster level (--host-freq); None: left alone
    fused: FusedSettings = field(default_factory=FusedSettings)

    def method_for(self, proc: ProcessorSpec) -> Method:
        return Method.chosen(self.method, proc.kind)


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


ExecutorFactory = Callable[[ProcessorSpec, "int | None"], "Executor"]


@dataclass
class _Job:
    """One `Sweep.run`'s state, shared by its steps."""

    sliced: SlicedModel
    sha: str  # of the model file
    output: ResumeState  # the CSV and sidecar being written
    progress: SweepProgress
    result: SweepResult
    env: dict[str, Any] = field(default_factory=dict)  # RunInfo's environment fields
    model: ModelUnderTest | None = None  # what every pair measures
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
        sliced: SlicedModel | None = None,
        argv: list[str] | None = None,
        power: PowerSession | None = None,
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

        data = read_model_bytes(self.model_path)
        sha = sha256_bytes(data)
        s = self.settings
        sliced = self.sliced or slice_model(self.model_path, s.granularity, s.cuts)
        make_output_dir(self.out_dir)
        output = resume_state(self.csv_path, self.json_path, self._settings_dict(sha, sliced),
                              self.resume)
        result = SweepResult(self.csv_path, self.json_path, skipped=output.skipped(self.pairs))
        model = ModelUnderTest(sliced, data, str(self.model_path.resolve()), self.model_path.name,
                               sha)
        return _Job(sliced, sha, output, progress, result, model=model)

    def _settings_dict(self, sha: str, sliced: SlicedModel) -> dict[str, Any]:
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

    def _governors(self, todo: Sequence[Pair]) -> dict[str, Governor]:
        """DVFS domain letter -> governor, for the processors that have levels to set."""
        return governors_for(self.board, [p.processor for p in todo if p.level is not None],
                             self.sysfs_root,
                             none_fix="use --freqs current to sweep at the current frequency")

    def _host_levels(self, todo: Sequence[Pair]) -> dict[str, tuple[Governor, tuple[int, int]]]:
        """G letter -> (its host's governor, the --host-freq level) when one is asked."""
        from governors.host import host_domain

        out: dict[str, tuple[Governor, tuple[int, int]]] = {}
        if self.settings.host_freq is None:
            return out
        for letter in dict.fromkeys(p.processor for p in todo):
            level = host_level(self.board, letter, self.settings.host_freq) \
                if host_domain(self.board, letter) is not None else None
            if level is not None:
                out[letter] = (host_governor(self.board, letter, self.sysfs_root), level)
        return out

    def _executor(self, proc: ProcessorSpec) -> Executor:
        if self.executor_factory is not None:
            return self.executor_factory(proc, self.settings.threads)
        from profiler.executors.factory import make_executor

        return make_executor(self.board, proc.letter, threads=self.settings.threads)

    # ---- the pairs ---------------------------------------------------------------

    def _run_pairs(self, job: _Job, todo: Sequence[Pair]) -> None:
        from profiler.measure.results import environment

        job.env = environment(self.argv)
        job.output.meta.setdefault("environment", {}).update(job.env)
        govs = self._governors(todo)
        hosts = self._host_levels(todo)
        # The runner collects the young generations before each run's timed frames;
        # with everything alive so far frozen, even a later full collection scans only
        # what each pair adds (a full one costs tens of ms per pair with pandas and
        # LiteRT loaded).
        gc.collect()
        gc.freeze()
        guarded = [*govs.values(), *(g for g, _ in hosts.values())]
        with Levels(guarded, job.progress.note, self.settings.settle_s) as levels, \
                _unfreeze_after(), ExitStack() as power_stack:
            if self.power is not None:
                power_stack.enter_context(self.power)
            for letter in dict.fromkeys(p.processor for p in todo):
                if letter in hosts:
                    host_gov, level = hosts[letter]
                    levels.set(host_gov, level, "host ")
                self._run_processor(job, letter, [p for p in todo if p.processor == letter],
                                    govs.get(self.board.dvfs_domain(letter).letter), levels)

    def _run_processor(self, job: _Job, letter: str, pairs: list[Pair], gov: Governor | None,
                       levels: Levels) -> None:
        """One executor, one runner and one set of prefixes for all of a processor's pairs
        (`profiler.measure.layers.ProcessorLayers`); between pairs only the level changes."""
        from governors.host import host_domain

        proc = self.board.processor(letter)
        s = self.settings
        any_fused = any(s.method_for(self.board.processor(p.processor)) is Method.FUSED
                        for p in self.pairs)
        any_host = any(host_domain(self.board, p.processor) is not None for p in self.pairs)
        settings = LayerSettings(
            frames=s.frames, warmup=s.warmup, seed=s.seed, threads=s.threads,
            settle_s=s.settle_s, fused=s.fused if s.method_for(proc) is Method.FUSED else None,
            fallback_column=False)

        def frames(what: str, done: int, total: int) -> None:
            if what == "frames":
                job.progress.frame(done, total)

        with ExitStack() as stack:
            reader = open_freq_reader(stack, self.board, proc, self.sysfs_root,
                                      job.progress.note)
            assert job.model is not None
            measurer = stack.enter_context(ProcessorLayers(
                self.board, letter, job.model, settings,
                open_executor=lambda: self._executor(proc), governor=gov, levels=levels,
                host_set=s.host_freq is not None, freq_reader=reader, hooks=self.hooks,
                sysfs_root=self.sysfs_root, env=job.env))
            for pair in pairs:
                job.progress.pair_started(job.index, pair)
                t0 = time.perf_counter_ns()
                if pair.level is not None and gov is not None and letter not in job.told:
                    job.progress.note(f"{letter}: frequencies set via {gov.describe()}")
                    job.told.add(letter)

                def power_failed(err: ProfilerError, pair: Pair = pair) -> None:
                    # before the pair's rows are written, so --resume measures it again
                    job.progress.note(f"power failed during {pair.label()}; "
                                      "its rows are not written")
                    raise err

                m = measurer.measure(
                    None if pair.level is None or pair.freq_khz is None
                    else (pair.level, pair.freq_khz),
                    power=self.power, progress=frames, host_columns=any_host,
                    on_power_error=power_failed)
                tables = m.tables()
                rows = tables.layers
                if m.fused is None and any_fused:  # one CSV: a sliced pair in fused columns
                    rows = in_fused_layout(rows)
                job.output.csv.append(rows)
                self._record(job, PairResult(
                    pair, m.level.effective_khz if m.level else None,
                    m.level.warning if m.level else None, tables.totals, len(rows),
                    frame_time_ns(m.run.timings), time.perf_counter_ns() - t0),
                    m.power, m.fused.info() if m.fused is not None else None, m.freq_trace)

    def _record(self, job: _Job, pr: PairResult, energy: PowerResult | None,
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


@contextmanager
def _unfreeze_after() -> Iterator[None]:
    try:
        yield
    finally:
        gc.unfreeze()


__all__ = [
    "PairResult", "Sweep", "SweepProgress", "SweepResult", "SweepSettings", "frame_time_ns",
]
