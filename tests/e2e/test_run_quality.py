"""Time to a held-out target, end to end: `suite run` trains a tiny ViT on generated CIFAR-10-format data (train
and test batches written here, learnable class patterns) and records when it reached its accuracy target;
an unreachable target fails the cell's gate with the best value it saw."""

from __future__ import annotations

import pytest

from suite.data.cifar10 import write_tiny_cifar10
from tests.e2e.run_helpers import cell_results, env, run_cli, run_dirs, write

pytestmark = pytest.mark.slow
SCENARIO = """
name: {name}
launcher: torchrun
device: cpu
model: {{family: vit, image_size: 32, patch_size: 8, layers: 2, heads: 4, hidden: 64, mlp: 128}}
strategy: ddp
gpus: 1
micro_batch_size: 16
global_batch_size: 16
steps: {steps}
warmup_steps: 2
optimizer: {{lr: 3.0e-3}}
data: {{kind: cifar10, root: {root}}}
eval: {{every_steps: 5, batches: 12}}
convergence: {{target: {{metric: accuracy, value: {target}}}}}
timeout_s: 300
"""


def test_time_to_target_is_recorded_and_a_missed_target_fails(tmp_path):
    root = tmp_path / "cifar"
    write_tiny_cifar10(root, per_batch=200, seed=1, learnable=True, test_size=192)
    results = tmp_path / "results"
    reach = write(tmp_path / "reach.yaml", SCENARIO.format(name="reach", steps=40, root=root, target=0.9))
    miss = write(tmp_path / "miss.yaml", SCENARIO.format(name="miss", steps=5, root=root, target=0.999))

    done = run_cli(["run", str(reach), "--results", str(results)], tmp_path, env())
    assert done.returncode == 0, done.stderr
    (result,) = cell_results(run_dirs(results, "reach")[0]).values()
    assert result["status"] == "ok"
    evals = result["eval"]
    assert [p["step"] for p in evals] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert evals[-1]["accuracy"] > 0.9 > 0.1  # far above chance (10 classes)
    assert evals[-1]["loss"] < evals[0]["loss"]
    ttt = result["time_to_target"]
    assert ttt["reached"] and ttt["step"] <= 40 and ttt["best"] >= 0.9
    assert 0 < ttt["train_s"] < ttt["wall_s"]  # the wall clock counts the evaluations too
    assert len(result["step_times_s"]) == 40 - 2  # measured steps: the evaluations are not among them
    assert any(g["name"] == "target" and g["passed"] for g in result["gates"])

    missed = run_cli(["run", str(miss), "--results", str(results)], tmp_path, env())
    assert missed.returncode == 1, missed.stderr
    (result,) = cell_results(run_dirs(results, "miss")[0]).values()
    assert result["status"] == "gate-failed" and not result["time_to_target"]["reached"]
    assert "accuracy target 0.999 not reached within 5 steps (best" in result["error"]
