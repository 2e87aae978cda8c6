"""The fused method against the simulated board's cut-dependent costs (issue 26).

On the sim, a call's end costs by where it is cut (G: a read-back per output handed out;
B on several threads: the join) and a conv and the ADD linked into it are one kernel
only inside one call (profiler/sim/README.md, "Where a call is cut"). This runs a fused
table of a zoo model on one simulated processor at its top level twice: as the method
was (prefixes keeping their outputs, every layer its own difference) and as it is now
(prefixes ending in one joined output, each end measured and taken out, kernel groups,
rows below zero merged), and prints every row against the sim's truth: each layer's
operators inside one call of the whole model (docs/fused.md, "Rows that alternate").

    python benchmarks/fused_cut_effects.py G --model resnet50 --size 32
    python benchmarks/fused_cut_effects.py B --threads 2 --model resnet50 --size 32
    python benchmarks/fused_cut_effects.py G --model default
"""

from __future__ import annotations

import argparse
import resource
import time
from dataclasses import replace

import numpy as np

from governors import RestoreGuard
from governors.factory import make_governor
from profiler import zoo
from profiler.executors.factory import make_executor
from profiler.measure.fused import (
    Estimate,
    FusedProfiler,
    FusedResult,
    FusedSettings,
    fused_profiler,
    layer_estimates,
)
from profiler.platform import choose_board
from profiler.sim import model as sim_model
from profiler.sim import perf
from profiler.sim.work import model_works
from profiler.slicing.graph import ModelView
from profiler.slicing.prefix import REDUCE_ABOVE_BYTES, prefix_models
from profiler.slicing.slicer import slice_model
from profiler.tflite.model_io import parse_model


def truth_ms(board, letter: str, data: bytes, khz: int, host_khz: int | None,  # noqa: ANN001
             threads: int) -> np.ndarray:
    """Per operator, the sim's price inside one call of the whole model, without the
    call's fixed cost and end (as tests/sim_truth.py's `op_times_ms`)."""
    proc = board.processor(letter)
    host = board.processors.get(proc.host) if proc.host else None
    fh = sim_model.operating_point(host, host_khz)[0] if host is not None else khz
    s = perf.op_split(sim_model.constants(proc).timing,
                      perf.Works.of(model_works(ModelView.of(parse_model(data, "truth")))),
                      khz / 1e6, fh / 1e6, sim_model.max_khz(proc) / 1e6, threads)
    return np.asarray(s.total_ms - s.end_ms)


def rows(res: FusedResult, truth: np.ndarray, new: bool) -> list[tuple[str, Estimate, float]]:
    """The table's rows against the truth: now, every layer in no group and every group;
    as it was, every layer's own difference of the same kind of rounds."""
    if not new:
        assert res.round_ns is not None
        _, layers, _ = layer_estimates(res.round_ns, positions=res.layer_positions or None)
        return [(str(k), e, float(truth[k])) for k, e in enumerate(layers)]
    out = [(str(x.index), Estimate(x.time_ms, x.ci95_ms), float(truth[x.index]))
           for x in res.layers if x.group is None]
    out += [(g.describe(), Estimate(g.time_ms, g.ci95_ms), float(truth[g.first:g.last + 1].sum()))
            for g in res.groups]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("letter", choices=("G", "N", "B", "L"))
    ap.add_argument("--model", default="resnet50", help="a zoo model, or 'default'")
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--budget-s", type=float, default=30.0)
    ap.add_argument("--min-rounds", type=int, default=8)
    ap.add_argument("--methods", default="old,new")
    a = ap.parse_args()
    board = choose_board("sim")
    data = zoo.default_model_path().read_bytes() if a.model == "default" \
        else zoo.build(a.model, size=a.size)
    sliced = slice_model(data, cache_dir=False)
    proc = board.processor(a.letter)
    host = board.processor(proc.host) if proc.host else None
    govs = [make_governor(board, p) for p in (proc, host) if p is not None and p.freqs_khz]
    settings = FusedSettings(budget_s=a.budget_s, min_rounds=a.min_rounds, warmup_rounds=1,
                             alone_calls=0)
    with RestoreGuard(govs):
        for gov in govs:
            gov.set_khz(gov.proc.freqs_khz[-1])
        time.sleep(0.02)  # past the modelled transition delays
        khz = sim_model.max_khz(proc)
        host_khz = host.freqs_khz[-1] if host is not None and host.freqs_khz else None
        ops = truth_ms(board, a.letter, data, khz, host_khz, a.threads)
        truth = np.array([ops[sorted(set(x.op_indices))].sum() for x in sliced.layers])
        for method in a.methods.split(","):
            new = method == "new"
            t0 = time.monotonic()
            with make_executor(board, a.letter, threads=a.threads) as ex:
                if new:
                    res = fused_profiler(ex, data, sliced, settings).measure(settings)
                else:
                    down = ex.proc.kind.downloads_results
                    prof = FusedProfiler(prefix_models(
                        data, sliced, reduce_above_bytes=REDUCE_ABOVE_BYTES if down else None),
                        ex, read_outputs=down, model_data=data)
                    res = prof.measure(replace(settings, end_cost=False))
            got = rows(res, truth, new)
            err = np.array([e.time_ms / t - 1 for _, e, t in got])
            big = np.array([t >= 0.1 for _, _, t in got])
            print(f"{a.model} size {a.size} on sim {a.letter}, {a.threads} thread(s), {method}: "
                  f"{res.rounds} rounds in {time.monotonic() - t0:.0f} s; {len(got)} rows, "
                  f"{sum(e.below_zero for _, e, _ in got)} wholly below zero, "
                  f"{sum(e.below_resolution for _, e, _ in got)} holding zero, "
                  f"{len(res.groups) if new else 0} groups; rows of 0.1 ms or more within 5 %: "
                  f"{int((np.abs(err[big]) <= 0.05).sum())} of {int(big.sum())} (worst "
                  f"{np.abs(err[big]).max():.1%}, median {np.median(np.abs(err[big])):.1%}); "
                  f"sum/whole {(res.fixed.time_ms + res.layer_sum_ms) / res.whole.time_ms:.4f}")
            for name, e, t in got:
                if e.below_zero or abs(e.time_ms / t - 1) > 0.05:
                    print(f"    {name}: {e.time_ms:.3f} +- {e.ci95_ms:.3f} ms, truth {t:.3f}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
