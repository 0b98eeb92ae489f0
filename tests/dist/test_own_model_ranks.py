"""Your own model under suite's strategies, on 2 gloo ranks: the two shipped Hugging Face configs (Llama and
Qwen2 architectures, scenarios/models/) and a Python factory (tests/dist/own_factory.py), each under ddp and
zero3, fp32, against the same model trained on 1 rank.

What must hold (issue 18): the 2-rank loss curves equal the 1-rank reference (rtol 1e-4); the parameter count
suite plans with equals transformers' own (and the module's); the traced peak (suite plan --trace) is within
5% of the measured MemTracker peak, and the traced static bytes equal the counted ones exactly.
What would fail: a loss that is not suite's (transformers shifting the targets once more trains a different
task; the reference would still agree, so the unit tests check the mathematics against transformers' own
loss), blocks not found (FSDP would shard the whole model as one unit: the trace and the bytes move), a tied
head untied by the meta build (the counted parameters grow by vocab x hidden).
"""

from __future__ import annotations

import pytest

from suite.plan import predict
from suite.plan.trace import trace_cell
from suite.testing.builders import make_cell
from suite.testing.spawn import run_group
from suite.worker.main import run_worker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

MODELS = {
    "hf-llama": {"family": "hf", "config": "scenarios/models/llama-tiny-hf.json"},
    "hf-qwen2": {"family": "hf", "config": "scenarios/models/qwen2-tiny.json"},
    "python": {"family": "python", "factory": "tests.dist.own_factory:tiny_lm", "args": {"hidden": 32},
               "inputs": "tokens", "vocab": 256},
}
STRATEGIES = ("ddp", "zero3")
TOLERANCE = 0.05


def _cell(model: str, **overrides):
    return make_cell(**{"model": MODELS[model], "measure_peaks": True, **overrides})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cells = {(m, s): _cell(m, strategy=s) for m in MODELS for s in STRATEGIES}
    records = run_group(list(cells.values()), tmp_path_factory.mktemp("own-model"))
    return {key: (cell, records[cell.id]) for key, cell in cells.items()}


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    out, refs = tmp_path_factory.mktemp("own-refs"), {}
    for m in MODELS:
        record = run_worker(_cell(m, gpus=1, strategy="ddp"), out / m)
        assert record.status == "ok", record.error
        refs[m] = record.losses
    return refs


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_two_ranks_match_one(model, strategy, runs, references):
    cell, records = runs[(model, strategy)]
    assert all(r.status == "ok" for r in records), [r.error for r in records]
    assert len(records[0].losses) == cell.steps
    assert records[0].losses == pytest.approx(references[model], rel=1e-4), (records[0].losses, references[model])
    assert records[0].losses[-1] < records[0].losses[0] - 0.1, "the model learns (6 steps: about -0.2 here)"


# Every 2-rank strategy (hsdp needs 4 ranks: its FSDP2 path is zero3's, traced in the unit tests) on the tied
# Qwen2 config, checkpointing selective or full: the same curve as 1 rank without checkpointing.
EVERY = [(s, ("selective", "full")[i % 2]) for i, s in enumerate(
    ("ddp", "zero1", "zero2", "zero3", "zero3-offload", "scratch-dp", "scratch-dp-overlap", "scratch-dp-bucketed",
     "scratch-zero1", "scratch-zero2", "scratch-zero3"))]


@pytest.fixture(scope="module")
def every(tmp_path_factory):
    cells = {(s, c): _cell("hf-qwen2", strategy=s, activation_checkpointing=c, measure_peaks=False) for s, c in EVERY}
    cells[("zero3", "bf16-mixed")] = _cell("hf-qwen2", strategy="zero3", precision="bf16-mixed", measure_peaks=False)
    records = run_group(list(cells.values()), tmp_path_factory.mktemp("own-every"))
    return {key: records[cell.id] for key, cell in cells.items()}


@pytest.mark.parametrize("strategy,checkpointing", EVERY)
def test_every_strategy_and_checkpointing_trains_an_hf_model_like_one_rank(strategy, checkpointing, every,
                                                                           references):
    records = every[(strategy, checkpointing)]
    assert all(r.status == "ok" for r in records), [r.error for r in records]
    assert records[0].losses == pytest.approx(references["hf-qwen2"], rel=1e-4)


def test_bf16_mixed_trains_an_hf_model(every, references):
    (r0, *_), ref = every[("zero3", "bf16-mixed")], references["hf-qwen2"]
    assert r0.status == "ok", r0.error
    # bf16 compute: near the fp32 curve (measured gap here: well under 1%), not equal to it
    assert r0.losses == pytest.approx(ref, rel=2e-2) and r0.losses != ref


@pytest.mark.parametrize("model", list(MODELS))
def test_parameter_count_is_the_modules(model, runs):
    import torch

    from suite.models.build import build_model

    cell, records = runs[(model, "ddp")]
    with torch.device("meta"):
        built = build_model(cell.model, 0)
    own = built.hf.num_parameters() if model.startswith("hf") else sum(p.numel() for p in built.parameters())
    assert cell.model.num_parameters() == predict(cell).num_parameters == own
    assert records[0].tensor_bytes.parameters == 4 * own  # ddp, fp32: every parameter once, in fp32


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_traced_peak_matches_measured(model, strategy, runs):
    cell, records = runs[(model, strategy)]
    r0 = next(r for r in records if r.rank == 0)
    trace = trace_cell(cell)
    assert trace.counted == r0.tensor_bytes.model_dump()
    ratio = trace.peak / r0.peaks.total
    assert 1 - TOLERANCE <= ratio <= 1 + TOLERANCE, (ratio, trace.peak, r0.peaks.total)
