"""Board profiles: which processors a board has, their cores, DVFS tables and sysfs files."""

from profiler.boards.model import Board, GovernorSpec, ProcessorSpec, resolve_level

__all__ = ["Board", "GovernorSpec", "ProcessorSpec", "resolve_level"]
