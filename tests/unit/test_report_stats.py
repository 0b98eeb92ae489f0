"""suite.report.stats against values worked out by hand (scipy is not installed; the arithmetic is shown)."""

from __future__ import annotations

import math
import statistics

import pytest

from suite.report.stats import mann_whitney_u, quantile, ranks, summary


def sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


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


def test_ranks_average_ties():
    r, ties = ranks([10, 20, 20, 30, 20])
    assert r == [1, 3, 3, 5, 3]  # the three 20s take ranks 2, 3, 4 -> 3 each
    assert ties == [3]


def test_u_test_separated_samples_by_hand():
    # x all below y: R_x = 1+2+3+4+5 = 15, U_x = 15 - 5*6/2 = 0, U_y = 25.
    # mean = 5*5/2 = 12.5; no ties: var = 25/12 * 11 = 22.9167, sd = 4.78714.
    x, y = [1, 2, 3, 4, 5], [6, 7, 8, 9, 10]
    sd = math.sqrt(25 / 12 * 11)
    less = mann_whitney_u(x, y, "less")
    assert less.u == 0
    assert less.z == pytest.approx((25 - 12.5 - 0.5) / sd)   # 2.50672
    assert less.p_value == pytest.approx(0.0060926, abs=1e-6)
    assert less.p_value == pytest.approx(sf(12 / sd))
    greater = mann_whitney_u(x, y, "greater")
    assert greater.p_value == pytest.approx(sf((0 - 12.5 - 0.5) / sd))  # 0.99669
    two = mann_whitney_u(x, y)
    assert two.p_value == pytest.approx(2 * 0.0060926, abs=2e-6)


def test_u_test_tie_correction_by_hand():
    # pooled sorted: 1x 2x 2x 2y 3x 3y 4y 5y -> ranks 1, 3, 3, 3, 5.5, 5.5, 7, 8
    # R_x = 1 + 3 + 3 + 5.5 = 12.5, U_x = 12.5 - 10 = 2.5, U_y = 16 - 2.5 = 13.5, mean = 8
    # ties of size 3 and 2: sum(t^3 - t) = 24 + 6 = 30; var = 16/12 * (9 - 30/56) = 11.285714
    x, y = [1, 2, 2, 3], [2, 3, 4, 5]
    res = mann_whitney_u(x, y, "less")
    assert res.u == 2.5
    sd = math.sqrt(16 / 12 * (9 - 30 / 56))
    assert sd == pytest.approx(3.359422, abs=1e-6)
    assert res.z == pytest.approx(5 / sd)  # (13.5 - 8 - 0.5) / sd = 1.48835
    assert res.p_value == pytest.approx(0.068329, abs=2e-6)  # normal table: 1 - Phi(1.48835)
    # without the tie correction the variance would be 12 and p 0.0745: the correction is applied
    assert res.p_value < sf(5 / math.sqrt(12)) - 0.005
    no_cc = mann_whitney_u(x, y, "less", continuity=False)
    assert no_cc.z == pytest.approx(5.5 / sd)


def test_u_test_symmetry_and_degenerate_cases():
    x, y = [0.11, 0.12, 0.13, 0.5], [0.10, 0.105, 0.2]
    assert mann_whitney_u(x, y, "greater").p_value == pytest.approx(mann_whitney_u(y, x, "less").p_value)
    assert mann_whitney_u([1.0] * 5, [1.0] * 7, "greater").p_value == 1.0
    with pytest.raises(ValueError):
        mann_whitney_u([], [1.0])
    with pytest.raises(ValueError):
        mann_whitney_u([1.0], [2.0], "bigger")  # type: ignore[arg-type]


def test_summary():
    s = summary([1.0, 2.0, 3.0, 4.0])
    assert s["mean"] == 2.5 and s["median"] == 2.5 and s["n"] == 4
    assert s["stddev"] == pytest.approx(math.sqrt(5 / 3))  # sample stddev: sum of squares 5 over n-1 = 3
    assert s["q1"] == pytest.approx(1.75) and s["q3"] == pytest.approx(3.25) and s["iqr"] == pytest.approx(1.5)
