"""`ruff check` over the whole repository (pyproject's [tool.ruff] settings) is clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ruff_check_is_clean() -> None:
    # --no-cache: the shared checkout's .ruff_cache is not this run's business.
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"ruff check failed:\n{proc.stdout}{proc.stderr}"
