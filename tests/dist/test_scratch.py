"""The hand-written strategies (suite/strategies/scratch/) on 2 CPU ranks (gloo, gpt-tiny): the same loss curve as
their native twins and as one rank, the bytes the planner predicts, and communication that really overlaps.

Cost: ONE launch of 2 processes (this file run as `python -m tests.dist.test_scratch SPEC`).  Each rank first
runs every cell of GROUP through `run_worker` (suite/testing/group_worker.py: one process group per cell), then
opens one more process group for the probes: single optimizer steps driven by hand, with the collectives
wrapped to record *when* each one was launched (inside backward or not, how many gradients were ready, whether
the transfer was still in flight).  The 1-rank references run in the pytest process.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from suite.testing.builders import make_cell

from suite.testing.spawn import ROOT, free_ports, read_records, worker_env

SCRATCH = ["scratch-dp", "scratch-dp-overlap", "scratch-dp-bucketed", "scratch-zero1", "scratch-zero2", "scratch-zero3"]
TWIN = {"scratch-dp": "ddp", "scratch-dp-overlap": "ddp", "scratch-dp-bucketed": "ddp",
        "scratch-zero1": "zero1", "scratch-zero2": "zero2", "scratch-zero3": "zero3"}
# Each strategy without accumulation, and with 2 micro-batches per rank under one checkpointing mode (its twin
# runs the same cell).  bucket_cap_mb 0.1 splits gpt-tiny (0.5 MB of fp32 parameters) into several buckets.
CKPT = {"scratch-dp": "full", "scratch-dp-overlap": "selective", "scratch-dp-bucketed": "full",
        "scratch-zero1": "selective", "scratch-zero2": "full", "scratch-zero3": "selective"}
COMMON = dict(bucket_cap_mb=0.1)
A1, A2 = dict(global_batch_size=4), dict(global_batch_size=8)  # micro-batch 2: 1 or 2 micro-batches per rank


def _group() -> dict[str, dict]:
    group = {}
    for s in SCRATCH + ["ddp", "zero1", "zero2", "zero3"]:
        group[f"{s}-a1"] = dict(strategy=s, **A1, **COMMON)
    for s in SCRATCH:
        for name in (s, TWIN[s]):
            group[f"{name}-a2-{CKPT[s]}"] = dict(strategy=name, activation_checkpointing=CKPT[s], **A2, **COMMON)
        group[f"{s}-bf16"] = dict(strategy=s, precision="bf16-mixed", steps=2, **A2, **COMMON)
    for s in ("scratch-dp-bucketed", "scratch-zero1", "scratch-zero2", "scratch-zero3"):
        group[f"{s}-fp16"] = dict(strategy=s, precision="fp16-mixed", steps=2, **A1, **COMMON)
    return group


GROUP = _group()
PROBE_MODEL = {"family": "gpt", "layers": 4, "hidden": 32, "heads": 4, "vocab": 256, "max_seq_len": 64}


# ===================================================================================== inside each rank
class Recorder:
    """Wraps a collective; records, per call, when it was launched and when its handle was waited on.

    "When" is program order, not a clock: `ready` counts the gradients done, `blocks` the blocks whose forward
    began.  A call whose wait came after more computation than its launch (`overlapped`) was on the wire while
    the model computed — whether gloo had finished by then (`in_flight`, kept for information) is a race."""

    def __init__(self, n_params: int):
        self.n_params, self.ready, self.blocks, self.phase, self.calls = n_params, 0, 0, "setup", []

    def wrap(self, fn):
        def collective(*args, **kwargs):
            work = fn(*args, **kwargs)
            call = {"op": fn.__name__, "phase": self.phase, "ready": self.ready, "blocks": self.blocks,
                    "async": bool(kwargs.get("async_op")), "waited": None, "overlapped": False,
                    "in_flight": work is not None and not work.is_completed()}
            self.calls.append(call)
            return work if work is None else _Watched(work, call, self)

        return collective


class _Watched:
    """A collective's handle that notes, at its first wait(), how far the computation had got."""

    def __init__(self, work, call: dict, rec: Recorder):
        self._work, self._call, self._rec = work, call, rec

    def wait(self, *args, **kwargs):
        c, r = self._call, self._rec
        if c["waited"] is None:
            c["waited"] = {"phase": r.phase, "ready": r.ready, "blocks": r.blocks}
            # more than the launching gradient's own hook (counted after the strategy's), or a later block
            c["overlapped"] = r.ready > c["ready"] + 1 or r.blocks > c["blocks"]
        return self._work.wait(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._work, name)


def _storage_sizes(module) -> list[int]:
    return [p.untyped_storage().nbytes() for p in module.parameters()]


def probe(strategy: str, rank: int) -> dict:
    """One hand-driven optimizer step of `strategy` with its collectives recorded (and, for scratch-zero3,
    which blocks hold their full parameters at each moment)."""
    import torch

    from suite.data import build_data
    from suite.models.build import build_model
    from suite.worker.parallelize import parallelize
    from suite.strategies.scratch import zero2, zero3

    cell = make_cell(strategy=strategy, model=PROBE_MODEL, bucket_cap_mb=0.01, **A1)
    model = build_model(cell.model, cell.seed)
    par = parallelize(model, cell, torch.device("cpu"))
    params = [p for p in model.parameters() if p.requires_grad]
    rec = Recorder(len(params))
    for p in params:  # registered after the strategy's hooks, so it runs after them: counts gradients *done*
        p.register_post_accumulate_grad_hook(lambda p: setattr(rec, "ready", rec.ready + 1))
    gathered_in_block = []  # scratch-zero3: which blocks hold full parameters while block i runs forward
    def entering(i: int) -> None:  # a forward pre-hook must return None (a value would replace the inputs)
        gathered_in_block.append([i] + [int(sum(_storage_sizes(b)) > 0) for b in model.blocks])
        rec.blocks += 1

    for i, block in enumerate(model.blocks):
        block.register_forward_pre_hook(lambda m, a, i=i: entering(i))
    (x, y), = build_data(cell, rank, 2).micro_batches(0)
    patches = [mock.patch("torch.distributed.all_reduce", rec.wrap(torch.distributed.all_reduce)),
               mock.patch.object(zero2, "reduce_scatter_flat", rec.wrap(zero2.reduce_scatter_flat)),
               mock.patch.object(zero3, "reduce_scatter_flat", rec.wrap(zero3.reduce_scatter_flat)),
               mock.patch.object(zero3, "all_gather_flat", rec.wrap(zero3.all_gather_flat))]
    for p in patches:
        p.start()
    try:
        par.optimizer.zero_grad(set_to_none=True)
        rec.phase = "forward"
        loss = par.model(x, y)
        after_forward = [int(sum(_storage_sizes(b)) > 0) for b in model.blocks]
        rec.phase = "backward"
        loss.backward()
        rec.phase = "step"
        par.before_step()
        par.optimizer.step()
        par.after_step()
    finally:
        for p in patches:
            p.stop()
    return {"calls": rec.calls, "n_params": len(params), "buckets": par.extra.get("buckets"),
            "gathered_in_block": gathered_in_block, "after_forward": after_forward,
            "after_step": [int(sum(_storage_sizes(b)) > 0) for b in model.blocks]}


def rank_main(spec_path: str) -> int:
    import torch
    import torch.distributed as dist

    from suite.testing.group_worker import main as run_group_rank

    run_group_rank(spec_path)  # every cell of GROUP through run_worker
    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    os.environ["MASTER_PORT"] = str(spec["probe_port"])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    results = {s: probe(s, rank) for s in SCRATCH}
    dist.destroy_process_group()
    (Path(spec["out_root"]) / f"probe_rank{rank}.json").write_text(json.dumps(results))
    return 0


# ===================================================================================== in pytest
@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """Run the group and the probes once; -> ({name: (cell, [rank records])}, [probe results per rank])."""
    out = tmp_path_factory.mktemp("scratch")
    cells = {name: make_cell(**o) for name, o in GROUP.items()}
    ports = free_ports(len(cells) + 1)
    spec = out / "group.json"
    spec.write_text(json.dumps({"cells": [c.model_dump(mode="json") for c in cells.values()], "ports": ports[:-1],
                                "probe_port": ports[-1], "out_root": str(out)}))
    procs = []
    for r in range(2):
        env = worker_env({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"})
        with open(out / f"rank{r}.log", "w") as log:
            procs.append(subprocess.Popen([sys.executable, "-m", "tests.dist.test_scratch", str(spec)], cwd=ROOT,
                                          env=env, stdout=log, stderr=subprocess.STDOUT))
    try:
        codes = [p.wait(timeout=400) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    logs = "\n".join((out / f"rank{r}.log").read_text()[-3000:] for r in range(2))
    assert codes == [0, 0], f"ranks exited {codes}:\n{logs}"
    records = {name: (cell, read_records(out / cell.id, 2)) for name, cell in cells.items()}
    probes = [json.loads((out / f"probe_rank{r}.json").read_text()) for r in range(2)]
    return records, probes


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """1-rank losses (same global batch, plain DDP on a world of one), in-process, keyed by precision and batch."""
    from suite.worker.main import run_worker

    out, refs = tmp_path_factory.mktemp("refs"), {}
    for precision, batch, steps in (("fp32", A1, 6), ("fp32", A2, 6), ("bf16-mixed", A2, 2), ("fp16-mixed", A1, 2)):
        record = run_worker(make_cell(gpus=1, precision=precision, steps=steps, **batch), out / str(len(refs)))
        assert record.status == "ok", record.error
        refs[precision, batch["global_batch_size"]] = record.losses
    return refs


def ok_records(records, name):
    cell, (r0, r1) = records[name]
    assert r0.status == r1.status == "ok", (name, r0.error, r1.error)
    assert r0.losses == r1.losses, "every rank sees the same global loss"
    return cell, r0, r1


FP32 = [n for n, o in GROUP.items() if o["strategy"] in SCRATCH and "precision" not in o]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", FP32)
def test_loss_matches_native_twin_and_one_rank(name, launched, references):
    records, _ = launched
    cell, r0, _ = ok_records(records, name)
    twin = name.replace(cell.strategy, TWIN[cell.strategy], 1)
    _, t0, _ = ok_records(records, twin)
    ref = references["fp32", cell.global_batch_size]
    assert len(r0.losses) == len(t0.losses) == len(ref) == cell.steps
    for step, (a, b, c) in enumerate(zip(r0.losses, t0.losses, ref)):
        assert abs(a - b) <= 1e-5, f"{name} step {step}: loss {a} vs native {twin} {b}"
        assert abs(a - c) <= 1e-5, f"{name} step {step}: loss {a} vs 1-rank reference {c}"
    assert r0.losses[-1] < r0.losses[0] - 0.05, f"{name}: the loss did not fall: {r0.losses}"


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n, o in GROUP.items() if "precision" in o])
def test_mixed_precision_runs_close_to_one_rank(name, launched, references):
    records, _ = launched
    cell, r0, _ = ok_records(records, name)
    ref = references[cell.precision, cell.global_batch_size]  # 1 rank, autocast at the same precision
    assert len(r0.losses) == 2 and all(math.isfinite(x) for x in r0.losses)
    for a, b in zip(r0.losses, ref):
        assert abs(a - b) < 2e-2, f"{name}: {r0.losses} vs 1-rank {ref}"


@pytest.mark.slow
@pytest.mark.parametrize("strategy", SCRATCH)
def test_bytes_match_the_planner_and_the_twin(strategy, launched):
    from suite.plan import predict

    records, _ = launched
    cell, r0, r1 = ok_records(records, f"{strategy}-a1")
    predicted = predict(cell).memory_bytes
    for r in (r0, r1):
        for key in ("parameters", "gradients", "optimizer_states"):
            m, p = getattr(r.tensor_bytes, key), getattr(predicted, key)
            assert abs(m / p - 1) < 0.03, f"{strategy} rank {r.rank} {key}: measured {m} vs predicted {p:.0f}"
        assert r.tensor_bytes.master_weights == 0  # fp32: the master shard is the parameters' own memory
    _, twin, _ = ok_records(records, f"{TWIN[strategy]}-a1")
    assert r0.tensor_bytes.gradients == pytest.approx(twin.tensor_bytes.gradients, rel=0.01)
    assert r0.tensor_bytes.optimizer_states == pytest.approx(twin.tensor_bytes.optimizer_states, rel=0.03)


def launched_in_backward(result) -> list[dict]:
    return [c for c in result["calls"] if c["phase"] == "backward"]


@pytest.mark.slow
def test_naive_dp_communicates_only_after_backward(launched):
    """The probe can tell: scratch-dp's all-reduces are all launched after backward, one blocking call each."""
    for result in launched[1]:
        calls = result["scratch-dp"]["calls"]
        assert len(calls) == result["scratch-dp"]["n_params"] and not launched_in_backward(result["scratch-dp"])
        assert all(c["phase"] == "step" and not c["async"] for c in calls)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["scratch-dp-overlap", "scratch-dp-bucketed", "scratch-zero2", "scratch-zero3"])
def test_gradient_communication_overlaps_backward(strategy, launched):
    for result in (probes[strategy] for probes in launched[1]):
        during = launched_in_backward(result)
        expected = {"scratch-dp-overlap": result["n_params"], "scratch-dp-bucketed": result["buckets"],
                    "scratch-zero2": result["buckets"], "scratch-zero3": 5}[strategy]  # zero3: 4 blocks + root
        reduces = [c for c in during if "gather" not in c["op"]]
        assert len(reduces) == expected > 1, result["calls"]
        assert all(c["async"] for c in reduces)
        # launched while backward still had gradients to compute, and waited on only after more of them were
        # computed (program order, not gloo's speed: whether it was still on the wire at launch is a race)
        assert any(c["ready"] < result["n_params"] - 1 for c in reduces), reduces
        assert all(c["waited"] is not None for c in reduces), reduces
        assert sum(c["overlapped"] for c in reduces) >= len(reduces) - 1, reduces  # all but the last launched
        assert not [c for c in result["calls"] if c["phase"] == "step" and "gather" not in c["op"]]


@pytest.mark.slow
def test_zero3_gathers_each_block_twice_with_prefetch_and_frees_it(launched):
    for result in (probes["scratch-zero3"] for probes in launched[1]):
        gathers = [c for c in result["calls"] if "gather" in c["op"]]
        forward = [c for c in gathers if c["phase"] == "forward"]
        backward = [c for c in gathers if c["phase"] == "backward"]
        assert len(forward) == 5 and len(backward) == 4  # root + 4 blocks in forward, each block again
        assert all(c["async"] for c in gathers) and any(c["overlapped"] for c in gathers), gathers
        # the prefetched gathers: launched before a block's forward, waited on after it began
        assert sum(c["overlapped"] for c in forward) >= 3, forward
        # while block i runs its forward, only block i and the prefetched block i+1 hold full parameters
        for i, *held in result["gathered_in_block"]:
            assert held == [int(j in (i, i + 1)) for j in range(4)], result["gathered_in_block"]
        assert result["after_forward"] == [0, 0, 0, 0]  # freed after forward, gathered again for backward
        assert result["after_step"] == [0, 0, 0, 0]


if __name__ == "__main__":
    sys.exit(rank_main(sys.argv[1]))
