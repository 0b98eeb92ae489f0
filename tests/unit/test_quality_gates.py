"""Quality gates on held-out evaluations (runner/quality.py): limits, the target and its time, clear failures."""

from __future__ import annotations

import pytest

from suite.gates.quality import quality_gates
from suite.results.schema import EvalPoint
from suite.scenario.convergence import Convergence


def points(accuracies, losses=None):
    losses = losses or [2.0 - 0.1 * i for i in range(len(accuracies))]
    return [EvalPoint(step=10 * (i + 1), loss=loss, accuracy=acc, samples=64, seconds=0.5,
                      train_s=1.0 * (i + 1), wall_s=1.6 * (i + 1)) for i, (acc, loss) in enumerate(zip(accuracies, losses))]


def test_target_reached_gives_the_step_and_both_clocks():
    conv = Convergence(target={"metric": "accuracy", "value": 0.75})
    gates, ttt = quality_gates(points([0.3, 0.6, 0.8, 0.9]), conv, steps=40)
    (gate,) = gates
    assert gate.passed and gate.name == "target"
    assert (ttt.reached, ttt.step, ttt.train_s, ttt.wall_s, ttt.best) == (True, 30, 3.0, pytest.approx(4.8), 0.8)
    assert "after 30 steps: 3 s of training, 4.8 s with the evaluations" in gate.detail


def test_target_not_reached_names_the_best_value():
    conv = Convergence(target={"metric": "eval_loss", "value": 0.5})
    gates, ttt = quality_gates(points([0.1, 0.2], losses=[1.9, 1.4]), conv, steps=20)
    assert not gates[0].passed and not ttt.reached and ttt.best == 1.4
    assert gates[0].detail == "eval_loss target 0.5 not reached within 20 steps (best 1.4 over 2 evaluations)"


def test_limits_on_the_last_evaluation():
    conv = Convergence(max_eval_loss=1.85, min_accuracy=0.5)
    gates, ttt = quality_gates(points([0.2, 0.6], losses=[1.9, 1.8]), conv, steps=20)
    assert [(g.name, g.passed) for g in gates] == [("max_eval_loss", True), ("min_accuracy", True)] and ttt is None
    gates, _ = quality_gates(points([0.6, 0.4], losses=[1.8, 1.9]), conv, steps=20)
    assert [(g.name, g.passed) for g in gates] == [("max_eval_loss", False), ("min_accuracy", False)]
    assert "held-out accuracy 0.4 < limit 0.5 after 20 steps" in gates[1].detail


def test_no_evaluation_or_no_accuracy_fails_saying_why():
    conv = Convergence(min_accuracy=0.5, target={"metric": "accuracy", "value": 0.9})
    gates, _ = quality_gates([], conv, steps=5)
    assert not any(g.passed for g in gates) and all("no evaluation ran" in g.detail for g in gates)
    language = [EvalPoint(step=5, loss=3.0, perplexity=20.1, samples=8, seconds=0.1)]
    gates, _ = quality_gates(language, conv, steps=5)
    assert all("accuracy is for classification models" in g.detail for g in gates)


def test_without_quality_gates_nothing_is_added():
    assert quality_gates(points([0.5]), Convergence(min_loss_drop=0.1), steps=10) == ([], None)
    assert quality_gates(points([0.5]), None, steps=10) == ([], None)
