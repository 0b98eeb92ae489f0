"""Adding a strategy touches one place: a throw-away strategy registered from a plugin module (this file writes
it) is accepted by `suite validate`, predicted by `suite plan`, run by a 2-rank cell and placed in the report
beside its native twin — with no change to suite itself.

The plugin's apply is a real one: it builds the hand-written all-reduce DP (scratch-dp) and marks the result,
so the test can see that the plugin's own code ran on both ranks.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.run_helpers import cell_results, env, run_cli, run_dirs, write

pytestmark = pytest.mark.slow

PLUGIN = '''
"""A throw-away strategy: scratch-dp's all-reduce, under another name, registered from outside suite."""
from suite.strategies.registry import Comm, StrategySpec, register


def apply(model, mesh, policy, device):
    from suite.strategies.scratch.dp import apply as scratch_dp

    parallel = scratch_dp(model, mesh, policy, device)
    parallel.extra["throwaway_plugin"] = True  # proof that this apply, not another, built the model
    return parallel


register(StrategySpec("throwaway-dp", "dp", "throwaway_strategy:apply", Comm(2, pattern="all-reduce"),
                      "test-only: scratch-dp under another name", aliases=("tdp",), twin="ddp"))
'''

SCENARIO = """
name: plugin
model: gpt-tiny
seq_len: 32
strategy: [ddp, tdp]
gpus: 2
micro_batch_size: 2
global_batch_size: 4
steps: 6
warmup_steps: 1
device: cpu
optimizer: {name: adamw, lr: 3.0e-3, weight_decay: 0.0}
convergence:
  match: {strategy: ddp, rtol: 1.0e-5}
timeout_s: 300
"""


def test_throwaway_strategy_from_a_plugin(tmp_path):
    write(tmp_path / "throwaway_strategy.py", PLUGIN)
    scenario = write(tmp_path / "plugin.yaml", SCENARIO)
    plain = env()
    with_plugin = env(SUITE_PLUGINS="throwaway_strategy")
    with_plugin["PYTHONPATH"] = f"{tmp_path}:{with_plugin['PYTHONPATH']}"

    # Unknown without the plugin: a clean error naming the value and the registered names.
    refused = run_cli(["validate", str(scenario)], tmp_path, plain, timeout=120)
    assert refused.returncode == 2 and "'tdp'" in refused.stdout + refused.stderr and "'zero3'" in (
        refused.stdout + refused.stderr)

    # A plugin that cannot be imported: a clean error, no traceback
    missing = run_cli(["validate", str(scenario)], tmp_path, env(SUITE_PLUGINS="no_such_plugin"), timeout=120)
    assert missing.returncode == 2 and "'no_such_plugin' cannot be imported" in missing.stderr
    assert "Traceback" not in missing.stderr

    # validate: accepted, alias and all
    ok = run_cli(["validate", str(scenario)], tmp_path, with_plugin, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr

    # schema: the plugin's name and alias are allowed values
    schema = run_cli(["schema"], tmp_path, with_plugin, timeout=120)
    assert schema.returncode == 0 and {"throwaway-dp", "tdp"} <= set(
        json.dumps(json.loads(schema.stdout)["properties"]["strategy"]).replace('"', " ").split())

    # plan: predicted from its registry entry, i.e. as its family (dp) - the same bytes as ddp
    planned = run_cli(["plan", str(scenario), "--json"], tmp_path, with_plugin, timeout=120)
    assert planned.returncode == 0, planned.stderr
    rows = {r["settings"]["strategy"]: r for r in json.loads(planned.stdout)}
    assert set(rows) == {"ddp", "throwaway-dp"}  # the alias was resolved on validation
    numbers = ("num_parameters", "memory_bytes", "flops_per_token", "comm_bytes_per_step")
    assert [rows["throwaway-dp"][k] for k in numbers] == [rows["ddp"][k] for k in numbers]
    assert rows["throwaway-dp"]["comm_bytes_per_step"] > 0

    # run: a 2-rank cell of the plugin's strategy, its curve equal to ddp's (the match gate)
    results = tmp_path / "results"
    ran = run_cli(["run", str(scenario), "--results", str(results)], tmp_path, with_plugin)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    cells = {c["axes"]["strategy"]: c for c in cell_results(run_dirs(results, "plugin")[0]).values()}
    assert set(cells) == {"ddp", "throwaway-dp"}
    mine = cells["throwaway-dp"]
    assert mine["status"] == "ok" and [g["passed"] for g in mine["gates"]] == [True, True]
    assert len(mine["ranks"]) == 2 and len(mine["losses"]) == 6
    work = run_dirs(results, "plugin")[0] / mine["extra"]["work_dir"]
    ranks = [json.loads(p.read_text()) for p in sorted(work.glob("rank*.json"))]
    assert len(ranks) == 2 and all(r["extra"].get("throwaway_plugin") is True for r in ranks)

    # report: placed after ddp (its twin's family) and paired with ddp in the twin table
    report = run_cli(["report", str(results)], tmp_path, with_plugin, timeout=120)
    assert report.returncode == 0, report.stderr
    text = report.stdout
    assert "throwaway-dp vs ddp" in text
    assert text.index("| ddp") < text.index("| throwaway-dp")
