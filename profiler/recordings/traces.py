"""Power traces from other loggers: time, power and a marker state per reading.

Two readers, one result (`Recording`):

- `read_armcoup_log`: ARM-CO-UP's Arduino log, one ``pin,millis,mW`` line per INA260
  reading. Pin 0 means a layer is running (their board drives the GPIO low at a
  layer's start and high at its end); coupprof's markers drive it high instead
  (``active_level=1``). `armcoup_recording` reads the same lines from text a logger
  sent (`profiler.power.sources.ina260`).
- `read_csv_trace`: any CSV with a header; the time, power (or current and voltage)
  and marker columns are named by a `CsvSpec`, with their units.

A malformed line is skipped, counted and reported by line number (ARM-CO-UP's own
reader throws away everything collected before such a line); so is a last line without
its newline (a logger that stopped mid-reading). A file that is empty, whose time runs
backwards, or that lacks a named column is bad input: one `BadInputError`.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import math
import re
from array import array
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from profiler.errors import BadInputError

TIME_UNITS_MS = {"s": 1000.0, "ms": 1.0, "us": 1e-3, "ns": 1e-6}
POWER_UNITS_MW = {"W": 1000.0, "mW": 1.0, "uW": 1e-3}
CURRENT_UNITS_A = {"A": 1.0, "mA": 1e-3, "uA": 1e-6}
VOLTAGE_UNITS_V = {"V": 1.0, "mV": 1e-3}

#: How many skipped lines are listed by number (the rest are counted).
LISTED_SKIPS = 20


@dataclass(frozen=True)
class SkippedLine:
    line: int  # 1-based line number in the file
    reason: str


@dataclass
class Recording:
    """A trace: per reading its time on the logger's clock, power, and marker state.

    ``active`` is True while a marked window (a layer) runs; ``level`` keeps the raw
    marker value (ARM-CO-UP's pin), whose changes split the trace into segments.
    ``line`` is each reading's line in the file, for messages.
    """

    path: Path
    sha256: str
    fmt: str
    t_ms: np.ndarray
    power_mw: np.ndarray
    level: np.ndarray
    active: np.ndarray
    line: np.ndarray
    skipped: list[SkippedLine] = field(default_factory=list)
    total_lines: int = 0

    @property
    def readings(self) -> int:
        return int(self.t_ms.size)

    def skipped_summary(self) -> str:
        """'3 malformed lines skipped: 17 (3 fields expected), 90 (...), ...' or ''."""
        if not self.skipped:
            return ""
        listed = ", ".join(f"{s.line} ({s.reason})" for s in self.skipped[:LISTED_SKIPS])
        more = len(self.skipped) - LISTED_SKIPS
        return (f"{len(self.skipped)} malformed line{'s' if len(self.skipped) != 1 else ''} "
                f"skipped in {self.path.name}: {listed}" + (f" and {more} more" if more > 0 else ""))


@dataclass(frozen=True)
class CsvSpec:
    """Which columns of a generic CSV hold what, and in which units."""

    time_col: str
    time_unit: str
    marker_cols: tuple[str, ...]
    power_col: str | None = None
    power_unit: str = "mW"
    current_col: str | None = None
    current_unit: str = "A"
    voltage_col: str | None = None
    voltage_unit: str = "V"
    voltage_v: float | None = None  # a fixed supply voltage instead of a column
    active_level: int = 1  # marker value while a window runs
    delimiter: str = ","


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """A trace file's OS errors as one-line bad input."""
    try:
        yield
    except FileNotFoundError:
        raise BadInputError(f"trace not found: {path}", "pass the logger's trace file") from None
    except IsADirectoryError:
        raise BadInputError(f"{path} is a directory, not a trace file") from None
    except OSError as err:
        raise BadInputError(f"cannot read {path}: {err.strerror}") from None


def _read_text(path: Path) -> tuple[str, str]:
    with _reading(path):
        raw = path.read_bytes()
    return raw.decode("utf-8", errors="replace"), hashlib.sha256(raw).hexdigest()


CUT_LAST = "no newline: the logger stopped mid-reading"


def _cut_last(text: str) -> bool:
    """A logger unplugged mid-write leaves a last line without its newline. Even one that
    parses may have lost digits (``1,4487,30`` of ``1,4487,3000.00``), so it is dropped
    and reported, as a cut first line is; the readings before it are whole."""
    return bool(text) and not text.endswith(("\n", "\r"))


def _monotonic(path: Path, t_ms: np.ndarray, line: np.ndarray) -> None:
    back = np.flatnonzero(np.diff(t_ms) < 0)
    if back.size:
        i = int(back[0]) + 1
        raise BadInputError(
            f"{path}: time runs backwards at line {int(line[i])} ({t_ms[i - 1]:g} -> "
            f"{t_ms[i]:g} ms): a logger reset or two captures in one file",
            "split the file where the time restarts and import each part")


def parse_armcoup_line(line: str) -> tuple[int, float, float] | str | None:
    """One ``pin,millis,mW`` line: (pin, ms, mW), the reason it is malformed, or None
    for a blank line."""
    s = line.strip()
    if not s:
        return None
    fields = s.split(",")
    if len(fields) != 3:
        return f"{len(fields)} fields, 3 expected"
    try:
        pin, ms, mw = int(fields[0]), float(fields[1]), float(fields[2])
    except ValueError:
        return "not numbers"
    if pin not in (0, 1):
        return f"pin {pin} is not 0 or 1"
    if not (math.isfinite(ms) and math.isfinite(mw)):
        return "not a finite number"
    return pin, ms, mw


#: Characters of a log handled at a time: an hour's log at 1 kS/s is ~60 MB of text, and
#: its lines held as a list of str would take four times that.
READ_BLOCK = 1 << 20
#: Line breaks `str.splitlines` knows besides ``\n`` and ``\r\n``: where one occurs, the
#: lines are numbered as it numbers them (the whole text at once).
_OTHER_BREAKS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]|\r(?!\n)")


class _Readings:
    """``pin,millis,mW`` lines gathered one by one into compact arrays (8 bytes a value,
    not a Python float's 32)."""

    def __init__(self) -> None:
        self.pins = array("b")
        self.times = array("d")
        self.powers = array("d")
        self.where = array("i")  # line numbers: 4 bytes each
        self.skipped: list[SkippedLine] = []
        self.lines = 0
        self.parsed_last = False

    def feed(self, lines: Iterable[str]) -> None:
        for raw in lines:
            self.lines += 1
            self.parsed_last = False
            got = parse_armcoup_line(raw)
            if got is None:
                continue
            if isinstance(got, str):
                self.skipped.append(SkippedLine(self.lines, got))
                continue
            self.pins.append(got[0])
            self.times.append(got[1])
            self.powers.append(got[2])
            self.where.append(self.lines)
            self.parsed_last = True

    def feed_block(self, block: str) -> None:
        """Whole lines, each ending with ``\n``."""
        parts = block.split("\n")
        parts.pop()  # after the last newline
        self.feed(parts)

    def recording(self, path: Path, sha256: str, tail: str, active_level: int) -> Recording:
        """``tail``: the text's last characters (is its last line whole?)."""
        if not self.pins:
            raise BadInputError(f"{path} holds no pin,millis,mW readings",
                                "pass an ARM-CO-UP power log (lines like 1,4487,3000.00)")
        if _cut_last(tail):
            if self.parsed_last:
                for col in (self.pins, self.times, self.powers, self.where):
                    col.pop()
            else:
                self.skipped = [x for x in self.skipped if x.line != self.lines]
            self.skipped.append(SkippedLine(self.lines, CUT_LAST))
            if not self.pins:
                raise BadInputError(f"{path} holds no whole pin,millis,mW reading",
                                    "pass an ARM-CO-UP power log (lines like 1,4487,3000.00)")
        level = np.frombuffer(self.pins, dtype=np.int8)
        rec = Recording(path=path, sha256=sha256, fmt="armcoup",
                        t_ms=np.frombuffer(self.times, dtype=np.float64),
                        power_mw=np.frombuffer(self.powers, dtype=np.float64), level=level,
                        active=level == active_level,
                        line=np.frombuffer(self.where, dtype=np.intc),
                        skipped=self.skipped, total_lines=self.lines)
        _monotonic(path, rec.t_ms, rec.line)
        return rec


def armcoup_recording(text: str, path: Path, sha256: str, active_level: int = 0) -> Recording:
    """The readings of ``pin,millis,mW`` text (a file's, or what a logger sent);
    ``active_level``: the pin while a layer runs (ARM-CO-UP's board drives it low)."""
    got = _Readings()
    if _OTHER_BREAKS.search(text):
        got.feed(text.splitlines())
    else:  # a block of lines at a time: the same lines, without a list of them all
        pos = 0
        while pos < len(text):
            end = text.find("\n", pos + READ_BLOCK)
            end = len(text) if end < 0 else end + 1
            got.feed_block(text[pos:end] + ("" if text[end - 1] == "\n" else "\n"))
            pos = end
    return got.recording(path, sha256, text[-1:], active_level)


def read_armcoup_log(path: str | Path, active_level: int = 0) -> Recording:
    """ARM-CO-UP's ``pin,millis,mW`` log (no header; by default pin 0 = a layer runs, as
    their board drives it; a recording made with coupprof's marker has pin 1). Read a
    block at a time, so an hour's log never sits in memory as text."""
    p = Path(path)
    got = _Readings()
    sha = hashlib.sha256()
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace")
    rest = tail = ""
    with _reading(p), open(p, "rb") as f:
            while True:
                raw = f.read(READ_BLOCK)
                sha.update(raw)
                text = rest + decode.decode(raw, final=not raw)
                if text:
                    tail = text[-1:]
                cut = text.rfind("\n") + 1 if raw else len(text)
                block, rest = text[:cut], text[cut:]
                if _OTHER_BREAKS.search(block):  # numbered as splitlines() numbers them
                    text, digest = _read_text(p)
                    return armcoup_recording(text, p, digest, active_level)
                if block:
                    got.feed_block(block if block.endswith("\n") else block + "\n")
                if not raw:
                    break
    return got.recording(p, sha.hexdigest(), tail, active_level)


#: How many of a file's first non-blank lines `looks_like_armcoup` reads, and the share
#: of them that must be ``pin,millis,mW`` readings.
SNIFF_LINES = 50
SNIFF_SHARE = 0.8


def looks_like_armcoup(path: str | Path) -> bool:
    """True when most of the file's first `SNIFF_LINES` non-blank lines are ``pin,millis,mW``
    readings. Not the first line alone: a logger started mid-line leaves a fragment there
    (``0.00``, ``,4487,3000.00``), which the reader then skips and reports. A first line
    with letters in it is a header, so the file is a generic CSV."""
    lines: list[str] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for raw in f:
                if raw.strip():
                    lines.append(raw)
                    if len(lines) == SNIFF_LINES:
                        break
    except OSError:
        return False
    if not lines or any(c.isalpha() for c in lines[0]):
        return False
    ok = [isinstance(parse_armcoup_line(s), tuple) for s in lines]
    # the lines a logger can cut, its first and a last one without its newline, count
    # only when whole
    judged = len(ok) - (not ok[0]) - (len(ok) > 1 and not ok[-1] and not lines[-1].endswith("\n"))
    return any(ok) and sum(ok) >= SNIFF_SHARE * judged


def _unit(value: str, table: dict[str, float], what: str) -> float:
    if value not in table:
        raise BadInputError(f"unknown {what} unit {value!r}",
                            f"use one of {', '.join(table)}")
    return table[value]


def read_csv_trace(path: str | Path, spec: CsvSpec) -> Recording:
    """A CSV with a header row; columns and units from `spec`. Several marker columns
    combine: a window runs while any of them is at ``spec.active_level``."""
    p = Path(path)
    to_ms = _unit(spec.time_unit, TIME_UNITS_MS, "time")
    if spec.power_col is None and spec.current_col is None:
        raise BadInputError("no power column named", "pass --power-col, or --current-col with "
                            "--voltage-col or --voltage-v")
    if spec.power_col is not None:
        p_scale = _unit(spec.power_unit, POWER_UNITS_MW, "power")
    else:
        i_scale = _unit(spec.current_unit, CURRENT_UNITS_A, "current")
        if spec.voltage_col is None and spec.voltage_v is None:
            raise BadInputError("current given without a voltage",
                                "pass --voltage-col NAME or --voltage-v VOLTS")
        v_scale = _unit(spec.voltage_unit, VOLTAGE_UNITS_V, "voltage")
    if not spec.marker_cols:
        raise BadInputError("no marker column named", "pass --marker-col NAME (one or more)")
    text, sha = _read_text(p)
    lines = text.splitlines()
    rows = csv.reader(lines, delimiter=spec.delimiter)
    header: list[str] | None = None
    for fields in rows:
        if fields and any(f.strip() for f in fields) and not fields[0].lstrip().startswith("#"):
            header = [f.strip() for f in fields]
            break
    if header is None:
        raise BadInputError(f"{p} is empty (no header row)", "pass a CSV with a header row")
    wanted = [spec.time_col, *spec.marker_cols]
    wanted += [spec.power_col] if spec.power_col else [spec.current_col or ""]
    if spec.power_col is None and spec.voltage_col:
        wanted.append(spec.voltage_col)
    missing = [c for c in wanted if c not in header]
    if missing:
        raise BadInputError(f"{p} has no column {', '.join(repr(c) for c in missing)} "
                            f"(its columns: {', '.join(header)})",
                            "name the columns with --time-col/--power-col/--marker-col")
    col = {name: header.index(name) for name in wanted}
    times: list[float] = []
    powers: list[float] = []
    marks: list[int] = []
    where: list[int] = []
    skipped: list[SkippedLine] = []
    parsed_last = False
    for fields in rows:
        no = rows.line_num
        parsed_last = False
        if not fields or not any(f.strip() for f in fields) or fields[0].lstrip().startswith("#"):
            continue
        if len(fields) != len(header):
            skipped.append(SkippedLine(no, f"{len(fields)} fields, {len(header)} expected"))
            continue
        try:
            t = float(fields[col[spec.time_col]]) * to_ms
            if spec.power_col is not None:
                mw = float(fields[col[spec.power_col]]) * p_scale
            else:
                volts = float(fields[col[spec.voltage_col]]) * v_scale if spec.voltage_col \
                    else float(spec.voltage_v or 0.0)
                mw = float(fields[col[spec.current_col or ""]]) * i_scale * volts * 1000.0
            on = any(round(float(fields[col[m]])) == spec.active_level for m in spec.marker_cols)
        except ValueError:
            skipped.append(SkippedLine(no, "not numbers"))
            continue
        if not (np.isfinite(t) and np.isfinite(mw)):
            skipped.append(SkippedLine(no, "not a finite number"))
            continue
        times.append(t)
        powers.append(mw)
        marks.append(1 if on else 0)
        where.append(no)
        parsed_last = True
    if _cut_last(text):
        if parsed_last:
            for col2 in (times, powers, marks, where):
                col2.pop()
        else:
            skipped = [x for x in skipped if x.line != rows.line_num]
        skipped.append(SkippedLine(rows.line_num, CUT_LAST))
    if not times:
        raise BadInputError(f"{p} has a header but no readings", "pass the whole export")
    active = np.asarray(marks, dtype=np.int8)
    rec = Recording(path=p, sha256=sha, fmt="csv", t_ms=np.asarray(times, dtype=np.float64),
                    power_mw=np.asarray(powers, dtype=np.float64), level=active,
                    active=active.astype(bool), line=np.asarray(where, dtype=np.int64),
                    skipped=skipped, total_lines=len(lines))
    _monotonic(p, rec.t_ms, rec.line)
    return rec
