"""The simulated twin of any board profile: its processors on the simulated board's model.

`twin_of(board)` turns a real board's profile (bundled, the user's own TOML, or `host`)
into a simulated one, ``sim-<board>``: every processor with its kind, cores, levels (kHz)
and voltages where the profile has them, driven by the `sim` governor, executor and
markers (every software path real, the silicon modelled: `profiler.sim`). What the
profile does not say is assumed from a documented prior, the bundled `sim` board
(ARM-CO-UP's RK3399Pro, calibrated), and said: in `Twin.assumed` and in the profile's
header comments. `coupprof calibrate --board <board>` fits the twin's timing and power
tables to that board's measured layers (`profiler.calibrate.board`) and writes it.

The priors, per processor of the same letter (L, B, G, N) on `sim`: its timing and power
tables and transition delays; voltages linear in frequency over its voltage range; a
processor without levels runs at its nominal point (sim's N) or top level. The board's
idle power is sim's. Docs: docs/boards.md ("A simulated twin of any board").
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from profiler.boards.model import Board, ProcessorSpec
from profiler.boards.profiles import SIM_BOARD, parse_profile
from profiler.calibrate.board import power_table, timing_tables, toml_table
from profiler.errors import BadInputError
from profiler.platform import choose_board
from profiler.sim import model as sim_model

TWIN_PREFIX = "sim-"


@dataclass(frozen=True)
class Twin:
    """A simulated board profile and what was assumed to build it."""

    board: Board  # the twin, loaded
    text: str  # its profile (TOML), with the prior tables in place
    assumed: tuple[str, ...]  # one line per assumption; empty for a board already simulated
    of: str  # the name of the board it is the twin of
    made: bool = True  # False: the board was simulated already and is its own twin


def twin_name(board_name: str) -> str:
    return board_name if board_name.startswith(TWIN_PREFIX) else TWIN_PREFIX + board_name


def twin_of(board: Board, prior: Board | None = None) -> Twin:
    """The simulated twin of `board` (a simulated board is its own twin), with the
    prior's model (default: the bundled `sim` board) where the profile says nothing."""
    if board.simulated:
        if board.source is None:
            raise BadInputError(f"simulated board {board.name} has no profile file")
        return Twin(board, board.source.read_text(), (), board.name, made=False)
    prior = prior or choose_board(SIM_BOARD, letters=())
    assumed: list[str] = []
    procs: list[list[str]] = []
    sims: list[list[str]] = []
    for letter, proc in board.processors.items():
        base = prior.processor(letter)
        head, sim = _processor(proc, base, assumed)
        procs.append(head)
        sims.append(sim)
    idle_mw = sim_model.idle_power_w(prior) * 1000
    assumed.append(f"idle power: {idle_mw:.0f} mW, the prior's (`{prior.name}` board)")
    assumed.append(f"timing and power tables of {', '.join(board.processors)}: the prior's "
                   f"processors of the same letter (`{prior.name}`), until calibrate fits "
                   "them ([board.sim.calibration] lists what was fitted); their runtime's rule "
                   "(winograd_min_in_channels, ARM Compute Library's) is kept, not fitted")
    source = str(board.source) if board.source else "generated from /sys"
    header = [
        f"# Simulated twin of board '{board.name}' ({board.description}), profile: {source}.",
        "# Its processors, cores, levels and the voltages the profile gives; every software",
        "# path real, the silicon modelled (profiler/sim/). Written by profiler/calibrate/twin.py.",
        f"# Assumed where the profile says nothing (priors: the bundled `{prior.name}` board):",
        *(f"# - {a}" for a in assumed),
        "",
        "[board]",
        f"name = {_quote(twin_name(board.name))}",
        f"description = {_quote('Simulated twin of ' + (board.description or board.name))}",
        "simulated = true",
        "",
        "[board.markers]",
        'backend = "sim"',
        "",
    ]
    lines = header + [x for p in procs for x in p]
    lines += toml_table("board.sim", {"idle_power_mw": idle_mw,
                                      "notes": "PRIOR: the idle power of the prior board"})
    lines += [x for s in sims for x in s]
    text = "\n".join(lines).rstrip() + "\n"
    path = Path(f"{twin_name(board.name)}.toml")
    twin = parse_profile(tomllib.loads(text), path)
    return Twin(twin, text, tuple(assumed), board.name)


def _processor(proc: ProcessorSpec, base: ProcessorSpec, assumed: list[str]
               ) -> tuple[list[str], list[str]]:
    """The twin's ``[processors.X]`` lines and its ``[processors.X.sim]`` tables."""
    letter = proc.letter
    table: dict[str, object] = {"kind": str(proc.kind), "name": f"{proc.name} (simulated)",
                                "cores": list(proc.cores)}
    if proc.host:
        table["host"] = proc.host
    consts = sim_model.constants(base)
    sim: dict[str, object] = {}
    for key in ("dvfs_delay_up_us", "dvfs_delay_down_us"):
        sim[key] = list(getattr(consts, key))
    governor = ""
    if proc.has_dvfs:
        table["freqs_khz"] = list(proc.freqs_khz)
        table["volts_mv"] = _volts(proc, base, assumed)
        governor = _governor_path(proc, assumed)
        assumed.append(f"{letter}: DVFS transition delays (us, [shortest, longest]) up "
                       f"{sim['dvfs_delay_up_us']}, down {sim['dvfs_delay_down_us']}, "
                       f"the prior's {letter}'s")
    else:
        sim = {}
        if consts.nominal_khz is not None and consts.nominal_mv is not None:
            khz, mv = consts.nominal_khz, consts.nominal_mv
        else:
            khz, mv = base.freqs_khz[-1], int(base.volts_mv[-1] or 1000)
        sim["nominal_khz"], sim["nominal_mv"] = int(khz), int(mv)
        assumed.append(f"{letter}: no DVFS levels in the profile: runs at {khz / 1000:g} MHz, "
                       f"{mv} mV (the prior's {letter}"
                       + (", its levels set by its host's" if proc.host else "") + ")")
    head = toml_table(f"processors.{letter}", table)
    if governor:
        head.insert(-1, f'governor = {{ kind = "sim", path = {_quote(governor)} }}')
    tables = [*toml_table(f"processors.{letter}.sim", sim),
              *timing_tables(letter, consts.timing), *power_table(letter, consts.power)]
    return head, tables


def _volts(proc: ProcessorSpec, base: ProcessorSpec, assumed: list[str]) -> list[int]:
    """The profile's voltages; where it has none, the prior's range linear in frequency."""
    have = list(proc.volts_mv) if len(proc.volts_mv) == len(proc.freqs_khz) else []
    if have and all(v is not None for v in have):
        return [int(v) for v in have if v is not None]
    known = [int(v) for v in base.volts_mv if v is not None]
    lo, hi = (min(known), max(known)) if known else (800, 1000)
    f0, f1 = proc.freqs_khz[0], proc.freqs_khz[-1]
    line = [round(lo + (hi - lo) * (f - f0) / (f1 - f0)) if f1 > f0 else hi
            for f in proc.freqs_khz]
    out = [int(v) if v is not None else p for v, p in zip(have, line, strict=True)] if have \
        else line
    which = "some of its levels" if have else "its levels"
    assumed.append(f"{proc.letter}: no voltage for {which} in the profile: {lo}-{hi} mV, "
                   f"linear in frequency (the prior's {base.letter} range)")
    return out


def _governor_path(proc: ProcessorSpec, assumed: list[str]) -> str:
    """Where the sim governor lays the processor out: its cpufreq policy or devfreq
    device; another kind of governor (kgsl, mpgpu) as a devfreq device of its name."""
    path = proc.governor.path if proc.governor else ""
    if "cpufreq" in path or "devfreq" in path:
        return path
    name = Path(path).name if path else f"sim-{proc.letter.lower()}"
    out = (f"devices/system/cpu/cpufreq/policy{min(proc.cores, default=0)}" if proc.kind.is_cpu
           else f"class/devfreq/{name}")
    kind = proc.governor.kind if proc.governor else "none"
    assumed.append(f"{proc.letter}: its {kind} governor is simulated as {out}")
    return out


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
