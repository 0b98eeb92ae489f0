"""A cell's status from structured facts (launcher outcome, rank records), and infeasibility before launch."""

from __future__ import annotations

import pytest

from suite.cells import expand
from suite.launch import LaunchResult
from suite.plan import predict
from suite.results.schema import RankRecord
from suite.runner.cell import classify, infeasible_reason, resolve_device


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
    from suite.scenario import Scenario

    data = dict(name="t", model="gpt-tiny", seq_len=16, gpus=2, micro_batch_size=2, global_batch_size=4, steps=2,
                warmup_steps=1)
    data.update(over)
    return expand(Scenario.model_validate(data))[0]


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
