"""The host CPU cluster of a GPU: its level matters to the GPU's layer times.

A GPU's layers are enqueued and waited for by a CPU cluster (its ``host``): ARM-CO-UP's
RK3399Pro data show G's times moving with the host's level (``Freq_Host``). So a G run
says at which host level it ran (read back), and ``--host-freq`` sets it. The NPU has
no DVFS of its own: its level *is* its host's (`Board.dvfs_domain`), so it has no
separate host level.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiler.boards.model import Board, ProcessorSpec
from profiler.errors import ProfilerError


def host_domain(board: Board, letter: str) -> ProcessorSpec | None:
    """The host cluster of `letter` whose level is separate from `letter`'s own, if any."""
    proc = board.processor(letter)
    if not proc.host or not proc.has_dvfs:
        return None
    host = board.processors.get(proc.host)
    return host if host is not None and host.has_dvfs else None


@dataclass(frozen=True)
class HostLevel:
    """The host's level during a run: set by coupprof (`requested`), or as found."""

    processor: str
    level: int | None
    freq_khz: int | None
    requested: bool

    def columns(self, rows: int) -> dict[str, list[Any]]:
        """Layer-row columns (host_level, host_freq_khz), as ARM-CO-UP's tables have."""
        return {"host_level": [self.level] * rows, "host_freq_khz": [self.freq_khz] * rows}

    def to_dict(self) -> dict[str, Any]:
        return {"processor": self.processor, "level": self.level, "freq_khz": self.freq_khz,
                "requested": self.requested}


def read_host_level(board: Board, letter: str, sysfs_root: Path | None = None,
                    *, requested: bool = False) -> HostLevel | None:
    """The host's frequency as its governor reads it back (None: no separate host)."""
    from governors.factory import make_governor

    host = host_domain(board, letter)
    if host is None:
        return None
    try:
        khz = make_governor(board, host, sysfs_root).read_khz()
    except (OSError, ProfilerError):
        khz = None
    level = host.freqs_khz.index(khz) + 1 if khz in host.freqs_khz else None
    return HostLevel(host.letter, level, khz, requested)
