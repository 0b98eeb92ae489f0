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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from suite.report import stats
from suite.report.noise import judge
from suite.report.tables import convergence_verdict, fold_status, measured_memory
from suite.results.reader import Run
from suite.results.schema import CellResult

RAN = ("ok", "gate-failed")


@dataclass
class Side:
    """All repeats of one cell from one run; on the baseline side also every stored run of the cell."""

    run: Run
    results: list[CellResult]
    # the baseline's stored runs of this cell, oldest first (the latest is `results`): a history when long
    # enough (noise.HISTORY_MIN), else only the latest run is used
    history: list[tuple[Run, list[CellResult]]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return fold_status(self.results)

    @property
    def memory(self) -> tuple[float | None, str | None]:
        mem = [measured_memory(r) for r in self.results]
        values = [m for m, _, _ in mem if m is not None]
        return (max(values) if values else None), mem[0][2]

    @property
    def final_loss(self) -> float | None:
        vals = [r.final_loss for r in self.results if r.final_loss is not None and math.isfinite(r.final_loss)]
        return stats.median(vals) if vals else None

    def last_eval(self, field: str) -> float | None:
        """The median over repeats of the last held-out evaluation's loss or accuracy (None: not evaluated)."""
        vals = [getattr(r.eval[-1], field) for r in self.results if r.eval]
        vals = [v for v in vals if v is not None and math.isfinite(v)]
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
    noise: str = ""               # what the change was judged against (timing checks)
    detectable: float | None = None  # the smallest change (fraction, worse direction) the check could flag
    band: tuple[float, float] | None = None  # with a history: where an unchanged run falls (the metric's units)
    method: str = ""  # timing: what it was judged against (noise.judge's history | repeats | threshold)


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

    def applies(self, baseline: Side, current: Side) -> bool:
        """False: the check has nothing to say about these cells (no finding at all, not even skipped)."""
        return True


class _HeldOut:
    """Mixin of the held-out checks: they speak only about cells that were evaluated (scenario `eval:`)."""

    def applies(self, baseline: Side, current: Side) -> bool:
        return any(r.eval for side in (baseline, current) for r in side.results)


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


def _ran(results: list[CellResult]) -> list[CellResult]:
    return [r for r in results if r.status in RAN]


class _TimingCheck(Check):
    """A change judged against the noise between runs (noise.judge): with a history of stored baseline runs,
    against that history's band; with 3+ repeats a side, by a t test on the repeats; else against the
    threshold alone ("no noise estimate").  A regression is a change larger than the threshold with
    confidence 1 - alpha."""

    default_threshold = 0.05
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
        runs = [v for v in (self.values(rs) for _, rs in baseline.history) if v] or [self.values(baseline.results)]
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
    what: ClassVar[str] = "final loss"

    def values(self, baseline: Side, current: Side) -> tuple[float | None, float | None]:
        return baseline.final_loss, current.final_loss

    def check(self, baseline: Side, current: Side) -> Verdict:
        bl, cl = self.values(baseline, current)
        v = Verdict("unchanged", fmt(bl, ".5f"), fmt(cl, ".5f"))
        if bl is None or cl is None:
            v.verdict, v.detail = "inconclusive", f"no finite {self.what} on one side"
            return v
        v.change = (cl - bl) / abs(bl) if bl else cl - bl
        if abs(v.change) > self.threshold:
            v.verdict = "regression"
            v.detail = (f"moved {v.change:+.2%} (tolerance {self.threshold:.2%}): "
                        "the same cell computes something else")
        else:
            v.detail = f"within {self.threshold:.2%}"
        return v


class EvalLossCheck(_HeldOut, FinalLossCheck):
    """The last held-out loss (scenario `eval:`) moved either way by more than the tolerance, as final_loss."""

    name = "eval_loss"
    listed_at = 6
    what = "held-out loss"

    def values(self, baseline: Side, current: Side) -> tuple[float | None, float | None]:
        return baseline.last_eval("loss"), current.last_eval("loss")


class AccuracyCheck(_HeldOut, Check):
    """The last held-out accuracy fell by more than the tolerance (absolute: 0.01 = one percentage point)."""

    name = "accuracy"
    listed_at = 7
    default_threshold = 0.01

    def check(self, baseline: Side, current: Side) -> Verdict:
        ba, ca = baseline.last_eval("accuracy"), current.last_eval("accuracy")
        v = Verdict("unchanged", fmt(ba and ba * 100, ".2f", "%"), fmt(ca and ca * 100, ".2f", "%"))
        if ba is None or ca is None:
            v.verdict, v.detail = "inconclusive", "no held-out accuracy on one side"
            return v
        v.change = ca - ba  # absolute, in accuracy
        if abs(v.change) > self.threshold:
            v.verdict = "regression" if v.change < 0 else "improvement"
        v.detail = f"{v.change * 100:+.2f} points (tolerance {self.threshold * 100:.2g})"
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
