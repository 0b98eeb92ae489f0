"""Injected faults (SUITE_FAULT) with the real worker: each cell gets the right status while the others of the
same run complete; the hung cell is killed at its timeout with no process left behind (checked by pid)."""

from __future__ import annotations

import pytest

from tests.e2e.run_helpers import cell_results, env, run_cli, run_dirs, write

pytestmark = pytest.mark.slow

# timeout_s leaves room for a healthy cell on a busy 2-core machine (launch + import torch can take ~60 s there:
# 110 s is nearly twice that, paid once by the hung cell: 150 s cost CI 40 s more).
# ddp/16 is the healthy reference; zero1/16 raises, zero2/16 hangs, zero3/16 goes NaN; ddp/8 runs fine but
# trains on a different global batch, so its curve cannot match ddp/16's (gate-failed).
SCENARIO = """
name: faults
model: gpt-tiny
seq_len: 32
strategy: [ddp, zero1, zero2, zero3]
gpus: 2
micro_batch_size: 4
global_batch_size: [16, 8]
steps: 6
warmup_steps: 1
device: cpu
timeout_s: 110
convergence:
  match: {global_batch_size: 16, rtol: 1.0e-4}
exclude:
  - {strategy: zero1, global_batch_size: 8}
  - {strategy: zero2, global_batch_size: 8}
  - {strategy: zero3, global_batch_size: 8}
"""


def test_faults_get_their_status_and_the_run_goes_on(tmp_path):
    from suite.scenario import load_cells

    path = write(tmp_path / "faults.yaml", SCENARIO)
    cells = {(c.strategy, c.global_batch_size): c for c in load_cells(str(path))[1]}
    ref, bad_raise, bad_hang, bad_nan, other_batch = (cells[k] for k in (
        ("ddp", 16), ("zero1", 16), ("zero2", 16), ("zero3", 16), ("ddp", 8)))
    faults = f"{bad_raise.id}:raise@2,{bad_hang.id}:hang@2,{bad_nan.id}:nan@3"
    results = tmp_path / "results"
    run = run_cli(["run", str(path), "--results", str(results)], tmp_path, env(SUITE_FAULT=faults))
    assert run.returncode == 1, run.stderr
    assert len(run.workers()) == 10 and not run.alive()  # 5 cells x 2 ranks seen; none left
    (folder,) = run_dirs(results, "faults")
    got = {k.rsplit("-r", 1)[0]: v for k, v in cell_results(folder).items()}
    assert {cid: r["status"] for cid, r in got.items()} == {
        ref.id: "ok", bad_raise.id: "failed", bad_hang.id: "timeout", bad_nan.id: "diverged",
        other_batch.id: "gate-failed"}

    assert "raise at step 2" in got[bad_raise.id]["error"]
    hung = got[bad_hang.id]
    assert hung["error"].startswith("timeout: killed after 110 s")
    assert 110 <= hung["extra"]["wall_s"] < 110 + 180  # at its timeout: not before, and not much after (a hang guard)
    assert hung["extra"]["sigkill_needed"] is False  # SIGTERM alone stopped torchrun and its ranks (not a clock)
    killed = set(hung["extra"]["killed_pids"])
    assert len(killed) >= 3 and not (killed & set(run.alive()))  # torchrun + 2 ranks, all gone
    diverged = got[bad_nan.id]
    assert len(diverged["losses"]) == 4 and diverged["losses"][3] != diverged["losses"][3]  # NaN at step 3
    gate = next(g for g in got[other_batch.id]["gates"] if g["name"] == "match")
    assert not gate["passed"] and gate["step"] is not None and ref.id in gate["detail"]
    assert got[other_batch.id]["error"].startswith("gate match failed")
    assert [g["name"] for g in got[ref.id]["gates"]] == ["finite", "match"]
    assert all(g["passed"] for g in got[ref.id]["gates"])
