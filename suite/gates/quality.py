"""Quality gates: pure checks of a finished cell's held-out evaluations (scenario `eval:` + `convergence:`).

- max_eval_loss: the last evaluation's loss <= the limit;
- min_accuracy: the last evaluation's accuracy >= the limit (classification models: vit);
- target {metric, value}: some evaluation reached it (eval_loss / perplexity at or below, accuracy at or
  above).  The first one that did gives the time to target, MLPerf's headline number, twice: as training time
  alone (the sum of the step times up to it) and as wall time since training began, the evaluations included
  (MLPerf's clock counts them).  Not reached within `steps`: the gate fails with the best value seen.
The last evaluation is the one after the last step when `eval.at_end` is on (the default).  A cell that ran
but recorded no evaluation fails each of these gates, saying so.
"""

from __future__ import annotations

from typing import Sequence

from suite.results.schema import EvalPoint, Gate, TimeToTarget


def _value(p: EvalPoint, metric: str) -> float | None:
    return {"eval_loss": p.loss, "accuracy": p.accuracy, "perplexity": p.perplexity}[metric]


def time_to_target(evals: Sequence[EvalPoint], target) -> TimeToTarget:
    """When `target` was first reached, or the best value seen (None: the metric was never measured)."""
    for p in evals:
        if target.reached(p.loss, p.accuracy, p.perplexity):
            return TimeToTarget(metric=target.metric, value=target.value, reached=True, step=p.step,
                                train_s=p.train_s, wall_s=p.wall_s, best=_value(p, target.metric))
    values = [v for v in (_value(p, target.metric) for p in evals) if v is not None]
    best = (max(values) if target.metric == "accuracy" else min(values)) if values else None
    return TimeToTarget(metric=target.metric, value=target.value, reached=False, best=best)


def target_gate(evals: Sequence[EvalPoint], target, steps: int) -> tuple[Gate, TimeToTarget]:
    t = time_to_target(evals, target)
    side = ">=" if target.metric == "accuracy" else "<="
    if t.reached:
        detail = (f"{target.metric} {t.best:.6g} {side} {target.value:g} after {t.step} steps: {t.train_s:.3g} s "
                  f"of training, {t.wall_s:.3g} s with the evaluations")
        return Gate(name="target", passed=True, detail=detail), t
    if t.best is None:
        why = f"no {target.metric} was evaluated" + (" (no evaluation ran)" if not evals else
                                                   " (accuracy is for classification models)")
        return Gate(name="target", passed=False, detail=why, step=steps), t
    return Gate(name="target", passed=False, step=steps,
                detail=f"{target.metric} target {target.value:g} not reached within {steps} steps "
                       f"(best {t.best:.6g} over {len(evals)} evaluations)"), t


def quality_gates(evals: Sequence[EvalPoint], convergence, steps: int) -> tuple[list[Gate], TimeToTarget | None]:
    """The quality gates the scenario sets, and the time to target (None without a target)."""
    gates: list[Gate] = []
    if convergence is None:
        return gates, None
    last = evals[-1] if evals else None
    if convergence.max_eval_loss is not None:
        limit = convergence.max_eval_loss
        ok = last is not None and last.loss <= limit
        gates.append(Gate(name="max_eval_loss", passed=ok, step=None if ok else steps,
                          detail=f"held-out loss {last.loss:.6g} {'<=' if ok else '>'} limit {limit:g} after "
                                 f"{last.step} steps" if last else "no evaluation ran"))
    if convergence.min_accuracy is not None:
        limit = convergence.min_accuracy
        acc = last.accuracy if last else None
        ok = acc is not None and acc >= limit
        gates.append(Gate(name="min_accuracy", passed=ok, step=None if ok else steps,
                          detail=(f"held-out accuracy {acc:.4g} {'>=' if ok else '<'} limit {limit:g} after "
                                  f"{last.step} steps") if acc is not None else
                          "no accuracy was evaluated" + (" (no evaluation ran)" if last is None else
                                                         " (accuracy is for classification models)")))
    ttt = None
    if convergence.target is not None:
        gate, ttt = target_gate(evals, convergence.target, steps)
        gates.append(gate)
    return gates, ttt
