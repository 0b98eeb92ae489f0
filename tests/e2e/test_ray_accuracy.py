"""The seed's Ray workload, faithful: checkpoints scored by held-out accuracy (checkpoint_score_attribute:
accuracy, order max), the best 2 kept, and the best one restored into a fresh model whose accuracy, measured
again by the driver, equals the one stored with the checkpoint.  One ViT cell on suite's private 2-node
loopback cluster (ray-multinode-cpu.yaml's model and placement)."""

from __future__ import annotations

import pytest

from tests.e2e.ray_helpers import by_strategy, scenario
from tests.e2e.run_helpers import cell_results, env, run_cli, run_dirs

# `long` (61 s on 2 cores): tests/dist/test_ray_checkpoint.py round-trips every strategy's checkpoint in CI's tier
pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(1500)]


def test_checkpoints_kept_by_accuracy_and_the_best_measured_again(tmp_path):
    path = scenario(tmp_path, "ray-accuracy", strategy="ddp", steps=20, eval={"every_steps": 5, "batches": 2},
                    ray={"checkpoint_every_steps": 5, "num_to_keep": 2, "checkpoint_score_attribute": "accuracy",
                         "checkpoint_score_order": "max"})
    results = tmp_path / "results"
    run = run_cli(["run", str(path), "--results", str(results)], tmp_path,
                  {k: v for k, v in env().items() if k != "RAY_ADDRESS"}, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    (result,) = by_strategy(cell_results(run_dirs(results, "ray-accuracy")[0])).values()
    accuracy = {p["step"]: p["accuracy"] for p in result["eval"]}
    assert sorted(accuracy) == [5, 10, 15, 20]
    ray = result["extra"]["ray"]
    kept = ray["checkpoints"]
    assert len(kept) == 2 and all(c["accuracy"] == accuracy[c["step"]] for c in kept)
    assert sorted(c["accuracy"] for c in kept) == sorted(accuracy.values())[-2:]  # the best two by accuracy
    best = ray["best"]
    assert best["restored"] and accuracy[best["step"]] == max(accuracy.values())
    stored, again = best["eval"]["stored"], best["eval"]["remeasured"]
    samples = 2 * 16
    assert abs(again["accuracy"] - stored["accuracy"]) <= 1 / samples
    assert again["eval_loss"] == pytest.approx(stored["eval_loss"], rel=1e-4)
