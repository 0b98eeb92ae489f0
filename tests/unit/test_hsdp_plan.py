"""HSDP and CPU offload in the scenario and the planner (pure): shard_size is resolved and checked with the
numbers, other strategies ignore it (and their ids do not change), bytes divide over the shard group,
communication adds the all-reduce across replicas, offload's bytes are host bytes."""

from __future__ import annotations

import pytest

from suite.plan import predict
from suite.plan.memory import shard_world
from suite.scenario import expand, Scenario, ScenarioError

BASE = {"name": "h", "model": "gpt-tiny", "seq_len": 16, "gpus": 8, "micro_batch_size": 1, "global_batch_size": 16}


def cells(**over):
    return expand(Scenario.model_validate({**BASE, **over}))


def test_shard_size_resolves_checks_and_stays_out_of_other_ids():
    (default,) = cells(strategy="hsdp")
    assert default.shard_size == 8  # the GPUs of one node
    (two_nodes,) = cells(strategy="hsdp", nodes=2, launcher="ray")
    assert two_nodes.shard_size == 4
    with pytest.raises(ScenarioError, match="shard_size 3 does not divide gpus 8: the world must factor as "
                                            "replicas x shard_size"):
        cells(strategy="hsdp", shard_size=3)
    swept = cells(strategy=["zero3", "hsdp"], shard_size=[2, 4])
    assert [(c.strategy, c.shard_size) for c in swept] == [("zero3", None), ("hsdp", 2), ("hsdp", 4)]
    (zero3,) = cells(strategy="zero3")
    assert "shard_size" not in zero3.settings() and zero3.id == swept[0].id


def test_bytes_divide_over_the_shard_group_and_comm_adds_the_replica_all_reduce():
    (hsdp,) = cells(strategy="hsdp", shard_size=2)
    (zero3_on_2,) = cells(strategy="zero3", gpus=2, global_batch_size=4)
    (zero3,) = cells(strategy="zero3")
    assert shard_world(hsdp) == 2 and shard_world(zero3) == 8
    a, b = predict(hsdp), predict(zero3_on_2)
    for key in ("parameters", "gradients", "optimizer_states"):
        assert getattr(a.as_implemented, key) == getattr(b.as_implemented, key)
        assert getattr(a.memory_bytes, key) == getattr(b.memory_bytes, key)
    psi, k = a.num_parameters, hsdp.grad_accum
    assert a.comm_bytes_per_step == pytest.approx(4 * psi * ((2 * k + 1) + 2 / 2))
    (whole,) = cells(strategy="hsdp", shard_size=8)  # one replica: zero3's traffic, no all-reduce
    assert predict(whole).comm_bytes_per_step == predict(zero3).comm_bytes_per_step


def test_offload_keeps_the_static_bytes_on_the_host():
    (off,) = cells(strategy="zero3-offload")
    (on,) = cells(strategy="zero3")
    p, q = predict(off).as_implemented, predict(on).as_implemented
    static = q.gradients + q.optimizer_states + q.master_weights + q.parameters
    from suite.plan.implemented import unsharded_bytes

    working = unsharded_bytes(on.model, "zero3", on.precision)
    assert p.host == pytest.approx(static - working) and q.host == 0
    # zero3's gradients are absent at its peak (FSDP2 makes them in backward); offloaded, they are host bytes
    assert p.total == pytest.approx(q.total + q.gradients_absent_at_peak - p.host)
    assert p.total == pytest.approx(working + q.activations + q.temporaries)


LLAMA = {**BASE, "model": "llama-tiny", "tensor_parallel": 2}


def test_tensor_parallel_checks_name_the_numbers():
    def problem(**over) -> str:
        with pytest.raises(ScenarioError) as err:
            expand(Scenario.model_validate({**LLAMA, **over}))
        return str(err.value)

    assert "tensor_parallel 3 does not divide gpus 8" in problem(tensor_parallel=3, strategy="zero3")
    assert "tensor_parallel 2 needs a llama model, not gpt" in problem(model="gpt-tiny", strategy="zero3")
    assert "tensor_parallel 8 does not divide kv_heads 2 of the model" in problem(tensor_parallel=8, strategy="zero3")
    assert "strategy zero1 does not compose with tensor_parallel 2 (those that do: ddp, zero3, hsdp)" in \
        problem(strategy="zero1")
    assert "composes with tensor_parallel only without data parallelism (gpus = tensor_parallel); gpus 8 / " \
           "tensor_parallel 2 = 4 data-parallel ranks: use zero3" in problem(strategy="ddp")
    assert "global_batch_size 6 is not divisible by micro_batch_size 1 x data-parallel ranks 4" in \
        problem(strategy="zero3", global_batch_size=6)


def test_tensor_parallel_arithmetic():
    from suite.plan.tensor_parallel import split_parameters

    (tp,) = expand(Scenario.model_validate({**LLAMA, "strategy": "zero3"}))
    (plain,) = expand(Scenario.model_validate({**LLAMA, "strategy": "zero3", "tensor_parallel": 1}))
    assert "tensor_parallel" not in plain.settings() and tp.grad_accum == 4 and plain.grad_accum == 2
    shape, p, q = tp.model, predict(tp), predict(plain)
    psi_tp = shape.num_parameters() - shape.layers * split_parameters(shape) / 2
    assert p.as_implemented.gradients == pytest.approx(4 * psi_tp / 4)  # fp32 shards over 8 / 2 = 4 dp ranks
    s, b, h = tp.seq_len, 1, shape.hidden
    # zero3 over 4 data-parallel ranks on Psi_tp, plus 8 s b h L elements of tensor-parallel all-reduces per
    # micro-batch
    dp = (2 * tp.grad_accum + 1) * psi_tp
    assert p.comm_bytes_per_step == pytest.approx(4 * (dp + 8 * s * b * h * shape.layers * tp.grad_accum))
    assert p.memory_bytes.activations < q.memory_bytes.activations


def test_the_layout_pivot_answers_per_tensor_parallel_degree():
    from suite.report.pivots import pivots
    from suite.testing.builders import make_row

    def row(tp, measured, tokens):
        return make_row(strategy="zero3", tensor_parallel=tp, gpus=4, created_at="t", states_measured_mib=measured,
                        states_predicted_mib=measured * 1.01, tokens_per_s=tokens, step_median_ms=10.0, final_loss=1.0)

    (layout,) = [p for p in pivots([row(1, 8.0, 1000.0), row(2, 5.0, 900.0)]) if p.name == "layout"]
    assert layout.header == ["cells", "tp 1", "tp 2"]
    assert layout.rows == [["all", "8.0 / 8.1 MiB, 1,000 tok/s", "5.0 / 5.0 MiB, 900 tok/s"]]  # 5.0 x 1.01 is 5.04999... in binary
    assert not [p for p in pivots([row(1, 8.0, 1000.0), row(1, 8.0, 1000.0)]) if p.name == "layout"]


def test_old_results_read_with_the_new_axes_and_layouts_with_none_sort():
    from suite.plan.trace import trace_key
    from suite.report.pivots import pivots
    from suite.results.schema import CellResult
    from suite.testing.builders import make_result, make_row

    (cell,) = cells(strategy="zero3")
    new = make_result(cell, started_at="", finished_at="")
    old_axes = {k: v for k, v in cell.axes().items() if k not in ("seed", "shard_size", "tensor_parallel")}
    stored = new.model_dump(mode="json")
    old = CellResult.model_validate({**stored, "axes": old_axes,
                                     "cell": {k: v for k, v in stored["cell"].items() if k not in ("shard_size",
                                                                                                   "tensor_parallel")}})
    assert old.axes == new.axes  # a pre-schema-4 record shows the axes a new one does
    (tp,) = expand(Scenario.model_validate({**LLAMA, "strategy": "zero3"}))
    (no_tp,) = expand(Scenario.model_validate({**LLAMA, "strategy": "zero3", "tensor_parallel": 1}))
    assert trace_key(tp) != trace_key(no_tp)  # a tp cell never reuses the trace of its tp = 1 twin

    def row(strategy, shard):
        return make_row(strategy=strategy, shard_size=shard, created_at="t", tokens_per_s=1.0, states_measured_mib=1.0,
                        states_predicted_mib=1.0, step_median_ms=1.0, final_loss=1.0)

    (layout,) = [p for p in pivots([row("zero3", None), row("hsdp", 2)]) if p.name == "layout"]
    assert layout.header == ["cells", "shard -", "shard 2"]  # zero3's None sorts first, without a TypeError


def test_only_a_judged_seed_brings_its_band_references():
    from suite.runner.opening import select_cells

    base = {"name": "b", "model": "gpt-tiny", "seq_len": 16, "strategy": ["ddp", "zero3"], "gpus": 2,
            "global_batch_size": 2, "seed": [0, 1, 2], "eval": {"every_steps": 5},
            "convergence": {"band": {"reference": {"strategy": "ddp"}}}}
    cs = expand(Scenario.model_validate(base))
    judged = next(c for c in cs if c.strategy == "zero3" and c.seed == 1)
    chosen, notes = select_cells(cs, [judged.id])
    assert sorted((c.strategy, c.seed) for c in chosen) == [("ddp", 0), ("ddp", 1), ("ddp", 2), ("zero3", 1)]
    assert len(notes) == 3 and "seed 0 of" in notes[0]
