"""A frame's latency through Pipeline mode's bounded queues, from its stages' times.

`profiler.mapping.pipeline` runs Pipeline mode as a line of stages joined by queues of
``queue_depth`` frames each: the source puts frames into queue 0 as fast as it takes
them; stage k takes a frame from queue k, works on it for S_k, then puts it into queue
k + 1, waiting while that queue is full (blocking after service); the driver empties the
last queue at once. A batch of frames starts with the line empty (the warm-up batch
drains before the measured one). `MappedRun.latency_ns` measures a frame from stage 0
taking it to the last stage done, so in the steady state most of a frame's latency is
waiting: every queue before the slowest stage is full.

With stage times taken as fixed, frame i's times follow (Q = queue_depth, n stages):

    T[i, k] = max(D[i-1, k], D[i, k-1])      stage k takes it (T[i, 0]: from the source)
    D[i, k] = max(T[i, k] + S_k, T[i-Q, k+1])  it leaves stage k (room in queue k + 1)
    D[i, n-1] = T[i, n-1] + S_{n-1};  latency_i = D[i, n-1] - T[i, 0]

In the steady state, with b the first of the slowest stages, a frame that stage 0 takes
finds b (Q + 1) frames ahead of it at or before stage b (Q in each of queues 1..b, one in
each of stages 1..b), so its latency is

    b (Q + 1) S_b + sum_{k >= b} S_k

(the serial sum when the first stage is the slowest). A finite batch starts empty, so its
first frames wait less; `pipeline_latency_ms` with ``frames`` gives the mean over such a
batch, which is what `coupprof run --mode pipeline --frames N` reports.
"""

from __future__ import annotations

from collections.abc import Sequence

from profiler.errors import BadInputError

QUEUE_DEPTH = 2  # frames each queue between stages holds, unless a run says otherwise


def steady_latency_ms(stage_ms: Sequence[float], queue_depth: int) -> float:
    """Latency of a frame once the line is full (module docstring's closed form)."""
    _check(stage_ms, queue_depth)
    slowest = max(stage_ms)
    b = next(k for k, s in enumerate(stage_ms) if s == slowest)
    return b * (queue_depth + 1) * slowest + sum(stage_ms[b:])


def frame_latencies_ms(stage_ms: Sequence[float], queue_depth: int, frames: int) -> list[float]:
    """Each frame's latency over a batch of `frames` that starts with the line empty
    (module docstring's recurrences)."""
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
