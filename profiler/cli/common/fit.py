"""Fit a rich table to the console's width by leaving out its lesser columns whole.

A table wider than its console makes rich squeeze every column: figures come out cut
('16.9…') and a column can shrink to nothing (at 100 columns `coupprof layers` lost its
`layer` column). A figure cut short is worse than one left out, so `fit` keeps every cell
whole: it wraps the columns named in ``wrap`` (free text such as a command line), then
leaves out columns in the order the caller names them, least wanted first, until the rest
fits at its natural width, and says which went. Columns not named are never left out.
Commands print through `profiler.cli.common.output`, which says what was left out and
that --wide shows it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table

#: Wide enough that nothing a table holds is constrained by it.
UNBOUNDED = 100_000


@dataclass(frozen=True)
class Fitted:
    """A table cut down to fit, and the headers of the columns left out (in the order
    they were named)."""

    table: Table
    dropped: tuple[str, ...]


def header(column: Column) -> str:
    """The column's header as plain text."""
    head = column.header
    return head if isinstance(head, str) else getattr(head, "plain", str(head))


def natural_width(table: Table, console: Console) -> int:
    """Characters the table takes with every cell on one line (title and caption wrap,
    so they do not count)."""
    return Measurement.get(console, console.options.update_width(UNBOUNDED), table).maximum


def shaped(table: Table, dropped: Sequence[str] = (),
           wrap: Mapping[str, int] | None = None) -> Table:
    """A copy of ``table`` without the columns headed ``dropped``, the ones in ``wrap``
    folded at that many characters. The cells are shared, not copied."""
    wrap = wrap or {}
    out = copy.copy(table)
    columns: list[Column] = []
    for column in table.columns:
        name = header(column)
        if name in dropped:
            continue
        column = copy.copy(column)
        column._index = len(columns)  # rich pads the first and last column by their index
        if name in wrap:
            column.max_width, column.overflow = wrap[name], "fold"
        columns.append(column)
    out.columns = columns
    return out


def fit(table: Table, console: Console, width: int, drop: Sequence[str] = (),
        wrap: Mapping[str, int] | None = None) -> Fitted:
    """``table`` shaped to ``width`` characters: as it is if it fits; else with the
    ``wrap`` columns folded; else with columns of ``drop`` (headers, least wanted first)
    left out until it fits, then each one put back, most wanted first, that still fits.
    If the columns that must stay are wider than ``width`` on their own, they are kept
    (rich then squeezes them) with every droppable column gone."""
    if natural_width(table, console) <= width:
        return Fitted(table, ())
    wrapped = shaped(table, (), wrap)
    if natural_width(wrapped, console) <= width:
        return Fitted(wrapped, ())
    present = {header(c) for c in table.columns}
    order = [name for name in dict.fromkeys(drop) if name in present]
    dropped: list[str] = []
    for name in order:
        dropped.append(name)
        if natural_width(shaped(table, dropped, wrap), console) <= width:
            break
    for name in reversed(dropped[:-1]):  # one left out early may fit beside the rest
        trial = [d for d in dropped if d != name]
        if natural_width(shaped(table, trial, wrap), console) <= width:
            dropped = trial
    return Fitted(shaped(table, dropped, wrap), tuple(dropped))
