"""The link fit recovers latency and bandwidth from synthetic hand-overs, and prices
boundaries nobody measured."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from profiler.devices.linkfit import (
    FittedLinks,
    LinkTable,
    fit_link,
    fit_links,
    links_sidecar,
    price_handover,
    read_link_table,
)
from profiler.devices.spec import parse_devices
from profiler.errors import BadInputError


def _truth(nbytes: np.ndarray, latency_ms: float, bw_mb_s: float) -> np.ndarray:
    return latency_ms + nbytes / (bw_mb_s * 1e3)


def test_fit_recovers_latency_and_bandwidth_with_intervals() -> None:
    rng = np.random.default_rng(3)
    sizes = np.repeat([4_000, 50_000, 200_000, 800_000, 2_000_000], 4)
    t = _truth(sizes, 0.5, 100.0) + rng.normal(0, 0.02, sizes.size)
    f = fit_link(sizes.tolist(), t.tolist(), "d0", "d1")
    assert f.latency_ms == pytest.approx(0.5, rel=0.05)
    assert f.bandwidth_mb_s == pytest.approx(100.0, rel=0.01)
    # the truth lies inside the 95 % intervals, which are narrow for this noise
    assert abs(f.latency_ms - 0.5) <= f.latency_ci95_ms < 0.05
    assert abs(f.ms_per_mb - 10.0) <= f.ms_per_mb_ci95 < 0.05
    assert f.residual_ms == pytest.approx(0.02, rel=0.4)
    # a size nobody measured: priced on the line, its interval covers the truth
    x = 1_234_567
    assert f.time_ms(x) == pytest.approx(0.5 + x / 1e5, rel=0.01)
    assert abs(f.time_ms(x) - (0.5 + x / 1e5)) <= f.ci95_ms(x)
    assert not f.extrapolates(x) and f.extrapolates(5_000_000)
    link = f.as_link()
    assert link.modelled_ms(x) == pytest.approx(f.time_ms(x))


def test_exact_two_points_and_refusals() -> None:
    f = fit_link([1000, 11000], [1.0, 2.0])
    assert f.latency_ms == pytest.approx(0.9) and f.bandwidth_mb_s == pytest.approx(10.0)
    assert math.isnan(f.latency_ci95_ms)
    with pytest.raises(BadInputError, match="one size"):
        fit_link([5000, 5000, 5000], [1.0, 1.1, 0.9], "d0", "d1")
    with pytest.raises(BadInputError, match="no .* samples"):
        fit_link([], [])
    flat = fit_link([1000, 2000, 3000], [1.0, 1.0, 0.99])  # no cost per byte resolved
    assert math.isinf(flat.bandwidth_mb_s) and flat.as_link().bandwidth_mb_s is None


def test_table_round_trip_and_prices(tmp_path) -> None:
    sizes = [10_000, 100_000, 400_000, 1_000_000]
    rows = pd.DataFrame({"boundary": [0, 1, 2, 3], "src": "d0", "dst": "d1", "bytes": sizes,
                         "tensors": 1, "time_ms_mean": 0.0,
                         "time_ms_median": _truth(np.array(sizes), 0.3, 50.0),
                         "time_ms_p95": 0.0, "time_ms_std": 0.0, "reps": 5})
    fits = fit_links(rows)
    (f,) = fits.values()
    assert (f.a, f.b) == ("d0", "d1")
    assert f.latency_ms == pytest.approx(0.3) and f.bandwidth_mb_s == pytest.approx(50.0)
    rows.to_csv(tmp_path / "links.csv", index=False)
    import json

    (tmp_path / "links.json").write_text(json.dumps(links_sidecar(FittedLinks(fits, {}), {})))
    table = read_link_table(tmp_path / "links.csv")
    # measured boundary (either direction of the pair), and one nobody measured
    assert price_handover(2, 400_000, "d1", "d0", table).source == "measured"
    p = price_handover(7, 250_000, "d0", "d1", table)
    assert p.source == "fitted" and p.time_ms == pytest.approx(0.3 + 250_000 / 5e4)
    # no table: the devices file's simulated link, else nothing
    devs = parse_devices("[[device]]\nname='a'\n[[device]]\nname='b'\n"
                         "[[link]]\nlatency_ms=1.0\nbandwidth_mb_s=10\n")
    assert price_handover(0, 10_000, "a", "b", None, devs).time_ms == pytest.approx(2.0)
    assert price_handover(0, 10_000, "a", "b", LinkTable({}, rows.iloc[:0])).source == "none"
    # another model's table: its boundaries are other tensors, so its fits only
    assert price_handover(2, 400_000, "d0", "d1", table.fits_only()).source == "fitted"
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(BadInputError, match="not a device link table"):
        read_link_table(tmp_path / "bad.csv")


def test_probe_rows_give_what_the_link_added() -> None:
    from profiler.devices.linkfit import fit_probe

    sizes = np.array([2_000, 20_000, 100_000, 400_000, 1_000_000])
    local = _truth(sizes, 0.1, 9000.0)
    rows = pd.DataFrame({"boundary": list(range(5)) * 2, "src": "d0", "dst": "d1",
                         "bytes": list(sizes) * 2, "pass": ["link"] * 5 + ["local"] * 5,
                         "time_ms_median": list(local + _truth(sizes, 0.5, 100.0))
                         + list(local)})
    got = fit_probe(rows)
    key = frozenset(("d0", "d1"))
    assert got.fits[key].latency_ms == pytest.approx(0.6)
    assert got.added[key].latency_ms == pytest.approx(0.5)
    assert got.added[key].bandwidth_mb_s == pytest.approx(100.0)
