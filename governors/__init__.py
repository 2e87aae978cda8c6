"""DVFS back ends: cpufreq, devfreq, vendor GPU files (kgsl, mpgpu), none; the simulated
board's governor (`profiler.sim.governor`) plugs in as kind ``sim`` through
`register_governor_kind`.

Entry points: `make_governor(board, proc, sysfs_root)` builds one, `RestoreGuard`
saves and restores them, `Governor.set_khz` (per run, with read-back) and
`Governor.request_khz` (per layer, write only) set frequencies.
"""

from governors.base import Check, Governor, SavedState, SetResult
from governors.factory import (
    GOVERNOR_KINDS,
    make_governor,
    register_governor_kind,
    writable_governor,
)
from governors.restore import RestoreGuard, Terminated
from governors.sysfs_io import SYSFS_ROOT_ENV, SysfsIO, sysfs_root_from_env

__all__ = [
    "Check", "Governor", "SavedState", "SetResult", "GOVERNOR_KINDS", "writable_governor",
    "make_governor", "register_governor_kind", "RestoreGuard", "Terminated", "SYSFS_ROOT_ENV",
    "SysfsIO", "sysfs_root_from_env",
]
