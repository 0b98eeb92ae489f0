"""Seed bands (convergence.band, runner/band.py): the scenario's checks name the field and the numbers; the
band is mean +- (k sd + atol) of the reference seeds at each evaluation; a curve outside fails at its step."""

from __future__ import annotations

import statistics

import pytest

from suite.gates.band import band_gate, band_points, band_references
from suite.gates.loss import run_order
from suite.results.schema import Axes, CellResult, EvalPoint
from suite.scenario import expand, Scenario, ScenarioError

BASE = {"name": "b", "model": "gpt-tiny", "seq_len": 16, "strategy": ["ddp", "zero3"], "gpus": 2,
        "micro_batch_size": 1, "global_batch_size": 2, "steps": 30, "warmup_steps": 1,
        "eval": {"every_steps": 10}, "seed": [0, 1, 2], "convergence": {"band": {"reference": {"strategy": "ddp"}}}}


def cells(**over):
    return expand(Scenario.model_validate({**BASE, **over}))


def problems(**over) -> str:
    with pytest.raises(ScenarioError) as err:
        cells(**over)
    return str(err.value)


def curve(*losses, start=10):
    return [EvalPoint(step=start * (i + 1), loss=x, samples=8, seconds=0.1, train_s=1.0, wall_s=1.1)
            for i, x in enumerate(losses)]


def result(cell, evals, status="ok"):
    return CellResult(cell_id=cell.id, axes=Axes(**cell.axes()), cell=cell, status=status, started_at="", finished_at="",
                      launcher="torchrun", prediction={}, eval=evals)


def test_the_scenario_checks_name_the_field_and_the_numbers():
    assert "seed needs at least 2 values (3 or more give a steadier band), got seed: 0" in problems(seed=0)
    assert "band reference strategy: 'zero1' is not among the scenario's strategy values ['ddp', 'zero3']" in \
        problems(convergence={"band": {"reference": {"strategy": "zero1"}}})
    assert "has 1 reference seed(s) in the matrix, the band needs 2 or more (dropped by exclude?)" in \
        problems(exclude=[{"strategy": "ddp", "seed": 1}, {"strategy": "ddp", "seed": 2}])
    for bad, want in [({"reference": {"seed": 0}}, "band reference axis cannot be seed"),
                      ({"reference": {"lr": 1}}, "band reference axis 'lr' is not an axis"),
                      ({"k": 3}, "band needs reference: {<axis>: <value>}"),
                      ({"reference": {"strategy": "ddp", "gpus": 2}}, "band reference must be one axis and its value")]:
        with pytest.raises(ValueError, match=want.replace("{", r"\{").replace("}", r"\}")):
            Scenario.model_validate({**BASE, "convergence": {"band": bad}})
    with pytest.raises(ValueError, match="band judge held-out evaluations: add an eval: block"):
        Scenario.model_validate({k: v for k, v in BASE.items() if k != "eval"})
    assert "band: accuracy is a classifier's metric and needs an image model" in \
        problems(convergence={"band": {"reference": {"strategy": "ddp"}, "metric": "accuracy"}})


def test_references_are_every_seed_of_the_reference_value_and_run_first():
    cs = cells()
    zero3 = next(c for c in cs if c.strategy == "zero3" and c.seed == 1)
    refs = band_references(zero3, cs, zero3.convergence.band)
    assert [(c.strategy, c.seed) for c in refs] == [("ddp", 0), ("ddp", 1), ("ddp", 2)]
    order = [(c.strategy, c.seed) for c, _ in run_order(cs)]
    assert order[:3] == [("ddp", 0), ("ddp", 1), ("ddp", 2)] and len(order) == 6
    assert len({c.id for c in cs}) == 6  # the seed is in the id


def test_band_is_mean_plus_minus_k_sd_plus_atol_at_each_step():
    band = cells()[0].convergence.band.model_copy(update={"k": 2.0, "atol": 0.01})
    pts = band_points([curve(2.0, 1.0), curve(2.2, 1.1), curve(2.4, 1.2, )[:1]], band)
    sd = statistics.stdev([2.0, 2.2, 2.4])
    assert pts[10].mean == pytest.approx(2.2) and pts[10].sd == pytest.approx(sd) and pts[10].n == 3
    assert (pts[10].lo, pts[10].hi) == (pytest.approx(2.2 - 2 * sd - 0.01), pytest.approx(2.2 + 2 * sd + 0.01))
    assert pts[20].n == 2 and pts[20].mean == pytest.approx(1.05)


def test_a_curve_outside_fails_at_its_step_and_one_inside_passes():
    cs = cells()
    zero3 = next(c for c in cs if c.strategy == "zero3" and c.seed == 0)
    band = zero3.convergence.band
    refs = band_references(zero3, cs, band)
    ref_results = [(c, result(c, curve(2.0 + 0.1 * i, 1.0 + 0.05 * i))) for i, c in enumerate(refs)]
    inside = band_gate(zero3, curve(2.05, 1.02), band, ref_results)
    assert inside.passed and inside.detail.startswith("2 evaluations inside the band of strategy=ddp over seeds 0, 1, 2")
    outside = band_gate(zero3, curve(2.1, 1.6), band, ref_results)
    assert not outside.passed and outside.step == 20
    assert outside.detail.startswith("step 20: eval_loss 1.6 outside the band of strategy=ddp over seeds 0, 1, 2 "
                                     "(mean +- 3 sd): [0.9, 1.2] (mean 1.05, sd 0.05)")
    assert band_gate(refs[1], curve(9.0), band, ref_results).passed  # a reference cell is the band
    failed = [(c, result(c, [], status="failed") if c.seed == 2 else r) for c, r in ref_results]
    gate = band_gate(zero3, curve(2.05, 1.02), band, failed)
    assert not gate.passed and "seed 2) did not finish ok (status failed)" in gate.detail
    gate = band_gate(zero3, curve(2.05, start=7), band, ref_results)
    assert not gate.passed and "no evaluation of this cell has a band point" in gate.detail


def test_the_report_draws_one_band_per_group_and_none_without_a_band():
    pytest.importorskip("matplotlib")
    from suite.report.bands import band_plots
    from suite.testing.builders import make_row

    cs = cells()
    spec = cs[0].convergence.band.model_dump(mode="json")
    rows = []
    for i, c in enumerate(cs):
        r = result(c, curve(2.0 + 0.05 * (i % 3), 1.5 + 0.02 * (i % 3)))
        assert r.cell.convergence.band.model_dump(mode="json") == spec
        rows.append(make_row(results=[r]))
    (plot,) = band_plots(rows, ["strategy", "seed"])
    assert plot.name == "band_1" and plot.title == "Held-out curves against the seed band of strategy=ddp"
    assert plot.png.startswith(b"\x89PNG")
    plain = [make_row(results=[r.model_copy(update={"cell": r.cell.model_copy(update={"convergence": None})})])
             for r in (row.results[0] for row in rows)]
    assert band_plots(plain, ["strategy", "seed"]) == []
