"""The worker's statuses and exit codes, through `python -m suite.worker`'s main() in-process (1 rank, gloo)."""

from __future__ import annotations

import json

import pytest
import torch

from suite.results.schema import RankRecord
from suite.testing.builders import make_cell
from suite.worker import __main__ as entry
from suite.worker.faults import Faults, parse


def run_main(cell, tmp_path, monkeypatch, fault: str | None = None):
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    if fault is None:
        monkeypatch.delenv("SUITE_FAULT", raising=False)
    else:
        monkeypatch.setenv("SUITE_FAULT", fault)
    (tmp_path / "cell.json").write_text(cell.model_dump_json())
    code = entry.main([str(tmp_path / "cell.json"), str(tmp_path / "out")])
    record = RankRecord.model_validate_json((tmp_path / "out" / "rank0.json").read_text())
    events = [json.loads(line) for line in (tmp_path / "out" / "events.jsonl").read_text().splitlines()]
    return code, record, events


def test_ok_run_exits_0_and_logs_every_step(tmp_path, monkeypatch):
    cell = make_cell(gpus=1, steps=3)
    code, record, events = run_main(cell, tmp_path, monkeypatch)
    assert code == 0 and record.status == "ok" and record.error is None
    assert [e["event"] for e in events] == ["setup_done", "step", "step", "step", "done"]
    assert record.tensor_bytes.parameters == 4 * cell.model.num_parameters()


def test_nan_fault_stops_at_once_as_diverged(tmp_path, monkeypatch):
    cell = make_cell(gpus=1, steps=6)
    code, record, events = run_main(cell, tmp_path, monkeypatch, fault=f"other:raise@0,{cell.id}:nan@2")
    assert code == 3 and record.status == "diverged"
    assert len(record.losses) == 3 and all(x == x for x in record.losses[:2]) and record.losses[2] != record.losses[2]
    assert "step 2" in record.error
    assert events[-1] == {**events[-1], "event": "done", "status": "diverged"}


def test_raise_fault_is_a_failure_with_the_traceback(tmp_path, monkeypatch):
    cell = make_cell(gpus=1, steps=4)
    code, record, events = run_main(cell, tmp_path, monkeypatch, fault=f"{cell.id}:raise@1")
    assert code == 1 and record.status == "failed" and len(record.losses) == 1
    assert "InjectedFault: injected fault: raise at step 1" in record.error and "Traceback" in record.error
    assert events[-1]["status"] == "failed"


def test_out_of_memory_is_oom(tmp_path, monkeypatch):
    def no_memory(shape, seed):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    monkeypatch.setattr("suite.worker.main.build_model", no_memory)
    code, record, _ = run_main(make_cell(gpus=1), tmp_path, monkeypatch)
    assert code == 4 and record.status == "oom" and "80.00 GiB" in record.error
    assert record.setup_s is None and record.losses == []


def test_wrong_world_size_fails_clearly(tmp_path, monkeypatch):
    code, record, _ = run_main(make_cell(gpus=2), tmp_path, monkeypatch)
    assert code == 1 and "WORLD_SIZE is 1 but the cell has gpus: 2" in record.error


def test_usage_without_arguments():
    assert entry.main([]) == 2


def test_fault_spec_parsing():
    assert parse("a:raise@3, b:nan@1,a:hang@5", "a") == {3: "raise", 5: "hang"}
    assert parse("", "a") == {} and Faults("a", "b:nan@1").at == {}
    assert Faults("a", "a:nan@2").poison(2) and not Faults("a", "a:nan@2").poison(1)
    with pytest.raises(ValueError, match="kind 'explode'"):
        parse("a:explode@1", "a")
    with pytest.raises(ValueError, match="malformed"):
        parse("a:raise", "a")



# suite.worker's own main under an address-space limit: ROOM bytes above what the interpreter, torch and suite
# already map.  gpt-tiny at micro-batch 8192 x 256 tokens keeps 512 MiB per hidden-size activation for the
# backward (more than 12 GiB in all); at micro-batch 8 it needs a few MiB.
_LIMITED = """
import resource, sys
import torch  # noqa: F401  (mapped before the limit is measured: torch's libraries take gigabytes of address space)
from suite.worker import __main__ as entry
size = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (size + int(sys.argv[3]), resource.RLIM_INFINITY))
sys.exit(entry.main(sys.argv[1:3]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("micro_batch, status, code", [(8, "ok", 0), (8192, "oom", 4)])
def test_a_real_cpu_allocation_failure_is_oom(tmp_path, micro_batch, status, code):
    """No patched builder: under a 1 GiB address-space limit (RLIMIT_AS) the CPU allocator itself refuses a
    tensor of the oversized micro-batch, and the worker records oom (exit 4) with the allocator's message, the
    way an oversized micro-batch fails on a CPU host.  The small micro-batch under the same limit trains: the
    limit alone is not what fails."""
    import subprocess
    import sys

    from suite.testing.spawn import ROOT, worker_env

    cell = make_cell(gpus=1, steps=2, seq_len=256, micro_batch_size=micro_batch, global_batch_size=micro_batch)
    (tmp_path / "cell.json").write_text(cell.model_dump_json())
    env = {k: v for k, v in worker_env().items() if k not in ("MASTER_ADDR", "SUITE_FAULT")}
    done = subprocess.run([sys.executable, "-c", _LIMITED, str(tmp_path / "cell.json"), str(tmp_path / "out"),
                           str(1024**3)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    record = RankRecord.model_validate_json((tmp_path / "out" / "rank0.json").read_text())
    assert (done.returncode, record.status) == (code, status), (done.returncode, record.error, done.stderr[-2000:])
    if status == "oom":
        assert "DefaultCPUAllocator: can't allocate memory" in record.error and record.losses == []
    else:
        assert len(record.losses) == 2 and record.error is None
