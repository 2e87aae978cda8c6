"""Where coupprof's files are: the data shipped in the package, and the source checkout.

- **Package data** (board profiles, example devices files, the default model) ships
  inside the package as ``profiler.data``: in a checkout that is the top-level ``data/``
  folder (pyproject's ``package-dir``), in an installed wheel
  ``site-packages/profiler/data/``. It is read through ``importlib.resources``, so every
  way of installing finds it; a checkout run without installing (``PYTHONPATH=.``) reads
  ``data/`` directly.
- **The source checkout** holds what no wheel ships: the firmware and its simavr rig
  (``firmware/``), benchmarks, notebooks, validation data. It is ``$COUPPROF_SOURCE_DIR``
  when set, else the folder above the ``profiler`` package, which is the checkout in an
  editable install (``./setup.sh``) and ``site-packages`` in a regular one.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

DATA_PACKAGE = "profiler.data"
SOURCE_ENV = "COUPPROF_SOURCE_DIR"
DEFAULT_MODEL_FILENAME = "mobilenet_v1_0.25_128.tflite"


def data_dir() -> Path:
    """The package data folder as a real path (LiteRT and glob need one)."""
    try:
        root = resources.files(DATA_PACKAGE)
    except ModuleNotFoundError:
        # Run from a checkout that is not installed (PYTHONPATH=the checkout): the
        # package-dir mapping exists only in an install, so read data/ where it is.
        checkout_data = Path(__file__).resolve().parent.parent / "data"
        if (checkout_data / "boards").is_dir():
            return checkout_data
        raise
    # pip always unpacks a wheel, so this is a Path; only a zipped package (zipimport)
    # would give a Traversable, and nothing here can use one.
    if not isinstance(root, Path):
        raise RuntimeError(f"coupprof's package data is not on the file system ({root}); "
                           "install coupprof with pip, which unpacks it")
    return root


def boards_dir() -> Path:
    """The bundled board profiles (``*.toml``)."""
    return data_dir() / "boards"


def devices_dir() -> Path:
    """The example devices files (``*.toml``), found by name: ``--devices sim2``."""
    return data_dir() / "devices"


def default_model_file() -> Path:
    """The bundled default model (MobileNetV1 alpha 0.25, 128x128)."""
    return data_dir() / "models" / DEFAULT_MODEL_FILENAME


def source_dir() -> Path:
    """The coupprof checkout that firmware/ and benchmarks/ are looked up in.

    It may not be a checkout at all (an install from a wheel): ask
    ``source_missing()`` before relying on it.
    """
    env = os.environ.get(SOURCE_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parent.parent


def source_missing() -> str | None:
    """Why ``source_dir()`` is not a coupprof checkout (one line), or None when it is."""
    root = source_dir()
    # firmware/Makefile is what setup.sh builds the firmware and the rig from.
    if (root / "firmware" / "Makefile").is_file():
        return None
    if os.environ.get(SOURCE_ENV):
        return (f"${SOURCE_ENV}={os.environ[SOURCE_ENV]} is not a coupprof checkout "
                f"(no firmware/Makefile); point it at a clone of the coupprof repository")
    return (f"coupprof is installed without its source checkout ({root} has no "
            f"firmware/); clone the coupprof repository, run ./setup.sh there, and set "
            f"{SOURCE_ENV} to the clone")
