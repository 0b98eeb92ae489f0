"""Pipeline and context parallelism, planned: what validate refuses (naming the numbers), the arithmetic of
plan/pipeline.py (bubble, micro-batches in flight, parameters per stage, point-to-point and ring traffic), the
worst stage as the cell's bytes, the curated frontier scenarios planned on this machine, which layouts run and
are traced, and the honest refusal of those that do not run yet (planned only)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite.axes import PIPELINE_SCHEDULES

from suite.plan import predict
from suite.plan.implemented import predict_memory
from suite.plan.pipeline import (bubble_fraction, cp_elements, in_flight, message_tensors, p2p_elements,
                                 stage_parameters)
from suite.plan.trace import TraceError, check_traceable
from suite.runner.cell import infeasible_reason
from suite.scenario import ScenarioError
from suite.testing.builders import make_cell
from suite.testing.pipeline_order import simulate
from tests.tiers import covering

ROOT = Path(__file__).resolve().parents[2]
DEEP = {"family": "llama", "layers": 8, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 172, "vocab": 256}


def pp(p=4, schedule="1f1b", m=8, **extra):
    return make_cell(**{"model": DEEP, "gpus": p, "pipeline_parallel": p, "pipeline_schedule": schedule,
                        "micro_batch_size": 1, "global_batch_size": m, **extra})


@pytest.mark.parametrize("settings,message", [
    (dict(model=DEEP, gpus=6, pipeline_parallel=4, global_batch_size=12),
     "pipeline_parallel 4 x context_parallel 1 x tensor_parallel 1 = 4 does not divide gpus 6"),
    (dict(model=DEEP, gpus=3, pipeline_parallel=3, global_batch_size=3),
     "pipeline_parallel 3 stages do not divide the 8 layers of the model"),
    (dict(model=DEEP, gpus=4, pipeline_parallel=4, pipeline_schedule="interleaved-1f1b", global_batch_size=8),
     "pipeline_parallel 4 x 2 model chunks per rank (interleaved-1f1b) = 8 stages"),  # 8 divides 8: no error...
    (dict(model=DEEP, gpus=4, pipeline_parallel=4, global_batch_size=2),
     "pipeline_schedule 1f1b needs at least pipeline_parallel 4 micro-batches per step; global_batch_size / "
     "(micro_batch_size x data-parallel ranks) gives 2"),
    (dict(model=DEEP, gpus=4, pipeline_parallel=4, pipeline_schedule="interleaved-1f1b", global_batch_size=6),
     "pipeline_schedule interleaved-1f1b needs micro-batches per step a multiple of pipeline_parallel 4; got 6"),
    (dict(model=DEEP, gpus=4, context_parallel=4, seq_len=36),
     "context_parallel 4 splits each sequence into 2 x 4 = 8 load-balanced chunks, which does not divide seq_len 36"),
    (dict(model=DEEP, gpus=4, tensor_parallel=2, context_parallel=2, seq_len=64, strategy="ddp", global_batch_size=1),
     "context_parallel 2 averages gradients over its ranks as data parallelism does"),
    (dict(model="vit-cifar10", seq_len=None, gpus=2, pipeline_parallel=2, global_batch_size=4),
     "pipeline_parallel 2 needs a llama or "
     "gpt model, not vit"),
])
def test_bad_layouts_are_refused_naming_the_numbers(settings, message):
    if "= 8 stages" in message:  # 4 x 2 = 8 stages over 8 layers is fine: the same layout on 6 layers is not
        make_cell(**{**settings, "micro_batch_size": 1})
        settings = {**settings, "model": {**DEEP, "layers": 6}}
        message += " do not divide the 6 layers of the model"
    with pytest.raises(ScenarioError) as err:
        make_cell(**{"micro_batch_size": 1, **settings})
    assert message in str(err.value)


def test_a_schedule_without_stages_is_one_cell_and_old_ids_hold():
    plain = make_cell(model=DEEP, gpus=2, global_batch_size=2, micro_batch_size=1)
    swept = make_cell(model=DEEP, gpus=2, global_batch_size=2, micro_batch_size=1, pipeline_schedule="gpipe")
    assert plain.id == swept.id and plain.pipeline_schedule is None
    assert not {"pipeline_parallel", "pipeline_schedule", "context_parallel"} & set(plain.settings())


@pytest.mark.parametrize("schedule,bubble", [("gpipe", 3 / 11), ("1f1b", 3 / 11), ("interleaved-1f1b", 3 / 19),
                                             ("zero-bubble", 3 / 51)])
def test_bubble_fractions(schedule, bubble):
    cell = pp(4, schedule, 8)
    assert bubble_fraction(cell) == pytest.approx(bubble)
    plan = predict(cell).pipeline
    assert plan.bubble_fraction == pytest.approx(bubble) and plan.micro_batches == 8 and plan.stages == 4


def test_micro_batches_in_flight_per_schedule():
    assert [in_flight(pp(4, "1f1b", 8), r) for r in range(4)] == [4, 3, 2, 1]
    assert [in_flight(pp(4, "gpipe", 8), r) for r in range(4)] == [8, 8, 8, 8]
    assert in_flight(pp(4, "interleaved-1f1b", 8), 0) == pytest.approx(4 * (1 + 3 / 8))  # Korthikanti et al.
    assert in_flight(pp(4, "interleaved-1f1b", 8), 3) == pytest.approx(5 / 2)  # 4 warm-up chunks and one more
    assert in_flight(pp(2, "1f1b", 2), 0) == 2
    assert [in_flight(pp(4, "zero-bubble", 8), r) for r in range(4)] == [4, 4, 4, 4]


@pytest.mark.parametrize("schedule", PIPELINE_SCHEDULES)
def test_the_formulas_are_pytorchs_own_orders_simulated(schedule):
    """Each schedule's bubble and activations in flight, as the planner prices them, against PyTorch's own order
    of actions run through a dependency simulation (suite/testing/pipeline_order.py) on equal stages: a forward,
    an input-gradient and a weight-gradient pass cost 1 each, a message nothing."""
    v = PIPELINE_SCHEDULES[schedule].chunks
    for p in (2, 4, 8):
        for m in range(p, 8 * p + 1, p):
            cell = pp(p, schedule, m, model={**DEEP, "layers": 16})
            sim = simulate(schedule, p, m, v)
            assert min(sim.idle) == pytest.approx(bubble_fraction(cell)), (p, m, sim.idle)
            assert [n / v for n in sim.in_flight] == pytest.approx([in_flight(cell, r) for r in range(p)]), (p, m)


def test_stages_hold_the_model_once_and_the_worst_stage_is_the_cells():
    cell = pp(4, "1f1b", 8)
    assert sum(stage_parameters(cell, r) for r in range(4)) == cell.model.num_parameters()
    shape = cell.model
    assert stage_parameters(cell, 1) == 2 * shape.block_parameters()  # a middle stage: its blocks only
    plan = predict(cell)
    assert len(plan.pipeline.stage_as_implemented) == 4
    assert plan.as_implemented.total == max(plan.pipeline.stage_as_implemented)
    assert predict_memory(cell, 0).activations > predict_memory(cell, 2).activations  # 4 in flight vs 2
    gpipe = predict(pp(4, "gpipe", 8))
    assert gpipe.as_implemented.total > plan.as_implemented.total  # gpipe keeps all 8 micro-batches


def test_a_rank_holds_a_receive_buffer_per_message_and_late_schedules_their_sends_too():
    """PyTorch's stage keeps a receive buffer per micro-batch and message; gpipe and the runtime schedules keep
    each send's work (and so its tensor) to the end, 1f1b waits each at the next.  A rank's chunks sit at global
    stages r, r + p, ...: each has a boundary forward unless it is the last stage, backward unless the first."""
    assert [message_tensors(pp(4, "1f1b", 8), r) for r in range(4)] == [8, 16, 16, 8]
    assert [message_tensors(pp(4, "gpipe", 8), r) for r in range(4)] == [16, 32, 32, 16]
    # interleaved on 2 ranks: rank 0 holds stages 0 and 2 (1 + 2 boundaries), rank 1 stages 1 and 3 (2 + 1)
    assert [message_tensors(pp(2, "interleaved-1f1b", 4), r) for r in range(2)] == [24, 24]
    assert message_tensors(pp(4, "interleaved-1f1b", 8), 1) == 2 * 8 * 4
    assert message_tensors(make_cell(model=DEEP, gpus=2, global_batch_size=2, micro_batch_size=1), 0) == 0


def test_point_to_point_and_ring_traffic():
    cell = pp(4, "interleaved-1f1b", 8, seq_len=32)
    assert p2p_elements(cell) == 2 * 2 * 8 * 32 * 1 * 64  # 2 (act + grad) x v x m x s b h
    cp = make_cell(model=DEEP, gpus=4, context_parallel=4, seq_len=64, micro_batch_size=1, global_batch_size=1)
    kv = 2 * 64 // 4
    assert cp_elements(cp) == 6 * 3 * (64 / 4) * 1 * kv * 8
    assert predict(cp).context_bytes_per_step == 4 * cp_elements(cp)


def test_context_parallelism_divides_the_activations_by_c():
    one = make_cell(model=DEEP, gpus=2, seq_len=32, micro_batch_size=1, global_batch_size=2)
    two = make_cell(model=DEEP, gpus=2, seq_len=64, context_parallel=2, micro_batch_size=1, global_batch_size=1)
    assert predict_memory(two).activations == pytest.approx(predict_memory(one).activations)  # 32 tokens a rank


def test_what_suite_cannot_run_yet_is_planned_not_run_nor_traced():
    cp = pp(2, "1f1b", 4, gpus=4, context_parallel=2)  # the sequence split inside a pipeline's micro-batches
    hsdp_cp = make_cell(model=DEEP, gpus=8, context_parallel=2, strategy="hsdp", shard_size=2, seq_len=64,
                        micro_batch_size=1, global_batch_size=4)
    replicas = pp(2, "1f1b", 8, gpus=4, strategy="ddp")  # DDP over a stage's 2 replicas: refused
    offload = pp(2, "1f1b", 8, gpus=4, strategy="zero3-offload")
    gpt = make_cell(model={"family": "gpt", "layers": 4, "hidden": 64, "heads": 4, "vocab": 256, "max_seq_len": 64},
                    gpus=2, pipeline_parallel=2, pipeline_schedule="gpipe", micro_batch_size=1, global_batch_size=2)
    lp = pp(2, "1f1b", 4, gpus=4, tensor_parallel=2, loss_parallel=True)
    fp16 = pp(2, "1f1b", 4, precision="fp16-mixed")
    zb_fsdp = pp(2, "zero-bubble", 8, gpus=4, strategy="zero3")  # its gradients differ from the reference
    zb_tp = pp(2, "zero-bubble", 4, gpus=4, tensor_parallel=2)
    for cell, why in ((cp, "with pipeline_parallel 2"), (hsdp_cp, "hsdp"), (replicas, "2 data-parallel replicas"),
                      (offload, "strategy zero3-offload"), (gpt, "only llama"), (lp, "loss parallelism"),
                      (fp16, "GradScaler"), (zb_fsdp, "gradient norm 0.884"), (zb_tp, "tensor_parallel 2")):
        reason = infeasible_reason(cell, predict(cell), gpu_count=8)
        assert reason is not None and "planned (suite plan), not run" in reason and why in reason, reason
        with pytest.raises(TraceError, match="no code to trace"):
            check_traceable(cell)


def test_runnable_pipelines_and_context_parallel_cells_run_and_are_traced():
    cp = dict(model=DEEP, seq_len=64, micro_batch_size=1, context_parallel=2)
    for cell in (pp(4, "1f1b", 8), pp(2, "interleaved-1f1b", 4), pp(2, "zero-bubble", 4),
                 pp(2, "zero-bubble", 8, gpus=4, strategy="zero2"),
                 pp(2, "gpipe", 8, gpus=4, strategy="zero3"),
                 pp(2, "1f1b", 4, gpus=4, tensor_parallel=2, sequence_parallel=True),
                 make_cell(**cp, gpus=2, global_batch_size=1),
                 make_cell(**cp, gpus=4, strategy="zero3", tensor_parallel=2, sequence_parallel=True,
                           global_batch_size=1)):
        assert infeasible_reason(cell, predict(cell), gpu_count=8) is None
        check_traceable(cell)
    from suite.plan.trace import trace_cell

    cell = pp(4, "1f1b", 8)
    trace = trace_cell(cell)
    assert [s.pipeline_rank for s in trace.stages] == [0, 1, 2, 3] and trace.micro_batches == cell.grad_accum
    assert trace.peak == trace.stages[trace.peak_stage].peak == max(s.peak for s in trace.stages)


@pytest.mark.parametrize("name", ["frontier", "frontier-long-context"])
def test_the_frontier_scenarios_are_planned_here(name):
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "suite", "plan", str(ROOT / "scenarios" / f"{name}.yaml"), "--json",
                          "--no-trace"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert time.perf_counter() - start < 60
    if name == "frontier":
        by = {r["settings"]["pipeline_schedule"]: r for r in rows}
        assert set(by) == {"1f1b", "interleaved-1f1b", "gpipe"}
        assert all(r["settings"]["gpus"] == 512 and len(r["pipeline"]["stage_as_implemented"]) == 8 for r in rows)
        assert by["1f1b"]["fits"] and by["interleaved-1f1b"]["fits"] and not by["gpipe"]["fits"]
        assert by["interleaved-1f1b"]["pipeline"]["bubble_fraction"] < by["1f1b"]["pipeline"]["bubble_fraction"]
    else:
        mem = {(r["settings"]["seq_len"], r["settings"]["context_parallel"]): r["as_implemented"]["total"]
               for r in rows}
        assert mem[(131072, 8)] < mem[(131072, 4)] < mem[(131072, 2)] < mem[(131072, 1)]
        # the same tokens per rank; but c = 2 leaves 4 data-parallel replicas, so global batch 8 is 2 micro-batches,
        # and zero3 accumulates the first one's gradients unsharded in fp32 (4 bytes x 8.03 G parameters)
        assert mem[(131072, 2)] - mem[(65536, 1)] == pytest.approx(4 * 8.03e9, rel=0.05)


def test_max_micro_batch_of_a_pipeline_reads_the_as_implemented_model():
    from suite.plan.search import max_micro_batch

    cell = pp(2, "1f1b", 4, gpus=2, gpu_memory_gb=0.05)

    def no_trace(_cell):
        raise AssertionError("a pipeline cell is not traced")

    answer = max_micro_batch(cell, no_trace, 0.1)
    assert answer.basis == "as-implemented" and answer.error is None
    m = answer.micro_batch_size
    assert m is not None and m > 1 and answer.next_micro_batch == m + 1
    total = predict(cell.model_copy(update={"micro_batch_size": m})).as_implemented.total
    assert answer.peak == int(total) <= answer.limit < answer.next_peak


def test_the_last_stage_keeps_no_micro_batchs_logits_past_its_backward():
    """1f1b's last stage holds one micro-batch in flight, so its peak must not grow with the step's
    micro-batches: PyTorch's schedule keeps every micro-batch's output (here the logits, the stage's largest
    tensor) until the step ends unless told not to (`return_outputs=False`), which the 405B cell's last stage
    paid 26 GiB for."""
    from suite.plan.trace import trace_cell

    wide = {**DEEP, "vocab": 8192}  # logits of one micro-batch: 64 tokens x 8192 x 4 bytes = 2 MiB
    peaks = [trace_cell(make_cell(model=wide, gpus=2, pipeline_parallel=2, pipeline_schedule="1f1b",
                                  micro_batch_size=1, global_batch_size=m, seq_len=64)).stages[1].peak
             for m in (2, 8)]
    assert peaks[1] - peaks[0] < 64 * 8192 * 4  # less than one micro-batch's logits more


@pytest.mark.parametrize("precision", covering(["fp32", "bf16-mixed"], {1}))  # (about 25 s each)
def test_gpipes_last_stage_holds_every_micro_batchs_logits_until_its_backward(precision):
    """gpipe runs every forward before any backward, and PyTorch's stage keeps each forward's output (on the last
    stage the logits, which the loss does not save) until that micro-batch's backward: m - 1 of them beside the
    loss's.  The as-implemented model was 31% under this trace in fp32 without them; the head's 16-bit copy,
    shared by the micro-batches under autocast (bf16, the default tier's case), was counted once per micro-batch."""
    from suite.plan.trace import trace_cell

    wide = {**DEEP, "layers": 4, "vocab": 8192}  # logits of one micro-batch: 64 tokens x 8192 x 4 bytes = 2 MiB
    cell = make_cell(model=wide, gpus=2, pipeline_parallel=2, pipeline_schedule="gpipe", micro_batch_size=1,
                     global_batch_size=8, seq_len=64, precision=precision, activation_checkpointing="full")
    traced = trace_cell(cell).stages[1].peak
    assert predict_memory(cell, 1).total == pytest.approx(traced, rel=0.06), precision


def test_the_first_stage_holds_the_embeddings_new_gradient_at_each_backwards_end():
    """The embedding's backward ends each micro-batch's backward on the first stage, while the other micro-batches
    keep their activations, and makes a whole V x h gradient (replicated under DTensor where the embedding is split)
    before it is added to the sums.  With a vocabulary large beside the activations that moment is the stage's
    peak: the model was 13% under this trace without it."""
    from suite.plan.trace import trace_cell

    wide = {**DEEP, "layers": 4, "hidden": 128, "ffn": 344, "vocab": 4096}  # V x h x 4 bytes = 2 MiB
    cell = make_cell(model=wide, gpus=4, pipeline_parallel=2, pipeline_schedule="gpipe", tensor_parallel=2,
                     sequence_parallel=True, micro_batch_size=1, global_batch_size=4, seq_len=64,
                     activation_checkpointing="full")
    traced = trace_cell(cell).stages[0].peak
    assert predict_memory(cell, 0).total == pytest.approx(traced, rel=0.05)


# the default tier: TP 2 + SP x zero3 and ddp in fp32 (20-40 s each on 2 cores); the others in the `long` tier
STAGE_CASES = [("1f1b", 2, "full", "zero3", "bf16-mixed"), ("gpipe", 1, "full", "zero3", "bf16-mixed"),
               ("interleaved-1f1b", 2, "full", "zero3", "bf16-mixed"), ("1f1b", 1, "none", "zero3", "bf16-mixed"),
               ("1f1b", 1, "full", "zero2", "bf16-mixed"), ("1f1b", 1, "full", "ddp", "fp32")]


@pytest.mark.parametrize("schedule,tp,policy,strategy,precision",
                         covering(STAGE_CASES, {0, 5}))
def test_a_stage_is_planned_as_the_trace_holds_it(schedule, tp, policy, strategy, precision):
    """A pipeline stage without the loss peaks inside a block's backward, and PyTorch's pipeline stage keeps an
    FSDP stage's blocks gathered from a micro-batch's backward to the step's end (reshard_after_backward False)
    while each forward reshards them, so a stage peaks at the larger of two moments (implemented.pipeline_peak):
    a backward's start (one block gathered, every micro-batch in flight) or its end (the whole stage gathered,
    a block's own backward).  On this 8-block llama the as-implemented stages were 4-18% under the traced peaks
    (zero3: the whole model's ends and one block gathered, as without a pipeline; zero2 and ddp: no block's
    backward); now within 5%."""
    from suite.plan.trace import trace_cell

    model = {"family": "llama", "layers": 8, "hidden": 256, "heads": 4, "kv_heads": 2, "ffn": 688, "vocab": 512}
    replicas = 1 if strategy == "ddp" else 2  # DDP cannot have a stage's micro-batches in flight over replicas
    cell = make_cell(model=model, gpus=2 * replicas * tp, strategy=strategy, pipeline_parallel=2,
                     pipeline_schedule=schedule, tensor_parallel=tp, sequence_parallel=tp > 1, micro_batch_size=1,
                     global_batch_size=4 * replicas, seq_len=128, precision=precision,
                     activation_checkpointing=policy)
    for stage in trace_cell(cell).stages:
        planned = predict_memory(cell, stage.pipeline_rank).total
        assert planned == pytest.approx(stage.peak, rel=0.05), (stage.pipeline_rank, planned, stage.peak)
