"""Planted gradient faults end to end: `suite run` gate-fails a 2-rank cell whose gradients were doubled after
synchronisation (SUITE_FAULT grad2x@2) or whose synchronisation was skipped (desync@3), naming the step, while
the same strategy's clean cell passes against DDP.  One strategy (FSDP2 zero3) is enough for the
runner's path; seeds tell the clean and faulty cells apart, each judged against DDP's cell of its seed.
Every strategy family is covered by tests/dist/test_grad_faults.py (the gate on the records, one process
group); this is the runner's path: records -> CellResult.grad_norms -> match gate -> status."""

from __future__ import annotations

import json

import pytest

from tests.e2e.run_helpers import cell_results, env, run_cli, run_dirs, write

# `long` (64 s on 2 cores): tests/dist/test_grad_faults.py gate-fails every family's planted faults in CI's tier
pytestmark = [pytest.mark.slow, pytest.mark.long]
SCENARIO = """
name: gradfaults
model: gpt-tiny
seq_len: 16
strategy: [ddp, zero3]
gpus: 2
micro_batch_size: 2
global_batch_size: 8
seed: [0, 1, 2]
steps: 5
warmup_steps: 1
device: cpu
optimizer: {lr: 0.005}
convergence:
  match: {strategy: ddp}
timeout_s: 300
"""


def test_grad2x_and_desync_are_gate_failed_at_their_step_and_the_clean_cells_pass(tmp_path):
    from suite.scenario import load_cells

    path = write(tmp_path / "gradfaults.yaml", SCENARIO)
    by = {(c.strategy, c.seed): c for c in load_cells(str(path))[1]}
    faults = ",".join(f"{by[s, 1].id}:grad2x@2,{by[s, 2].id}:desync@3" for s in ("zero3",))
    results = tmp_path / "results"
    run = run_cli(["run", str(path), "--results", str(results)], tmp_path, env(SUITE_FAULT=faults), timeout=600)
    assert run.returncode == 1, run.stderr  # cells gate-failed
    (folder,) = run_dirs(results, "gradfaults")
    got = {(r["axes"]["strategy"], r["axes"]["seed"]): r for r in cell_results(folder).values()}
    for seed in (0, 1, 2):
        assert got[("ddp", seed)]["status"] == "ok"
        assert len(got[("ddp", seed)]["grad_norms"]) == 5
    for strategy in ("zero3",):
        clean = got[(strategy, 0)]
        match = next(g for g in clean["gates"] if g["name"] == "match")
        assert clean["status"] == "ok" and match["passed"], match
        assert "grad norm: 5 steps within grad_rtol 1e-05" in match["detail"]
        for seed, step in ((1, 2), (2, 3)):
            bad = got[(strategy, seed)]
            ref = got[("ddp", seed)]
            gate = next(g for g in bad["gates"] if g["name"] == "match")
            assert bad["status"] == "gate-failed" and gate["step"] == step, gate
            assert bad["error"].startswith(f"gate match failed: step {step}: grad norm {bad['grad_norms'][step]!r} "
                                           f"vs reference {ref['cell_id']} (strategy=ddp) {ref['grad_norms'][step]!r}")
            assert "grad_rtol 1e-05" in bad["error"]
    # the per-step event lines carry the norm too
    work = folder / got[("zero3", 1)]["extra"]["work_dir"]
    steps = [e for e in map(json.loads, (work / "events.jsonl").read_text().splitlines()) if e["event"] == "step"]
    assert [e["grad_norm"] for e in steps] == got[("zero3", 1)]["grad_norms"]
