"""Pricing a mapping across devices, against figures computed by hand from small tables."""

from __future__ import annotations

import pandas as pd
import pytest

from profiler.devices.linkfit import LinkTable, fit_link, pair_key
from profiler.devices.predict import predict_devices
from profiler.devices.spec import parse_device_order, parse_devices
from profiler.mapping.predict import LayerCosts

DEVICES = parse_devices("[[device]]\nname='d0'\n[[device]]\nname='d1'\n"
                        "[[link]]\nlatency_ms=0.5\nbandwidth_mb_s=1\n")
SIZES = {"param_bytes": [100, 200, 300, 400], "bytes_in": [1000, 800, 600, 400],
         "bytes_out": [800, 600, 400, 200]}


def _costs(rows: dict[str, tuple[list[float], list[float], list[float]]], idle_w: float
           ) -> LayerCosts:
    frames = []
    for letter, (t, tr, e) in rows.items():
        frames.append(pd.DataFrame({"processor": letter, "level": None, "layer": range(4),
                                    "time_ms": t, "transfer_ms": tr, "energy_mj": e, **SIZES}))
    table = pd.concat(frames, ignore_index=True)
    table["level"] = table["level"].astype("Int64")
    return LayerCosts(table, {p: idle_w for p in rows})


COSTS = {"d0": _costs({"B": ([1, 2, 3, 4], [0.1] * 4, [1, 2, 3, 4]),
                       "G": ([0.5] * 4, [0.2] * 4, [0.5] * 4)}, 1.0),
         "d1": _costs({"B": ([2] * 4, [0.1] * 4, [2] * 4)}, 0.5)}


def test_pipeline_two_devices_by_hand() -> None:
    m = parse_device_order("d0:B2 d1:B2", 4, DEVICES)
    p = predict_devices(m, "pipeline", COSTS, None, DEVICES)
    d0, d1 = p.parts
    assert d0.latency_ms == pytest.approx(3.1)  # 1 + 2 + the feed into layer 0
    assert d1.latency_ms == pytest.approx(4.1)  # its layers 2, 3 on its own table
    (h,) = p.handovers
    # the devices file's simulated link: 0.5 ms + 600 bytes (layer 2's input) at 1 MB/s
    assert (h.boundary, h.nbytes, h.source) == (1, 600, "modelled")
    assert h.time_ms == pytest.approx(1.1)
    assert p.latency_ms == pytest.approx(3.1 + 1.1 + 4.1)
    assert p.throughput_fps == pytest.approx(1000 / 4.1) and p.bottleneck == "d1"
    # energy: its layers and feed, then its idle power over the rest of the period
    assert d0.energy_mj == pytest.approx(3.1 + 1.0 * (4.1 - 3.1))
    assert d1.energy_mj == pytest.approx(4.05)
    assert p.max_energy_mj == pytest.approx(4.1)
    # memory: coefficients + output buffers + input buffers
    assert d0.memory is not None and d0.memory.total_bytes == 300 + 1400 + 1000
    assert d1.memory is not None and d1.memory.total_bytes == 700 + 600 + 600
    assert p.max_memory_bytes == 2700


def test_switch_with_processors_within_a_device_and_a_fitted_link() -> None:
    m = parse_device_order("d0:B1G1 d1:B2", 4, DEVICES)
    fits = {pair_key("d0", "d1"): fit_link([0, 1_000_000], [0.2, 10.2], "d0", "d1")}
    links = LinkTable(fits, pd.DataFrame(columns=["boundary", "src", "dst", "bytes",
                                                  "time_ms_median"]))
    p = predict_devices(m, "switch", COSTS, links, DEVICES)
    d0, d1 = p.parts
    assert d0.latency_ms == pytest.approx(1 + 0.1 + 0.5)  # B->G within d0 unmeasured: 0
    assert d0.prediction.missing == ["0:B->G"]
    (h,) = p.handovers
    assert h.source == "fitted" and h.time_ms == pytest.approx(0.2 + 600 * 10 / 1e6)
    lat = 1.6 + h.time_ms + 4.1
    assert p.latency_ms == pytest.approx(lat) and p.throughput_fps == pytest.approx(1000 / lat)
    assert d0.energy_mj == pytest.approx(1.6 + 1.0 * (lat - 1.6))
    assert d1.energy_mj == pytest.approx(4.05 + 0.5 * (lat - 4.1))
    # a link faster than either part never sets the pace; a slow one does
    slow = parse_devices("[[device]]\nname='d0'\n[[device]]\nname='d1'\n"
                         "[[link]]\nlatency_ms=9\n")
    q = predict_devices(parse_device_order("d0:B2 d1:B2", 4, slow), "pipeline", COSTS,
                        None, slow)
    assert q.bottleneck == "d0->d1" and q.throughput_fps == pytest.approx(1000 / 9)
