"""JSON sidecars written whole or not at all (a temporary file, then an atomic rename)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np


def json_default(o: object) -> object:
    """numpy scalars as plain numbers (``json.dumps(..., default=json_default)``)."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_json_atomic(path: Path, obj: dict[str, Any]) -> None:
    # No fsync: a reader must never see half a file; a crash may lose the last update.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=json_default) + "\n", encoding="utf-8")
    os.replace(tmp, path)
