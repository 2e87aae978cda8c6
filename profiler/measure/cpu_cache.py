"""A CPU's last-level cache: its size from sysfs, and emptying it before a timed call.

The fused method (`profiler.measure.fused`) times a layer inside a short call repeated back to
back, so the call finds that layer's weights in cache. An application calling its model
frame after frame finds them there only if the whole model's weights fit in the
last-level cache: each weight is read once per frame, so between two reads of it the
rest of the model's weights pass through the cache, and a model whose weights outgrow it
meets every weight cold (a cyclic stream larger than an LRU-like cache misses on every
line). `Evictor` reproduces that state before a timed call by reading a buffer twice the
cache's size, one load per cache line.

What it cannot reach: the private caches (L1, L2) of the cluster's other cores, where a
multi-threaded call's workers keep what they last touched. Reading from one core empties
the shared last-level cache and that core's own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

LINE_BYTES = 64  # one load per line is enough to displace it; every x86-64 and Arm core here


def _size_bytes(text: str) -> int:
    """sysfs cache sizes: '32768K', '1024K', '8M', or plain bytes."""
    t = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(t[:-1] if scale > 1 else t) * scale


def last_level_cache_bytes(core: int, sysfs_root: Path) -> int | None:
    """The size of the highest-level data or unified cache that ``core`` uses, from
    ``<sysfs_root>/devices/system/cpu/cpu<core>/cache/index*/``; None where sysfs does
    not say (no such directory, or a virtual CPU that lists none)."""
    best: tuple[int, int] | None = None
    for index in sorted((sysfs_root / "devices/system/cpu" / f"cpu{core}" / "cache").glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = _size_bytes((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and (best is None or level > best[0]):
            best = (level, size)
    return None if best is None else best[1]


class Evictor:
    """Reads ``nbytes`` of its own buffer, one load per cache line, so whatever a call
    left in the caches is displaced. The buffer is allocated and touched once, here."""

    def __init__(self, nbytes: int) -> None:
        if nbytes < LINE_BYTES:
            raise ValueError(f"an eviction of {nbytes} bytes displaces nothing")
        self.nbytes = int(nbytes)
        self._buf = np.ones(self.nbytes // 8, dtype=np.int64)
        self.calls = 0

    def __call__(self) -> int:
        """One pass; returns the values read (the lines read, since every value is 1)."""
        self.calls += 1
        return int(self._buf[:: LINE_BYTES // 8].sum())
