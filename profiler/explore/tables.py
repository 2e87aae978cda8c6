"""Filling `CostTables` (profiler.explore.space) from coupprof's own tables.

- layers: a `coupprof sweep` directory (or its sweep.csv), or any DataFrame with the
  columns processor, freq_level, layer, time_ms_mean[, transfer_ms_mean, energy_mj,
  dynamic_energy_mj][, host]. An imported table (ARM-CO-UP's) feeds `from_frames` the
  same way; a ``host`` column makes G/N on each host its own unit (``G@L``).
- transfers: `coupprof transfer-matrix` CSV (boundary, src, dst, time_ms_mean[, energy_mj]).
- delays: `coupprof dvfs-latency` CSVs (processor, from_level, to_level, delay_us; the
  median over repeats is used).

The board gives each processor's DVFS domain (N runs at its host cluster's level) and
the kHz of each level; the idle power comes from the sweep's baselines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler.boards.model import PROCESSOR_LETTERS, Board
from profiler.csvfile import read_table_csv
from profiler.errors import BadInputError
from profiler.explore.space import CostTables, Unit

SWEEP_FIX = "pass the directory written by `coupprof sweep -o DIR`"


def read_delay_csvs(paths: Sequence[str | Path]) -> pd.DataFrame:
    """`coupprof dvfs-latency` CSVs, concatenated (processor, from_level, to_level, delay_us)."""
    frames = []
    for raw in paths:
        frames.append(read_table_csv(raw, "DVFS delay table",
                                     ("processor", "from_level", "to_level", "delay_us"),
                                     "pass CSVs written by `coupprof dvfs-latency --csv`"))
    if not frames:
        return pd.DataFrame(columns=["processor", "from_level", "to_level", "delay_us"])
    return pd.concat(frames, ignore_index=True)


def from_frames(layers: pd.DataFrame, board: Board, transfers: pd.DataFrame | None = None,
                delays: pd.DataFrame | None = None, idle_power_w: float | None = None,
                model: str = "model", sources: Sequence[str] = (),
                processors: Sequence[str] | None = None,
                levels: Sequence[int] | str | None = None,
                fixed_ms: dict[tuple[str, int | None], float] | None = None,
                fixed_energy_mj: dict[tuple[str, int | None], float] | None = None,
                call_factor: dict[tuple[str, int | None], float] | None = None,
                ) -> CostTables:
    """Cost tables from a layer DataFrame (one row per processor, level, layer), kept to
    `processors` and `levels` where given (``"max"``: each processor's top level in
    the table, ARM-CO-UP's Table 8 setting; ``"min"``: its lowest). Rows with a
    ``time_ms_ci95`` (the fused method: time_ms_mean is the layer inside one call), and ``fixed_ms``
    {(processor, level): ms} gives the fixed per-call cost a stage on them pays once,
    ``fixed_energy_mj`` (same keys) its energy where a counter measured it,
    ``call_factor`` (same keys) the factor a fused CPU pair's times and fixed row are
    priced at, as predict prices them
    (`profiler.measure.fused`, "Disturbed calls")."""
    factor = call_factor or {}
    fixed_ms = {k: v * factor.get(k, 1.0) for k, v in (fixed_ms or {}).items()}
    need = {"processor", "freq_level", "layer", "time_ms_mean"}
    if not need <= set(layers.columns):
        raise BadInputError("the layer table lacks the columns "
                            f"{', '.join(sorted(need - set(layers.columns)))}", SWEEP_FIX)
    df = layers.copy()
    df["processor"] = df["processor"].astype(str).str.upper()
    if df["freq_level"].isna().any():
        raise BadInputError("the layer table has rows without a freq_level (a sweep at "
                            "--freqs current)", "sweep with --freqs all (or a list of levels)")
    df["freq_level"] = df["freq_level"].astype(int)
    df["layer"] = df["layer"].astype(int)
    if processors is not None:
        df = df[df["processor"].isin([p.upper() for p in processors])]
    notes: list[str] = []
    if "host_level" in df.columns:
        # Imported tables (ARM-CO-UP) time G at every level of its host CPU too. The
        # search gives G one level of its own, so G keeps its rows at the host's top
        # level (N's level is its host's already).
        own = [p for p in df["processor"].unique()
               if board.dvfs_domain(p).letter == p and df.loc[df["processor"] == p,
                                                             "host_level"].notna().any()]
        for p in own:
            mine = df["processor"] == p
            top = df.loc[mine, "host_level"].max()
            df = df[~mine | (df["host_level"] == top)]
            notes.append(f"{p}: rows at host level {int(top)} only")
    if isinstance(levels, str):
        if levels not in ("max", "min"):
            raise BadInputError(f"levels {levels!r} is not a list of levels, 'min' or 'max'")
        df = df[df["freq_level"] == df.groupby("processor")["freq_level"].transform(levels)]
    elif levels is not None:
        df = df[df["freq_level"].isin(list(levels))]
    if df.empty:
        raise BadInputError("no layer rows left for the processors and levels asked for",
                            "name processors and levels the sweep measured")
    if "sim_late_runs" in df.columns:  # the simulated board: rows the host held back
        late = df[df["sim_late_runs"].fillna(0) > 0]
        for p, g in late.groupby("processor"):
            notes.append(f"{p}: {len(g)} simulated layer rows where this machine was slower "
                         "than the modelled processor (the host's time stands in for the "
                         "model's there; predictions that use them need not hold)")
    has_host = "host" in df.columns
    hosts = df["host"] if has_host else pd.Series(None, df.index, dtype=object)
    df["unit"] = [p if h is None or pd.isna(h) or not str(h) else f"{p}@{str(h).upper()}"
                  for p, h in zip(df["processor"], hosts, strict=True)]
    rank = {k: i for i, k in enumerate(PROCESSOR_LETTERS)}
    names = sorted(df["unit"].unique(), key=lambda n: (rank.get(n[0], 99), n))
    units: list[Unit] = []
    for name in names:
        letter = name[0]
        if letter not in board.processors:
            raise BadInputError(f"the tables have processor {letter}, which board "
                                f"'{board.name}' does not", "pass the board the tables "
                                "were measured on with --board")
        host = name.split("@", 1)[1] if "@" in name else None
        units.append(Unit(name, letter, board.dvfs_domain(letter).letter, host))
    layer_ids = sorted(df["layer"].unique())
    if layer_ids != list(range(len(layer_ids))):
        raise BadInputError("the layer table's layers are not 0..N-1", SWEEP_FIX)
    n = len(layer_ids)
    lvls = [tuple(sorted(int(v) for v in df.loc[df["unit"] == u.name, "freq_level"].unique()))
              for u in units]
    k_max = max(len(lv) for lv in lvls)
    shape = (len(units), k_max, n)
    time_ms = np.full(shape, np.inf)
    feed_ms = np.zeros(shape)
    use_e = "energy_mj" in df.columns and df["energy_mj"].notna().all()
    use_d = use_e and "dynamic_energy_mj" in df.columns and df["dynamic_energy_mj"].notna().all()
    energy = np.full(shape, np.nan) if use_e else None
    dyn = np.full(shape, np.nan) if use_d else None
    u_of = {u.name: i for i, u in enumerate(units)}
    # Mean over repeated rows of one (unit, level, layer), e.g. a sweep run twice.
    # fused rows (an interval beside their time): the time inside one uninterrupted run
    fused = df["time_ms_ci95"].notna() if "time_ms_ci95" in df.columns \
        else pd.Series(False, index=df.index)
    if fused.any():
        t = df["time_ms_mean"]
        # A layer below the fused method's resolution can come out below 0 (a difference
        # of two noisy prefixes); a layer costs at least nothing, and the searches need
        # every step non-negative (the switch DP's latency bins).
        below = fused & (t < 0)
        if below.any():
            notes.append(f"{int(below.sum())} fused layer time(s) below 0 (below "
                         "resolution) counted as 0")
        df["time_ms_mean"] = t.where(~fused, t.clip(lower=0.0))
        if factor:
            kappa = [factor.get((str(p).upper(), None if pd.isna(lv) else int(lv)), 1.0)
                     for p, lv in zip(df["processor"], df["freq_level"], strict=True)]
            df["time_ms_mean"] = df["time_ms_mean"] * np.where(fused, kappa, 1.0)
    cols = ["time_ms_mean"] + [c for c in ("transfer_ms_mean", "energy_mj",
                                            "dynamic_energy_mj") if c in df.columns]
    g = df.groupby(["unit", "freq_level", "layer"])[cols].mean()
    for (name, lv, i), row in g.iterrows():
        u = u_of[str(name)]
        k = lvls[u].index(int(lv))
        time_ms[u, k, int(i)] = float(row["time_ms_mean"])
        feed = float(row.get("transfer_ms_mean", 0.0))
        feed_ms[u, k, int(i)] = 0.0 if math.isnan(feed) else feed  # blank: 0, as predict
        if energy is not None:
            energy[u, k, int(i)] = float(row["energy_mj"])
        if dyn is not None:
            dyn[u, k, int(i)] = float(row["dynamic_energy_mj"])
    tr_ms = np.full((max(n - 1, 0), len(units), len(units)), np.nan)
    tr_mj = None
    readout = np.zeros((max(n - 1, 0), len(units)))
    # units measured fused: their layer times leave out the read-back at a cut
    fused_units = set(df.loc[fused, "unit"])
    if transfers is not None and len(transfers):
        tr_mj = np.full_like(tr_ms, np.nan) if "energy_mj" in transfers.columns else None
        by_letter: dict[str, list[int]] = {}
        for i, unit in enumerate(units):
            by_letter.setdefault(unit.letter, []).append(i)
        for r in transfers.itertuples(index=False):
            b = int(r.boundary)
            if not 0 <= b < n - 1:
                raise BadInputError(f"the transfer table has boundary {b}, but the layer table "
                                    f"has {n} layers", "pass tables of the same model")
            # a transfer measured between processors holds for every host of each
            for a in by_letter.get(str(r.src).upper(), []):
                for c in by_letter.get(str(r.dst).upper(), []):
                    tr_ms[b, a, c] = float(r.time_ms_mean)
                    if tr_mj is not None:
                        tr_mj[b, a, c] = float(r.energy_mj)
                ro = float(getattr(r, "readout_ms", math.nan))
                if not math.isnan(ro) and units[a].name in fused_units:
                    readout[b, a] = max(ro, 0.0)  # below 0: noise below resolution
    delay_ms: dict[str, np.ndarray] = {}
    if delays is not None and len(delays):
        d = delays.dropna(subset=["delay_us"])
        med = d.groupby(["processor", "from_level", "to_level"])["delay_us"].median()
        for (proc, a, b), us in med.items():
            dom = board.dvfs_domain(str(proc)).letter
            size = len(board.dvfs_domain(dom).freqs_khz) + 1
            arr = delay_ms.setdefault(dom, np.full((size, size), np.nan))
            if int(a) < size and int(b) < size:
                arr[int(a), int(b)] = float(us) / 1000.0
    fixed = np.zeros(shape[:2])
    fixed_e = np.full(shape[:2], np.nan)
    for dst, src in ((fixed, fixed_ms), (fixed_e, fixed_energy_mj)):
        for (proc, lv), v in (src or {}).items():
            for u, unit in enumerate(units):
                if unit.letter == str(proc).upper() and lv is not None and int(lv) in lvls[u]:
                    dst[u, lvls[u].index(int(lv))] = float(v)
    freq_khz = {}
    for unit in units:
        domain = board.dvfs_domain(unit.letter)
        freq_khz[domain.letter] = {i + 1: f for i, f in enumerate(domain.freqs_khz)}
    return CostTables(units, lvls, time_ms, feed_ms, energy, dyn, tr_ms, tr_mj, delay_ms,
                      idle_power_w, freq_khz, model, board.name, [*sources, *notes],
                      notes=list(notes), fixed_ms=fixed, readout_ms=readout,
                      fixed_energy_mj=fixed_e)


def load_tables(sweep: str | Path, board: Board, transfers: str | Path | None = None,
                delays: Sequence[str | Path] = (), processors: Sequence[str] | None = None,
                levels: Sequence[int] | str | None = None) -> CostTables:
    """Cost tables from a sweep directory, a transfer-matrix CSV and dvfs-latency CSVs."""
    from profiler.mapping.transfer import read_transfer_csv
    from profiler.sweep.schema import read_sweep

    data = read_sweep(sweep)
    df = data.layer_rows(str(sweep), SWEEP_FIX)
    tr = read_transfer_csv(transfers) if transfers else None
    dl = read_delay_csvs(delays) if delays else None
    model = str(df["model"].iloc[0]) if "model" in df.columns else "model"
    sources = [str(sweep), *([str(transfers)] if transfers else []), *map(str, delays)]
    base = list(data.baseline_power_w().values())
    return from_frames(df, board, tr, dl, float(np.mean(base)) if base else None, model,
                       sources, processors, levels, data.fixed_ms(), data.fixed_energy_mj(),
                       data.call_factor())





def synthetic_tables(board: Board, n_layers: int, seed: int = 0,
                     processors: Sequence[str] | None = None, delays: bool = True,
                     idle_power_w: float = 1.5, fixed: bool = True) -> CostTables:
    """Random but physical tables on `board`'s levels, for tests and benchmarks: per
    layer a work size; each processor a speed and a power at its top level; time
    scales as f_max / f, power as V^2 f (V from the profile, else flat); transfers
    grow with a boundary's size between processors; the delay between levels i and j
    is 0.2 ms + 0.5 ms per level apart. With ``fixed``, G and N are "fused" tables: a
    stage on them pays a fixed per-call cost of 0.3-1.0 ms (shorter at higher levels)."""
    rng = np.random.default_rng(seed)
    letters = [p for p in (processors or board.processors)]
    work = rng.uniform(0.5, 5.0, n_layers)  # ms on a unit-speed processor
    rows: list[dict[str, Any]] = []
    for letter in letters:
        dom = board.dvfs_domain(letter)
        freqs = dom.freqs_khz or (1,)
        volts = [v or 1000 for v in dom.volts_mv] if dom.volts_mv else [1000] * len(freqs)
        speed = rng.uniform(0.5, 2.0, n_layers) * rng.uniform(0.5, 2.0)  # per-layer affinity
        p_top = rng.uniform(0.3, 2.0)  # W above idle at the top level
        for k, (f, v) in enumerate(zip(freqs, volts, strict=True), 1):
            scale = freqs[-1] / f
            t_ms = work / speed * scale
            p_w = p_top * (v / volts[-1]) ** 2 * (f / freqs[-1])
            for i in range(n_layers):
                rows.append({"processor": letter, "freq_level": k, "layer": i,
                             "time_ms_mean": t_ms[i], "transfer_ms_mean": 0.01,
                             "energy_mj": (p_w + idle_power_w) * t_ms[i],
                             "dynamic_energy_mj": p_w * t_ms[i]})
    fixed_ms: dict[tuple[str, int | None], float] = {}
    if fixed:
        for letter in letters:
            if board.processor(letter).kind.is_accelerator:
                n = len(board.dvfs_domain(letter).freqs_khz) or 1
                for k in range(1, n + 1):
                    fixed_ms[(letter, k)] = 0.3 + 0.7 * (n - k) / max(n - 1, 1)
    size = rng.uniform(0.1, 1.0, max(n_layers - 1, 0))
    tr = [{"boundary": b, "src": a, "dst": c,
           "time_ms_mean": 0.01 if a == c else 0.2 + size[b],
           "energy_mj": idle_power_w * (0.01 if a == c else 0.2 + size[b]) * 1.1}
          for b in range(n_layers - 1) for a in letters for c in letters]
    dl = []
    if delays:
        for letter in dict.fromkeys(board.dvfs_domain(p).letter for p in letters):
            n = len(board.processor(letter).freqs_khz)
            dl += [{"processor": letter, "from_level": a, "to_level": b,
                    "delay_us": 200.0 + 500.0 * abs(a - b)}
                   for a in range(1, n + 1) for b in range(1, n + 1) if a != b]
    return from_frames(pd.DataFrame(rows), board, pd.DataFrame(tr),
                       pd.DataFrame(dl) if dl else None, idle_power_w,
                       f"synthetic-{n_layers}-seed{seed}", ["synthetic"], fixed_ms=fixed_ms)
__all__ = ["from_frames", "load_tables", "read_delay_csvs", "synthetic_tables"]
