"""Small statistics in pure Python, the one module for them: the quantile all of suite uses, the runner's step
statistics, and what compare's noise model needs.

* `quantile` / `median`: the one quantile (numpy's default linear interpolation).
* `t_sf` / `t_ppf`: Student's t distribution, from the regularized incomplete beta function
  (`betainc`, Numerical Recipes' continued fraction): compare judges a change against the spread of a few
  runs, and with 3 runs a side the estimated spread is itself uncertain; the t distribution with
  n_b + n_c - 2 degrees of freedom is what accounts for that (tests check it against tabulated quantiles).
* `mad_sigma`: a robust standard deviation (1.4826 x the median absolute deviation), for a history of
  nights of which one may be broken.
* `mean`, `yuen_trimmed` (Yuen's 20%-trimmed mean and winsorized variance: compare's noise model,
  compare/noise.py), `percentile` (the runner's step-time statistics).
* `summary`: min/max/mean/stddev/quantiles of a sample (export's pytest-benchmark statistics).

There is no test on step times here on purpose: steps of one run are not independent samples of what moves
a night's numbers (docs/compare.md, "Why runs, not steps").
"""

from __future__ import annotations

import functools
import math
from typing import Sequence


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


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz's method)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((qam + 2 * m) * (a + 2 * m)),
                    -(a + m) * (qab + m) * x / ((a + 2 * m) * (qap + 2 * m))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function (Numerical Recipes' betai)."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"betainc: x={x} is outside [0, 1]")
    if x in (0.0, 1.0):
        return x
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with df degrees of freedom."""
    if df <= 0:
        raise ValueError(f"Student's t needs df > 0, got {df}")
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


@functools.lru_cache(maxsize=256)  # compare asks for the same few (q, df) once per cell and metric
def t_ppf(q: float, df: float) -> float:
    """The q-quantile of Student's t (bisection on t_sf; |error| < 1e-10)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"t quantile q={q} is outside (0, 1)")
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > 1.0 - q:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_sf(mid, df) > 1.0 - q else (lo, mid)
        if hi - lo < 1e-10:
            break
    return (lo + hi) / 2


# Small-sample factors that make 1.4826 x MAD unbiased for normal data (Croux & Rousseeuw 1992, "Time-efficient
# algorithms for two highly robust estimators of scale", Table 1); n > 9: n / (n - 0.8).
_MAD_SMALL = {2: 1.196, 3: 1.495, 4: 1.363, 5: 1.206, 6: 1.200, 7: 1.140, 8: 1.129, 9: 1.107}


def mad_sigma(values: Sequence[float]) -> float:
    """A robust standard deviation: 1.4826 x the median absolute deviation from the median, times the small-
    sample factor that makes it unbiased for normal data (at n = 5 the plain MAD is 17% low on average); one
    wild value moves it little."""
    n = len(values)
    m = median(values)
    factor = _MAD_SMALL.get(n, n / (n - 0.8) if n > 9 else 1.0)
    return factor * 1.4826 * median([abs(v - m) for v in values])


def mean(xs: Sequence[float]) -> float:
    """The arithmetic mean (ValueError names an empty sample)."""
    if not xs:
        raise ValueError("mean of an empty sample")
    return sum(xs) / len(xs)


def yuen_trimmed(ys: Sequence[float]) -> tuple[float, float, int]:
    """Yuen's 20%-trimmed mean, the winsorized variance and the number of values kept: (mean, s_w^2, h).  With
    3 or 4 values nothing is trimmed (then Yuen's test is Welch's t test)."""
    n = len(ys)
    g = int(0.2 * n)
    data = sorted(ys)
    kept = data[g:n - g]
    h = len(kept)
    wins = [kept[0]] * g + kept + [kept[-1]] * g
    mw = mean(wins)
    s2 = sum((y - mw) ** 2 for y in wins) / (n - 1)
    return mean(kept), s2, h


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile, q in [0, 100]: `quantile` at q / 100 (numpy's default linear method)."""
    return quantile(values, q / 100.0)


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
