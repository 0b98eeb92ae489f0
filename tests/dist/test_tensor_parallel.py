"""Tensor parallelism on CPU ranks (gloo) against a 1-rank reference: llama-tiny with t = 2 on 2 ranks (no
data parallelism: strategy ddp) and zero3 x tp on 4 ranks (a 2 x 2 mesh: FSDP2 over the dp dimension of
DTensors split over tp), with and without accumulation and checkpointing (fp32, rtol 1e-4); bytes per rank as
the planner says.  What would fail: a rank of a tensor-parallel group reading another data slice than its
partner (the curve drifts at once), a projection split on the wrong dimension (the shapes or the sums go wrong),
replicated parameters left unsynchronized across the data-parallel ranks (the curves drift).

With sequence and loss parallelism (the same groups: one spawn per world size): TP 2 + SP, TP 2 + LP, TP 2 + SP
+ LP with 2 micro-batches and full checkpointing (ddp, 2 ranks), zero3 x TP 2 + SP + LP on 4 ranks; losses and
gradient norms at rtol 1e-5.  What would fail there: a norm run on half the sequence whose gain gradient is not
summed over the tensor-parallel ranks (the curves drift from step 2), a reduce-scatter onto the wrong dimension,
a vocabulary-split cross-entropy whose max or sum is not reduced (the loss is off at step 1), the loss context
left out of backward (an error)."""

from __future__ import annotations

import pytest

from suite.plan import predict
from suite.plan.implemented import unsharded_bytes
from suite.testing.builders import make_cell
from suite.testing.spawn import one_rank_references, run_group, run_named_groups
from suite.worker.main import run_worker

TP = dict(model="llama-tiny", tensor_parallel=2, micro_batch_size=1)
EVAL = {"every_steps": 3, "batches": 1}  # held-out loss of the vocabulary-split logits (gathered for evaluation)
GROUPS = {
    2: {"tp2": dict(TP, strategy="ddp", gpus=2, global_batch_size=2),
        "tp2-a2-full": dict(TP, strategy="ddp", gpus=2, global_batch_size=4, activation_checkpointing="full")},
    4: {"zero3-tp2": dict(TP, strategy="zero3", gpus=4, global_batch_size=4),
        "zero3-tp2-a2-selective": dict(TP, strategy="zero3", gpus=4, global_batch_size=8,
                                       activation_checkpointing="selective")},
}
SEQUENCE = {
    2: {"sp": dict(TP, strategy="ddp", gpus=2, global_batch_size=2, sequence_parallel=True),
        "lp": dict(TP, strategy="ddp", gpus=2, global_batch_size=2, loss_parallel=True),
        "sp-lp-a2-full": dict(TP, strategy="ddp", gpus=2, global_batch_size=4, sequence_parallel=True,
                              loss_parallel=True, activation_checkpointing="full", eval=EVAL)},
    4: {"zero3-sp-lp": dict(TP, strategy="zero3", gpus=4, global_batch_size=4, sequence_parallel=True,
                            loss_parallel=True)},
}
NAMES = [(world, name) for world, group in GROUPS.items() for name in group]
SEQUENCE_NAMES = [(world, name) for world, group in SEQUENCE.items() for name in group]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    both = {world: {**GROUPS[world], **SEQUENCE[world]} for world in GROUPS}
    return run_named_groups(both, tmp_path_factory.mktemp, make_cell)


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    layouts = [o for group in (*GROUPS.values(), *SEQUENCE.values()) for o in group.values()]
    return one_rank_references(layouts, tmp_path_factory.mktemp("tp-refs"), make_cell, model="llama-tiny",
                               eval=EVAL)  # evaluation reads the model: the training curves are the same


@pytest.mark.parametrize("world,name", NAMES)
def test_tensor_parallel_matches_the_one_rank_reference(world, name, groups, references):
    cell, records = groups[name]
    assert len(records) == world and all(r.status == "ok" for r in records), [r.error for r in records]
    assert all(r.losses == records[0].losses for r in records)
    assert records[0].losses == pytest.approx(references[cell.global_batch_size].losses, rel=1e-4)
    assert cell.grad_accum == cell.global_batch_size // (world // 2)


@pytest.mark.parametrize("world,name", [(2, "tp2"), (4, "zero3-tp2")])
def test_bytes_per_rank_are_the_planners(world, name, groups):
    cell, records = groups[name]
    p = predict(cell).as_implemented
    at_rest = p.parameters - unsharded_bytes(cell.model, cell.strategy, cell.precision, 2)
    psi = cell.model.num_parameters()
    for r in records:
        b = r.tensor_bytes
        wants = (("parameters", at_rest), ("gradients", p.gradients), ("optimizer_states", p.optimizer_states))
        for key, want in wants:
            assert getattr(b, key) == pytest.approx(want, rel=0.05), (r.rank, key, getattr(b, key), want)
        # fewer than a whole model's bytes: the blocks' projections are split
        assert b.parameters < 4 * psi / (world // 2)


@pytest.mark.long  # 8 ranks on 2 cores; TP x FSDP (zero3-tp2) is in CI's tier above
def test_hsdp_times_tp_on_a_3d_mesh_matches_the_reference(tmp_path):
    """8 ranks: 2 replicas x 2-rank shard groups x t = 2 (85 s here: 8 ranks on 2 cores)."""
    cell = make_cell(model="llama-tiny", strategy="hsdp", gpus=8, shard_size=2, tensor_parallel=2, micro_batch_size=1,
                     global_batch_size=4, steps=4)
    records = run_group([cell], tmp_path / "group", world=8)[cell.id]
    ref = run_worker(make_cell(model="llama-tiny", strategy="ddp", gpus=1, global_batch_size=4, steps=4),
                     tmp_path / "ref")
    assert all(r.status == "ok" for r in records), [r.error for r in records]
    assert records[0].extra["mesh"] == [2, 2]  # FSDP2's (replicate, shard) part of the (2, 2, 2) mesh
    assert records[0].losses == pytest.approx(ref.losses, rel=1e-4)
    assert records[0].tensor_bytes.gradients == pytest.approx(predict(cell).as_implemented.gradients, rel=0.05)


@pytest.mark.parametrize("world,name", SEQUENCE_NAMES)
def test_sequence_and_loss_parallel_match_the_one_rank_reference(world, name, groups, references):
    cell, records = groups[name]
    assert len(records) == world and all(r.status == "ok" for r in records), [r.error for r in records]
    ref = references[cell.global_batch_size]
    assert all(r.losses == records[0].losses for r in records)
    assert records[0].losses == pytest.approx(ref.losses, rel=1e-5)
    assert records[0].grad_norms == pytest.approx(ref.grad_norms, rel=1e-5)
    if cell.eval is not None:
        assert [e.loss for e in records[0].eval] == pytest.approx([e.loss for e in ref.eval], rel=1e-5)
        assert len(records[0].eval) == 2


def test_the_split_embedding_and_head_are_the_planners_bytes(groups):
    """With sequence parallelism the embedding and the head are split on the vocabulary: fewer bytes than
    tensor parallelism alone, as the planner says."""
    cell, records = groups["sp"]
    p = predict(cell).as_implemented
    for r in records:
        assert r.tensor_bytes.optimizer_states == pytest.approx(p.optimizer_states, rel=0.05)
        assert r.tensor_bytes.gradients == pytest.approx(p.gradients, rel=0.05)
    plain = predict(make_cell(**{**SEQUENCE[2]["sp"], "sequence_parallel": False})).as_implemented
    assert p.gradients < plain.gradients
