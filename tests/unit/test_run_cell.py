"""A cell's status from structured facts (launcher outcome, rank records), and infeasibility before launch."""

from __future__ import annotations

import pytest

from suite.launch import LaunchResult
from suite.plan import predict
from suite.results.schema import RankRecord
from suite.runner.cell import classify, infeasible_reason, resolve_device
from suite.testing.builders import make_cell


def _rec(rank, status="ok", error=None) -> RankRecord:
    return RankRecord(cell_id="c", rank=rank, world_size=2, local_rank=rank, hostname="h", device="cpu",
                      device_name="cpu", status=status, error=error, losses=[1.0], step_times_s=[0.1],
                      warmup_steps=0, tokens_per_step=1, samples_per_step=1)


def _launch(code=0, **kw) -> LaunchResult:
    return LaunchResult(launcher="torchrun", returncode=code, **kw)


@pytest.mark.parametrize("launch, records, status", [
    (_launch(0), [_rec(0), _rec(1)], "ok"),
    (_launch(1), [_rec(0, "failed", "Traceback\nRuntimeError: boom"), _rec(1)], "failed"),
    (_launch(1), [_rec(0, "diverged", "loss nan"), _rec(1, "diverged")], "diverged"),
    (_launch(1), [_rec(0, "failed"), _rec(1, "oom", "CUDA out of memory")], "oom"),  # the cause beats the echo
    (_launch(1), [_rec(0)], "failed"),  # rank 1 wrote nothing
    (_launch(1), [], "failed"),
    (_launch(4), [], "oom"),  # the worker's own exit code when it was launched directly (no torchrun)
    (_launch(3), [], "diverged"),
    (_launch(1), [_rec(0), _rec(1)], "failed"),  # records ok but the launcher failed: not ok
    (_launch(None, timed_out=True), [_rec(0), _rec(1)], "timeout"),
    (_launch(None, interrupted=True), [], "interrupted"),
    (LaunchResult(launcher="ray", returncode=None, error="launcher 'ray' is not available"), [], "failed"),
])
def test_classify(launch, records, status):
    got, error = classify(launch, records, world=2)
    assert got == status
    assert (error is None) == (status == "ok")


def test_classify_puts_the_cause_first():
    _, error = classify(_launch(1), [_rec(0, "failed", "Traceback (most recent call last):\n  x\nRuntimeError: boom"),
                                     _rec(1)], world=2)
    assert error.splitlines()[0] == "rank 0: RuntimeError: boom"
    _, missing = classify(_launch(1, error="log tail"), [_rec(0)], world=2)
    assert "rank(s) [1] wrote no record" in missing and "log tail" in missing


def _cell(**over):
    return make_cell(**{"seq_len": 16, "steps": 2, "optimizer": {}, **over})


def test_infeasible_memory_and_devices():
    small = _cell(gpu_memory_gb=1e-6, device="cuda")
    reason = infeasible_reason(small, predict(small), gpu_count=8)
    assert "gpu_memory_gb" in reason and "predicted" in reason
    cuda = _cell(device="cuda", gpus=4, global_batch_size=8)
    assert "needs 4 GPUs; this machine has 2" in infeasible_reason(cuda, predict(cuda), gpu_count=2)
    assert infeasible_reason(cuda, predict(cuda), gpu_count=4) is None
    auto = _cell(device="auto")
    assert resolve_device(auto, 0) == "cpu" and resolve_device(auto, 1) == "cuda"
    assert infeasible_reason(auto, predict(auto), gpu_count=0) is None  # 2 CPU ranks are fine
    many = _cell(device="cpu", gpus=1024, global_batch_size=2048)
    assert "CPU ranks" in infeasible_reason(many, predict(many), gpu_count=0)


def test_ray_ranks_on_the_wrong_nodes_fail_the_cell_from_their_records(tmp_path):
    """The runner, not the Ray launcher, checks placement: `nodes` distinct node ids in the rank records."""
    from suite.runner.cell import build_result

    cell = _cell(launcher="ray", nodes=2, device="cpu")
    run_dir = tmp_path
    work = run_dir / "work" / "w"
    work.mkdir(parents=True)
    for rank, node in enumerate(["n0", "n0"]):
        record = _rec(rank).model_copy(update={"node_id": node, "restarts": 1})
        (work / f"rank{rank}.json").write_text(record.model_dump_json())
    launched = LaunchResult(launcher="ray", returncode=0, started=1.0, ended=2.0, extra={"ray": {"attempts": 2}})
    result = build_result(cell, 0, launched, work, run_dir, "cpu", "manifest.json")
    problem = "placement: ranks ran on 1 distinct node(s), the cell says nodes: 2"
    assert result.status == "failed"
    assert result.error == problem and result.extra["returncode"] == 0  # the driver itself exited 0
    assert result.extra["ray"] == {"attempts": 2, "placement_error": problem} and result.restarts == 1
    (work / "rank1.json").write_text(_rec(1).model_copy(update={"node_id": "n1"}).model_dump_json())
    assert build_result(cell, 0, launched, work, run_dir, "cpu", "manifest.json").status == "ok"


def test_launch_request_carries_what_launchers_read_of_a_cell(tmp_path):
    from suite.runner.cell import launch_request, write_payload

    cell = _cell(launcher="ray", nodes=2, ray={"resources_per_worker": {"CPU": 2}})
    req = write_payload(cell, launch_request(cell, tmp_path, "cpu", image="img", ray_address="h:1"))
    assert (req.launcher, req.gpus, req.nodes, req.threads_per_rank, req.label) == ("ray", 2, 2, 1, cell.id)
    assert req.image is None and req.ray_address == "h:1" and req.resources_per_worker == {"CPU": 2}
    assert req.timeout_s == cell.timeout_s and req.payload.read_text() == cell.model_dump_json(indent=1)
    plain = launch_request(_cell(), tmp_path, "cpu", image="img", ray_address="h:1")
    assert plain.launcher == "container" and plain.image == "img" and plain.ray_address is None
