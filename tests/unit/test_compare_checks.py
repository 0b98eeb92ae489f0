"""compare's checks: one object per metric, and what compare does with them."""

from __future__ import annotations

from report_fixtures import make_cells, make_manifest, make_result, write_run

from suite.compare import checks
from suite.compare.checks import CHECKS, DEFAULT_THRESHOLDS, METRICS, Side, StepTimeCheck
from suite.results.reader import load_runs


def test_every_check_is_listed_once():
    assert sorted(METRICS) == sorted(c.name for c in CHECKS) and len(set(METRICS)) == len(METRICS)
    assert list(DEFAULT_THRESHOLDS) == ["tokens_per_s", "step_time", "peak_memory", "final_loss", "eval_loss",
                                        "accuracy"]


def test_a_check_alone_gives_a_verdict(tmp_path):
    cell = make_cells()[0]
    base = load_runs([write_run(tmp_path / "b", make_manifest(), [make_result(cell, noise=0.01)])])[0]
    cur = load_runs([write_run(tmp_path / "c", make_manifest(), [make_result(cell, seed=1, noise=0.01,
                                                                              step_time_s=0.12)])])[0]
    v = StepTimeCheck(0.05, 0.05).check(Side(base, base.results), Side(cur, cur.results))
    # one run a side: nothing to estimate the noise from, so the threshold alone decides, and says so
    assert v.verdict == "regression" and 0.15 < v.change < 0.25 and v.p_value is None
    assert v.detail.startswith(f"{v.change:.1%} slower, beyond the threshold (flags > 5.0%)")
    assert v.detail.endswith("no noise estimate") and v.noise.startswith("no noise estimate (1 vs 1")
    assert [c.name for c in checks.make_checks(DEFAULT_THRESHOLDS, 0.05)] == [c.name for c in CHECKS]
