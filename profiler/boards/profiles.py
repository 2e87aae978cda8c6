"""Board profiles: `data/boards/*.toml` loaded into `Board`, validated, detected, listed.

A profile has a ``[board]`` table (name, description, device-tree ``match`` strings,
``simulated``, optional ``sim`` and ``markers`` tables) and one ``[processors.X]`` table per
letter L, B, G or N (kind, name, cores, ascending ``freqs_khz`` and ``volts_mv``, governor,
host cluster, accelerator or delegate). Every key is checked; an unknown key is an error.
Errors name the file, the key and the problem (BoardError, exit code 2).

A profile's layout, key by key: docs/boards.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from profiler.boards.model import (
    PROCESSOR_LETTERS,
    Board,
    GovernorSpec,
    ProcessorKind,
    ProcessorSpec,
)
from profiler.errors import BoardError
from profiler.resources import boards_dir

BOARDS_DIR = boards_dir()  # in the package (profiler.data), so a wheel has them too
GENERATED = ("host",)  # boards built at run time, no file
#: The user's own profiles, found by name after the bundled ones (the simulated twins
#: `coupprof calibrate` writes); relative to the working directory.
USER_BOARDS_ENV = "COUPPROF_BOARDS_DIR"
USER_BOARDS_DIR = Path("coupprof-out") / "boards"
SIM_BOARD = "sim"
GOVERNOR_KINDS = ("cpufreq", "devfreq", "kgsl", "mpgpu", "sim", "sim-driver", "none")
#: kinds without files: nothing to write, so no path
PATHLESS_GOVERNORS = ("sim-driver", "none")
PROC_KINDS = tuple(k.value for k in ProcessorKind)
ACCELERATORS = ("gpu", "npu")

BOARD_KEYS = {"name", "description", "match", "simulated", "sim", "markers"}
PROC_KEYS = {"kind", "name", "cores", "freqs_khz", "volts_mv", "governor", "host",
             "accelerator", "delegate", "notes", "sim"}
SIM_PROC_KEYS = {"dvfs_delay_up_us", "dvfs_delay_down_us", "nominal_khz", "nominal_mv",
                 "timing", "power", "notes"}
SIM_PROC_REQUIRED = {"timing", "power"}
SIM_BOARD_KEYS = {"idle_power_mw", "sensor_lag_ms", "notes", "calibration"}
MARKER_KEYS = {"chip", "lines", "backend"}

FIX = "see `coupprof boards show rk3399pro` and data/boards/rk3399pro.toml for a valid profile"


class ProfileChecker:
    """Builds errors that name the file, the key and the problem."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, problem: str) -> BoardError:
        return BoardError(f"board profile {self.path}: key '{key}': {problem}", FIX)

    def table(self, obj: object, key: str) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise self.fail(key, f"must be a table, not {type(obj).__name__}")
        return obj

    def keys(self, obj: dict[str, Any], key: str, allowed: set[str]) -> None:
        for k in obj:
            if k not in allowed:
                raise self.fail(f"{key}.{k}" if key else k,
                                f"unknown key (allowed: {', '.join(sorted(allowed))})")

    def string(self, obj: dict[str, Any], key: str, name: str, required: bool = True) -> str | None:
        if name not in obj:
            if required:
                raise self.fail(f"{key}.{name}", "missing")
            return None
        val = obj[name]
        if not isinstance(val, str) or not val.strip():
            raise self.fail(f"{key}.{name}", f"must be a non-empty string, not {val!r}")
        return val

    def int_list(self, obj: dict[str, Any], key: str, name: str) -> list[int]:
        val = obj.get(name, [])
        if not isinstance(val, list) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                for v in val):
            raise self.fail(f"{key}.{name}", f"must be a list of integers, not {val!r}")
        return val

    def number(self, obj: dict[str, Any], key: str, name: str, lo: float, hi: float) -> float:
        val = obj[name]
        if isinstance(val, bool) or not isinstance(val, int | float) or not lo <= val <= hi:
            raise self.fail(f"{key}.{name}", f"must be a number in [{lo:g}, {hi:g}], not {val!r}")
        return float(val)


def load_profile(path: str | Path) -> Board:
    """Read and validate one profile file."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise BoardError(f"board profile {path} does not exist",
                         "list the bundled boards with `coupprof boards`") from None
    except OSError as err:
        raise BoardError(f"cannot read board profile {path}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise BoardError(f"board profile {path} is not valid TOML: {err}", FIX) from None
    return parse_profile(raw, path)


def parse_profile(raw: dict[str, Any], path: Path) -> Board:
    c = ProfileChecker(path)
    c.keys(raw, "", {"board", "processors"})
    if "board" not in raw:
        raise c.fail("board", "missing table [board]")
    b = c.table(raw["board"], "board")
    c.keys(b, "board", BOARD_KEYS)
    name = c.string(b, "board", "name", required=False) or path.stem
    description = c.string(b, "board", "description") or ""
    match = b.get("match", [])
    if not isinstance(match, list) or not all(isinstance(m, str) and m.strip() for m in match):
        raise c.fail("board.match", f"must be a list of non-empty strings, not {match!r}")
    simulated = b.get("simulated", False)
    if not isinstance(simulated, bool):
        raise c.fail("board.simulated", f"must be true or false, not {simulated!r}")
    extra: dict[str, Any] = {"match": tuple(match)}
    if "sim" in b:
        if not simulated:
            raise c.fail("board.sim", "only simulated boards (simulated = true) have a model")
        sim = c.table(b["sim"], "board.sim")
        c.keys(sim, "board.sim", SIM_BOARD_KEYS)
        if "idle_power_mw" in sim:
            c.number(sim, "board.sim", "idle_power_mw", 0, 1e6)
        if "sensor_lag_ms" in sim:
            c.number(sim, "board.sim", "sensor_lag_ms", 0, 1e3)
        if "calibration" in sim:
            c.table(sim["calibration"], "board.sim.calibration")
        extra["sim"] = dict(sim)
    if "markers" in b:
        m = c.table(b["markers"], "board.markers")
        c.keys(m, "board.markers", MARKER_KEYS)
        c.string(m, "board.markers", "chip", required=False)
        c.string(m, "board.markers", "backend", required=False)
        lines = c.int_list(m, "board.markers", "lines")
        if any(v < 0 for v in lines):
            raise c.fail("board.markers.lines", "line offsets must be >= 0")
        extra["markers"] = dict(m)

    if "processors" not in raw:
        raise c.fail("processors", "missing; a board needs at least one [processors.X] table")
    procs_raw = c.table(raw["processors"], "processors")
    if not procs_raw:
        raise c.fail("processors", "empty; a board needs at least one processor")
    for letter in procs_raw:
        if letter not in PROCESSOR_LETTERS:
            raise c.fail(f"processors.{letter}",
                         f"processor letter must be one of {', '.join(PROCESSOR_LETTERS)}")
    tables = {k: c.table(v, f"processors.{k}") for k, v in procs_raw.items()}
    processors: dict[str, ProcessorSpec] = {}
    # CPUs first, so GPU/NPU can borrow their host's cores.
    for letter in sorted(tables, key=lambda k: tables[k].get("kind") != ProcessorKind.CPU):
        processors[letter] = _processor(c, letter, tables[letter], tables, simulated)
    ordered = {k: processors[k] for k in PROCESSOR_LETTERS if k in processors}
    return Board(name=name, description=description, processors=ordered,
                 simulated=simulated, source=path, extra=extra)


def _processor(c: ProfileChecker, letter: str, t: dict[str, Any], tables: dict[str, dict[str, Any]],
               simulated: bool) -> ProcessorSpec:
    key = f"processors.{letter}"
    c.keys(t, key, PROC_KEYS)
    kind = c.string(t, key, "kind")
    if kind not in PROC_KINDS:
        raise c.fail(f"{key}.kind", f"must be one of {', '.join(PROC_KINDS)}, not {kind!r}")
    pk = ProcessorKind(kind)
    name = c.string(t, key, "name") or ""
    host = c.string(t, key, "host", required=False)
    if not pk.needs_host and host:
        raise c.fail(f"{key}.host", "a CPU cluster has no host; only gpu/npu processors do")
    if pk.needs_host:
        if not host:
            raise c.fail(f"{key}.host", "missing: a gpu/npu needs the letter of its host CPU cluster")
        if host not in tables or tables[host].get("kind") != ProcessorKind.CPU:
            raise c.fail(f"{key}.host", f"'{host}' is not a CPU processor of this board")
    cores = c.int_list(t, key, "cores")
    if not cores and pk.is_cpu:
        raise c.fail(f"{key}.cores", "missing: list the CPU cores of this cluster")
    if not cores and host:
        cores = c.int_list(tables[host], f"processors.{host}", "cores")
    if any(v < 0 for v in cores) or len(set(cores)) != len(cores):
        raise c.fail(f"{key}.cores", f"cores must be distinct and >= 0, not {cores}")
    freqs = c.int_list(t, key, "freqs_khz")
    if any(f <= 0 for f in freqs):
        raise c.fail(f"{key}.freqs_khz", "frequencies must be positive kHz")
    for a, b in zip(freqs, freqs[1:], strict=False):
        if b <= a:
            raise c.fail(f"{key}.freqs_khz", f"must ascend strictly ({b} after {a})")
    if freqs and freqs[0] < 10_000:
        raise c.fail(f"{key}.freqs_khz", f"{freqs[0]} looks like MHz; write kHz (e.g. 408000)")
    volts = c.int_list(t, key, "volts_mv")
    if volts and len(volts) != len(freqs):
        raise c.fail(f"{key}.volts_mv",
                     f"has {len(volts)} entries but freqs_khz has {len(freqs)}")
    if any(not 300 <= v <= 2000 for v in volts):
        raise c.fail(f"{key}.volts_mv", "voltages must be mV in [300, 2000]")
    gov = None
    if "governor" in t:
        g = c.table(t["governor"], f"{key}.governor")
        c.keys(g, f"{key}.governor", {"kind", "path"})
        gkind = c.string(g, f"{key}.governor", "kind")
        if gkind not in GOVERNOR_KINDS:
            raise c.fail(f"{key}.governor.kind",
                         f"must be one of {', '.join(GOVERNOR_KINDS)}, not {gkind!r}")
        gpath = c.string(g, f"{key}.governor", "path",
                         required=gkind not in PATHLESS_GOVERNORS) or ""
        if gpath.startswith("/"):
            raise c.fail(f"{key}.governor.path",
                         "must be relative to the sysfs root (e.g. devices/system/cpu/cpufreq/policy0)")
        if gkind in ("sim", "sim-driver") and not simulated:
            raise c.fail(f"{key}.governor.kind", f"'{gkind}' is only for simulated boards")
        if gkind not in ("none",) and not freqs:
            raise c.fail(f"{key}.freqs_khz", f"missing: governor '{gkind}' needs a frequency table")
        gov = GovernorSpec(gkind or "none", gpath)
    elif freqs:
        raise c.fail(f"{key}.governor", "missing: a processor with freqs_khz needs a governor")
    accel = t.get("accelerator")
    if accel is not None and accel not in ACCELERATORS:
        raise c.fail(f"{key}.accelerator", f"must be one of {', '.join(ACCELERATORS)}, not {accel!r}")
    delegate = c.string(t, key, "delegate", required=False)
    extra: dict[str, Any] = {}
    if "notes" in t:
        extra["notes"] = c.string(t, key, "notes")
    if "sim" in t:
        if not simulated:
            raise c.fail(f"{key}.sim", "only simulated boards (simulated = true) have a model")
        extra["sim"] = _sim_constants(c, f"{key}.sim", t["sim"], bool(freqs), volts, freqs)
    elif simulated:
        raise c.fail(f"{key}.sim", "missing: a simulated board needs a model for every processor")
    return ProcessorSpec(
        letter=letter, kind=pk, name=name, cores=tuple(cores),
        freqs_khz=tuple(freqs), volts_mv=tuple(volts), governor=gov, host=host,
        accelerator=accel, delegate=delegate, extra=extra,
    )


def _sim_constants(c: ProfileChecker, key: str, raw: object, has_dvfs: bool, volts: list[int],
                   freqs: list[int]) -> dict[str, Any]:
    s = c.table(raw, key)
    c.keys(s, key, SIM_PROC_KEYS)
    for k in sorted(SIM_PROC_REQUIRED):
        if k not in s:
            raise c.fail(f"{key}.{k}", "missing")
    _sim_model_tables(c, key, s)
    for k in ("dvfs_delay_up_us", "dvfs_delay_down_us"):
        if k in s:
            v = s[k]
            if (not isinstance(v, list) or len(v) != 2
                    or not all(isinstance(x, int | float) and x >= 0 for x in v) or v[0] > v[1]):
                raise c.fail(f"{key}.{k}", f"must be [shortest, longest] in us, not {v!r}")
    if has_dvfs and len(volts) != len(freqs):
        raise c.fail(key.rsplit(".", 1)[0] + ".volts_mv",
                     "a simulated processor with DVFS needs a voltage per level")
    if not has_dvfs:
        for k in ("nominal_khz", "nominal_mv"):
            if k not in s:
                raise c.fail(f"{key}.{k}", "missing: a processor without DVFS needs its operating point")
        c.number(s, key, "nominal_khz", 10_000, 1e8)
        c.number(s, key, "nominal_mv", 300, 2000)
    return dict(s)


#: Checks a processor's ``[processors.X.sim]`` timing and power tables: (checker, key,
#: table), raising the checker's errors. The simulated board registers it
#: (`profiler.sim.platform`): the tables are its model, so nothing here imports it.
SimTableCheck = Callable[["ProfileChecker", str, dict[str, Any]], None]
_sim_table_check: list[SimTableCheck] = []


def register_sim_table_check(check: SimTableCheck) -> None:
    """Set the check of simulated processors' model tables (replacing any before)."""
    _sim_table_check[:] = [check]


def _sim_model_tables(c: ProfileChecker, key: str, s: dict[str, Any]) -> None:
    # Without the simulated board plugged in (a script that only reads a profile) the
    # tables wait: nothing can run the model then, and the model checks what it reads.
    if _sim_table_check:
        _sim_table_check[0](c, key, s)


# ---- finding boards --------------------------------------------------------------

def bundled_profiles() -> dict[str, Path]:
    return {p.stem: p for p in sorted(BOARDS_DIR.glob("*.toml"))}


def user_boards_dir() -> Path:
    """Where `--board NAME` looks after the bundled profiles: $COUPPROF_BOARDS_DIR, else
    coupprof-out/boards in the working directory."""
    return Path(os.environ.get(USER_BOARDS_ENV) or USER_BOARDS_DIR)


def user_profiles() -> dict[str, Path]:
    """The profiles in `user_boards_dir`, by file stem (a bundled name wins)."""
    bundled = bundled_profiles()
    return {p.stem: p for p in sorted(user_boards_dir().glob("*.toml")) if p.stem not in bundled}


def list_boards() -> list[str]:
    """Bundled profile names plus the generated ones (`host`)."""
    return sorted([*bundled_profiles(), *GENERATED])


def load_board(name_or_path: str | Path, sysfs_root: str | Path | None = None) -> Board:
    """A bundled board by name, a profile by path, `host` built from `sysfs_root`, or
    one of the user's profiles (`user_boards_dir`) by name."""
    text = str(name_or_path)
    if text == "host":
        from profiler.boards.host import host_board, sysfs_root_from_env

        return host_board(sysfs_root if sysfs_root is not None else sysfs_root_from_env())
    bundled = bundled_profiles()
    if text in bundled:
        return load_profile(bundled[text])
    path = Path(text)
    if path.suffix == ".toml" or path.exists() or "/" in text:
        return load_profile(path)
    own = user_profiles()
    if text in own:
        return load_profile(own[text])
    raise BoardError(f"unknown board '{text}'",
                     f"use one of: {', '.join(sorted([*list_boards(), *own]))}, or a path to "
                     f"a .toml profile (profiles in {user_boards_dir()} are found by name)")


def read_model_string(sysfs_root: str | Path) -> str | None:
    """The device tree model, e.g. 'Radxa ROCK Pi N10', or None (no device tree).

    /proc/device-tree is a link to /sys/firmware/devicetree/base, so both are tried:
    <root>/../proc/device-tree/model first, then <root>/firmware/devicetree/base/model.
    """
    root = Path(sysfs_root)
    for p in (root.parent / "proc/device-tree/model", root / "firmware/devicetree/base/model"):
        try:
            text = p.read_bytes().replace(b"\x00", b"").decode(errors="replace").strip()
        except OSError:
            continue
        if text:
            return text
    return None


def detect_board(sysfs_root: str | Path) -> str | None:
    """Name of the bundled profile whose `match` strings occur in the device tree model."""
    model = read_model_string(sysfs_root)
    if not model:
        return None
    low = model.lower()
    for name, path in bundled_profiles().items():
        board = load_profile(path)
        if not board.simulated and any(m.lower() in low for m in board.extra.get("match", ())):
            return name
    return None


def select_board(arg: str | None, sysfs_root: str | Path,
                 announce: Callable[[str], None] | None = None) -> Board:
    """--board if given; else the detected board; else the simulated board, saying so."""
    if arg:
        return load_board(arg, sysfs_root)
    name = detect_board(sysfs_root)
    if name:
        return load_board(name, sysfs_root)
    if announce is not None:
        from profiler.boards.hostprobe import host_board_hint

        model = read_model_string(sysfs_root)
        why = f"no profile for '{model}'" if model else "no known board"
        hint = host_board_hint(sysfs_root)  # real GPU or cpufreq here: host measures them
        # short (one line under 100 columns): the tables say [SIMULATED] too
        announce(f"using the simulated board '{SIM_BOARD}' ({why}; "
                 f"{hint or '--board NAME to choose'})")
    return load_board(SIM_BOARD, sysfs_root)
