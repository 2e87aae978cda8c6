"""Calibrate a simulated twin of a board: fit the per-layer timing and power model to
measured layers and write it into a board profile."""
