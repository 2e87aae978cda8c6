"""Where a command's results go: its tables, its CSV and JSON sidecar, its messages.

One rule for every command with --csv / --json (no command owns this module):
- `--csv -` writes the CSV to standard output and nothing else goes there: the tables,
  the "wrote" line and every note go to standard error, so `coupprof layers --csv - |
  python -c 'import pandas, sys; pandas.read_csv(sys.stdin)'` works. The sidecar is then
  written only where --json says; a power trace is kept in memory, not beside a file
  named `-`. `--json -` does the same for the sidecar; both cannot have standard output.
- `--quiet` prints no table, no "wrote" line and no note; errors are still printed.
- Tables are fitted to the terminal (`profiler.cli.common.fit`): lesser columns are left
  out whole, never cut, and a line under the table names them; `--wide` keeps them all.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from profiler.cli.common.fit import fit, natural_width
from profiler.cli.common.options import stdout_console
from profiler.cli.common.plumbing import set_quiet
from profiler.errors import BadInputError

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console
    from rich.table import Table

#: What --csv / --json take for standard output.
STDOUT = "-"

#: What a kept power trace is, for the "wrote" line.
TRACE_WHAT = "the power logger's raw samples and marker edges behind the energy figures"


@dataclass(frozen=True)
class Written:
    """Where a command's results went: None is standard output for the CSV; for the
    sidecar None is standard output when ``json_stdout``, else not written."""

    csv: Path | None
    json: Path | None
    json_stdout: bool = False


@dataclass
class Output:
    """A command's --csv, --json, --quiet and --wide, and what it prints and writes."""

    command: str
    csv: Path | None = None
    json: Path | None = None
    quiet: bool = False
    wide: bool = False
    #: Whether the command writes a CSV (the note under a cut table points to it).
    writes_csv: bool = True
    started_ns: int = field(default_factory=time.time_ns)

    @classmethod
    def of(cls, args: argparse.Namespace) -> Output:
        """From the parsed options (absent ones default); refuses both on stdout."""
        out = cls(command=str(getattr(args, "command", "") or "coupprof"),
                  csv=getattr(args, "csv", None), json=getattr(args, "json", None),
                  quiet=bool(getattr(args, "quiet", False)), wide=bool(getattr(args, "wide", False)),
                  writes_csv=hasattr(args, "csv"))
        if out.csv_stdout and out.json_stdout:
            raise BadInputError("--csv - and --json - both ask for standard output",
                                "send one of them to a file, e.g. --json results.json")
        set_quiet(out.quiet)
        return out

    # -- where things go -------------------------------------------------------------

    @property
    def csv_stdout(self) -> bool:
        return self.csv is not None and str(self.csv) == STDOUT

    @property
    def json_stdout(self) -> bool:
        return self.json is not None and str(self.json) == STDOUT

    @property
    def data_on_stdout(self) -> bool:
        """Standard output carries the CSV or the sidecar, so messages go to stderr."""
        return self.csv_stdout or self.json_stdout

    @property
    def stream(self) -> TextIO:
        """Where tables and messages go."""
        return sys.stderr if self.data_on_stdout else sys.stdout

    @property
    def progress(self) -> bool:
        """Whether to draw progress bars (on a terminal, unless --quiet)."""
        return sys.stderr.isatty() and not self.quiet

    def csv_path(self, default: Path) -> Path | None:
        """The CSV file to write (``default`` unless --csv gave one); None for stdout."""
        return None if self.csv_stdout else Path(self.csv or default)

    def trace_dir(self, default_csv: Path) -> Path | None:
        """Where a streaming power source keeps its trace: beside the CSV; None (memory)
        when the CSV goes to standard output."""
        path = self.csv_path(default_csv)
        return None if path is None else path.with_suffix(".trace")

    def json_path(self, default_csv: Path) -> Path | None:
        """The sidecar file: --json, else the CSV's with .json; None for stdout or, with
        the CSV on stdout and no --json, none at all."""
        if self.json_stdout:
            return None
        if self.json is not None:
            return Path(self.json)
        path = self.csv_path(default_csv)
        return None if path is None else path.with_suffix(".json")

    # -- printing --------------------------------------------------------------------

    def console(self) -> Console:
        return stdout_console(stderr=self.data_on_stdout)

    def table(self, table: Table, drop: Sequence[str] = (),
              wrap: Mapping[str, int] | None = None, console: Console | None = None) -> None:
        """Print ``table`` fitted to the console: ``drop`` names its columns least wanted
        first (see `profiler.cli.common.fit`); --wide prints it whole, however wide."""
        if self.quiet:
            return
        console = console or self.console()
        if self.wide:
            need = natural_width(table, console)
            if need > console.width:  # the terminal wraps its lines; no cell is cut
                console.width = need
            console.print(table)
            return
        fitted = fit(table, console, console.width, drop, wrap)
        console.print(fitted.table)
        if fitted.dropped:
            them = "them" if len(fitted.dropped) > 1 else "it"
            where = f"; the CSV has {them}" if self.writes_csv else ""
            console.print(f"left out to fit {console.width} columns: "
                          f"{', '.join(fitted.dropped)} (--wide shows {them}{where})",
                          highlight=False)

    def line(self, text: str) -> None:
        """A line of results or a "wrote" line (not a note: `plumbing.say` prints those)."""
        if not self.quiet:
            print(text, file=self.stream, flush=True)

    # -- writing ---------------------------------------------------------------------

    def save(self, frame: pd.DataFrame, sidecar: dict[str, Any] | None,
             default_csv: Path) -> Written:
        """Write ``frame`` as the CSV and ``sidecar`` as its JSON (its "csv" key set to
        the CSV's file name, None on stdout), where the options say."""
        csv_p = self.csv_path(default_csv)
        json_p = self.json_path(default_csv)
        try:
            if csv_p is None:
                _to_stdout(lambda: frame.to_csv(sys.stdout, index=False))
            else:
                csv_p.parent.mkdir(parents=True, exist_ok=True)
                frame.to_csv(csv_p, index=False)
            if sidecar is not None:
                self.save_json({**sidecar, "csv": None if csv_p is None else csv_p.name},
                               json_p)
        except OSError as err:
            raise BadInputError(f"cannot write results to {err.filename or csv_p}: "
                                f"{err.strerror}",
                                "choose a writable path with --csv / --json") from None
        return Written(csv_p, json_p if sidecar is not None else None, self.json_stdout)

    def save_json(self, doc: dict[str, Any], path: Path | None) -> None:
        """``doc`` as indented JSON to ``path``; to stdout with --json -; nowhere if
        ``path`` is None otherwise."""
        text = json.dumps(doc, indent=2, default=str) + "\n"
        if self.json_stdout:
            _to_stdout(lambda: sys.stdout.write(text))
        elif path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            except OSError as err:
                raise BadInputError(f"cannot write {err.filename or path}: {err.strerror}",
                                    "choose a writable path with --json") from None

    def wrote(self, written: Written, rows: str = "", trace: Path | None = None,
              trace_what: str = TRACE_WHAT) -> None:
        """The "wrote" line: the CSV (``rows`` says what it holds), the sidecar, and the
        power trace folder when this run kept one there."""
        csv = "the CSV to standard output" if written.csv is None else str(written.csv)
        text = f"wrote {csv}{f' ({rows})' if rows else ''}"
        if written.json is not None:
            text += f" and {written.json}"
        elif written.json_stdout:
            text += " and the JSON sidecar to standard output"
        elif written.csv is None:
            text += "; no sidecar (--json FILE writes one)"
        if trace is not None and self.kept(trace):
            text += f"; kept {trace}/ ({trace_what})"
        self.line(text)

    def kept(self, folder: Path) -> bool:
        """Whether this run wrote into ``folder`` (an older run's folder is not named).
        The 2 s of slack cover file systems that keep coarse modification times."""
        with contextlib.suppress(OSError):
            return folder.is_dir() and any(
                p.stat().st_mtime_ns >= self.started_ns - 2_000_000_000
                for p in folder.iterdir())
        return False


def _to_stdout(write: Any) -> None:
    """Run ``write`` (onto sys.stdout) and flush; a reader that stopped early (`| head`)
    ends the output quietly, not with a traceback."""
    try:
        write()
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the flush at exit does not fail again
