"""suite.stats against values worked out by hand (scipy is not installed; the arithmetic is shown)."""

from __future__ import annotations

import math
import statistics

import pytest

from suite.stats import betainc, mad_sigma, quantile, summary, t_ppf, t_sf


def test_quantile_interpolates_linearly():
    assert quantile([4, 1, 3, 2], 0.5) == 2.5
    assert quantile([1, 2, 3, 4], 0.9) == pytest.approx(3.7)  # position 0.9 * 3 = 2.7 -> 3 + 0.7 * (4 - 3)
    assert quantile([7.0], 0.1) == 7.0
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_quantile_is_the_standard_librarys_inclusive_method():
    # statistics.quantiles(method="inclusive") is numpy's linear (type 7) definition at the cut points i/n
    data = [0.3, 1.7, 0.2, 5.5, 2.25, 9.0, 4.4, 4.4]
    cuts = statistics.quantiles(data, n=100, method="inclusive")
    for p in range(1, 100):
        assert quantile(data, p / 100) == pytest.approx(cuts[p - 1], rel=1e-12, abs=1e-12)
    assert quantile(data, 0.0) == min(data) and quantile(data, 1.0) == max(data)


# Student's t quantiles from printed tables (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2), six digits.
T_TABLE = [(0.95, 1, 6.313752), (0.975, 1, 12.706205), (0.95, 2, 2.919986), (0.99, 2, 6.964557),
           (0.95, 4, 2.131847), (0.99, 4, 3.746947), (0.80, 4, 0.940965), (0.95, 8, 1.859548),
           (0.975, 30, 2.042272), (0.95, 1e7, 1.644854)]


@pytest.mark.parametrize("q,df,t", T_TABLE)
def test_t_quantiles_match_the_tables(q, df, t):
    assert t_ppf(q, df) == pytest.approx(t, abs=2e-6)
    assert t_sf(t, df) == pytest.approx(1 - q, rel=1e-5)
    assert t_ppf(1 - q, df) == pytest.approx(-t, abs=2e-6)


def test_t_survival_in_closed_form():
    # df=1 is the Cauchy distribution: P(T > t) = 1/2 - atan(t)/pi; df=2: P(T > t) = (1 - t/sqrt(2 + t^2)) / 2
    for t in (-3.0, -0.5, 0.0, 0.7, 4.0, 40.0):
        assert t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, abs=1e-12)
        assert t_sf(t, 2) == pytest.approx((1 - t / math.sqrt(2 + t * t)) / 2, abs=1e-12)
    assert betainc(2, 3, 0.4) == pytest.approx(0.5248, abs=1e-12)  # 1 - (1-x)^4 - 4x(1-x)^3 at x = 0.4
    with pytest.raises(ValueError):
        t_ppf(1.0, 4)


def test_mad_sigma_is_robust():
    # the wild value barely counts; 1.206: the small-sample factor at n = 5
    assert mad_sigma([1.0, 2.0, 3.0, 4.0, 100.0]) == pytest.approx(1.206 * 1.4826)
    assert mad_sigma([float(v) for v in range(1, 101)]) == pytest.approx(100 / 99.2 * 1.4826 * 25, rel=1e-9)
    assert mad_sigma([5.0, 5.0, 5.0]) == 0.0


def test_summary():
    s = summary([1.0, 2.0, 3.0, 4.0])
    assert s["mean"] == 2.5 and s["median"] == 2.5 and s["n"] == 4
    assert s["stddev"] == pytest.approx(math.sqrt(5 / 3))  # sample stddev: sum of squares 5 over n-1 = 3
    assert s["q1"] == pytest.approx(1.75) and s["q3"] == pytest.approx(3.25) and s["iqr"] == pytest.approx(1.5)
