"""Ground truth for a layer's attributed energy, from exact window energies."""

from __future__ import annotations

import numpy as np


def layer_truth_mj(truth_mj: np.ndarray, dur: np.ndarray, used: np.ndarray) -> float:
    """A layer's energy per frame as attribution defines it: the power over the windows
    used (``truth_mj / dur`` summed over them) times the mean length of every window.
    ``dur`` in any unit; the three arrays are one layer's, per frame."""
    dur = np.asarray(dur, dtype=float)
    return float(truth_mj[used].sum() / dur[used].sum() * dur.mean())
