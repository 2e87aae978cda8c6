"""Regenerate the bundled default model: `python -m profiler.zoo.default [PATH]`."""

from __future__ import annotations

import sys
from pathlib import Path

from profiler.tflite.model_io import sha256_bytes
from profiler.zoo.registry import write_default_model


def main(argv: list[str]) -> int:
    path = write_default_model(Path(argv[0]) if argv else None)
    print(f"wrote {path} ({path.stat().st_size} bytes, sha256 {sha256_bytes(path.read_bytes())})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
