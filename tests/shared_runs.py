"""Runs on the simulated board that several test modules draw on (figures, reports,
notebooks, explore), made once per test session by the `sim_runs` fixture
(tests/conftest.py) instead of once per module: each is a real `coupprof` subprocess, and the sim's
modelled time (G's fused rounds above all) makes each cost seconds.

The runs sit in one session folder that no test writes to: a module copies what it
uses into its own folder (`copy_run`, `copy_sweep`) before it plots, reports or
explores there.

`make_all` makes them all at once (`cli_runs.at_once`) and returns when all are done,
before any test uses them: each mostly waits out the modelled time (a sweep of L, B, G,
N at two levels keeps about a quarter of one core busy), so together they take about as
long as the longest alone; a run only one module uses is made here too, to overlap with
the others. They are data for figures, reports, notebooks and explore's searches; no test
compares their times with the model."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from cli_runs import at_once, run_coupprof

SIM = ("--board", "sim")
# Short pairs; G's and N's fused rounds fixed at 5: the runs are data for figures,
# reports and notebooks, not measurements of a layer's precision.
QUICK = ("--frames", "3", "--warmup", "1", "--baseline-s", "0.05", "--min-rounds", "5",
         "--max-rounds", "5")
EXPLORE_CUTS = "5,15"  # op indices: the default model in 3 layers


def cli(d: Path, *args: str, cwd: Path | None = None) -> None:
    """`coupprof ARGS` in ``cwd`` (default: ``d``, the session's folder), its slice cache
    in ``d`` (out of what tests copy; entries are stored atomically, so the runs made at
    once share it)."""
    run_coupprof(args, cwd or d, d / "cache")


def sweep_lbg(d: Path) -> Path:
    """L, B and G at levels 1 and 3 (6 pairs, energy from the virtual logger): the sweep
    directory."""
    cli(d, "sweep", *SIM, "--processors", "L,B,G", "--freqs", "1,3", *QUICK, "-o", "sweep-LBG")
    return d / "sweep-LBG"


def sweep_lbgn(d: Path, lbg: Path) -> Path:
    """The L, B, G sweep with N's two pairs added by `sweep --resume` (8 pairs): the rows
    an uninterrupted sweep of L,B,G,N writes (tests/test_sweep.py checks that resuming
    gives them), without measuring L, B and G again."""
    out = copy_sweep(lbg, d / "sweep-LBGN")
    cli(d, "sweep", *SIM, "--processors", "L,B,G,N", "--freqs", "1,3", *QUICK, "-o", out.name,
        "--resume")
    return out


def layers_g(d: Path) -> Path:
    """`layers --raw` on G at level 4, 20 frames, its power trace kept: the CSV (its sidecar
    and layers-G.trace/ beside it)."""
    cli(d, "layers", *SIM, "--processor", "G", "--freq", "4", "--frames", "20", "--warmup", "1",
        "--raw", "--baseline-s", "0.05", "--min-rounds", "5", "--max-rounds", "5",
        "--csv", "layers-G.csv")
    return d / "layers-G.csv"


def sweep_g(d: Path) -> Path:
    """G alone at levels 1 and 5 (2 fused pairs, with energy): the sweep directory."""
    cli(d, "sweep", *SIM, "--processors", "G", "--freqs", "1,5", *QUICK, "-o", "sweep-G")
    return d / "sweep-G"


def sweep_b3(d: Path) -> Path:
    """B alone at level 3 (1 sliced pair): the sweep directory."""
    cli(d, "sweep", *SIM, "--processors", "B", "--freqs", "3", *QUICK, "-o", "sweep-B3")
    return d / "sweep-B3"


def transfers_lbg(d: Path) -> Path:
    """The transfer matrix of L, B and G (3 frames a boundary): the CSV."""
    cli(d, "transfer-matrix", *SIM, "--processors", "L,B,G", "--frames", "3", "--warmup", "1",
        "--csv", "transfers-LBG.csv")
    return d / "transfers-LBG.csv"


def layers_l(d: Path) -> Path:
    """`layers` on L at its top level, 5 frames, with energy: the CSV."""
    cli(d, "layers", *SIM, "--baseline-s", "0.05", "--processor", "L", "--freq", "max",
        "--frames", "5", "--warmup", "1", "--csv", "layers-L.csv")
    return d / "layers-L.csv"


def explore_tables(d: Path) -> Path:
    """What `coupprof explore` searches, on the model in 3 layers: a sweep of B, G and N at
    levels 1, 3 and 5 (sw/), their transfer matrix (tm.csv) and B's and G's DVFS delays
    (dv-B.csv, dv-G.csv); the folder."""
    out = d / "explore"
    out.mkdir()
    sim = [*SIM, "--baseline-s", "0.2"]
    cli(d, "sweep", *sim, "--processors", "B,G,N", "--freqs", "1,3,5", "--cuts", EXPLORE_CUTS,
        "--frames", "3", "--warmup", "1", "--min-rounds", "5", "--max-rounds", "5", "-o", "sw",
        cwd=out)
    cli(d, "transfer-matrix", *sim, "--processors", "B,G,N", "--cuts", EXPLORE_CUTS,
        "--frames", "5", "--warmup", "1", "--csv", "tm.csv", cwd=out)
    for p in "BG":
        cli(d, "dvfs-latency", *SIM, "-p", p, "--levels", "1,3,5", "--repeats", "1",
            "--csv", f"dv-{p}.csv", cwd=out)
    return out


def copy_sweep(src: Path, dst: Path) -> Path:
    """A sweep directory (sweep.csv and its sidecar) copied to ``dst``."""
    shutil.copytree(src, dst)
    return dst


def copy_run(csv: Path, dst_dir: Path) -> Path:
    """A run's CSV with its sidecar and kept power trace, copied into ``dst_dir`` under the
    same names (the sidecar names its trace relative to the CSV): the copied CSV."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    for f in (csv, csv.with_suffix(".json")):
        shutil.copy2(f, dst_dir / f.name)
    trace = csv.with_suffix(".trace")
    if trace.is_dir():
        shutil.copytree(trace, dst_dir / trace.name)
    return dst_dir / csv.name


@dataclass(frozen=True)
class SharedRuns:
    sweep_lbg: Path  # sweep_lbg's directory
    sweep_lbgn: Path  # sweep_lbgn's directory
    layers_g: Path  # layers_g's CSV
    sweep_g: Path  # sweep_g's directory
    sweep_b3: Path  # sweep_b3's directory
    transfers_lbg: Path  # transfers_lbg's CSV
    layers_l: Path  # layers_l's CSV
    explore: Path  # explore_tables' folder


def make_all(d: Path) -> SharedRuns:
    """Every shared run in ``d``, four independent chains at once: the L, B, G(, N)
    sweeps (the longest, ~25 s alone), G's raw layers then G's sweep, the short runs, and
    explore's tables."""
    def sweeps() -> tuple[Path, Path]:
        lbg = sweep_lbg(d)
        return lbg, sweep_lbgn(d, lbg)

    def g_runs() -> tuple[Path, Path]:
        return layers_g(d), sweep_g(d)

    def short() -> tuple[Path, Path, Path]:
        return sweep_b3(d), transfers_lbg(d), layers_l(d)

    (lbg, lbgn), (g_csv, g_sweep), (b3, tm, l_csv), tables = at_once(
        sweeps, g_runs, short, lambda: explore_tables(d))
    return SharedRuns(lbg, lbgn, g_csv, g_sweep, b3, tm, l_csv, tables)
