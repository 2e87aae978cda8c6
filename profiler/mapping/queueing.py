"""A frame's latency through Pipeline mode's bounded queues, from its stages' times.

Stages are joined by queues of ``queue_depth`` frames, so in the steady state most of a
frame's latency is waiting in the full queues before the slowest stage b:
b (Q + 1) S_b + sum_{k >= b} S_k. `pipeline_latency_ms` gives that, or with ``frames`` the
mean over a batch that starts empty, from the recurrences of the frames' times.

The recurrences and the closed form, derived: docs/mapping.md ("Predictions").
"""

from __future__ import annotations

from collections.abc import Sequence

from profiler.errors import BadInputError

QUEUE_DEPTH = 2  # frames each queue between stages holds, unless a run says otherwise


def steady_latency_ms(stage_ms: Sequence[float], queue_depth: int) -> float:
    """Latency of a frame once the line is full (the closed form in docs/mapping.md)."""
    _check(stage_ms, queue_depth)
    slowest = max(stage_ms)
    b = next(k for k, s in enumerate(stage_ms) if s == slowest)
    return b * (queue_depth + 1) * slowest + sum(stage_ms[b:])


def frame_latencies_ms(stage_ms: Sequence[float], queue_depth: int, frames: int) -> list[float]:
    """Each frame's latency over a batch of `frames` that starts with the line empty
    (the recurrences in docs/mapping.md)."""
    _check(stage_ms, queue_depth)
    if frames < 1:
        raise BadInputError(f"need frames >= 1 (got {frames})")
    n, q = len(stage_ms), queue_depth
    take: list[list[float]] = []  # take[i][k]: stage k takes frame i
    leave_prev = [0.0] * n  # D[i-1, k]: when stage k was last free
    out = []
    for i in range(frames):
        t_row = [0.0] * n
        arrived = 0.0  # D[i, k-1]; the source has every frame at once
        for k in range(n):
            t_row[k] = max(leave_prev[k], arrived)
            done = t_row[k] + stage_ms[k]
            # room in queue k + 1 once the frame Q places ahead has been taken from it
            room = take[i - q][k + 1] if k + 1 < n and i >= q else 0.0
            arrived = leave_prev[k] = max(done, room)
        take.append(t_row)
        out.append(arrived - t_row[0])
    return out


def pipeline_latency_ms(stage_ms: Sequence[float], queue_depth: int,
                        frames: int | None = None) -> float:
    """Mean latency of a Pipeline-mode batch of `frames` (None: the steady state)."""
    if frames is None:
        return steady_latency_ms(stage_ms, queue_depth)
    lat = frame_latencies_ms(stage_ms, queue_depth, frames)
    return sum(lat) / len(lat)


def _check(stage_ms: Sequence[float], queue_depth: int) -> None:
    if not stage_ms:
        raise BadInputError("a pipeline needs at least one stage")
    if queue_depth < 1:
        raise BadInputError(f"need queue depth >= 1 (got {queue_depth})")
    if any(s < 0 for s in stage_ms):
        raise BadInputError(f"stage times must be >= 0 (got {list(stage_ms)})")
