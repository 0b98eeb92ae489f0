"""How compare judges a timing change: against the spread between runs, never between steps of one run.

The unit of evidence is a run (one launch of a cell): its value is the median of its measured step times (or
its throughput).  Steps of one run share everything that moves a night's numbers — the node's other jobs,
clocks, the process layout, where the allocator put things — so treating them as independent samples makes
noise look significant (docs/compare.md, "Why runs, not steps").  Values are compared on a log scale (noise
on step times is multiplicative: a 3% wobble is 3% of a 10 ms step and of a 1 s step alike).

Three ways to judge, by what the two sides hold (`judge`):

* history — the baseline holds the cell in >= HISTORY_MIN stored runs (e.g. the last nights).  The noise
  model is that history: centre = the median of the runs' log values, spread s = the robust sd
  (stats.mad_sigma, small-sample corrected) of them, so one broken night neither moves the centre nor widens
  the band much.  A new run's log value, if nothing changed, falls within t(1-alpha, (n-1)/2) x s x
  sqrt(1 + pi/(2n)) of the centre (a prediction interval: the new night's own spread plus the uncertainty of
  a median of n; (n-1)/2 degrees of freedom because a MAD is about half as informative as an sd).  The
  history's runs and the current run should have as many repeats (a run's value is the mean over its
  repeats; the verdict says so when they differ).
* repeats — no history, but >= REPEATS_MIN repeats on each side: Yuen's two-sample test on the repeats' log
  values: 20%-trimmed means, winsorized variances, Welch's degrees of freedom (Yuen 1974).  Launches of a
  cell come in modes (on the 2-core development machine a launch is now and then 25-30% faster throughout),
  so with 5 repeats the extreme one on each side is trimmed; with 3 or 4 nothing is, and it is Welch's t test
  (unequal spreads: one side may have caught a fast launch).  Not Mann-Whitney on the repeat medians: with 3
  against 3 its smallest possible one-sided p is 1/20 = 0.05, so at alpha = 0.05 it could never fire.
* threshold — fewer repeats and no history, or a spread of exactly 0 (identical values: a degenerate
  estimate, not a measurement of no noise): the change is compared with the threshold alone and says "no
  noise estimate"; it is never called significant.

In the first two, the question asked is "is the change larger than the threshold, with confidence
1 - alpha" (a test against the threshold as margin, not against zero): regression when

    log(change) > log(1 + threshold) + t(1 - alpha, df) x se

That boundary, as a relative change, is the verdict's `detectable`: the smallest change this comparison flags
(a true change of that size is flagged about half the time, larger ones more often).  Under no change, a
false alarm needs the noise alone to carry a run past threshold AND confidence band, so identical code stays
quiet even on a machine whose noise is as large as the threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from suite import stats

HISTORY_MIN = 5   # stored runs of a cell on the baseline side that make a noise model of their own (fewer: the
                  # spread of 3 or 4 values, robustly estimated, is too uncertain to judge a night by)
REPEATS_MIN = 3   # repeats a side for a two-sample test (the spread of 2 values is too uncertain to use)


@dataclass(frozen=True)
class Judgement:
    verdict: str                 # worse | better | same
    method: str                  # history | repeats | threshold
    baseline: float              # the values compared (geometric (trimmed) means; a history's median), in units
    current: float
    change: float                # current / baseline - 1
    detectable: float            # smallest change flagged, as a fraction in the worse direction
    noise: float | None          # relative sd of one run's value (None: no estimate)
    # in the direction of the change: P(a change this far past the threshold | the true change = the threshold)
    p_value: float | None
    n_baseline: int              # runs (history) or repeats on each side
    n_current: int
    band: tuple[float, float] | None = None   # history: where an unchanged run falls, in units
    note: str = ""               # e.g. the history's runs have other repeat counts than the current run

    @property
    def noise_text(self) -> str:
        if self.method == "history":
            return f"night-to-night sd {self.noise:.1%} (history of {self.n_baseline} runs{self.note})"
        if self.method == "repeats":
            return f"run-to-run sd {self.noise:.1%} ({self.n_baseline}+{self.n_current} repeats)"
        if self.note:
            return f"no noise estimate ({self.note})"
        return (f"no noise estimate ({self.n_baseline} vs {self.n_current} repeat(s); needs {REPEATS_MIN}+ a "
                f"side or {HISTORY_MIN}+ stored baseline runs)")


def _logs(values: Sequence[float]) -> list[float]:
    bad = [v for v in values if not (v > 0 and math.isfinite(v))]
    if bad:
        raise ValueError(f"values must be positive and finite, got {bad[0]}")
    return [math.log(v) for v in values]


def judge(baseline: Sequence[Sequence[float]], current: Sequence[float], threshold: float, alpha: float,
          higher_is_worse: bool = True) -> Judgement:
    """The verdict on one metric of one cell.

    baseline: per stored run (oldest first, the latest last), the values of its repeats; current: the values
    of the current run's repeats.  Runs without values must be left out by the caller."""
    runs = [list(r) for r in baseline if r]
    if not runs or not current:
        raise ValueError(f"judge needs values on both sides (baseline runs {len(runs)}, current {len(current)})")
    yc = _logs(current)
    loc = stats.mean(yc)  # the current side's location (repeats: its trimmed mean)
    sign = 1.0 if higher_is_worse else -1.0
    margin = math.log1p(threshold)
    band, note = None, ""
    if len(runs) >= HISTORY_MIN:
        nights = [stats.mean(_logs(r)) for r in runs]
        n = len(nights)
        centre, spread = stats.median(nights), stats.mad_sigma(nights)
        # df (n - 1) / 2: a MAD carries about half the information of a standard deviation of as many values;
        # with n - 1 a change exactly at the threshold was flagged 7.7% of the time at alpha = 5% (n = 5), with
        # (n - 1) / 2 4.7-5.1% for n = 5..20 (simulated; tests/unit/test_noise.py checks it)
        se, df, method, nb = spread * math.sqrt(1 + math.pi / (2 * n)), (n - 1) / 2, "history", n
        counts = sorted({len(r) for r in runs})
        if counts != [len(yc)]:
            note = f"; their repeats: {'/'.join(map(str, counts))}, current: {len(yc)}"
    else:
        yb = _logs(runs[-1])
        centre, nb = stats.mean(yb), len(yb)
        if nb >= REPEATS_MIN and len(yc) >= REPEATS_MIN:
            (centre, wb, hb), (loc, wc, hc) = stats.yuen_trimmed(yb), stats.yuen_trimmed(yc)
            vb, vc = (nb - 1) * wb / (hb * (hb - 1)), (len(yc) - 1) * wc / (hc * (hc - 1))  # Yuen's squared se
            se = math.sqrt(vb + vc)
            df = (vb + vc) ** 2 / (vb ** 2 / (hb - 1) + vc ** 2 / (hc - 1)) if se > 0 else 0  # Welch's
            spread, method = math.sqrt((wb + wc) / 2), "repeats"
        else:
            spread, se, df, method = None, 0.0, 0, "threshold"
    if spread == 0:  # identical values: nothing was learnt about the noise
        note = f"{'history' if method == 'history' else 'repeats'} with a spread of exactly 0"
        spread, se, df, method = None, 0.0, 0, "threshold"
    d = loc - centre
    worse = sign * d
    reach = stats.t_ppf(1 - alpha, df) * se if se > 0 else 0.0
    boundary = margin + reach
    p = stats.t_sf((abs(d) - margin) / se, df) if se > 0 else None
    verdict = "worse" if worse > boundary else "better" if -worse > boundary else "same"
    if method == "history":
        band = (math.exp(centre - reach), math.exp(centre + reach))
    detectable = math.expm1(boundary) if higher_is_worse else -math.expm1(-boundary)
    return Judgement(verdict, method, math.exp(centre), math.exp(loc), math.expm1(d), detectable,
                     None if spread is None else math.expm1(spread), p, nb, len(yc), band, note)
