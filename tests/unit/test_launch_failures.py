"""Which rank died first and how: from torchrun's ChildFailedError to launcher_failures.json to the cell's
error line and its typed first_failure."""

from __future__ import annotations

import json

from suite.launch import LaunchResult, failures
from suite.results.schema import RankRecord
from suite.runner.cell import build_result, classify


def _child_failed(exitcodes: dict[int, int], stamps: dict[int, int]):
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    out = {}
    for rank, code in exitcodes.items():
        pf = ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=code, error_file="<N/A>")
        pf.timestamp = stamps[rank]  # torchrun stamps whole seconds when it notices; fixed here
        out[rank] = pf
    return ChildFailedError("suite.worker", out)


def test_a_killed_rank_comes_before_its_peer_that_failed_in_the_same_second(tmp_path):
    exc = _child_failed({0: 1, 1: -9}, {0: 100, 1: 100})
    got = failures.from_child_failed(exc)
    assert [(f.rank, f.pid, f.exitcode, f.signal) for f in got] == [(1, 1001, -9, "SIGKILL"), (0, 1000, 1, None)]
    assert got[0].describe() == "rank 1 (pid 1001) was killed by SIGKILL"
    assert got[1].describe() == "rank 0 (pid 1000) exited with code 1"
    assert [f.noticed for f in got] == [1, 0]  # torchrun's own order is kept
    # an earlier timestamp wins whatever the kind
    assert [f.rank for f in failures.from_child_failed(_child_failed({0: 1, 1: -9}, {0: 99, 1: 100}))] == [0, 1]
    # torchrun lists the ranks it stopped itself (SIGTERM) after the one that failed: they never come first
    stopped = failures.from_child_failed(_child_failed({1: -9, 0: -15}, {1: 100, 0: 100}))
    assert [(f.rank, f.signal) for f in stopped] == [(1, "SIGKILL"), (0, "SIGTERM")]
    assert failures.from_child_failed(_child_failed({0: -15}, {0: 100}))[0].signal == "SIGTERM"  # a SIGTERM alone

    failures.write(got, tmp_path / failures.FILE_NAME)
    assert failures.read(tmp_path) == (got, None)
    assert json.loads((tmp_path / failures.FILE_NAME).read_text())["failures"][0]["signal"] == "SIGKILL"


def test_missing_and_unreadable_files():
    assert failures.read("/nonexistent") == ([], None)


def test_unreadable_file_is_a_problem_not_a_crash(tmp_path):
    (tmp_path / failures.FILE_NAME).write_text("{half")
    got, problem = failures.read(tmp_path)
    assert got == [] and problem.startswith(f"{failures.FILE_NAME}: unreadable")


def _rec(rank, status="ok", error=None) -> RankRecord:
    return RankRecord(cell_id="c", rank=rank, world_size=2, local_rank=rank, hostname="h", device="cpu",
                      device_name="cpu", status=status, error=error, losses=[1.0], step_times_s=[0.1],
                      warmup_steps=0, tokens_per_step=1, samples_per_step=1)


KILLED = failures.Failure(rank=1, pid=4242, exitcode=-9, signal="SIGKILL", timestamp=100.0)


def test_classify_names_the_killed_rank_before_the_peer_that_blamed_the_connection():
    peer = _rec(0, "failed", "Traceback\nRuntimeError: Connection reset by peer")
    status, error = classify(LaunchResult(launcher="torchrun", returncode=1), [peer], 2, first_failure=KILLED)
    lines = error.splitlines()
    assert status == "failed"
    assert lines[0] == "rank 1 (pid 4242) was killed by SIGKILL first"
    assert lines[1] == "rank 0: RuntimeError: Connection reset by peer"
    # a cell we stopped ourselves keeps its own reason
    timed = LaunchResult(launcher="torchrun", returncode=None, timed_out=True, error="timeout: killed after 5 s")
    assert classify(timed, [], 2, first_failure=KILLED) == ("timeout", "timeout: killed after 5 s")


def test_build_result_keeps_the_first_failure_typed(tmp_path):
    from suite.scenario import expand
    from suite.scenario import Scenario

    cell = expand(Scenario.model_validate(dict(name="t", model="gpt-tiny", seq_len=16, gpus=2, micro_batch_size=2,
                                               global_batch_size=4, steps=2, warmup_steps=1)))[0]
    work = tmp_path / "work" / "w"
    work.mkdir(parents=True)
    (work / "rank0.json").write_text(_rec(0, "failed", "RuntimeError: Connection reset by peer").model_dump_json())
    failures.write([KILLED, failures.Failure(rank=0, pid=17, exitcode=1, timestamp=100.0)],
                   work / failures.FILE_NAME)
    launched = LaunchResult(launcher="torchrun", returncode=1, started=1.0, ended=2.0)
    result = build_result(cell, 0, launched, work, tmp_path, "cpu", "manifest.json")
    assert result.status == "failed" and result.error.startswith("rank 1 (pid 4242) was killed by SIGKILL first\n")
    assert result.first_failure.model_dump() == {"rank": 1, "pid": 4242, "exitcode": -9, "signal": "SIGKILL",
                                                 "timestamp": 100.0}
    (work / failures.FILE_NAME).unlink()
    plain = build_result(cell, 0, launched, work, tmp_path, "cpu", "manifest.json")
    assert plain.first_failure is None and plain.error.startswith("rank 0: RuntimeError")
