"""The shipped CPU twin of frontier.yaml, run by `suite run`: 2 pipeline stages x 2 zero3 replicas on 4 gloo
ranks under gpipe, 1f1b and interleaved-1f1b, each loss and gradient-norm curve equal to zero3's without stages
(the scenario's match gate, fp32), the bubble measured beside the planner's and each stage's model states
stored and reported."""

from __future__ import annotations

import pytest

from tests.e2e.run_helpers import env, run_cli, run_shipped

# `long` (92-115 s on 2 cores): tests/dist/test_pipeline_parallel.py runs every schedule against the one-rank
# reference, with and without FSDP, in CI's tier; this is the shipped CPU twin of frontier.yaml through `suite run`
pytestmark = [pytest.mark.slow, pytest.mark.long]


def test_pipelines_match_zero3_and_report_their_bubble(tmp_path):
    results, stored = run_shipped("frontier-cpu", tmp_path)
    got = {r["axes"]["pipeline_schedule"]: r for r in stored.values()}
    assert set(got) == {None, "gpipe", "1f1b", "interleaved-1f1b"}
    assert got[None]["pipeline"] is None
    for schedule in ("gpipe", "1f1b", "interleaved-1f1b"):
        r = got[schedule]
        match = next(g for g in r["gates"] if g["name"] == "match")
        assert r["status"] == "ok" and match["passed"], (schedule, r["error"], match)
        assert r["losses"] == pytest.approx(got[None]["losses"], rel=1e-4)
        pipe = r["pipeline"]
        assert 0 < pipe["bubble"] < 1 and pipe["bubble_predicted"] == r["prediction"]["pipeline"]["bubble_fraction"]
        assert len(pipe["stage_states"]) == 2 and all(b > 0 for b in pipe["stage_states"])
    report = run_cli(["report", str(results), "--format", "md", "--out", str(tmp_path / "report")], tmp_path, env(),
                     timeout=300)
    assert report.returncode == 0, report.stderr
    text = "\n".join(p.read_text() for p in (tmp_path / "report").glob("*.md"))
    assert "bubble measured (%)" in text and "bubble predicted (%)" in text and "model states per stage" in text
    assert "Step time and bubble by sched" in text  # the pipeline pivot
