"""The one line a command prints when Ctrl-C stops it: what was restored, what was kept.

`profiler.cli.main` catches the KeyboardInterrupt and prints `interrupt_line`. The
frequencies come from the governors' guards (`governors.restore.restored_on_unwind`: the
processors whose saved settings were written back as the interrupt unwound them); files a
command leaves behind are registered as it creates them (`keep_on_interrupt`) and named
only if they exist by then. A command that keeps its own results (a sweep's finished
pairs) says so itself through `account`, and its line replaces the generic one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class _Record:
    kept: list[tuple[Path, str]] = field(default_factory=list)  # (path, what it is)
    account: str | None = None


_RECORD = _Record()


def keep_on_interrupt(path: Path, what: str) -> None:
    """Name ``path`` (``what``: e.g. "the power trace so far") if the command is stopped
    while it exists."""
    _RECORD.kept.append((Path(path), what))


def account(text: str) -> None:
    """The command's own words on what an interrupt left (said instead of the generic
    "no results written")."""
    _RECORD.account = text


def interrupt_line(command: str) -> str:
    """``coupprof COMMAND: interrupted; ...``: the account or "no results written",
    the frequencies restored (or that none was left changed) and the files kept."""
    from governors.restore import restored_on_unwind

    parts = [_RECORD.account or "no results written (they are written when it finishes)"]
    letters = restored_on_unwind()
    parts.append(f"frequencies restored ({', '.join(letters)} as before the run)" if letters
                 else "no frequency was left changed")
    kept = [f"{what}: {p}" for p, what in _RECORD.kept if p.exists()]
    if kept:
        parts.append("kept " + ", ".join(kept))
    return f"coupprof {command}: interrupted; " + "; ".join(parts)
