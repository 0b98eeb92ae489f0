"""compare's per-metric checks: one small object per metric, each turning (baseline, current) into a verdict.

pytest-benchmark's regression checks are the model (pytest_benchmark/utils.py: a RegressionCheck holds its
field and threshold and says whether the candidate fails against the baseline).  Here a Check holds its
threshold (a relative change) and the test's alpha, and check(baseline, current) returns a Verdict:
regression, improvement, unchanged or inconclusive, with both sides' values for people, the reason, the noise
it was judged against and the smallest change it could have detected.  The timing checks' statistics are
noise.py's (runs are the unit of evidence; a history of stored runs is a noise model).
A new metric is one Check subclass added to CHECKS (METRICS, the order metrics are listed in, follows each
check's listed_at).
compare.py matches cells, runs the checks and collects their verdicts; docs/compare.md explains each rule.
Where things live: check.py holds the shared pieces (RAN, Side, Verdict, fmt, Check and the held-out
mixin), quality_checks.py the checks that judge training quality (convergence, final_loss, eval_loss,
accuracy); this module holds the status, timing and memory checks, CHECKS, METRICS, DEFAULT_THRESHOLDS and
make_checks, and re-exports the rest, so importers need only `suite.compare.checks`.
"""

from __future__ import annotations

import math
from typing import ClassVar

from suite import stats
from suite.compare.check import RAN, Check, Side, Verdict, _ran, fmt, quiet_history
from suite.compare.noise import judge
from suite.compare.quality_checks import AccuracyCheck, ConvergenceCheck, EvalLossCheck, FinalLossCheck
from suite.results.schema import CellResult

__all__ = ["RAN", "Side", "Verdict", "fmt", "Check", "StatusCheck", "StepTimeCheck", "TokensPerSCheck",
           "PeakMemoryCheck", "ConvergenceCheck", "FinalLossCheck", "EvalLossCheck", "AccuracyCheck", "CHECKS",
           "METRICS", "DEFAULT_THRESHOLDS", "make_checks"]


class StatusCheck(Check):
    """A cell that ran (ok / gate-failed) now failed, oom, timeout, diverged, infeasible or interrupted."""

    name = "status"
    listed_at = 0
    measured_only = False

    def check(self, baseline: Side, current: Side) -> Verdict:
        bs, cs = baseline.status, current.status
        v = Verdict("unchanged", bs, cs)
        if bs in RAN and cs not in RAN:
            v.verdict = "regression"
            v.detail = f"was {bs}, now {cs}: {(current.results[0].error or '')[-200:]}".rstrip(": ")
        elif bs not in RAN and cs in RAN:
            v.verdict, v.detail = "improvement", f"was {bs}, now runs"
        elif bs != cs:
            v.detail = f"was {bs}, now {cs}"
        return v

class _TimingCheck(Check):
    """A change judged against the noise between runs (noise.judge): with a history of stored baseline runs,
    against that history's band; with 3+ repeats a side, by a t test on the repeats; else against the
    threshold alone ("no noise estimate").  A regression is a change larger than the threshold with
    confidence 1 - alpha."""

    default_threshold = 0.05
    timing = True
    unit: ClassVar[tuple[float, str, str]] = (1.0, ",.0f", "")   # scale, format, suffix of shown values
    words: ClassVar[tuple[str, str]] = ("", "")  # how "worse" and "better" read for this metric
    higher_is_worse: ClassVar[bool] = True

    def values(self, results: list[CellResult]) -> list[float]:
        """One value per repeat that ran (the unit of evidence is the run)."""
        raise NotImplementedError

    def show(self, value: float | None) -> str:
        scale, spec, suffix = self.unit
        return fmt(None if value is None else value * scale, spec, suffix)

    def check(self, baseline: Side, current: Side) -> Verdict:
        # every stored baseline run with a value (noise.judge uses them as a history when there are enough),
        # else the latest run's repeats
        runs = [v for v in (self.values(rs) for rs in quiet_history(baseline)) if v] or [self.values(baseline.results)]
        cur = self.values(current.results)
        if not runs[-1] or not cur:
            return Verdict("inconclusive", "-", self.show(stats.median(cur) if cur else None),
                           detail="no measured value on one side")
        j = judge(runs, cur, self.threshold, self.alpha, self.higher_is_worse)
        v = Verdict("unchanged", self.show(j.baseline), self.show(j.current), j.change, j.p_value,
                    noise=j.noise_text, detectable=j.detectable, band=j.band, method=j.method)
        moved = f"{abs(j.change):.1%} {self.words[0] if (j.change > 0) == self.higher_is_worse else self.words[1]}"
        flags = f"flags > {j.detectable:.1%}"
        if j.band:
            flags += f"; an unchanged run falls in {self.show(j.band[0])}..{self.show(j.band[1])}"
        p = "" if j.p_value is None else f", p={j.p_value:.3g}"
        if j.verdict != "same":
            v.verdict = "regression" if j.verdict == "worse" else "improvement"
            beyond = "beyond the threshold" if j.method == "threshold" else "beyond threshold and noise"
            v.detail = f"{moved}, {beyond} ({flags}{p})"
            if j.method == "threshold":
                v.detail += "; no noise estimate"
        elif abs(math.log1p(j.change)) <= math.log1p(self.threshold):
            v.detail = f"within {self.threshold:.0%} ({flags})"
        else:
            v.detail = f"{moved} but within the noise ({flags}{p})"
        return v


class StepTimeCheck(_TimingCheck):
    name = "step_time"
    listed_at = 2
    words = ("slower", "faster")
    unit = (1e3, ",.2f", " ms")

    def values(self, results: list[CellResult]) -> list[float]:
        return [stats.median(r.step_times_s) for r in _ran(results) if r.step_times_s]


class TokensPerSCheck(_TimingCheck):
    name = "tokens_per_s"
    listed_at = 1
    words = ("lower", "higher")
    higher_is_worse = False  # fewer tokens per second is worse

    def values(self, results: list[CellResult]) -> list[float]:
        return [r.throughput.tokens_per_s for r in _ran(results) if r.throughput and r.throughput.tokens_per_s > 0]


class PeakMemoryCheck(Check):
    """Measured per-rank memory, same scope on both sides, up (or down) by more than the tolerance."""

    name = "peak_memory"
    listed_at = 3
    default_threshold = 0.01

    def check(self, baseline: Side, current: Side) -> Verdict:
        (bm, bscope), (cm, cscope) = baseline.memory, current.memory
        v = Verdict("unchanged", fmt(bm and bm / 2**20, ",.1f", " MiB"), fmt(cm and cm / 2**20, ",.1f", " MiB"))
        if bm is None or cm is None or bscope != cscope:
            v.verdict, v.detail = "inconclusive", f"no like-for-like measurement (baseline {bscope}, current {cscope})"
            return v
        v.change = cm / bm - 1 if bm else None
        if v.change is not None and abs(v.change) > self.threshold:
            v.verdict = "regression" if v.change > 0 else "improvement"
            v.detail = (f"{bscope} {'up' if v.change > 0 else 'down'} {abs(v.change):.1%} "
                        f"(tolerance {self.threshold:.0%})")
        else:
            v.detail = f"{bscope} within {self.threshold:.0%}"
        return v


# Every check, in the order a matched cell's findings list them.
CHECKS: tuple[type[Check], ...] = (StatusCheck, StepTimeCheck, TokensPerSCheck, PeakMemoryCheck, ConvergenceCheck,
                                   FinalLossCheck, EvalLossCheck, AccuracyCheck)
# The order thresholds and skipped checks are listed in (each check's listed_at).
METRICS = tuple(c.name for c in sorted(CHECKS, key=lambda c: c.listed_at))
DEFAULT_THRESHOLDS = {m: c.default_threshold for m in METRICS for c in CHECKS
                      if c.name == m and c.default_threshold is not None}


def make_checks(thresholds: dict[str, float], alpha: float) -> list[Check]:
    """One instance of every check with its threshold (thresholds: every metric that takes one)."""
    return [c(thresholds.get(c.name), alpha) for c in CHECKS]
