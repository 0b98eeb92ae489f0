"""The SGD twin of the equivalence checks: with plain SGD the update is linear in the gradient, so a scale or
synchronisation error moves the loss curve itself (under AdamW a doubled gradient moves gpt-tiny's curve by
~1e-7 relative: Adam normalises the scale away; issue 20).

Each strategy family on 2 gloo ranks, fp32, SGD: the loss curve equals the 1-rank reference's (rtol 1e-5, the
fp32 CPU agreement is ~1e-7), and the same cell with its gradients doubled at step 2 (SUITE_FAULT grad2x@2)
leaves the reference's curve from step 3 on, by far more than that tolerance.
"""

from __future__ import annotations

import pytest

from suite.testing.builders import make_cell

from suite.testing.spawn import run_group

pytestmark = pytest.mark.slow

STRATEGIES = ["ddp", "zero1", "zero2", "zero3", "scratch-dp-bucketed", "scratch-zero2", "scratch-zero3"]
SGD = dict(optimizer={"name": "sgd", "lr": 0.5}, steps=6, micro_batch_size=2, global_batch_size=8, seq_len=16)
RTOL = 1e-5


def _cell(strategy: str, seed: int, gpus: int = 2):
    return make_cell(strategy=strategy, seed=seed, gpus=gpus, **SGD)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    clean = {s: _cell(s, 0) for s in STRATEGIES}
    doubled = {s: _cell(s, 1) for s in STRATEGIES}  # seed 1: its own data, its own reference
    mp.setenv("SUITE_FAULT", ",".join(f"{c.id}:grad2x@2" for c in doubled.values()))
    root = tmp_path_factory.mktemp("sgd-twin")
    try:
        two = run_group([*clean.values(), *doubled.values()], root / "two")
        one = run_group([_cell("ddp", 0, gpus=1), _cell("ddp", 1, gpus=1)], root / "one", world=1)
    finally:
        mp.undo()
    refs = {seed: one[_cell("ddp", seed, gpus=1).id][0] for seed in (0, 1)}
    return {s: (two[clean[s].id][0], two[doubled[s].id][0]) for s in STRATEGIES}, refs


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_sgd_curves_equal_one_rank_and_a_doubled_gradient_shows_in_the_loss(strategy, records):
    by_strategy, refs = records
    clean, doubled = by_strategy[strategy]
    assert clean.status == "ok" and doubled.status == "ok", (clean.error, doubled.error)
    assert clean.losses == pytest.approx(refs[0].losses, rel=RTOL), (clean.losses, refs[0].losses)
    assert clean.losses[-1] < clean.losses[0]  # SGD at this rate learns
    ref = refs[1].losses
    assert doubled.losses[:3] == pytest.approx(ref[:3], rel=RTOL)  # the fault acts in step 2's update
    worst = max(abs(a - b) / abs(b) for a, b in zip(doubled.losses[3:], ref[3:]))
    assert worst > 100 * RTOL, (doubled.losses, ref)
