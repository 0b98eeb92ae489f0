"""The training worker on 2 CPU ranks (gloo, gpt-tiny) against a 1-rank reference: losses, bytes, peaks.

Cost: one spawned group of 2 ranks runs every 2-rank cell (suite/testing/spawn.py), one real torchrun launch
tests the `python -m suite.worker` entry point, and the 1-rank references run in the pytest process.
"""

from __future__ import annotations

import json
import math

import pytest

from suite.plan import predict
from suite.testing.builders import make_cell
from suite.testing.spawn import read_records, run_group, torchrun_cell
from suite.worker.main import run_worker

TINY_VIT = {"family": "vit", "image_size": 16, "patch_size": 4, "layers": 2, "heads": 4, "hidden": 64, "mlp": 128}
NO_SEQ = {"seq_len": None}
LLAMA4 = {"family": "llama", "layers": 4, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 172, "vocab": 256}

# name -> overrides of builders.BASE (gpt-tiny, seq 32, micro-batch 2, global batch 4 = no accumulation at 2 ranks)
A2 = {"global_batch_size": 8}  # 2 micro-batches per rank per step
GROUP = {
    "ddp-none": dict(strategy="ddp", measure_peaks=True),
    "ddp-selective": dict(strategy="ddp", activation_checkpointing="selective", measure_peaks=True),
    "ddp-full": dict(strategy="ddp", activation_checkpointing="full", measure_peaks=True),
    "ddp-a2-selective": dict(strategy="ddp", activation_checkpointing="selective", **A2),
    "zero1-full": dict(strategy="zero1", activation_checkpointing="full"),
    "zero1-a2-none": dict(strategy="zero1", **A2),
    "zero2-none": dict(strategy="zero2", measure_peaks=True),
    "zero2-a2-full": dict(strategy="zero2", activation_checkpointing="full", **A2),
    "zero3-none": dict(strategy="zero3", measure_peaks=True),
    "zero3-a2-selective": dict(strategy="zero3", activation_checkpointing="selective", **A2),
    "llama-zero3-a2-full": dict(model="llama-tiny", strategy="zero3", activation_checkpointing="full", **A2),
    # the other checkpointing policies (techniques/checkpointing.py): the same mathematics as none
    "ddp-op-level": dict(strategy="ddp", activation_checkpointing="op-level", measure_peaks=True),
    "zero3-every-2": dict(strategy="zero3", activation_checkpointing="every-2", measure_peaks=True),
    "llama-zero2-a2-op-level": dict(model="llama-tiny", strategy="zero2", activation_checkpointing="op-level", **A2),
    "llama4-ddp-every-4": dict(model=LLAMA4, strategy="ddp", activation_checkpointing="every-4"),
    "vit-zero2": dict(model=TINY_VIT, strategy="zero2", steps=2, **NO_SEQ),
    "bf16-ddp": dict(precision="bf16-mixed", strategy="ddp", steps=2),
    "bf16-zero3": dict(precision="bf16-mixed", strategy="zero3", steps=2),
    "fp16-zero2": dict(precision="fp16-mixed", strategy="zero2", steps=2),
}
FP32_MATCH = [n for n, o in GROUP.items() if "precision" not in o]


def reference_overrides(overrides: dict) -> dict:
    """The 1-rank cell with the same global batch (so 2x the micro-batches), plain DDP, no checkpointing."""
    keep = {k: v for k, v in overrides.items() if k in ("model", "global_batch_size", "steps", "seq_len", "precision")}
    return {**keep, "gpus": 1, "strategy": "ddp"}


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    cells = {name: make_cell(**o) for name, o in GROUP.items()}
    records = run_group(list(cells.values()), tmp_path_factory.mktemp("group"))
    return {name: (cells[name], records[cell.id]) for name, cell in cells.items()}


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """1-rank losses, in-process (world of one, in-memory store), keyed by the reference overrides."""
    out, refs = tmp_path_factory.mktemp("refs"), {}
    for o in GROUP.values():
        key = json.dumps(reference_overrides(o), sort_keys=True)
        if key not in refs:
            record = run_worker(make_cell(**reference_overrides(o)), out / str(len(refs)))
            assert record.status == "ok", record.error
            refs[key] = record.losses
    return refs


def reference_for(name: str, references) -> list[float]:
    return references[json.dumps(reference_overrides(GROUP[name]), sort_keys=True)]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", FP32_MATCH)
def test_loss_matches_one_rank_reference(name, group, references):
    cell, (r0, r1) = group[name]
    assert r0.status == r1.status == "ok", (r0.error, r1.error)
    assert r0.losses == r1.losses, "the global mean loss must be identical on every rank"
    ref = reference_for(name, references)
    assert len(r0.losses) == len(ref) == cell.steps
    for step, (a, b) in enumerate(zip(r0.losses, ref)):
        assert abs(a - b) <= 1e-5, f"{name} step {step}: loss {a} vs 1-rank reference {b}"
    assert r0.losses[-1] < r0.losses[0] - (0.05 if cell.steps > 2 else 0.0), f"{name}: loss did not fall {r0.losses}"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bf16-ddp", "bf16-zero3", "fp16-zero2"])
def test_mixed_precision_steps_run_close_to_fp32(name, group, references):
    cell, (r0, r1) = group[name]
    assert r0.status == r1.status == "ok", (r0.error, r1.error)
    ref = reference_for(name, references)  # 1 rank, same precision through autocast
    assert all(math.isfinite(x) for x in r0.losses) and len(r0.losses) == 2
    for a, b in zip(r0.losses, ref):
        assert abs(a - b) < 2e-2, f"{name}: {r0.losses} vs 1-rank {ref}"


BYTES = {"ddp": "ddp-none", "zero1": "zero1-full", "zero2": "zero2-none", "zero3": "zero3-none"}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", list(BYTES))
def test_measured_bytes_match_the_planner(strategy, group):
    cell, records = group[BYTES[strategy]]
    predicted = predict(cell).memory_bytes
    for r in records:
        measured = r.tensor_bytes
        for key in ("parameters", "gradients", "optimizer_states"):
            m, p = getattr(measured, key), getattr(predicted, key)
            assert abs(m / p - 1) < 0.03, f"{strategy} rank {r.rank} {key}: measured {m} vs predicted {p:.0f}"
        # zero2 keeps fp32 shards beside the unsharded parameters (see strategies/fsdp.py); nobody else does
        expected_master = predicted.parameters / cell.gpus if strategy == "zero2" else 0
        assert measured.master_weights == pytest.approx(expected_master, rel=0.03)


@pytest.mark.slow
def test_each_zero_stage_halves_one_more_thing(group):
    b = {s: group[name][1][0].tensor_bytes for s, name in BYTES.items()}
    half = lambda x, y: abs(x / y - 0.5) < 0.03  # noqa: E731
    assert half(b["zero1"].optimizer_states, b["ddp"].optimizer_states)
    assert b["zero1"].gradients == b["ddp"].gradients and b["zero1"].parameters == b["ddp"].parameters
    assert half(b["zero2"].gradients, b["ddp"].gradients) and b["zero2"].parameters == b["ddp"].parameters
    assert half(b["zero3"].parameters, b["ddp"].parameters) and half(b["zero3"].gradients, b["ddp"].gradients)


@pytest.mark.slow
def test_checkpointing_lowers_the_activation_peak(group):
    peaks = {mode: group[f"ddp-{mode}"][1][0].peaks for mode in ("none", "selective", "full")}
    acts = {mode: p.activations for mode, p in peaks.items()}
    assert acts["selective"] < 0.9 * acts["none"], acts
    assert acts["full"] < 0.9 * acts["selective"], acts
    assert all(p.total > p.activations > 0 for p in peaks.values())


@pytest.mark.slow
def test_zero3_holds_fewer_unsharded_parameters_than_zero2(group):
    """zero2 all-gathers every block and keeps it to backward: all parameters are unsharded at once; zero3
    holds the root's (embeddings, final norm) plus one block's at a time (62% of gpt-tiny, where the
    embeddings are a quarter of the model)."""
    cell, (r0, _) = group["zero2-none"]
    z2, z3 = r0.peaks, group["zero3-none"][1][0].peaks
    assert z2.unsharded_parameters == 4 * cell.model.num_parameters()
    assert 0 < z3.unsharded_parameters < 0.7 * z2.unsharded_parameters, (z2, z3)


@pytest.mark.slow
def test_records_carry_timings_and_counts(group):
    cell, (r0, r1) = group["ddp-none"]
    for r in (r0, r1):
        assert (r.world_size, r.device, r.cell_id) == (2, "cpu", cell.id)
        assert len(r.step_times_s) == cell.steps and all(t > 0 for t in r.step_times_s)
        assert r.warmup_steps == cell.warmup_steps
        assert r.tokens_per_step == cell.global_batch_size * cell.seq_len
        assert r.setup_s.total >= r.setup_s.process_group + r.setup_s.model_build + r.setup_s.strategy
        assert r.train_s >= sum(r.step_times_s) and r.cuda_memory is None
    vit_cell, (v0, _) = group["vit-zero2"]
    assert v0.tokens_per_step == v0.samples_per_step == vit_cell.global_batch_size


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_torchrun_entry_point(tmp_path, references):
    """`torchrun -m suite.worker CELL_JSON OUT_DIR`: exit 0, both rank files, rank 0's event log; a fault
    aimed at another cell is ignored."""
    cell = make_cell(strategy="zero2", activation_checkpointing="selective", **A2)
    code, output = torchrun_cell(cell, tmp_path, env={"SUITE_FAULT": "someothercell:raise@0"})
    assert code == 0, output[-3000:]
    r0, r1 = read_records(tmp_path, 2)
    assert r0.status == r1.status == "ok" and r0.losses == r1.losses
    ref = references[json.dumps(reference_overrides(A2), sort_keys=True)]
    assert max(abs(a - b) for a, b in zip(r0.losses, ref)) <= 1e-5
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["setup_done"] + ["step"] * cell.steps + ["done"]
    assert [e["step"] for e in events[1:-1]] == list(range(cell.steps))
    assert [e["loss"] for e in events[1:-1]] == r0.losses and events[-1]["status"] == "ok"
    assert all(set(e) >= {"event", "t"} for e in events)
