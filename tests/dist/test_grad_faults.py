"""Planted gradient faults against the match gate, for every strategy family (2 gloo ranks, one spawned group).

The loss curve cannot see them under Adam; the gradient-norm curve can.  Each strategy runs three cells, told
apart by their seed, each against the DDP cell of the same seed (the 1-rank DDP cell for ddp itself):

    clean        seed 0 (ddp: seed 0)   the match gate passes: losses and gradient norms equal the reference's
    grad2x@2     seed 1 (ddp: seed 3)   gradients doubled after synchronisation: fails at step 2, the norm 2x
    desync@3     seed 2 (ddp: seed 4)   step 3's synchronisation skipped: fails at step 3

Two micro-batches per rank, so a desync step skips the sync of an accumulated gradient.  Also checked: every
strategy's global gradient norm equals the 1-rank reference's (fp32: within GRAD_RTOL), the sharded ones
(zero1's partitions, FSDP2's DTensors, the hand-written ZeRO's flat chunks) included, and both ranks record it.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from suite.gates.loss import match_gate
from suite.scenario.convergence import GRAD_RTOL, MatchGate
from suite.testing.builders import make_cell
from suite.testing.spawn import run_group

pytestmark = pytest.mark.slow

STRATEGIES = ["ddp", "zero1", "zero2", "zero3", "scratch-dp", "scratch-dp-bucketed", "scratch-zero1", "scratch-zero2",
              "scratch-zero3"]
SHAPE = dict(steps=5, micro_batch_size=2, global_batch_size=8, seq_len=16)
KINDS = {"clean": (None, None), "grad2x": ("grad2x", 2), "desync": ("desync", 3)}
SEEDS = {"clean": 0, "grad2x": 1, "desync": 2}
DDP_SEEDS = {"clean": 0, "grad2x": 3, "desync": 4}  # ddp's own faulty cells must not be the others' references


def _cell(strategy: str, kind: str, gpus: int = 2, seeds: dict | None = None):
    seed = (seeds or (DDP_SEEDS if strategy == "ddp" else SEEDS))[kind]
    return make_cell(strategy=strategy, seed=seed, gpus=gpus, **SHAPE)


def _reference(strategy: str, kind: str):
    """The reference cell of a strategy's cell, and the match gate that names it."""
    if strategy == "ddp":
        return _cell("ddp", kind, gpus=1), MatchGate.model_validate({"gpus": 1})
    return _cell("ddp", kind, seeds=SEEDS), MatchGate.model_validate({"strategy": "ddp"})


@pytest.fixture(scope="module")
def records(tmp_path_factory, monkeypatch_module):
    cells = {(s, k): _cell(s, k) for s in STRATEGIES for k in KINDS}
    faults = [f"{cells[s, k].id}:{kind}@{step}" for s in STRATEGIES for k, (kind, step) in KINDS.items() if kind]
    monkeypatch_module.setenv("SUITE_FAULT", ",".join(faults))
    root = tmp_path_factory.mktemp("grad-faults")
    refs = [_reference(s, k)[0] for s in STRATEGIES if s != "ddp" for k in KINDS]
    two = run_group(list({c.id: c for c in [*cells.values(), *refs]}.values()), root / "two")
    one = run_group([_cell("ddp", k, gpus=1) for k in KINDS], root / "one", world=1)
    return {**two, **one}


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _gate(records, strategy: str, kind: str):
    cell = _cell(strategy, kind)
    ref_cell, match = _reference(strategy, kind)
    r0, ref0 = records[cell.id][0], records[ref_cell.id][0]
    assert r0.status == "ok" and ref0.status == "ok", (r0.error, ref0.error)
    ref = SimpleNamespace(status="ok", error=None, losses=ref0.losses, grad_norms=ref0.grad_norms)
    return match_gate(cell, r0.losses, match, ref_cell, ref, r0.grad_norms), records[cell.id], ref0, ref_cell


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_planted_gradient_faults_fail_the_match_gate_at_their_step_and_the_clean_cell_passes(strategy, records):
    clean, ranks, ref, _ = _gate(records, strategy, "clean")
    assert clean.passed, clean.detail
    assert "grad norm: 5 steps within grad_rtol 1e-05" in clean.detail
    assert len(ranks[0].grad_norms) == 5 and ranks[0].grad_norms == pytest.approx(ranks[1].grad_norms, rel=1e-12)
    one = records[_cell("ddp", "clean", gpus=1).id][0]
    assert ranks[0].grad_norms == pytest.approx(one.grad_norms, rel=GRAD_RTOL["fp32"])  # sharded norms are global

    doubled, ranks, ref, ref_cell = _gate(records, strategy, "grad2x")
    assert not doubled.passed and doubled.step == 2, doubled.detail
    assert doubled.detail.startswith(f"step 2: grad norm {ranks[0].grad_norms[2]!r} vs reference {ref_cell.id}")
    assert "grad_rtol 1e-05" in doubled.detail
    assert ranks[0].grad_norms[:2] == pytest.approx(ref.grad_norms[:2], rel=GRAD_RTOL["fp32"])
    assert ranks[0].grad_norms[2] == pytest.approx(2 * ref.grad_norms[2], rel=GRAD_RTOL["fp32"])
    assert ranks[0].losses[:3] == pytest.approx(ref.losses[:3], rel=1e-6)  # the loss curve moves only afterwards

    skipped, ranks, ref, ref_cell = _gate(records, strategy, "desync")
    assert not skipped.passed and skipped.step == 3, skipped.detail
    assert skipped.detail.startswith(f"step 3: grad norm {ranks[0].grad_norms[3]!r} vs reference {ref_cell.id}")
    assert ranks[0].grad_norms[:3] == pytest.approx(ref.grad_norms[:3], rel=GRAD_RTOL["fp32"])
