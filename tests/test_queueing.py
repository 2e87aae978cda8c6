"""Pipeline latency through bounded queues (`profiler.mapping.queueing`), against a second,
event-by-event simulation of the same line written plainly here, against hand-derived
cases, and against a real Pipeline-mode run of `profiler.mapping.pipeline` on the simulated board."""

from __future__ import annotations

import random

import numpy as np
import pytest

from profiler import zoo
from profiler.boards.profiles import load_board
from profiler.errors import BadInputError
from profiler.mapping.pipeline import MappingRunConfig, run_mapping
from profiler.mapping.queueing import (
    QUEUE_DEPTH,
    frame_latencies_ms,
    pipeline_latency_ms,
    steady_latency_ms,
)
from profiler.mapping.spec import parse_order
from profiler.slicing.slicer import slice_model


def simulate_line(stage_ms: list[float], depth: int, frames: int) -> list[float]:
    """The line as `profiler.mapping.pipeline` builds it, step by step: a source that always has
    the next frame and puts it into queue 0 when there is room; stages that take from
    their queue when free, work S_k, and hold the frame until the next queue has room;
    the driver emptying the last queue at once. Events in time order; latency = the last
    stage done - stage 0 taking the frame."""
    n = len(stage_ms)
    queues: list[list[int]] = [[] for _ in range(n)]  # queue k feeds stage k
    holding: list[int | None] = [None] * n  # frame a stage works on or holds (blocked)
    done_at: list[float | None] = [None] * n  # when its work ends (None: idle)
    taken: dict[int, float] = {}
    finished: dict[int, float] = {}
    fed, now = 0, 0.0
    while len(finished) < frames:
        moved = True
        while moved:  # settle every move possible at this instant
            moved = False
            if fed < frames and len(queues[0]) < depth:
                queues[0].append(fed)
                fed, moved = fed + 1, True
            for k in range(n):
                if holding[k] is not None and done_at[k] is not None and done_at[k] <= now:
                    f = holding[k]
                    if k == n - 1:
                        finished[f] = now
                    elif len(queues[k + 1]) < depth:
                        queues[k + 1].append(f)
                    else:
                        continue  # blocked: keeps the frame
                    holding[k] = done_at[k] = None
                    moved = True
                if holding[k] is None and queues[k]:
                    f = queues[k].pop(0)
                    holding[k], done_at[k] = f, now + stage_ms[k]
                    if k == 0:
                        taken[f] = now
                    moved = True
        pending = [t for t in done_at if t is not None and t > now]
        if not pending:  # every frame is through
            break
        now = min(pending)
    return [finished[f] - taken[f] for f in range(frames)]


def test_the_recurrences_follow_the_line_event_by_event() -> None:
    rng = random.Random(7)
    for _ in range(300):
        n, depth, frames = rng.randint(1, 4), rng.randint(1, 3), rng.randint(1, 25)
        # whole numbers of a quarter ms: exact in floating point, ties included
        stage_ms = [rng.randint(1, 24) / 4 for _ in range(n)]
        assert frame_latencies_ms(stage_ms, depth, frames) == pytest.approx(
            simulate_line(stage_ms, depth, frames)), (stage_ms, depth, frames)


def test_a_slow_second_stage_fills_the_queues_before_it() -> None:
    # 2.9 then 5.4 ms, queues of 2: worked by hand (docs/mapping.md). Frame 0 goes straight
    # through; each later frame waits 2.5 ms more until queue 1 is full and the frame
    # stage 0 takes finds 3 frames ahead of it at or before stage 1: 4 x 5.4 ms.
    lat = frame_latencies_ms([2.9, 5.4], 2, 8)
    assert lat == pytest.approx([8.3, 10.8, 13.3, 15.8, 18.3, 20.8, 21.6, 21.6])
    assert steady_latency_ms([2.9, 5.4], 2) == pytest.approx(4 * 5.4)
    assert pipeline_latency_ms([2.9, 5.4], 2, 8) == pytest.approx(sum(lat) / 8)
    # The first stage slowest: nothing waits, the serial sum.
    assert frame_latencies_ms([5.4, 2.9], 2, 5) == pytest.approx([8.3] * 5)
    # Slowest third of four, queues of 1: 2 (1 + 1) frames ahead of it, then 5 + 1 ms.
    assert steady_latency_ms([1, 2, 5, 1], 1) == pytest.approx(4 * 5 + 5 + 1)


def test_a_long_batch_ends_in_the_steady_state() -> None:
    rng = random.Random(3)
    for _ in range(100):
        n, depth = rng.randint(1, 5), rng.randint(1, 4)
        stage_ms = [rng.uniform(0.1, 10.0) for _ in range(n)]
        # The queues before the slowest stage fill by (1 - S_k / S_b) of a frame per frame
        # at best: with the slowest 25 % slower than the rest, within 4 x 5 x 5 frames.
        b = rng.randrange(n)
        stage_ms[b] = 1.25 * max(stage_ms)
        lat = frame_latencies_ms(stage_ms, depth, 400)
        assert lat[-1] == pytest.approx(steady_latency_ms(stage_ms, depth)), (stage_ms, depth)
        assert pipeline_latency_ms(stage_ms, depth) == steady_latency_ms(stage_ms, depth)


@pytest.mark.parametrize("stage_ms,depth,frames", [([], 2, 3), ([1.0], 0, 3),
                                                   ([1.0, -0.5], 2, 3), ([1.0], 2, 0)])
def test_bad_input_is_refused(stage_ms: list[float], depth: int, frames: int) -> None:
    with pytest.raises(BadInputError):
        frame_latencies_ms(stage_ms, depth, frames)


@pytest.mark.alone
def test_a_real_pipeline_run_waits_as_its_stage_times_say() -> None:
    """A Pipeline-mode run on the simulated board, its second stage (G, a fixed cost of
    some ms a call plus its layers' work, about 10 ms) far slower than its first (the
    first conv alone on B, about 1.5 ms there, and B's real compute is what a busy host
    slows): per frame, the run's latency is what the line gives for the run's own mean stage
    times. The stage threads' hand-offs take some µs each, against stages of ms."""
    sim = load_board("sim")
    data = zoo.default_model_path().read_bytes()
    default = slice_model(data, cache_dir=False)
    sliced = slice_model(data, cuts=[default.cuts[0], *default.cuts[5::3]], cache_dir=False)
    mapping = parse_order("BGGGG", 5, sim)
    frames = 14
    run = run_mapping(sliced, sim, MappingRunConfig(mapping, "pipeline", frames=frames,
                                                    warmup=2, model_bytes=data))
    stage_ms = (run.stage_busy_ns.mean(axis=0) / 1e6).tolist()
    assert stage_ms[1] > 2 * stage_ms[0], stage_ms  # the case this test is about
    want = np.array(frame_latencies_ms(stage_ms, QUEUE_DEPTH, frames))
    got = run.latency_ns / 1e6
    # The claim checked is the waiting, so each frame's own figure (the median of their
    # ratios, against a frame a busy host preempts); without the queues the steady
    # state's latency would be the serial sum, less than half of it here.
    assert float(np.median(got / want)) == pytest.approx(1.0, abs=0.05), (got, want)
    assert got[-1] > 2 * sum(stage_ms)
