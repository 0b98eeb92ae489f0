"""compare's held-out checks: eval_loss (either way, like final_loss) and accuracy (a drop past the tolerance),
only for cells that were evaluated; and the report's held-out columns, only when something was."""

from __future__ import annotations

from pathlib import Path

from report_fixtures import make_cells, make_manifest, make_result

from suite.compare.comparison import compare
from suite.report.tables import cell_rows, display_columns
from suite.results.reader import Run
from suite.results.schema import EvalPoint, TimeToTarget

CELLS = make_cells(strategy=["ddp", "zero3"])


def run(n: int, accuracy: float | None, loss: float = 1.0, evaluated: bool = True) -> Run:
    results = []
    for c in CELLS:
        r = make_result(c, seed=n)
        if evaluated:
            point = EvalPoint(step=r.cell.steps, loss=loss, accuracy=accuracy, samples=64, seconds=0.2)
            r = r.model_copy(update={"eval": [point], "time_to_target": TimeToTarget(
                metric="accuracy", value=0.5, reached=True, step=10, train_s=1.5, wall_s=2.0, best=0.6)})
        results.append(r)
    return Run(path=Path(f"r{n}"), manifest=make_manifest("eval", n), results=results)


def verdicts(result, metric):
    return {f.cell_id: (f.verdict, f.detail) for f in result.findings if f.metric == metric}


def test_an_accuracy_drop_past_the_tolerance_is_a_regression():
    res = compare([run(1, 0.80)], [run(2, 0.75)])
    assert all(v == "regression" for v, _ in verdicts(res, "accuracy").values())
    assert "-5.00 points (tolerance 1)" in next(iter(verdicts(res, "accuracy").values()))[1]
    same = compare([run(1, 0.80)], [run(2, 0.805)])
    assert all(v == "unchanged" for v, _ in verdicts(same, "accuracy").values())


def test_a_moved_held_out_loss_is_a_regression_either_way():
    for loss in (1.03, 0.97):
        res = compare([run(1, 0.8, loss=1.0)], [run(2, 0.8, loss=loss)])
        assert {v for v, _ in verdicts(res, "eval_loss").values()} == {"regression"}


def test_cells_never_evaluated_get_no_held_out_findings():
    res = compare([run(1, None, evaluated=False)], [run(2, None, evaluated=False)])
    assert not verdicts(res, "eval_loss") and not verdicts(res, "accuracy")
    one_side = compare([run(1, 0.8, evaluated=False)], [run(2, 0.8)])
    assert {v for v, _ in verdicts(one_side, "accuracy").values()} == {"inconclusive"}


def test_report_shows_held_out_columns_only_when_evaluated():
    rows = cell_rows([run(1, 0.8)])
    keys = [c.key for c in display_columns(rows)]
    assert {"eval_loss", "accuracy_pct", "time_to_target"} <= set(keys)
    assert rows[0].accuracy_pct == 80.0 and rows[0].time_to_target == "step 10: 1.5 s train, 2 s wall"
    plain = [c.key for c in display_columns(cell_rows([run(1, None, evaluated=False)]))]
    assert not {"eval_loss", "accuracy_pct", "time_to_target"} & set(plain)
