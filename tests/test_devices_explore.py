"""The split search across devices: its fast costs agree with predict_devices, and its
NSGA-II front holds the splits a brute force finds best."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler.devices.explore import (
    DeviceSearch,
    all_splits,
    evaluate_split,
    search_splits,
    single_devices,
)
from profiler.devices.predict import predict_devices
from profiler.devices.spec import parse_devices
from profiler.mapping.predict import LayerCosts

N = 7
DEVICES = parse_devices("[[device]]\nname='d0'\n[[device]]\nname='d1'\n[[device]]\nname='d2'\n"
                        "[[link]]\nlatency_ms=0.4\nbandwidth_mb_s=20\n"
                        "[[link]]\nbetween=['d1','d2']\nlatency_ms=2.0\nbandwidth_mb_s=5\n")


def _tables(seed: int, speed: float) -> LayerCosts:
    rng = np.random.default_rng(seed)
    frames = []
    fixed = {}
    for letter, k in (("B", 1.0), ("G", 0.45)):
        t = rng.uniform(0.5, 4.0, N) * k * speed
        p_w = 2.0 if letter == "B" else 3.5
        frames.append(pd.DataFrame({
            "processor": letter, "level": None, "layer": range(N), "time_ms": t,
            "transfer_ms": rng.uniform(0.01, 0.1, N), "energy_mj": t * p_w,
            "dynamic_energy_mj": t * (p_w - 1.0),
            "param_bytes": np.arange(1, N + 1) * 10_000,
            "bytes_in": (N + 1 - np.arange(N)) * 8_000,
            "bytes_out": (N - np.arange(N)) * 8_000}))
        fixed[(letter, None)] = 0.3 if letter == "G" else 0.0
    table = pd.concat(frames, ignore_index=True)
    table["level"] = table["level"].astype("Int64")
    return LayerCosts(table, {"B": 1.0, "G": 1.0}, fixed_ms=fixed)


COSTS = {"d0": _tables(1, 1.0), "d1": _tables(2, 1.3), "d2": _tables(3, 0.8)}


@pytest.mark.parametrize("mode", ["pipeline", "switch"])
def test_fast_costs_agree_with_predict_devices(mode: str) -> None:
    s = DeviceSearch(DEVICES, ["d0", "d1", "d2"], COSTS, None, mode)
    splits = all_splits(s)
    # one point per mapping (a split that leaves a device out names no processor for it):
    # 15 cut pairs x 8 with three parts, 3 x 6 x 4 with two, 3 x 2 with one
    assert len(splits) == len({s.mapping(sp).text for sp in splits}) == 15 * 8 + 3 * 6 * 4 + 3 * 2
    for sp in splits[::13]:
        ev = evaluate_split(s, sp)
        p = predict_devices(s.mapping(sp), mode, COSTS, None, DEVICES)
        assert ev.throughput_fps == pytest.approx(p.throughput_fps)
        assert ev.latency_ms == pytest.approx(p.latency_ms)
        assert ev.energy_mj == pytest.approx(tuple(x.energy_mj for x in p.parts))
        assert ev.memory_bytes == tuple(x.memory.total_bytes for x in p.parts if x.memory)


def test_nsga2_front_holds_the_brute_force_best() -> None:
    s = DeviceSearch(DEVICES, ["d0", "d1", "d2"], COSTS, None, "pipeline")
    # brute force over every split (its costs checked against predict_devices above):
    # the fastest, the least energy on the busiest device, the least memory on the fullest
    truth = [evaluate_split(s, sp) for sp in all_splits(s)]
    fastest = max(truth, key=lambda e: e.throughput_fps)
    frugal = min(e.max_energy_mj or 0.0 for e in truth)
    lean = min(e.max_memory_bytes or 0 for e in truth)
    res = search_splits(s, method="nsga2", pop_size=30, generations=25, seed=1)
    assert res.method == "NSGA-II"
    assert max(e.throughput_fps for e in res.front) == pytest.approx(fastest.throughput_fps)
    assert min(e.max_energy_mj or 0.0 for e in res.front) == pytest.approx(frugal)
    assert min(e.max_memory_bytes or 0 for e in res.front) == lean
    assert fastest.order in {e.order for e in search_splits(s, method="exact").front}
    # a split across devices beats every single device on throughput here
    assert fastest.throughput_fps > 1.2 * max(e.throughput_fps for e in single_devices(s))
    assert len(fastest.part_ms) >= 2
