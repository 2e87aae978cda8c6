"""Sweeps: every (processor, DVFS level) pair of a board, measured into one CSV.

    plan = plan_pairs(board, ["B", "G"], parse_freqs("all"))
    sweep = Sweep(board, model_path, plan, out_dir, SweepSettings(frames=30))
    result = sweep.run(progress)

What it costs: the model is sliced once; for each processor the executor (core
affinity) and the runner's interpreters are built once, and between the levels
of that processor only the frequency changes (through the board's governor,
restored afterwards by `governors.RestoreGuard`, also on Ctrl-C and SIGTERM).
A sweep therefore costs close to the sum of the frames it runs
(`benchmarks/sweep.py` measures the ratio).

Files in the output directory:

- ``sweep.csv``: the layer rows of every finished pair, `profiler.tables`
  layer columns (ID columns first: board, simulated, model, processor,
  freq_level, freq_khz), one row per (processor, level, layer). Each pair is
  appended in one write followed by flush + fsync, so a crash loses at most the
  pair being measured.
- ``sweep.json``: the settings, the environment and per pair the requested and
  read-back frequency, warnings and per-frame totals; rewritten atomically after
  each pair. The CSV is the record of which pairs are done (``--resume``).
"""

from __future__ import annotations

import gc
import io
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler.boards.model import PROCESSOR_LETTERS, Board, ProcessorSpec
from profiler.errors import BadInputError, BoardError, PermissionDeniedError
from profiler.jsonfile import write_json_atomic
from profiler.results import LAYER_END, TRANSFER_START, LayerInfo, LayerRun, LayerTimings, RunInfo
from profiler.runner import LayerHooks
from profiler.tables import ID_COLUMNS, NULLABLE_INT_COLUMNS, layer_table, totals

SWEEP_FORMAT = "coupprof-sweep/1"
CSV_NAME = "sweep.csv"
JSON_NAME = "sweep.json"

# Settings that must match for --resume to add rows to an existing sweep.
RESUME_KEYS = ("board", "model_sha256", "granularity", "cuts", "frames", "warmup", "threads", "seed",
               "power_source")


@dataclass(frozen=True, order=True)
class Pair:
    """One point of the sweep. `level` None: the frequency is left as it is."""

    processor: str
    level: int | None = None
    freq_khz: int | None = None

    @property
    def key(self) -> tuple[str, int | None]:
        return (self.processor, self.level)

    def label(self) -> str:
        if self.level is None:
            return f"{self.processor} at the current frequency"
        return f"{self.processor} level {self.level} ({(self.freq_khz or 0) / 1000:g} MHz)"


# -- planning ----------------------------------------------------------------------

FreqSpec = str | list[int]  # "all", "current" or explicit 1-based levels


def parse_freqs(text: str) -> FreqSpec:
    """`all`, `current` (leave the frequency alone) or `1,3,5` (levels, 1-based)."""
    t = text.strip().lower()
    if t in ("all", "current"):
        return t
    try:
        levels = sorted({int(tok) for tok in t.split(",") if tok.strip()})
    except ValueError:
        raise BadInputError(f"--freqs '{text}' is not 'all', 'current' or a list of levels",
                            "e.g. --freqs all, or --freqs 1,3,5") from None
    if not levels or levels[0] < 1:
        raise BadInputError(f"--freqs '{text}': levels are 1-based whole numbers",
                            "e.g. --freqs 1,3,5 (`coupprof boards show BOARD` lists the levels)")
    return levels


def parse_processors(text: str | None, board: Board) -> list[str]:
    """'L,B,G' -> ['L', 'B', 'G'] (default: every processor of the board)."""
    if not text:
        return [k for k in PROCESSOR_LETTERS if k in board.processors]
    letters = [tok.strip().upper() for tok in text.split(",") if tok.strip()]
    if not letters:
        raise BadInputError(f"--processors '{text}' names no processor", "e.g. --processors L,B,G")
    for letter in letters:
        board.processor(letter)  # unknown letters: BoardError listing the board's processors
    return list(dict.fromkeys(letters))


def dvfs_target(board: Board, letter: str) -> ProcessorSpec:
    """The processor whose table a level of `letter` indexes (N: its host cluster)."""
    from governors import dvfs_processor

    return dvfs_processor(board, letter)


def plan_pairs(board: Board, processors: Sequence[str], freqs: FreqSpec) -> list[Pair]:
    """Every (processor, level) pair, processors in the given order, levels ascending."""
    pairs: list[Pair] = []
    for letter in processors:
        proc = board.processor(letter)
        if freqs == "current":
            pairs.append(Pair(proc.letter))
            continue
        target = dvfs_target(board, letter)
        if not target.freqs_khz:
            raise BoardError(
                f"cannot set frequencies: processor {proc.letter} on board '{board.name}' has no "
                "DVFS levels (no frequency table"
                + (" in this machine's cpufreq files" if board.name == "host" else "") + ")",
                "use --freqs current to sweep at the current frequency, or --board sim for the "
                "simulated board (`coupprof boards` lists boards)",
            )
        n = len(target.freqs_khz)
        levels = list(range(1, n + 1)) if freqs == "all" else list(freqs)
        bad = [k for k in levels if k > n]
        if bad:
            raise BoardError(
                f"--freqs: level {bad[0]} is out of range for processor {proc.letter} on board "
                f"'{board.name}'" + (f" (it uses {target.letter}'s table)" if target is not proc else ""),
                f"valid levels: {target.levels_text()}",
            )
        pairs += [Pair(proc.letter, k, target.freqs_khz[k - 1]) for k in levels]
    return pairs


# -- settings and results ------------------------------------------------------------


@dataclass(frozen=True)
class SweepSettings:
    frames: int = 30
    warmup: int = 3
    threads: int | None = None
    granularity: str = "layer"
    cuts: str | None = None
    seed: int = 0
    settle_s: float = 0.05  # how long set_level waits for the read-back to match


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


# -- the CSV -----------------------------------------------------------------------


def read_sweep_csv(path: str | Path) -> pd.DataFrame:
    """A sweep CSV as a DataFrame with the ID columns typed (nullable integer levels)."""
    dtypes = {c: "Int64" for c in NULLABLE_INT_COLUMNS}
    return pd.read_csv(path, dtype=dtypes)


class SweepCSV:
    """Appends each pair's rows in one write, then flush + fsync."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.columns: list[str] | None = None

    def load(self, layers_per_pair: int) -> set[tuple[str, int | None]]:
        """Read an existing sweep: drop a torn last line and incomplete pairs; return done pairs."""
        raw = self.path.read_bytes()
        if raw and not raw.endswith(b"\n"):  # a write cut short by a crash
            raw = raw[: raw.rfind(b"\n") + 1]
            self._replace(raw)
        if not raw.strip():
            return set()
        try:
            df = read_sweep_csv(io.BytesIO(raw))
        except (ValueError, pd.errors.ParserError) as err:
            raise BadInputError(f"cannot read {self.path}: {err}",
                                "pass another -o DIR, or delete the file to start over") from None
        missing = [c for c in ("processor", "freq_level", "layer") if c not in df.columns]
        if missing:
            raise BadInputError(f"{self.path} is not a coupprof sweep CSV (no {', '.join(missing)})",
                                "pass another -o DIR")
        self.columns = list(df.columns)
        keys = list(zip(df["processor"].astype(str), _levels(df["freq_level"]), strict=True))
        counts: dict[tuple[str, int | None], int] = {}
        for k in keys:
            counts[k] = counts.get(k, 0) + 1
        done = {k for k, n in counts.items() if n == layers_per_pair}
        if len(done) != len(counts):  # rows of a pair cut short: measure it again
            keep = np.array([k in done for k in keys])
            buf = io.StringIO()
            df[keep].to_csv(buf, index=False)
            self._replace(buf.getvalue().encode())
        return done

    def append(self, df: pd.DataFrame) -> None:
        if self.columns is None:
            self.columns = list(df.columns)
            header = True
        else:
            extra = [c for c in df.columns if c not in self.columns]
            if extra:
                raise BadInputError(
                    f"{self.path} has no columns {', '.join(extra)} that this run produces "
                    "(it was started with other settings or another power source)",
                    "pass another -o DIR, or drop --resume after deleting the file")
            df = df.reindex(columns=self.columns)
            header = False
        text = df.to_csv(index=False, header=header)
        try:
            with open(self.path, "a", encoding="utf-8", newline="") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            raise BadInputError(f"cannot write {self.path}: {err.strerror}",
                                "choose a writable directory with -o") from None

    def _replace(self, data: bytes) -> None:
        tmp = self.path.with_suffix(".csv.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)


def _levels(col: pd.Series) -> list[int | None]:
    return [None if pd.isna(v) else int(v) for v in col]


# -- running -----------------------------------------------------------------------


ExecutorFactory = Callable[[ProcessorSpec, "int | None"], Any]


class Sweep:
    """Measures `pairs` on `board` into `out_dir`/sweep.csv (see the module docstring).

    `power` (a `PowerSession`, opened and closed here) adds the energy columns: per pair
    the stream is started, the idle baseline measured, the frames run with its marker
    hooks and the energy attributed; `sim_power` (the simulated board's `SimPowerModel`)
    is told which processor is busy at which frequency. `hooks` are passed to every
    runner too (tests watch the frequency in force);
    `executor_factory(proc, threads)` returns an executor context manager (default:
    `profiler.executors.factory.make_executor`: CPU sets, accelerators, delegates, and the
    simulated board's stretched processors); `sliced` skips slicing when given.
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
        sim_power: Any = None,
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
        self.sim_power = sim_power  # the simulated board's SimPowerModel, told who is busy
        self.csv_path = self.out_dir / CSV_NAME
        self.json_path = self.out_dir / JSON_NAME

    # ---- set-up ------------------------------------------------------------------

    def _settings_dict(self, sha: str, sliced: Any) -> dict[str, Any]:
        s = self.settings
        return {
            "board": self.board.name, "simulated": self.board.simulated,
            "model_path": str(self.model_path.resolve()), "model_sha256": sha,
            "granularity": s.granularity, "cuts": s.cuts, "frames": s.frames,
            "warmup": s.warmup, "threads": s.threads, "seed": s.seed,
            "layers": len(sliced.layers), "slice_cuts": list(sliced.cuts),
            "power_source": self.power.source.spec if self.power is not None else "none",
        }

    def _open_output(self, settings: dict[str, Any]) -> tuple[SweepCSV, dict[str, Any], set]:
        csv = SweepCSV(self.csv_path)
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise BadInputError(f"cannot create {self.out_dir}: {err.strerror}",
                                "choose a writable directory with -o") from None
        exists = self.csv_path.exists()
        if exists and not self.resume:
            raise BadInputError(f"{self.csv_path} already exists",
                                "pass --resume to add the missing pairs to it, or another -o DIR")
        meta: dict[str, Any] = {"format": SWEEP_FORMAT, "csv": CSV_NAME, "settings": settings,
                                "pairs": {}}
        done: set = set()
        if exists:
            old = self._read_sidecar()
            if old is not None:
                theirs = old.get("settings", {})
                diff = [k for k in RESUME_KEYS if theirs.get(k) != settings.get(k)]
                if diff:
                    what = ", ".join(f"{k} {theirs.get(k)!r} there, {settings.get(k)!r} now"
                                     for k in diff)
                    raise BadInputError(f"cannot resume {self.csv_path}: it was measured with "
                                        f"other settings ({what})",
                                        "repeat the original options, or use another -o DIR")
                meta["pairs"] = old.get("pairs", {})
                meta["environment"] = old.get("environment", {})
            done = csv.load(settings["layers"])
            meta["pairs"] = {k: v for k, v in meta["pairs"].items()
                             if (v.get("processor"), v.get("level")) in done}
        return csv, meta, done

    def _read_sidecar(self) -> dict[str, Any] | None:
        if not self.json_path.exists():
            return None
        try:
            meta = json.loads(self.json_path.read_text())
        except (OSError, ValueError) as err:
            raise BadInputError(f"cannot read {self.json_path}: {err}",
                                "delete it (the CSV alone is enough to resume) or use another -o DIR"
                                ) from None
        if meta.get("format") != SWEEP_FORMAT:
            raise BadInputError(f"{self.json_path} is not a coupprof sweep sidecar",
                                "use another -o DIR")
        return meta

    def _governors(self, todo: Sequence[Pair]) -> dict[str, Any]:
        """processor letter -> governor, for the letters that have levels to set."""
        from governors import make_governor

        govs: dict[str, Any] = {}
        by_target: dict[str, Any] = {}
        for pair in todo:
            if pair.level is None or pair.processor in govs:
                continue
            target = dvfs_target(self.board, pair.processor)
            if target.letter not in by_target:
                gov = make_governor(self.board, target, self.sysfs_root)
                if gov.kind == "none":
                    raise BoardError(
                        f"cannot set frequencies: processor {target.letter} on board "
                        f"'{self.board.name}' has governor 'none'",
                        "use --freqs current to sweep at the current frequency")
                bad = [c for c in gov.checks() if not c.ok]
                if bad:
                    raise PermissionDeniedError(
                        f"cannot set frequencies of processor {target.letter} on board "
                        f"'{self.board.name}': {bad[0].what} is not writable"
                        + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""),
                        bad[0].fix or "run as root")
                by_target[target.letter] = gov
            govs[pair.processor] = by_target[target.letter]
        return govs

    def _executor(self, proc: ProcessorSpec) -> Any:
        if self.executor_factory is not None:
            return self.executor_factory(proc, self.settings.threads)
        from profiler.executors.factory import make_executor

        return make_executor(self.board, proc.letter, threads=self.settings.threads)

    # ---- the sweep ---------------------------------------------------------------

    def run(self, progress: SweepProgress | None = None) -> SweepResult:
        from governors import RestoreGuard
        from profiler.results import environment
        from profiler.runner import LayerRunner
        from profiler.slicing.slicer import slice_model
        from profiler.tflite.model_io import read_model_bytes, sha256_bytes

        prog = progress or SweepProgress()
        t_start = time.perf_counter_ns()
        data = read_model_bytes(self.model_path)
        sha = sha256_bytes(data)
        s = self.settings
        sliced = self.sliced or slice_model(self.model_path, s.granularity, s.cuts)
        settings = self._settings_dict(sha, sliced)
        csv, meta, done = self._open_output(settings)
        todo = [p for p in self.pairs if p.key not in done]
        skipped = [p for p in self.pairs if p.key in done]
        result = SweepResult(self.csv_path, self.json_path, skipped=skipped)
        prog.start(todo, skipped, s.warmup + s.frames)
        if not todo:
            result.wall_ns = time.perf_counter_ns() - t_start
            return result
        env = environment(self.argv)
        meta.setdefault("environment", {}).update(env)
        layer_infos = [LayerInfo.from_layer(layer) for layer in sliced.layers]

        govs = self._governors(todo)
        index = 0
        # The runner collects garbage before each run's timed frames; with everything
        # alive so far frozen, that collection scans only what each pair adds (a full
        # one costs tens of ms per pair with pandas and LiteRT loaded).
        gc.collect()
        gc.freeze()
        with RestoreGuard(list(govs.values())), _unfreeze_after(), ExitStack() as power_stack:
            if self.power is not None:
                power_stack.enter_context(self.power)
            for letter in dict.fromkeys(p.processor for p in todo):
                proc = self.board.processor(letter)
                gov = govs.get(letter)
                told = False
                with ExitStack() as stack:
                    executor = stack.enter_context(self._executor(proc))
                    runner = LayerRunner(sliced, executor, hooks=self.hooks, seed=s.seed,
                                         model_name=self.model_path.name)  # hooks: per pair
                    for pair in (p for p in todo if p.processor == letter):
                        prog.pair_started(index, pair)
                        t0 = time.perf_counter_ns()
                        effective, warning = None, None
                        if pair.level is not None:
                            assert gov is not None
                            res = gov.set_level(pair.level, s.settle_s)
                            effective, warning = res.effective_khz, res.warning
                            _wait_in_effect(gov, res.requested_khz, s.settle_s)
                            if not told:  # the method is known once the first level is set
                                prog.note(f"{letter}: frequencies set via {gov.describe()}")
                                told = True
                            if warning:
                                prog.note(f"warning: {warning}")
                        timings, energy = self._measure(runner, proc, pair, prog)
                        info = self._info(pair, proc, executor, sliced, sha, env)
                        run = LayerRun(info, layer_infos, timings,
                                       dict(energy.columns) if energy is not None else {},
                                       dict(energy.totals) if energy is not None else {})
                        rows = layer_table(run)
                        csv.append(rows)
                        pr = PairResult(pair, effective, warning, totals(run), len(rows),
                                        frame_time_ns(timings), time.perf_counter_ns() - t0)
                        entry = pr.to_dict()
                        if energy is not None:
                            entry["power"] = energy.info
                        meta["pairs"][f"{pair.processor}@{pair.level or 'current'}"] = entry
                        write_json_atomic(self.json_path, meta)
                        result.done.append(pr)
                        prog.pair_done(index, pr)
                        index += 1
        result.wall_ns = time.perf_counter_ns() - t_start
        return result

    def _measure(self, runner: Any, proc: ProcessorSpec, pair: Pair,
                 prog: SweepProgress) -> tuple[LayerTimings, Any]:
        """Run the pair's frames; with a power session, also its per-layer energy.

        A power failure raises before the pair's rows are written, so --resume measures
        it again; the pairs before it are on disk."""
        s = self.settings
        if self.sim_power is not None:  # the NPU has no DVFS: its nominal operating point
            self.sim_power.set_busy(proc.letter, pair.freq_khz if proc.has_dvfs else None)
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
        energy = self.power.finish(timings, [runner.layer_call(i) for i in range(len(runner.layers))])
        if energy.error is not None:
            prog.note(f"power failed during {pair.label()}; its rows are not written")
            raise energy.error
        return timings, energy

    def _info(self, pair: Pair, proc: ProcessorSpec, executor: Any, sliced: Any, sha: str,
              env: dict[str, str]) -> RunInfo:
        return RunInfo(
            board=self.board.name, simulated=self.board.simulated,
            model_path=str(self.model_path.resolve()), model_sha256=sha,
            processor=proc.letter, processor_name=proc.name,
            cores=tuple(getattr(executor, "cores", proc.cores)),
            threads=int(getattr(executor, "threads", self.settings.threads or len(proc.cores))),
            frames=self.settings.frames, warmup=self.settings.warmup,
            granularity=sliced.granularity, cuts=tuple(sliced.cuts),
            freq_level=pair.level, freq_khz=pair.freq_khz,
            power_source=self.power.source.spec if self.power is not None else "none", **env,
        )


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


# -- reading a sweep back ------------------------------------------------------------


@dataclass
class SweepData:
    """A sweep directory loaded: layer rows and the sidecar."""

    layers: pd.DataFrame
    meta: dict[str, Any]

    def pairs(self) -> list[tuple[str, int | None]]:
        df = self.layers
        order = {k: i for i, k in enumerate(PROCESSOR_LETTERS)}
        return sorted(set(zip(df["processor"].astype(str), _levels(df["freq_level"]), strict=True)),
                      key=lambda k: (order.get(k[0], 99), k[0], -1 if k[1] is None else k[1]))


def read_sweep(path: str | Path) -> SweepData:
    """Load DIR (or DIR/sweep.csv) written by `coupprof sweep`."""
    p = Path(path)
    csv_p = p / CSV_NAME if p.is_dir() else p
    json_p = csv_p.with_suffix(".json")
    if not csv_p.is_file():
        raise BadInputError(f"sweep results not found: {csv_p}",
                            "pass the directory written by `coupprof sweep -o DIR`")
    meta = json.loads(json_p.read_text()) if json_p.is_file() else {}
    df = read_sweep_csv(csv_p)
    if not set(ID_COLUMNS) <= set(df.columns):
        raise BadInputError(f"{csv_p} lacks the columns {', '.join(sorted(set(ID_COLUMNS) - set(df.columns)))}",
                            "pass a CSV written by `coupprof sweep`")
    return SweepData(df, meta)


__all__ = [
    "Pair", "PairResult", "Sweep", "SweepCSV", "SweepData", "SweepProgress", "SweepResult",
    "SweepSettings", "frame_time_ns", "parse_freqs", "parse_processors", "plan_pairs",
    "read_sweep", "read_sweep_csv",
]
