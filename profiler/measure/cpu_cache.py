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

sysfs may name more cache than a core gets: a virtual machine lists its host's L3 (300
MiB on this project's 2-core VM, which keeps about 32 MiB: docs/fused.md, "Cache
state"). `usable_cache_bytes` measures what a core re-reads faster than memory.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: A buffer counts as cached where re-reading it is this much faster than memory.
CACHED_SPEEDUP = 1.3
#: `usable_cache_bytes`: its smallest buffer; the buffer that stands for memory (twice the
#: listed cache, at least the first and at most the second figure).
PROBE_MIN_BYTES = 1 << 20
PROBE_MEMORY_BYTES = 1 << 28
PROBE_MAX_BYTES = 1 << 30

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


def cached_bytes(rate_by_size: dict[int, float], memory_rate: float,
                 speedup: float = CACHED_SPEEDUP) -> int | None:
    """The largest size re-read at least ``speedup`` times faster than ``memory_rate``,
    below which every size is too (a cache is a prefix of the sizes); None where even
    the smallest is not."""
    best = None
    for size in sorted(rate_by_size):
        if rate_by_size[size] < speedup * memory_rate:
            break
        best = size
    return best


def usable_cache_bytes(listed_bytes: int, clock: Callable[[], int] = time.perf_counter_ns,
                       passes: int = 5) -> int | None:
    """What the calling core re-reads faster than memory, up to ``listed_bytes`` (what
    sysfs lists): buffers of 1 MiB, 2 MiB, ... and ``listed_bytes`` itself, each read
    ``passes`` times (the median pass), against a buffer no cache holds for memory.
    None where ``listed_bytes`` is under 1 MiB (nothing to probe); 0 where no buffer
    reads faster than memory. Under a second."""
    if listed_bytes < PROBE_MIN_BYTES:
        return None
    memory_bytes = min(max(2 * listed_bytes, PROBE_MEMORY_BYTES), PROBE_MAX_BYTES)

    def rate(nbytes: int) -> float:
        buf = np.ones(nbytes // 8, dtype=np.int64)
        buf[:: LINE_BYTES // 8].sum()  # touched once: later passes find what stays cached
        times = []
        for _ in range(passes):
            t0 = clock()
            buf[:: LINE_BYTES // 8].sum()
            times.append(clock() - t0)
        return nbytes / max(float(np.median(times)), 1.0)

    memory = rate(memory_bytes)
    sizes = [PROBE_MIN_BYTES << k for k in range(40) if PROBE_MIN_BYTES << k < listed_bytes]
    rates: dict[int, float] = {}
    for size in [*sizes, listed_bytes]:
        rates[size] = rate(size)
        if rates[size] < CACHED_SPEEDUP * memory:
            break  # past the cache: larger sizes only read memory
    return cached_bytes(rates, memory) or 0


@functools.lru_cache(maxsize=8)
def measured_cache_bytes(core: int, listed_bytes: int) -> int | None:
    """`usable_cache_bytes` on ``core`` (this thread pinned there meanwhile), once per
    process for each core and listed size."""
    was = os.sched_getaffinity(0)
    try:
        with contextlib.suppress(OSError):  # a core this process may not use: from here
            os.sched_setaffinity(0, {core})
        return usable_cache_bytes(listed_bytes)
    finally:
        os.sched_setaffinity(0, was)
