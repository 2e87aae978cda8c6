"""Price a mapping across devices from per-device layer tables and a link table.

Each device's part (consecutive layers, its own processor order) is priced by the
one-board prediction (`profiler.mapping.predict.predict`) on that device's own tables,
its layers renumbered from 0, so calls, fixed costs, intra-device hand-overs and energy
follow `coupprof predict` exactly. Between parts, the hand-over of the cut's tensors
is priced by the link (`profiler.devices.linkfit.price_handover`: measured, else
fitted, else the devices file's simulated link). For the whole, as AutoDiCE's model:

- pipeline: throughput = 1 / the slowest of the parts' cycles and the links (non-
  blocking sends make each link a stage of its own); switch: 1 / latency;
- latency = parts + links, one frame alone;
- energy per frame per device: its part's energy, plus its idle power over the rest of
  the frame period (a device waits while the others work);
- memory per device, AutoDiCE's M_i: its layers' coefficients (param_bytes), their
  output buffers (bytes_out) and its input buffers (bytes received at its first layer).

The formulas: docs/devices.md ("Predict across devices").
"""

from __future__ import annotations

import math
from collections.abc import Mapping as MappingOf
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from profiler.devices.linkfit import LinkTable, price_handover
from profiler.devices.spec import DeviceMapping, DevicePart, DeviceSet
from profiler.errors import BadInputError
from profiler.mapping.predict import LayerCosts, Prediction, predict
from profiler.measure.method import Method


@dataclass(frozen=True)
class MemoryEstimate:
    """AutoDiCE's M_i in bytes: coefficients + output buffers + input buffers."""

    coeff_bytes: int
    outbuf_bytes: int
    inbuf_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.coeff_bytes + self.outbuf_bytes + self.inbuf_bytes


@dataclass
class PartPrediction:
    """One device's part, priced on its own tables."""

    device: str
    first: int
    last: int
    prediction: Prediction  # the one-board prediction of its layers, renumbered from 0
    energy_mj: float | None = None  # per frame of the whole, idle wait included
    memory: MemoryEstimate | None = None

    @property
    def order(self) -> str:
        return self.prediction.order

    @property
    def cycle_ms(self) -> float:
        """Time between two frames leaving this part when it runs alone."""
        p = self.prediction
        return 1000.0 / p.throughput_fps if p.throughput_fps > 0 else math.inf

    @property
    def latency_ms(self) -> float:
        return self.prediction.latency_ms


@dataclass(frozen=True)
class HandoverPrediction:
    boundary: int
    src: str
    dst: str
    nbytes: int | None
    time_ms: float
    source: str  # measured, fitted, modelled or none
    ci95_ms: float = math.nan


@dataclass
class DevicePrediction:
    mapping: str
    mode: str
    parts: list[PartPrediction]
    handovers: list[HandoverPrediction]
    latency_ms: float
    throughput_fps: float
    notes: list[str] = field(default_factory=list)

    @property
    def period_ms(self) -> float:
        return 1000.0 / self.throughput_fps if self.throughput_fps > 0 else math.inf

    @property
    def bottleneck(self) -> str:
        """The device (or 'A->B' link) that sets the throughput."""
        items = [(p.cycle_ms, p.device) for p in self.parts] + \
            [(h.time_ms, f"{h.src}->{h.dst}") for h in self.handovers]
        return max(items)[1]

    @property
    def max_energy_mj(self) -> float | None:
        es = [p.energy_mj for p in self.parts]
        return None if any(e is None for e in es) else max(e for e in es if e is not None)

    @property
    def max_memory_bytes(self) -> int | None:
        ms = [p.memory for p in self.parts]
        return None if any(m is None for m in ms) else \
            max(m.total_bytes for m in ms if m is not None)

    def to_dict(self) -> dict[str, Any]:
        return {"mapping": self.mapping, "mode": self.mode, "latency_ms": self.latency_ms,
                "throughput_fps": self.throughput_fps, "bottleneck": self.bottleneck,
                "max_energy_mj": self.max_energy_mj, "max_memory_bytes": self.max_memory_bytes,
                "notes": self.notes,
                "devices": [{"device": p.device, "layers": [p.first, p.last], "order": p.order,
                             "cycle_ms": p.cycle_ms, "latency_ms": p.latency_ms,
                             "energy_mj": p.energy_mj,
                             "energy_note": p.prediction.energy_note,
                             "memory": None if p.memory is None else
                             {"coeff_bytes": p.memory.coeff_bytes,
                              "outbuf_bytes": p.memory.outbuf_bytes,
                              "inbuf_bytes": p.memory.inbuf_bytes,
                              "total_bytes": p.memory.total_bytes},
                             "part": p.prediction.to_dict()} for p in self.parts],
                "links": [{"boundary": h.boundary, "src": h.src, "dst": h.dst,
                           "bytes": h.nbytes, "time_ms": h.time_ms, "source": h.source,
                           "ci95_ms": None if math.isnan(h.ci95_ms) else h.ci95_ms}
                          for h in self.handovers]}


def part_costs(costs: LayerCosts, part: DevicePart) -> LayerCosts:
    """`costs` restricted to `part`'s layers, renumbered from 0 (the one-board prediction
    prices layers 0..n-1)."""
    t = costs.table
    mine = t[(t["layer"] >= part.first) & (t["layer"] <= part.last)].copy()
    mine["layer"] = mine["layer"] - part.first
    return replace(costs, table=mine.reset_index(drop=True))


def part_transfers(transfers: pd.DataFrame | None, part: DevicePart) -> pd.DataFrame | None:
    """A device's own transfer table at `part`'s inner boundaries, renumbered."""
    if transfers is None:
        return None
    t = transfers[(transfers["boundary"] >= part.first) & (transfers["boundary"] < part.last)]
    t = t.copy()
    t["boundary"] = t["boundary"] - part.first
    return t


def _layer_value(costs: LayerCosts, layer: int, col: str) -> int | None:
    t = costs.table
    if col not in t.columns:
        return None
    v = t.loc[t["layer"] == layer, col].dropna()
    return None if v.empty else int(v.iloc[0])


def memory_of(costs: LayerCosts, part: DevicePart, inbuf_bytes: int | None
              ) -> MemoryEstimate | None:
    """AutoDiCE's memory of `part`: every layer's coefficients and output buffers, and
    the tensors it receives (None where its table has no sizes)."""
    coeff = [_layer_value(costs, i, "param_bytes") for i in part.layers]
    out = [_layer_value(costs, i, "bytes_out") for i in part.layers]
    if inbuf_bytes is None:
        inbuf_bytes = _layer_value(costs, part.first, "bytes_in")
    if any(v is None for v in coeff + out) or inbuf_bytes is None:
        return None
    return MemoryEstimate(sum(v for v in coeff if v is not None),
                          sum(v for v in out if v is not None), inbuf_bytes)


def cut_bytes(boundary: int, links: LinkTable | None, costs: LayerCosts) -> int | None:
    """Bytes crossing `boundary`: the link table's (the slicer's boundary tensors), else
    the consuming layer's inputs from its table (skip connections over it left out)."""
    got = links.boundary_bytes(boundary) if links is not None else None
    return got if got is not None else _layer_value(costs, boundary + 1, "bytes_in")


def predict_devices(mapping: DeviceMapping, mode: str, costs: MappingOf[str, LayerCosts],
                    links: LinkTable | None = None, devices: DeviceSet | None = None, *,
                    transfers: MappingOf[str, pd.DataFrame] | None = None,
                    method: Method = Method.FUSED) -> DevicePrediction:
    """Throughput, latency, and per-device energy and memory of `mapping` in `mode`
    (within each device and across them); ``costs``: device -> its layer tables;
    ``transfers``: device -> its own `coupprof transfer-matrix` table."""
    if mode not in ("switch", "pipeline"):
        raise BadInputError(f"--mode {mode!r} is not switch or pipeline")
    parts: list[PartPrediction] = []
    hands: list[HandoverPrediction] = []
    notes: list[str] = []
    for k, part in enumerate(mapping.parts):
        if part.device not in costs:
            raise BadInputError(f"no layer tables for device {part.device!r} (have "
                                f"{', '.join(costs) or 'none'})",
                                f"add {part.device}=CSV[,CSV] to --layers")
        mine = part_costs(costs[part.device], part)
        have = set(mine.table["processor"])
        lack = [p for p in part.mapping.processors if p not in have]
        if lack:
            raise BadInputError(f"device {part.device}'s tables have no processor "
                                f"{', '.join(lack)} for layers {part.first}-{part.last}",
                                f"measure it: coupprof layers --processor {lack[0]} --csv ...")
        pred = predict(part.mapping, mode, mine,
                       part_transfers((transfers or {}).get(part.device), part),
                       method=method)
        inbuf: int | None = None
        if k > 0:
            prev = mapping.parts[k - 1]
            b = prev.last
            nbytes = cut_bytes(b, links, costs[part.device])
            price = price_handover(b, nbytes or 0, prev.device, part.device, links, devices)
            if price.source == "fitted" and nbytes is None:
                raise BadInputError(f"the size of boundary {b} is unknown, so the link "
                                    f"{prev.device}->{part.device} cannot price it",
                                    "pass layer tables with bytes_in (coupprof layers) or a "
                                    "link table that measured it")
            hands.append(HandoverPrediction(b, prev.device, part.device, nbytes,
                                            price.time_ms, price.source, price.ci95_ms))
            inbuf = nbytes
        parts.append(PartPrediction(part.device, part.first, part.last, pred,
                                    memory=memory_of(costs[part.device], part, inbuf)))
    latency = sum(p.latency_ms for p in parts) + sum(h.time_ms for h in hands)
    if mode == "pipeline":
        slowest = max([p.cycle_ms for p in parts] + [h.time_ms for h in hands])
    else:
        slowest = latency
    fps = 1000.0 / slowest if slowest > 0 else math.inf
    period = 1000.0 / fps if fps > 0 else 0.0
    for p in parts:
        p.energy_mj, note = _device_energy(p, costs[p.device], period)
        if note:
            notes.append(f"{p.device}: {note}")
    unpriced = [f"{h.boundary}:{h.src}->{h.dst}" for h in hands if h.source == "none"]
    if unpriced:
        notes.append(f"no link figure for {', '.join(unpriced)} (counted as 0): pass --links "
                     "from `coupprof transfer-matrix --devices`")
    return DevicePrediction(mapping.text, mode, parts, hands, latency, fps, notes)


def _device_energy(p: PartPrediction, costs: LayerCosts, period_ms: float
                   ) -> tuple[float | None, str]:
    """Its part's energy per frame and its idle power over the rest of the period."""
    e = p.prediction.energy_mj
    if e is None:
        return None, ""
    idle = [costs.baseline_power_w.get(letter) for letter in dict.fromkeys(p.order)]
    if any(w is None for w in idle):
        return e, "energy without the idle wait (its tables have no idle baseline)"
    p_idle = sum(w for w in idle if w is not None) / len(idle)
    return e + p_idle * max(period_ms - p.cycle_ms, 0.0), ""
