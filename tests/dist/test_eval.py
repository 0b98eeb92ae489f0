"""Held-out evaluation (scenario `eval:`) on 2 CPU ranks against a 1-rank reference, for every strategy.

Each strategy evaluates the model as it holds it (sharded ones gather for forward) on its rank's slice of the
held-out batches; the reduced eval loss (and accuracy, for vit) must equal a 1-rank evaluation of the same
training (fp32, rtol 1e-4), on both ranks.  Evaluation must not change training (the loss curve is the one
without `eval:`, and the cell id is the same) and must stay out of the timed steps.
One spawned group runs every 2-rank cell (suite/testing/spawn.py); the references run in the pytest process.
"""

from __future__ import annotations

import json

import pytest

from suite.testing.builders import make_cell

from suite.testing.spawn import run_group
from suite.worker.main import run_worker

TINY_VIT = {"family": "vit", "image_size": 16, "patch_size": 4, "layers": 2, "heads": 4, "hidden": 64, "mlp": 128}
EVAL = {"every_steps": 3, "batches": 2}  # after steps 3 and 6 (the end)
STRATEGIES = ["ddp", "zero1", "zero2", "zero3", "scratch-dp", "scratch-dp-overlap", "scratch-dp-bucketed",
              "scratch-zero1", "scratch-zero2", "scratch-zero3"]
GROUP = {**{s: dict(strategy=s) for s in STRATEGIES},
         "zero3-a2-full": dict(strategy="zero3", global_batch_size=8, activation_checkpointing="full"),
         "llama-zero2": dict(model="llama-tiny", strategy="zero2"),
         "vit-zero3": dict(model=TINY_VIT, strategy="zero3", seq_len=None),
         "vit-scratch-zero3": dict(model=TINY_VIT, strategy="scratch-zero3", seq_len=None)}
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def reference(overrides: dict) -> dict:
    keep = {k: v for k, v in overrides.items() if k in ("model", "global_batch_size", "seq_len")}
    return {**keep, "gpus": 1, "strategy": "ddp"}


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    cells = {name: make_cell(eval=EVAL, **o) for name, o in GROUP.items()}
    records = run_group(list(cells.values()), tmp_path_factory.mktemp("eval-group"))
    return {name: (cells[name], records[cell.id]) for name, cell in cells.items()}


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """1-rank records with and without eval, in-process, keyed by the reference overrides."""
    out, refs = tmp_path_factory.mktemp("eval-refs"), {}
    for o in GROUP.values():
        key = json.dumps(reference(o), sort_keys=True)
        if key not in refs:
            with_eval = run_worker(make_cell(eval=EVAL, **reference(o)), out / f"{len(refs)}-eval")
            without = run_worker(make_cell(**reference(o)), out / f"{len(refs)}-plain")
            assert with_eval.status == without.status == "ok", (with_eval.error, without.error)
            refs[key] = (with_eval, without)
    return refs


@pytest.mark.parametrize("name", list(GROUP))
def test_eval_matches_the_one_rank_reference(name, group, references):
    cell, (r0, r1) = group[name]
    assert r0.status == r1.status == "ok", (r0.error, r1.error)
    ref, _ = references[json.dumps(reference(GROUP[name]), sort_keys=True)]
    assert [p.step for p in r0.eval] == [p.step for p in ref.eval] == [3, 6]
    same = [[(p.step, p.loss, p.accuracy, p.samples) for p in r.eval] for r in (r0, r1)]
    assert same[0] == same[1], "reduced over ranks: every rank must hold the same evaluation"
    for a, b in zip(r0.eval, ref.eval):
        assert a.loss == pytest.approx(b.loss, rel=1e-4), f"{name} after step {a.step}: {a.loss} vs {b.loss}"
        assert a.samples == b.samples == 2 * cell.global_batch_size
        if cell.model.family == "vit":
            assert a.accuracy is not None and abs(a.accuracy - b.accuracy) <= 1 / a.samples
            assert a.perplexity is None
        else:
            assert a.accuracy is None and a.perplexity == pytest.approx(b.perplexity, rel=1e-3)


@pytest.mark.parametrize("name", ["ddp", "zero3", "scratch-zero3", "vit-zero3"])
def test_eval_changes_neither_training_nor_the_timed_steps(name, group, references):
    cell, (r0, _) = group[name]
    ref, plain = references[json.dumps(reference(GROUP[name]), sort_keys=True)]
    assert ref.losses == plain.losses, "evaluating changed the 1-rank training curve"
    assert make_cell(**reference(GROUP[name])).id == make_cell(eval=EVAL, **reference(GROUP[name])).id
    for a, b in zip(r0.losses, plain.losses):
        assert abs(a - b) <= 1e-5
    assert len(r0.step_times_s) == cell.steps  # one timed step per optimizer step: the evals are not among them
    assert all(p.seconds > 0 for p in r0.eval)


def test_held_out_loss_falls_as_training_goes_on(group):
    _, (r0, _) = group["ddp"]
    assert r0.eval[-1].loss < r0.eval[0].loss
