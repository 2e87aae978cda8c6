"""Reading a CSV that a coupprof command wrote: bad input named once, in one line."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from profiler.errors import BadInputError


def read_table_csv(path: str | Path, what: str, columns: Iterable[str], fix: str,
                   ) -> pd.DataFrame:
    """The CSV at ``path``, which must hold ``columns``; ``what`` names the table in
    errors ("transfer table") and ``fix`` says which command writes one."""
    p = Path(path)
    if not p.is_file():
        raise BadInputError(f"{what} not found: {p}", fix)
    try:
        df = pd.read_csv(p)
    except (ValueError, OSError) as err:
        raise BadInputError(f"cannot read {what} {p}: {err}") from None
    need = set(columns)
    if not need <= set(df.columns):
        raise BadInputError(f"{p} is not a {what} (needs columns {', '.join(sorted(need))})",
                            fix)
    return df
