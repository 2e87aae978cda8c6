"""The fit of the simulated board's model (profiler/calibrate/fit.py) on data whose truth is known:
layer times and sensor readings made by the model itself from chosen parameters, at
several levels, for layers of varied kinds; the fit must find parameters that predict
layers it never saw."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler.calibrate import fit
from profiler.sim import perf
from profiler.sim.work import COMPUTE_KINDS, OpWork

TRUE = perf.TimingParams(
    call_us=800.0, call_kcycles=600.0, host_call_kcycles=0.0, op_kcycles=20.0,
    host_op_kcycles=0.0, act_gb_s=1.5, weight_gb_s=2.0, stream_gb_s=5.0,
    memory_clock_share=0.3, roofline_p=2.0, half_occupancy_pixels=30.0,
    weight_cache_kb=256.0,
    macs_per_cycle=dict(zip(COMPUTE_KINDS, (5.0, 7.0, 10.0, 2.0, 6.0, 3.0, 4.0), strict=True)))
POWER = fit.PowerFit(perf.PowerParams(ceff_nf=1.2, static_mw_per_v2=20.0, activity_memory=0.6,
                                      activity_overhead=0.3, activity_weights=0.4),
                     idle_mw=3200.0, lag_ms=2.0, gap_activity=0.1)
FREQS_GHZ = (0.408, 0.816, 1.2, 1.8)
VOLTS = (0.8, 0.825, 0.95, 1.2)


def layer(rng: np.random.Generator) -> list[OpWork]:
    """A layer of one to four operators of random kinds and sizes."""
    out = []
    for _ in range(int(rng.integers(1, 5))):
        kind = str(rng.choice(["conv", "conv1x1", "conv3x3s1", "depthwise", "fc", "pool",
                               "elementwise", "view"]))
        pixels = 1 if kind == "fc" else int(rng.choice([49, 196, 784, 3136, 12544]))
        macs = int(rng.uniform(1e6, 3e8)) if kind not in ("elementwise", "view") else 0
        out.append(OpWork(kind, macs, int(rng.uniform(1e4, 4e6)),
                          int(rng.uniform(0, 2e7 if kind == "fc" else 4e6)), pixels))
    return out


def measurements(seed: int, models: int = 4, layers: int = 12,
                 power: fit.PowerFit = POWER) -> fit.Measurements:
    rng = np.random.default_rng(seed)
    works, rows = {}, []
    for m in range(models):
        for k in range(layers):
            works[(f"m{m}", k)] = layer(rng)
    for model, k in works:
        for f, v in zip(FREQS_GHZ, VOLTS, strict=True):
            rows.append({"model": model, "layer": k, "f_ghz": f, "fh_ghz": f, "volts": v,
                         "host_volts": 0.0})
    frame = pd.DataFrame(rows).assign(time_ms=0.0, power_w=0.0)
    m = fit.Measurements("B", frame, works, FREQS_GHZ[-1], False)
    split = fit.predict_split(TRUE, m)
    frame["time_ms"] = split.total_ms
    frame["power_w"] = fit.sensed_power_w(power, split, frame)
    return fit.Measurements("B", frame, works, FREQS_GHZ[-1], False)


@pytest.fixture(scope="module")
def fitted() -> tuple[fit.ProcessorFit, fit.Measurements]:
    train = measurements(seed=1)
    return fit.fit_processor(train), measurements(seed=2, models=2)


def test_the_fit_predicts_layers_it_never_saw(fitted) -> None:
    f, unseen = fitted
    held = fit.evaluate(f, unseen)
    # Noise-free data made by the model: the fit predicts new layers' times closely (the
    # parameters themselves need not come back: a rate and a bandwidth can trade places
    # on layers that never stress one of them).
    assert np.median(held.layer_time_err) < 0.01
    assert np.quantile(held.layer_time_err, 0.9) < 0.05
    assert held.whole_time_err.max() < 0.02


def test_the_power_fit_finds_the_sensor_lag(fitted) -> None:
    f, unseen = fitted
    assert f.power is not None
    # The lag shows in every short layer's reading, so it is identified.
    assert f.power.lag_ms == pytest.approx(POWER.lag_ms, rel=0.05)
    assert f.power.idle_mw == pytest.approx(POWER.idle_mw, rel=0.01)
    held = fit.evaluate(f, unseen)
    assert np.median(held.power_err) < 0.005 and held.power_err.max() < 0.03


def test_lomo_table_and_target_misses() -> None:
    m = measurements(seed=3, models=3, layers=8)
    held = fit.leave_one_model_out(m)
    table = fit.lomo_table(held)
    assert list(table["held_out"]) == ["m0", "m1", "m2", "pooled"]
    pooled = table.iloc[-1]
    assert pooled["layers"] == 3 * 8 * len(FREQS_GHZ)
    assert pooled["layer_time_err_median_pct"] < 2.0
    assert fit.target_misses(table) == []
    worse = table.assign(layer_time_err_median_pct=[30.0, 1.0, 1.0, 12.0])
    assert fit.target_misses(worse) == ["B: per-layer time median with m0 held out 30.0 % > 20 %"]


def test_a_power_parameter_the_data_do_not_bound_is_fitted_as_exactly_zero() -> None:
    """Where the truth has no static power and no overhead activity, log space can only
    run towards 0 and stop wherever the optimiser's tolerances leave it (which moves with
    the NumPy/SciPy stack); the fit says 0, and keeps the parameters that move the
    readings."""
    from dataclasses import replace

    truth = replace(POWER, power=replace(POWER.power, static_mw_per_v2=0.0,
                                         activity_overhead=0.0))
    pf = fit.fit_power(measurements(seed=4, models=3, layers=10, power=truth), TRUE)
    assert pf.power.static_mw_per_v2 == 0.0 and pf.power.activity_overhead == 0.0
    assert pf.power.ceff_nf == pytest.approx(1.2, rel=0.01)
    assert pf.power.activity_memory == pytest.approx(0.6, rel=0.02)


def test_zeroed_keeps_a_parameter_that_moves_a_prediction() -> None:
    p = perf.PowerParams(ceff_nf=1.0, static_mw_per_v2=1e-3, activity_memory=2e-9)

    def predict(q: perf.PowerParams) -> np.ndarray:  # one row at 1 V: P = ceff + static + mem
        return np.array([q.ceff_nf + q.static_mw_per_v2 + q.activity_memory])

    out = fit._zeroed(p, ["static_mw_per_v2", "activity_memory"], predict)
    # static moves the row by 1e-3 (kept); activity_memory by 2e-9 (below 1e-6: zeroed)
    assert out.static_mw_per_v2 == 1e-3 and out.activity_memory == 0.0
