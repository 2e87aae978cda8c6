"""coupprof: per-layer time and energy profiling of CNN inference on embedded SoCs."""

from pathlib import Path

__version__ = "0.1.0"

#: Repository root: `data/`, `firmware/` and `benchmarks/` live beside the packages
#: (the project is installed editable; see README).
REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
