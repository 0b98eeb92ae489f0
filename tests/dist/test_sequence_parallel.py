"""Sequence and loss parallelism on CPU ranks (gloo) against the 1-rank reference: llama-tiny with t = 2 on 2
ranks (ddp: no data parallelism), with sequence parallelism, with loss parallelism, with both, and zero3 x tp 2
with both on 4 ranks (fp32; loss and gradient-norm curves, rtol 1e-5).  What would fail: a norm run on half the
sequence whose gain gradient is not summed over the tensor-parallel ranks (the curves drift from step 2), a
reduce-scatter onto the wrong dimension (shapes, or the sums, go wrong), a vocabulary-split cross-entropy whose
max or sum is not reduced (the loss is off at step 1), the loss context left out of backward (an error)."""

from __future__ import annotations

import pytest

from suite.plan import predict
from suite.testing.builders import make_cell
from suite.testing.spawn import run_group
from suite.worker.main import run_worker

TP = dict(model="llama-tiny", tensor_parallel=2, micro_batch_size=1, steps=6)
GROUPS = {
    2: {"sp": dict(TP, strategy="ddp", gpus=2, global_batch_size=2, sequence_parallel=True),
        "lp": dict(TP, strategy="ddp", gpus=2, global_batch_size=2, loss_parallel=True),
        "sp-lp-a2-full": dict(TP, strategy="ddp", gpus=2, global_batch_size=4, sequence_parallel=True,
                              loss_parallel=True, activation_checkpointing="full")},
    4: {"zero3-sp-lp": dict(TP, strategy="zero3", gpus=4, global_batch_size=4, sequence_parallel=True,
                            loss_parallel=True)},
}
NAMES = [(world, name) for world, group in GROUPS.items() for name in group]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    out = {}
    for world, group in GROUPS.items():
        cells = {name: make_cell(**o) for name, o in group.items()}
        records = run_group(list(cells.values()), tmp_path_factory.mktemp(f"sp-{world}"), world=world)
        out.update({name: (cells[name], records[cell.id]) for name, cell in cells.items()})
    return out


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    out, refs = tmp_path_factory.mktemp("sp-refs"), {}
    for gbs in sorted({o["global_batch_size"] for g in GROUPS.values() for o in g.values()}):
        cell = make_cell(model="llama-tiny", gpus=1, strategy="ddp", global_batch_size=gbs, steps=6)
        record = run_worker(cell, out / str(gbs))
        assert record.status == "ok", record.error
        refs[gbs] = record
    return refs


@pytest.mark.parametrize("world,name", NAMES)
def test_sequence_and_loss_parallel_match_the_one_rank_reference(world, name, groups, references):
    cell, records = groups[name]
    assert len(records) == world and all(r.status == "ok" for r in records), [r.error for r in records]
    ref = references[cell.global_batch_size]
    assert all(r.losses == records[0].losses for r in records)
    assert records[0].losses == pytest.approx(ref.losses, rel=1e-5)
    assert records[0].grad_norms == pytest.approx(ref.grad_norms, rel=1e-5)


def test_the_split_embedding_and_head_are_the_planners_bytes(groups):
    """With sequence parallelism the embedding and the head are split on the vocabulary: fewer bytes than
    tensor parallelism alone, as the planner says."""
    cell, records = groups["sp"]
    p = predict(cell).as_implemented
    for r in records:
        assert r.tensor_bytes.optimizer_states == pytest.approx(p.optimizer_states, rel=0.05)
        assert r.tensor_bytes.gradients == pytest.approx(p.gradients, rel=0.05)
    plain = predict(make_cell(**{**GROUPS[2]["sp"], "sequence_parallel": False})).as_implemented
    assert p.gradients < plain.gradients
