"""The simulated board's per-layer timing and power model (one parameter set per processor).

A call's time is a fixed per-call cost (part of it on the host CPU for G and N) plus, per
operator, a soft roofline of compute (MACs at a per-kind rate, lower on small maps) and
memory time, plus the weights that do not fit the cluster's cache; compute scales with
the clock, memory mostly does not. Where a call is cut costs too: the outputs it hands
out are read back (G, N) or joined (a CPU cluster on several threads) at its end, and a
convolution and the element-wise op it feeds are one kernel only inside one call. A
call's power is the idle power plus static and
dynamic power (C_eff V^2 f scaled by how compute-bound the call is) and the host's share.
Everything is vectorised over operators; `profiler.calibrate.fit` fits the parameters,
the executor prices each sub-model with them.

The formulas: profiler/sim/README.md ("The model").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from profiler.sim.work import COMPUTE_KINDS, KINDS, OpWork

_KIND_INDEX = {k: i for i, k in enumerate(KINDS)}
#: `TimingParams` a runtime fixes, not a fit: what a call's end and its kernels cost.
CUT_EFFECTS = ("readback_us", "readback_gb_s", "fuse_share", "join_gb_s")


@dataclass(frozen=True)
class TimingParams:
    call_us: float = 0.0
    call_kcycles: float = 0.0
    host_call_kcycles: float = 0.0
    op_kcycles: float = 0.0
    host_op_kcycles: float = 0.0
    act_gb_s: float = 4.0
    weight_gb_s: float = 4.0
    stream_gb_s: float = 4.0
    memory_clock_share: float = 0.0
    roofline_p: float = 1.0
    half_occupancy_pixels: float = 0.0
    weight_cache_kb: float = 0.0
    # Not fitted: the runtime's rule (ACL: NEConvolutionLayer / CLConvolutionLayer::
    # get_convolution_method run a 3x3 stride-1 conv with Cin <= 16 (NEON), < 16 (OpenCL)
    # as im2col + GEMM). 0: every 3x3 stride-1 conv is Winograd-priced.
    winograd_min_in_channels: float = 0.0
    # Not fitted either: what a call's end and the runtime's kernels cost, by where a call
    # is cut (profile values and where they come from: data/boards/sim.toml; the
    # effects: profiler/sim/README.md, "Where a call is cut"). 0: none.
    # G, N: each output tensor handed out of a call is read back at its end, a
    # synchronised download of its own ...
    readback_us: float = 0.0
    # ... at this rate (GB/s; 0: its bytes cost nothing).
    readback_gb_s: float = 0.0
    # G, N: an element-wise op linked into the convolution that feeds it in the same call
    # (`profiler.slicing.fusion`): this share of the intermediate's write and read and of
    # the element-wise op's dispatch is saved.
    fuse_share: float = 0.0
    # CPU clusters on several threads: the outputs a call hands out were written by its
    # workers and reach the caller at the join, at this rate for the (T - 1) / T written
    # on other cores than the caller's (GB/s; 0: free).
    join_gb_s: float = 0.0
    macs_per_cycle: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COMPUTE_KINDS, 4.0))

    def to_table(self) -> dict[str, object]:
        d = asdict(self)
        # a runtime rule, not a fit: an integer, and left out where it is the default
        rule = int(d.pop("winograd_min_in_channels"))
        if rule:
            d["winograd_min_in_channels"] = rule
        for name in CUT_EFFECTS:  # runtime effects, left out where off
            if not d[name]:
                del d[name]
        d["macs_per_cycle"] = {k: self.macs_per_cycle[k] for k in COMPUTE_KINDS}
        return d

    @classmethod
    def from_table(cls, raw: Mapping[str, object]) -> TimingParams:
        names = {f.name for f in fields(cls)}
        kw = {k: float(v) for k, v in raw.items() if k in names and k != "macs_per_cycle"}  # type: ignore[arg-type]
        mpc = raw.get("macs_per_cycle", {})
        if not isinstance(mpc, Mapping):
            raise ValueError("macs_per_cycle must be a table of kind = MACs per cycle")
        rates = {k: float(mpc[k]) for k in COMPUTE_KINDS if k in mpc}
        missing = [k for k in COMPUTE_KINDS if k not in rates]
        if missing:
            raise ValueError(f"macs_per_cycle lacks {', '.join(missing)}")
        return cls(**kw, macs_per_cycle=rates)  # type: ignore[arg-type]


@dataclass(frozen=True)
class PowerParams:
    ceff_nf: float = 0.0
    static_mw_per_v2: float = 0.0
    activity_memory: float = 1.0
    activity_overhead: float = 1.0
    activity_weights: float = 1.0
    host_ceff_nf: float = 0.0

    @classmethod
    def from_table(cls, raw: Mapping[str, object]) -> PowerParams:
        names = {f.name for f in fields(cls)}
        return cls(**{k: float(v) for k, v in raw.items() if k in names})  # type: ignore[arg-type]


@dataclass(frozen=True)
class Works:
    """Columns of many `OpWork` (one sub-model, or many layers for calibration)."""

    kind: np.ndarray  # int index into work.KINDS
    macs: np.ndarray
    act_bytes: np.ndarray
    weight_bytes: np.ndarray
    out_pixels: np.ndarray
    in_channels: np.ndarray
    # in the call (`work.model_works`): outputs handed out, their bytes, bytes linked on chip
    out_tensors: np.ndarray
    out_bytes: np.ndarray
    fused_in_bytes: np.ndarray
    fused_out_bytes: np.ndarray

    @classmethod
    def of(cls, works: Sequence[OpWork]) -> Works:
        def col(get: Callable[[OpWork], float]) -> np.ndarray:
            return np.array([get(w) for w in works], dtype=np.float64)

        return cls(
            np.array([_KIND_INDEX[w.kind] for w in works], dtype=np.int64),
            col(lambda w: w.macs), col(lambda w: w.act_bytes), col(lambda w: w.weight_bytes),
            col(lambda w: max(w.out_pixels, 1)), col(lambda w: w.in_channels),
            col(lambda w: w.out_tensors), col(lambda w: w.out_bytes),
            col(lambda w: w.fused_in_bytes), col(lambda w: w.fused_out_bytes))

    @classmethod
    def concat(cls, parts: Sequence[Works]) -> Works:
        """Many `Works` as one (operators in order)."""
        if not parts:
            return cls.of([])
        return cls(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)))

    def take(self, idx: np.ndarray) -> Works:
        return Works(*(getattr(self, f.name)[idx] for f in fields(self)))

    def __len__(self) -> int:
        return len(self.kind)


@dataclass(frozen=True)
class TimeSplit:
    """A call's modelled time in ms, split by what bounds it (arrays or floats):
    computing, moving activations, streaming weights, fixed costs, and the call's end
    (read-back, join: what its outputs cost, `TimingParams.readback_us`)."""

    compute_ms: np.ndarray
    memory_ms: np.ndarray
    overhead_ms: np.ndarray
    weights_ms: np.ndarray | float = 0.0
    end_ms: np.ndarray | float = 0.0

    @property
    def total_ms(self) -> np.ndarray:
        return self.compute_ms + self.memory_ms + self.weights_ms + self.overhead_ms + self.end_ms


_FC = _KIND_INDEX["fc"]
_CONV = _KIND_INDEX["conv"]
_WINOGRAD = _KIND_INDEX["conv3x3s1"]
_VIEW = _KIND_INDEX["view"]
_REDUCE = _KIND_INDEX["reduce"]
_COMPUTE = np.array([k in COMPUTE_KINDS for k in KINDS])


def op_split(p: TimingParams, w: Works, f_ghz: np.ndarray | float, fh_ghz: np.ndarray | float,
             f_max_ghz: float, threads: int = 1) -> TimeSplit:
    """Per operator (broadcast against f/fh arrays of the same length, or scalars), in
    the call `w` was taken from (`work.model_works`): its share of the call's end
    (`end_ms`: its outputs handed out) and of its linked kernels (``fuse_share``).
    ``threads``: the call's interpreter threads (a CPU cluster's join)."""
    f = np.asarray(f_ghz, dtype=np.float64)
    fh = np.asarray(fh_ghz, dtype=np.float64)
    kind = np.where((w.kind == _WINOGRAD) & (w.in_channels < p.winograd_min_in_channels),
                    _CONV, w.kind)
    rate = np.array([p.macs_per_cycle.get(k, 1.0) for k in KINDS])[kind]
    is_fc = w.kind == _FC
    occ = np.where(is_fc, 1.0, w.out_pixels / (w.out_pixels + p.half_occupancy_pixels))
    # MACs / (MACs per cycle * GHz) = ns; / 1e6 -> ms
    comp = np.where(_COMPUTE[w.kind], w.macs / (rate * occ * f) / 1e6, 0.0)
    m = p.memory_clock_share
    mscale = (1.0 - m) + m * f_max_ghz / f
    # a linked pair keeps its intermediate on chip: the producer does not write it, the
    # element-wise op does not read it (fused_*_bytes are 0 where nothing is linked)
    act = w.act_bytes - p.fuse_share * (w.fused_in_bytes + w.fused_out_bytes)
    # bytes / (GB/s) = ns; / 1e6 -> ms
    mem = np.where(is_fc, w.weight_bytes / p.stream_gb_s,
                   np.where(w.kind == _REDUCE, w.act_bytes / p.stream_gb_s,
                            act / p.act_gb_s)) / 1e6
    mem = np.where(w.kind == _VIEW, 0.0, mem) * mscale
    spill = np.maximum(w.weight_bytes - p.weight_cache_kb * 1024.0, 0.0)
    wts = np.where(is_fc, 0.0, spill / p.weight_gb_s / 1e6) * mscale
    pw = p.roofline_p
    both = comp + mem
    safe = np.where(both > 0, both, 1.0)
    # the p-norm, computed relative to the sum so large p cannot overflow
    roof = np.where(both > 0, safe * ((comp / safe) ** pw + (mem / safe) ** pw) ** (1.0 / pw), 0.0)
    share = np.where(both > 0, comp / safe, 0.0)
    # a linked element-wise op runs inside its producer's kernel: no dispatch of its own
    dispatch = 1.0 - p.fuse_share * (w.fused_in_bytes > 0)
    overhead = (p.op_kcycles / f + p.host_op_kcycles / fh) / 1e3 * dispatch + 0.0 * comp
    return TimeSplit(roof * share, roof * (1.0 - share), overhead, wts,
                     end_ms(p, w, threads) + 0.0 * comp)


def end_ms(p: TimingParams, w: Works, threads: int = 1) -> np.ndarray:
    """Per operator, what its outputs handed out of the call cost at the call's end: a
    GPU's or NPU's read-back (``readback_us`` each, plus their bytes at
    ``readback_gb_s``), a multi-threaded CPU call's join (the share its workers wrote,
    at ``join_gb_s``). Where a call is cut decides which outputs it hands out."""
    t = w.out_tensors * p.readback_us / 1e3
    if p.readback_gb_s > 0:
        t = t + w.out_bytes / p.readback_gb_s / 1e6
    if p.join_gb_s > 0 and threads > 1:
        t = t + w.out_bytes * (1.0 - 1.0 / threads) / p.join_gb_s / 1e6
    return np.asarray(t, dtype=np.float64)


def call_overhead_ms(p: TimingParams, f_ghz: np.ndarray | float,
                     fh_ghz: np.ndarray | float) -> np.ndarray:
    """The fixed part of one call (dispatch, synchronisation), in ms."""
    f = np.asarray(f_ghz, dtype=np.float64)
    fh = np.asarray(fh_ghz, dtype=np.float64)
    return p.call_us / 1e3 + (p.call_kcycles / f + p.host_call_kcycles / fh) / 1e3


def call_split(p: TimingParams, w: Works, f_ghz: float, fh_ghz: float,
               f_max_ghz: float, threads: int = 1) -> TimeSplit:
    """One call of the sub-model whose operators are `w`: its whole time, split."""
    s = op_split(p, w, f_ghz, fh_ghz, f_max_ghz, threads)
    return TimeSplit(np.sum(s.compute_ms), np.sum(s.memory_ms),
                     np.sum(s.overhead_ms) + call_overhead_ms(p, f_ghz, fh_ghz),
                     np.sum(s.weights_ms), np.sum(s.end_ms))


def activity(pp: PowerParams, s: TimeSplit) -> np.ndarray:
    """Share of full dynamic power a call draws on average (compute-bound = 1)."""
    t = s.total_ms
    busy = (s.compute_ms + pp.activity_memory * s.memory_ms + pp.activity_weights * s.weights_ms
            + pp.activity_overhead * (s.overhead_ms + s.end_ms))
    return np.where(t > 0, busy / np.where(t > 0, t, 1.0), 0.0)


def dynamic_power_w(pp: PowerParams, s: TimeSplit, volts: np.ndarray | float,
                    f_ghz: np.ndarray | float, host_volts: np.ndarray | float = 0.0,
                    fh_ghz: np.ndarray | float = 0.0) -> np.ndarray:
    """What a running call adds to the board's idle power, in W.

    nF * V^2 * GHz = 1e-9 F * V^2 * 1e9 Hz = W."""
    v, f = np.asarray(volts, dtype=np.float64), np.asarray(f_ghz, dtype=np.float64)
    vh, fh = np.asarray(host_volts, dtype=np.float64), np.asarray(fh_ghz, dtype=np.float64)
    return (pp.static_mw_per_v2 / 1e3 * v * v + pp.ceff_nf * v * v * f * activity(pp, s)
            + pp.host_ceff_nf * vh * vh * fh)
