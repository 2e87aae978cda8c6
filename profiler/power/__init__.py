"""Power sources and the Arduino logger path.

- ``protocol``: the logger's binary protocol (frames, CRC, commands, numpy decoder).
- ``trace``: a captured trace (samples, edges, gaps, counters) on disk and in memory.
- ``clockmap``: logger clock -> host clock from matched marker edges.
- ``collector``: pyserial capture from a logger (real, simavr rig, or virtual).
- ``virtual_logger``: a Python logger speaking the protocol over a pty.
"""
