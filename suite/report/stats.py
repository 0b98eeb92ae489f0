"""Small statistics in pure Python: the quantile all of suite uses, and the Mann-Whitney U test `compare` needs.

Why Mann-Whitney rather than a t-test: step times are not normal.  They have a floor (the work itself) and a
long right tail (a page fault, a collective that waited on a straggler, a GC pause), so a few slow steps pull
the mean and inflate the variance.  The U test only compares ranks: it asks whether a step time drawn from the
current run tends to be larger than one drawn from the baseline, which is exactly "did it get slower", and one
outlier counts as one rank, not as its size.

The U statistic of sample x against y counts the pairs (x_i, y_j) with x_i > y_j (ties count one half).  It is
computed from ranks: U_x = R_x - n_x (n_x + 1) / 2, with R_x the sum of x's ranks in the pooled, sorted data
(tied values share their average rank).  Under the null hypothesis (both samples from one distribution)

    mean(U) = n_x n_y / 2
    var(U)  = n_x n_y / 12 * ((n + 1) - sum(t^3 - t) / (n (n - 1)))      n = n_x + n_y

where t runs over the sizes of the groups of tied values (the tie correction: ties shrink the variance).
For the sample sizes suite produces (tens of steps per side) the normal approximation is accurate; a
continuity correction of 1/2 is applied, as scipy.stats.mannwhitneyu does by default in its asymptotic method,
so the p-values here match scipy's `method="asymptotic"` (tested against hand-computed values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

Alternative = Literal["greater", "less", "two-sided"]


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile with linear interpolation between order statistics (numpy's default, "type 7").

    The one quantile of suite: step-time percentiles of a cell (runner.aggregate.percentile) and the report's
    pooled medians and p90s.  It is statistics.quantiles(method="inclusive") at any q (tested against it); the
    standard library only gives the n-1 cut points i/n, and refuses a single value before Python 3.13.
    """
    if not values:
        raise ValueError("quantile of an empty sample")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q={q} is outside [0, 1]")
    data = sorted(values)
    pos = (len(data) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return quantile(values, 0.5)


def ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """1-based ranks with ties given their average rank, and the sizes of the tied groups."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        avg = (i + j) / 2 + 1  # ranks i+1 .. j+1 share their mean
        for k in range(i, j + 1):
            out[order[k]] = avg
        if j > i:
            ties.append(j - i + 1)
        i = j + 1
    return out, ties


@dataclass(frozen=True)
class UTest:
    """Result of mann_whitney_u(x, y): U is x's statistic (pairs where x wins), p for the alternative."""

    u: float
    z: float
    p_value: float
    n_x: int
    n_y: int
    alternative: str


def _norm_sf(z: float) -> float:
    """Survival function of the standard normal, P(Z > z)."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney_u(x: Sequence[float], y: Sequence[float], alternative: Alternative = "two-sided",
                   continuity: bool = True) -> UTest:
    """Mann-Whitney U test with the normal approximation and tie correction.

    alternative="greater": x tends to be larger than y (e.g. current step times slower than baseline's).
    Samples with fewer than one value on a side are an error; identical samples (zero variance) give p = 1.
    """
    n_x, n_y = len(x), len(y)
    if n_x == 0 or n_y == 0:
        raise ValueError(f"Mann-Whitney U needs values on both sides, got n_x={n_x}, n_y={n_y}")
    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative {alternative!r} is not one of greater, less, two-sided")
    pooled = list(x) + list(y)
    r, ties = ranks(pooled)
    u_x = sum(r[:n_x]) - n_x * (n_x + 1) / 2
    u_y = n_x * n_y - u_x
    n = n_x + n_y
    mean = n_x * n_y / 2
    tie_term = sum(t**3 - t for t in ties) / (n * (n - 1)) if n > 1 else 0.0
    var = n_x * n_y / 12 * ((n + 1) - tie_term)
    if var <= 0:  # every value tied: no evidence either way
        return UTest(u_x, 0.0, 1.0, n_x, n_y, alternative)
    sd = math.sqrt(var)
    cc = 0.5 if continuity else 0.0
    if alternative == "greater":
        z = (u_x - mean - cc) / sd
        p = _norm_sf(z)
    elif alternative == "less":
        z = (u_y - mean - cc) / sd
        p = _norm_sf(z)
    else:
        z = (max(u_x, u_y) - mean - cc) / sd
        p = min(1.0, 2 * _norm_sf(z))
    return UTest(u_x, z, p, n_x, n_y, alternative)


def summary(values: Sequence[float]) -> dict[str, float | int]:
    """min/max/mean/stddev/median/q1/q3/iqr of a sample (stddev: sample standard deviation, n-1)."""
    if not values:
        raise ValueError("summary of an empty sample")
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    q1, q3 = quantile(values, 0.25), quantile(values, 0.75)
    return {"n": n, "min": min(values), "max": max(values), "mean": mean, "stddev": math.sqrt(var),
            "median": median(values), "q1": q1, "q3": q3, "iqr": q3 - q1}
