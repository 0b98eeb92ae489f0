"""Sequence and loss parallelism before anything runs: what validate refuses (with the field and the numbers),
the planner's arithmetic (Korthikanti et al.'s 34 / t with SP; the embedding and head split on the vocabulary;
the loss's vocabulary-wide tensors / t with LP), cell ids and trace keys of older cells unchanged, and the plan
table's columns.  The runs themselves are tests/dist/test_tensor_parallel.py."""

from __future__ import annotations

import json

import pytest

from suite.models.presets import resolve
from suite.plan import memory, predict
from suite.plan.implemented import predict_memory
from suite.plan.tensor_parallel import per_rank_parameters
from suite.plan.trace import trace_key
from suite.scenario import ScenarioError
from suite.testing.builders import make_cell

TP2 = dict(model="llama-tiny", strategy="ddp", gpus=2, tensor_parallel=2, seq_len=64, global_batch_size=2)


@pytest.mark.parametrize("settings,message", [
    (dict(model="llama-tiny", sequence_parallel=True),
     "sequence_parallel true needs tensor_parallel > 1 (got tensor_parallel 1)"),
    (dict(model="llama-tiny", loss_parallel=True), "loss_parallel true needs tensor_parallel > 1"),
    (dict(TP2, seq_len=63, sequence_parallel=True),
     "sequence_parallel shards the sequence over tensor_parallel 2, which does not divide seq_len 63"),
    (dict(TP2, model={"family": "llama", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 172,
                      "vocab": 257}, loss_parallel=True),
     "loss_parallel shards the vocabulary over tensor_parallel 2, which does not divide vocab 257"),
])
def test_bad_combinations_are_refused_naming_the_numbers(settings, message):
    with pytest.raises(ScenarioError) as err:
        make_cell(**settings)
    assert message in str(err.value)


def test_cells_without_them_keep_their_ids_and_trace_keys():
    plain = make_cell(**TP2)
    assert "sequence_parallel" not in plain.settings() and "loss_parallel" not in plain.settings()
    sp = make_cell(**TP2, sequence_parallel=True)
    lp = make_cell(**TP2, loss_parallel=True)
    assert len({plain.id, sp.id, lp.id}) == 3
    assert len({trace_key(plain), trace_key(sp), trace_key(lp)}) == 3


def test_textbook_activations_with_sequence_parallelism_are_34_over_t():
    shape, s, b, t = resolve("llama-tiny"), 64, 2, 2
    h, a = shape.hidden, shape.heads
    for mode, per_layer in (("none", s * b * h * (34 / t + 5 * a * s / (h * t))), ("selective", s * b * h * 34 / t),
                            ("full", 2 * s * b * h / t)):
        got = memory.activation_bytes(shape, s, b, mode, "bf16-mixed", t, sequence_parallel=True)
        assert got == pytest.approx(per_layer * shape.layers), mode
        assert got < memory.activation_bytes(shape, s, b, mode, "bf16-mixed", t)


def test_the_vocabulary_split_parameters_and_loss_bytes():
    plain, sp, lp = (make_cell(**TP2, **extra) for extra in ({}, {"sequence_parallel": True},
                                                              {"loss_parallel": True}))
    shape = plain.model
    assert per_rank_parameters(plain) - per_rank_parameters(sp) == pytest.approx(shape.vocab * shape.hidden)
    assert per_rank_parameters(lp) == per_rank_parameters(sp)
    # LP: the loss's fp32 log-probabilities (saved) / t; its backward's temporaries whole (as traced)
    vocab_wide = 4 * shape.vocab * plain.seq_len * plain.micro_batch_size
    p, q = predict_memory(plain), predict_memory(lp)
    assert p.activations - q.activations == pytest.approx(vocab_wide / 2)
    assert p.temporaries == q.temporaries
    assert predict(make_cell(**TP2, sequence_parallel=True)).memory_bytes.total < predict(plain).memory_bytes.total


def test_the_plan_table_shows_sp_and_lp_when_they_vary(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    path = tmp_path / "sp.yaml"
    path.write_text(json.dumps({"name": "sp", **TP2, "sequence_parallel": [False, True], "loss_parallel": True}))
    out = cli("plan", path)
    assert out.exit_code == 0, out.output
    header = next(line for line in out.stdout.splitlines() if "cell" in line and "tp" in line)
    assert [c.strip() for c in header.strip("┃│ ").split("┃")][6:10] == ["gpus", "tp", "sp", "lp"]


@pytest.mark.parametrize("extra", [{"sequence_parallel": True}, {"sequence_parallel": True, "loss_parallel": True}])
def test_the_as_implemented_peak_is_within_6_percent_of_the_trace(extra):
    """llama-tiny, t = 2, seq 512 (the loss's vocabulary-wide tensors and the residual stream both count): the
    as-implemented model against the peak of the real code on fake tensors (4.6% and 5.0% under it here)."""
    from suite.plan.trace import trace_cell

    cell = make_cell(**{**TP2, "seq_len": 512}, **extra)
    traced, guess = trace_cell(cell).peak, predict(cell).as_implemented.total
    assert guess == pytest.approx(traced, rel=0.06), (guess, traced)


def test_a_vocabulary_split_embedding_gets_its_gradient_whole_and_the_first_rank_plans_it():
    """PyTorch 2.14's DTensor embedding backward returns the vocabulary-split (RowwiseParallel) embedding's
    gradient replicated: V x h on every tensor-parallel rank (real tensors, a fake process group).  Under zero3
    the planner's first rank holds it at the end of a micro-batch's backward, in the compute dtype, and, where
    micro-batches accumulate unsharded, summed in fp32 beyond the split rows: a torch that splits the gradient
    fails the first half, and a planner that forgets it the second."""
    import torch
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module

    from suite.plan.fake_world import fake_world

    with fake_world(2):
        emb = nn.Sequential(nn.Embedding(64, 8))
        parallelize_module(emb, init_device_mesh("cpu", (2,)),
                           {"0": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))})
        emb(torch.randint(0, 64, (1, 4))).sum().backward()
        assert tuple(emb[0].weight.to_local().shape) == (32, 8)
        assert tuple(emb[0].weight.grad.to_local().shape) == (64, 8)

    from suite.plan.implemented import whole_embedding_in_backward

    zero3 = dict(TP2, strategy="zero3", gpus=4, precision="bf16-mixed", micro_batch_size=1)
    whole = resolve("llama-tiny").vocab * resolve("llama-tiny").hidden
    one = dict(zero3, global_batch_size=2)  # 2 data-parallel ranks: one micro-batch, nothing accumulates
    assert predict_memory(make_cell(**one, sequence_parallel=True)).temporaries \
        - predict_memory(make_cell(**one)).temporaries == pytest.approx(2 * whole)  # bf16, whole
    two = make_cell(**dict(zero3, global_batch_size=4), sequence_parallel=True)
    assert whole_embedding_in_backward(two) == pytest.approx(2 * whole + 4 * whole / 2)  # + fp32 beyond 1 / t
    assert whole_embedding_in_backward(make_cell(**dict(zero3, global_batch_size=4))) == 0.0  # not split
    # ddp keeps it as a gradient (whole_embedding_gradient), not a temporary
    assert whole_embedding_in_backward(make_cell(**dict(TP2, sequence_parallel=True))) == 0.0
