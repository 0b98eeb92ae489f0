"""compare's per-metric checks: one small object per metric, each turning (baseline, current) into a verdict.

pytest-benchmark's regression checks are the model (pytest_benchmark/utils.py: a RegressionCheck holds its
field and threshold and says whether the candidate fails against the baseline).  Here a Check holds its
threshold (a relative change) and the test's alpha, and check(baseline, current) returns a Verdict:
regression, improvement, unchanged or inconclusive, with both sides' values for people and the reason.
A new metric is one Check subclass added to CHECKS (METRICS, the order metrics are listed in, follows each
check's listed_at).
compare.py matches cells, runs the checks and collects their verdicts; docs/compare.md explains each rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from suite.report import stats
from suite.report.tables import convergence_verdict, fold_status, measured_memory
from suite.results.reader import Run
from suite.results.schema import CellResult

RAN = ("ok", "gate-failed")
MIN_SAMPLES = 3  # below this on either side the U test cannot reach alpha = 0.05 at all


@dataclass
class Side:
    """All repeats of one cell from one run."""

    run: Run
    results: list[CellResult]

    @property
    def status(self) -> str:
        return fold_status(self.results)

    @property
    def step_times(self) -> list[float]:
        return [t for r in self.results for t in r.step_times_s]

    @property
    def tokens_per_s(self) -> float | None:
        vals = [r.throughput.tokens_per_s for r in self.results if r.throughput]
        return stats.median(vals) if vals else None

    @property
    def memory(self) -> tuple[float | None, str | None]:
        mem = [measured_memory(r) for r in self.results]
        values = [m for m, _, _ in mem if m is not None]
        return (max(values) if values else None), mem[0][2]

    @property
    def final_loss(self) -> float | None:
        vals = [r.final_loss for r in self.results if r.final_loss is not None and math.isfinite(r.final_loss)]
        return stats.median(vals) if vals else None

    @property
    def gates(self) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for r in self.results:
            for g in r.gates:
                out[g.name] = out.get(g.name, True) and g.passed
        return out


@dataclass
class Verdict:
    verdict: str        # regression | improvement | unchanged | inconclusive (compare adds skipped)
    baseline: str       # each side's value, formatted for people
    current: str
    change: float | None = None   # relative (current / baseline - 1)
    p_value: float | None = None
    detail: str = ""


def fmt(v: float | None, spec: str, unit: str = "") -> str:
    return "-" if v is None else format(v, spec) + unit


@dataclass(frozen=True)
class Check:
    """One metric's check; `threshold` is the relative change it tolerates (None for the checks without one)."""

    threshold: float | None = None
    alpha: float = 0.05
    name: ClassVar[str] = ""
    # where thresholds and skipped checks list this metric (an order older than CHECKS'; kept so outputs stay
    # put); a new check may leave it: it is listed last
    listed_at: ClassVar[int] = 100
    default_threshold: ClassVar[float | None] = None  # set: the check takes --threshold NAME=VALUE
    measured_only: ClassVar[bool] = True  # skipped unless the cell ran (ok / gate-failed) on both sides

    def check(self, baseline: Side, current: Side) -> Verdict:
        raise NotImplementedError


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
    """A change beyond the threshold AND a one-sided Mann-Whitney U test on the measured step times (repeats
    pooled) at level alpha; a big change the test cannot tell from noise is 'unchanged' and says so."""

    default_threshold = 0.05
    words: ClassVar[tuple[str, str]] = ("", "")  # how "worse" and "better" read for this metric

    def shown(self, side: Side) -> str:
        raise NotImplementedError

    def change(self, baseline: Side, current: Side) -> float | None:
        raise NotImplementedError

    def worse(self, change: float) -> float:
        """The change with worse positive."""
        return change

    def check(self, baseline: Side, current: Side) -> Verdict:
        bt, ct = baseline.step_times, current.step_times
        v = Verdict("unchanged", self.shown(baseline), self.shown(current))
        if len(bt) < MIN_SAMPLES or len(ct) < MIN_SAMPLES:
            v.verdict = "inconclusive"
            v.detail = f"too few measured steps to test (baseline {len(bt)}, current {len(ct)})"
            return v
        v.change = self.change(baseline, current)
        if v.change is None:
            v.verdict, v.detail = "inconclusive", "no value on one side"
            return v
        worse = self.worse(v.change)
        v.p_value = p = stats.mann_whitney_u(ct, bt, "greater" if worse > 0 else "less").p_value
        moved = f"{abs(worse):.1%} {self.words[0] if worse > 0 else self.words[1]}"
        if abs(worse) <= self.threshold:
            v.detail = f"within {self.threshold:.0%}"
        elif p >= self.alpha:
            v.detail = f"{moved} but not significant (p={p:.3g} >= {self.alpha})"
        else:
            v.verdict = "regression" if worse > 0 else "improvement"
            v.detail = f"{moved} (> {self.threshold:.0%}), p={p:.3g}"
        return v


def _median_step(side: Side) -> float | None:
    times = side.step_times
    return stats.median(times) if times else None


class StepTimeCheck(_TimingCheck):
    name = "step_time"
    listed_at = 2
    words = ("slower", "faster")

    def shown(self, side: Side) -> str:
        m = _median_step(side)
        return fmt(m and m * 1e3, ",.2f", " ms")

    def change(self, baseline: Side, current: Side) -> float | None:
        bm, cm = _median_step(baseline), _median_step(current)
        return cm / bm - 1 if bm else None


class TokensPerSCheck(_TimingCheck):
    name = "tokens_per_s"
    listed_at = 1
    words = ("lower", "higher")

    def shown(self, side: Side) -> str:
        return fmt(side.tokens_per_s, ",.0f")

    def change(self, baseline: Side, current: Side) -> float | None:
        btp, ctp = baseline.tokens_per_s, current.tokens_per_s
        return ctp / btp - 1 if btp and ctp is not None else None

    def worse(self, change: float) -> float:
        return -change  # fewer tokens per second is worse


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


class ConvergenceCheck(Check):
    """A gate that passed (or was absent) now fails; one that failed now passes."""

    name = "convergence"
    listed_at = 4

    def check(self, baseline: Side, current: Side) -> Verdict:
        v = Verdict("unchanged", convergence_verdict(baseline.results) or "-",
                    convergence_verdict(current.results) or "-")
        bg, cg = baseline.gates, current.gates
        newly_failed = sorted(n for n, ok in cg.items() if not ok and bg.get(n, True))
        newly_passed = sorted(n for n, ok in cg.items() if ok and bg.get(n) is False)
        if newly_failed:
            v.verdict, v.detail = "regression", "gate(s) now failing: " + ", ".join(newly_failed)
        elif newly_passed:
            v.verdict, v.detail = "improvement", "gate(s) now passing: " + ", ".join(newly_passed)
        return v


class FinalLossCheck(Check):
    """The final loss moved, either way, by more than the tolerance: the same cell is the same mathematics."""

    name = "final_loss"
    listed_at = 5
    default_threshold = 0.01

    def check(self, baseline: Side, current: Side) -> Verdict:
        bl, cl = baseline.final_loss, current.final_loss
        v = Verdict("unchanged", fmt(bl, ".5f"), fmt(cl, ".5f"))
        if bl is None or cl is None:
            v.verdict, v.detail = "inconclusive", "no finite final loss on one side"
            return v
        v.change = (cl - bl) / abs(bl) if bl else cl - bl
        if abs(v.change) > self.threshold:
            v.verdict = "regression"
            v.detail = (f"moved {v.change:+.2%} (tolerance {self.threshold:.2%}): "
                        "the same cell computes something else")
        else:
            v.detail = f"within {self.threshold:.2%}"
        return v


# Every check, in the order a matched cell's findings list them.
CHECKS: tuple[type[Check], ...] = (StatusCheck, StepTimeCheck, TokensPerSCheck, PeakMemoryCheck, ConvergenceCheck,
                                   FinalLossCheck)
# The order thresholds and skipped checks are listed in (each check's listed_at).
METRICS = tuple(c.name for c in sorted(CHECKS, key=lambda c: c.listed_at))
DEFAULT_THRESHOLDS = {m: c.default_threshold for m in METRICS for c in CHECKS
                      if c.name == m and c.default_threshold is not None}


def make_checks(thresholds: dict[str, float], alpha: float) -> list[Check]:
    """One instance of every check with its threshold (thresholds: every metric that takes one)."""
    return [c(thresholds.get(c.name), alpha) for c in CHECKS]
