"""compare's checks that judge training quality: convergence gates, the final loss, the held-out loss and
accuracy.  They build on check.py; checks.py lists them in CHECKS and re-exports them.
"""

from __future__ import annotations

from typing import ClassVar

from suite.compare.check import Check, Side, Verdict, _HeldOut, fmt
from suite.report.tables import convergence_verdict


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
