"""Convergence gates on hand-made curves and real expanded cells: thresholds, match, references first."""

from __future__ import annotations

import math
from types import SimpleNamespace

from suite.gates import loss as g
from suite.results.schema import Axes, CellResult
from suite.scenario import expand, Scenario


def _cells(**over):
    data = dict(name="t", model="gpt-tiny", seq_len=16, strategy=["zero1", "ddp", "zero3"], gpus=2,
                micro_batch_size=2, global_batch_size=[4, 8], steps=4, warmup_steps=1,
                convergence={"min_loss_drop": 0.5, "match": {"strategy": "ddp", "rtol": 1e-4}})
    data.update(over)
    return expand(Scenario.model_validate(data))


def _result(cell, status="ok", losses=(4.0, 3.0, 2.0), error=None) -> CellResult:
    return CellResult(cell_id=cell.id, axes=Axes(**cell.axes()), cell=cell, status=status, error=error, started_at="",
                      finished_at="", launcher="torchrun", prediction={}, losses=list(losses))


def test_finite_and_thresholds():
    assert g.finite_gate([3.0, 2.0]).passed
    bad = g.finite_gate([3.0, float("nan"), 1.0])
    assert not bad.passed and bad.step == 1 and "nan" in bad.detail
    assert not g.finite_gate([]).passed
    assert g.min_loss_drop_gate([4.0, 3.4], 0.5).passed
    drop = g.min_loss_drop_gate([4.0, 3.6], 0.5)
    assert not drop.passed and drop.step == 1 and "0.4" in drop.detail
    assert g.max_final_loss_gate([4.0, 1.0], 1.0).passed
    assert not g.max_final_loss_gate([4.0, 1.5], 1.0).passed


def test_loss_gates_follow_the_convergence_block():
    conv = _cells()[0].convergence
    assert [x.name for x in g.loss_gates([4.0, 3.0], conv)] == ["finite", "min_loss_drop"]
    assert [x.name for x in g.loss_gates([4.0, math.inf], conv)] == ["finite"]  # no threshold on a broken curve
    assert [x.name for x in g.loss_gates([4.0, 3.9], None)] == ["finite"]


def test_curve_gate_reports_first_failing_step_and_values():
    ok = g.curve_gate([4.0, 3.0, 2.0], [4.0, 3.0002, 2.0001], rtol=1e-4, atol=0.0, ref_label="ref")
    assert ok.passed and "3 steps" in ok.detail
    bad = g.curve_gate([4.0, 3.0, 2.5], [4.0, 3.0, 2.0], rtol=1e-4, atol=0.0, ref_label="ref")
    assert not bad.passed and bad.step == 2 and "2.5" in bad.detail and "2.0" in bad.detail
    assert g.curve_gate([4.0, 3.05], [4.0, 3.0], rtol=0.0, atol=0.1, ref_label="ref").passed
    short = g.curve_gate([4.0, 3.0], [4.0, 3.0, 2.0], rtol=1e-4, atol=0.0, ref_label="ref")
    assert not short.passed and short.step == 2 and "2 steps vs 3" in short.detail
    assert not g.curve_gate([4.0, math.nan], [4.0, 3.0], 1e-4, 0.0, "ref").passed


def test_references_run_first_and_are_found_by_the_other_axes():
    cells = _cells()
    ordered = g.order_cells(cells)
    assert [c.strategy for c in ordered[:2]] == ["ddp", "ddp"]
    assert sorted(c.id for c in ordered) == sorted(c.id for c in cells)
    match = cells[0].convergence.match
    for c in cells:
        ref = g.reference_of(c, cells, match)
        if c.strategy == "ddp":
            assert ref is None and g.is_reference(c, match)
        else:
            assert ref.strategy == "ddp" and ref.global_batch_size == c.global_batch_size


def test_match_on_another_axis_and_fsdp_alias():
    cells = _cells(strategy=["ddp", "zero3"], convergence={"match": {"global_batch_size": 8}})
    match = cells[0].convergence.match
    small = next(c for c in cells if c.global_batch_size == 4 and c.strategy == "zero3")
    ref = g.reference_of(small, cells, match)
    assert (ref.global_batch_size, ref.strategy) == (8, "zero3")
    fsdp = _cells(strategy=["ddp", "fsdp"], convergence={"match": {"strategy": "fsdp"}})
    assert all(c.strategy == "zero3" for c in g.order_cells(fsdp)[:2])


def test_match_gate_outcomes():
    cells = _cells()
    match = cells[0].convergence.match
    zero1 = next(c for c in cells if c.strategy == "zero1")
    ddp = g.reference_of(zero1, cells, match)
    same = g.match_gate(zero1, [4.0, 3.0, 2.0], match, ddp, _result(ddp))
    assert same.passed and ddp.id in same.detail
    differs = g.match_gate(zero1, [4.0, 3.1, 2.0], match, ddp, _result(ddp))
    assert not differs.passed and differs.step == 1
    failed_ref = g.match_gate(zero1, [4.0, 3.0, 2.0], match, ddp,
                              _result(ddp, status="failed", losses=(), error="rank 0: boom\ntraceback"))
    assert not failed_ref.passed and "status failed" in failed_ref.detail and "boom" in failed_ref.detail
    missing = g.match_gate(zero1, [4.0], match, ddp, None)
    assert not missing.passed and "no result" in missing.detail
    nobody = g.match_gate(zero1, [4.0], match, None, None)
    assert not nobody.passed and "no cell" in nobody.detail
    assert g.match_gate(ddp, [4.0], match, None, None).passed  # the reference is its own reference
    gated_ref = g.match_gate(zero1, [4.0, 3.0, 2.0], match, ddp, _result(ddp, status="gate-failed"))
    assert gated_ref.passed  # a reference that ran to the end but missed a threshold still has a curve


def test_first_failure():
    gates = [g.finite_gate([1.0]), g.max_final_loss_gate([1.0], 0.5), g.min_loss_drop_gate([1.0, 0.0], 2.0)]
    assert g.first_failure(gates).name == "max_final_loss"
    assert g.first_failure(gates[:1]) is None


def test_repeats_run_in_interleaved_rounds_references_first():
    cells = _cells()  # 6 cells, 2 of them ddp references
    plan = g.run_order(cells, repeats=3)
    assert len(plan) == 18
    rounds = [plan[i * 6:(i + 1) * 6] for i in range(3)]
    for r, section in enumerate(rounds):  # A0 B0 ... then A1 B1 ...: every round holds each cell once
        assert {rep for _, rep in section} == {r}
        assert sorted(c.id for c, _ in section) == sorted(c.id for c in cells)
        assert [c.strategy for c, _ in section[:2]] == ["ddp", "ddp"]
    assert [c.id for c, _ in rounds[0]] == [c.id for c, _ in rounds[1]]  # no shuffle: the same order


def test_shuffle_changes_the_order_within_rounds_reproducibly():
    cells = _cells()
    a, b = g.run_order(cells, 4, shuffle=7), g.run_order(cells, 4, shuffle=7)
    assert [(c.id, r) for c, r in a] == [(c.id, r) for c, r in b]  # the same seed: the same plan (--resume)
    orders = {tuple(c.id for c, r in a if r == k) for k in range(4)}
    assert len(orders) > 1  # rounds differ from one another
    for k in range(4):  # references still first in each round
        assert [c.strategy for c, r in a if r == k][:2] == ["ddp", "ddp"]
    assert [(c.id, r) for c, r in g.run_order(cells, 4, shuffle=8)] != [(c.id, r) for c, r in a]


def test_cells_own_repeats_counts_and_the_override():
    cells = _cells(strategy=["ddp"], global_batch_size=4, repeats=2)
    assert [r for _, r in g.run_order(cells)] == [0, 1]
    assert [r for _, r in g.run_order(cells, repeats=3)] == [0, 1, 2]


def _with_grads(cell, grads, losses=(4.0, 3.0, 2.0)) -> CellResult:
    return _result(cell, losses=losses).model_copy(update={"grad_norms": list(grads)})


def test_match_compares_gradient_norm_curves_naming_the_step_values_and_tolerance():
    cells = _cells()
    match = cells[0].convergence.match
    zero1 = next(c for c in cells if c.strategy == "zero1")
    ddp = g.reference_of(zero1, cells, match)
    ref = _with_grads(ddp, [1.8, 1.5, 1.0])
    same = g.match_gate(zero1, [4.0, 3.0, 2.0], match, ddp, ref, [1.8, 1.5 * (1 + 5e-6), 1.0])
    assert same.passed and "grad norm: 3 steps within grad_rtol 1e-05" in same.detail  # fp32's default
    doubled = g.match_gate(zero1, [4.0, 3.0, 2.0], match, ddp, ref, [1.8, 3.0, 1.0])
    assert not doubled.passed and doubled.step == 1
    assert doubled.detail.startswith(f"step 1: grad norm 3.0 vs reference {ddp.id} (strategy=ddp) 1.5: |diff| 1.5 > "
                                     "grad_atol 0 + grad_rtol 1e-05 x 1.5")
    # the earlier of the two curves' first failures wins; on a tie the gradient norm (it moves first)
    both = g.match_gate(zero1, [4.0, 3.0, 2.5], match, ddp, ref, [1.8, 1.5, 0.0])
    assert both.step == 2 and "grad norm 0.0" in both.detail
    loss_first = g.match_gate(zero1, [4.0, 3.5, 2.0], match, ddp, ref, [1.8, 1.5, 0.0])
    assert loss_first.step == 1 and "loss 3.5" in loss_first.detail
    # an explicit grad_rtol; equal infinities (a step fp16's scaler skipped on both sides) agree, NaN does not
    loose = match.model_copy(update={"grad_rtol": 0.5})
    assert g.match_gate(zero1, [4.0, 3.0, 2.0], loose, ddp, ref, [1.8, 2.0, 1.0]).passed
    inf_ref = _with_grads(ddp, [1.8, math.inf, 1.0])
    assert g.match_gate(zero1, [4.0, 3.0, 2.0], match, ddp, inf_ref, [1.8, math.inf, 1.0]).passed
    assert not g.match_gate(zero1, [4.0, 3.0, 2.0], match, ddp, ref, [1.8, math.nan, 1.0]).passed
    short = g.match_gate(zero1, [4.0, 3.0, 2.0], match, ddp, ref, [1.8, 1.5])
    assert not short.passed and short.step == 2 and "(grad norms)" in short.detail


def test_match_without_gradient_norms_compares_losses_and_says_so():
    cells = _cells()
    match = cells[0].convergence.match
    zero1 = next(c for c in cells if c.strategy == "zero1")
    ddp = g.reference_of(zero1, cells, match)
    old_ref = g.match_gate(zero1, [4.0, 3.0, 2.0], match, ddp, _result(ddp), [1.8, 9.0, 1.0])
    assert old_ref.passed and old_ref.detail.endswith(f"gradient norms not compared: reference {ddp.id} "
                                                      "(strategy=ddp) recorded none (a result from before schema 5)")
    old_cell = g.match_gate(zero1, [4.0, 3.0, 2.0], match, ddp, _with_grads(ddp, [1.8, 1.5, 1.0]))
    assert old_cell.passed and "this cell recorded none" in old_cell.detail
    # an older result (schema 4, no grad_norms key) still reads
    data = _result(ddp).model_dump()
    del data["grad_norms"]
    assert CellResult.model_validate({**data, "schema_version": 4}).grad_norms == []


def test_gradient_tolerance_by_precision():
    from suite.scenario.convergence import GRAD_RTOL, MatchGate

    m = MatchGate.model_validate({"strategy": "ddp"})
    assert m.grad_rtol is None and m.grad_tolerance("fp32") == GRAD_RTOL["fp32"] == 1e-5
    assert m.grad_tolerance("bf16-mixed") == GRAD_RTOL["bf16-mixed"]
    assert m.grad_tolerance("fp32", "bf16-mixed") == GRAD_RTOL["bf16-mixed"]  # the looser of the two
    given = MatchGate.model_validate({"strategy": "ddp", "rtol": 1e-3, "grad_rtol": 1e-3, "grad_atol": 1e-6})
    assert (given.axis, given.grad_tolerance("fp32"), given.grad_atol) == ("strategy", 1e-3, 1e-6)


def test_loss_tolerance_by_precision():
    from suite.scenario.convergence import LOSS_RTOL, MatchGate

    m = MatchGate.model_validate({"strategy": "ddp"})
    assert m.rtol is None and m.loss_tolerance("fp32") == LOSS_RTOL["fp32"] == 1e-5
    assert m.loss_tolerance("fp32", "bf16-mixed") == LOSS_RTOL["bf16-mixed"] == 5e-3  # the looser of the two
    assert MatchGate.model_validate({"strategy": "ddp", "rtol": 1e-4}).loss_tolerance("bf16-mixed") == 1e-4
    fp32_losses, ref_losses = [2.0, 1.5], [2.0, 1.5 * (1 + 5e-5)]
    reference = SimpleNamespace(losses=ref_losses, grad_norms=[])
    assert not g.match_curves(fp32_losses, [], reference, m, "ref", ("fp32", "fp32")).passed  # 5e-5 > 1e-5
    assert g.match_curves(fp32_losses, [], reference, m, "ref", ("bf16-mixed", "bf16-mixed")).passed


def test_a_non_finite_gradient_norm_is_inf_so_skipped_fp16_steps_agree():
    """fp16's GradScaler skips a step whose gradients overflowed; inf - inf in backward makes them NaN, which
    would never equal NaN on the other side: the recorded norm is inf."""
    import torch

    from suite.worker.gradients import global_norm

    assert global_norm([torch.tensor([float("nan"), 1.0])], False, torch.device("cpu")) == float("inf")
    assert global_norm([torch.tensor([3.0, 4.0])], False, torch.device("cpu")) == 5.0
