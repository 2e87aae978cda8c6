"""`mypy profiler governors` (pyproject's [tool.mypy] settings, its defaults otherwise) is clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_mypy_is_clean() -> None:
    # The incremental cache (.mypy_cache/, ignored) takes a rerun from ~15 s to ~1 s; mypy
    # checks each cached module against its source, so a stale cache cannot hide an error.
    proc = subprocess.run([sys.executable, "-m", "mypy", "profiler", "governors"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mypy found errors:\n{proc.stdout}{proc.stderr}"
