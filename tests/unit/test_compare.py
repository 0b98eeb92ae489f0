"""`suite compare` on stored result sets with planted changes: each verdict, each exit code, the JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from report_fixtures import make_cells, make_manifest, make_result, write_run

from suite.report.compare import compare, parse_threshold, CompareUsageError
from suite.results.reader import load_runs
from suite.results.schema import Gate

PASS = [Gate(name="match", passed=True, detail="within rtol")]


@pytest.fixture
def cells():
    return make_cells(strategy=["ddp", "zero1", "zero2", "zero3"], convergence={"match": {"strategy": "ddp"}})


def store(tmp_path, name, results, **manifest):
    return write_run(tmp_path / name, make_manifest(**manifest), results)


def baseline(tmp_path, cells, noise=0.01):
    return store(tmp_path, "base", [make_result(c, noise=noise, gates=PASS) for c in cells])


def verdicts(result, cell_id):
    return {f.metric: f.verdict for f in result.findings if f.cell_id == cell_id}


def test_15_percent_throughput_drop_with_low_noise_is_a_regression(cli, tmp_path, cells):
    base = baseline(tmp_path, cells)
    cur = store(tmp_path, "cur", [make_result(c, seed=1, noise=0.01, gates=PASS,
                                              step_time_s=0.115 if c.strategy == "zero1" else 0.1) for c in cells])
    res = compare(load_runs([base]), load_runs([cur]))
    slow = next(c.id for c in cells if c.strategy == "zero1")
    assert verdicts(res, slow) == {"status": "unchanged", "step_time": "regression", "tokens_per_s": "regression",
                                   "peak_memory": "unchanged", "convergence": "unchanged", "final_loss": "unchanged"}
    tps = next(f for f in res.findings if f.cell_id == slow and f.metric == "tokens_per_s")
    assert -0.16 < tps.change < -0.11 and tps.p_value < 1e-6
    assert {f.cell_id for f in res.regressions} == {slow}
    result = cli("compare", base, cur)
    assert result.exit_code == 1 and "REGRESSION" in result.stdout


def test_3_percent_drop_inside_the_noise_is_not_a_regression(cli, tmp_path, cells):
    # 2% step-time noise over 25 steps: the 3% slowdown is real (the U test may well see it) but below the 5%
    # threshold, so it is not a regression — significance alone does not fail a build.
    base = baseline(tmp_path, cells, noise=0.02)
    cur = store(tmp_path, "cur", [make_result(c, seed=1, noise=0.02, step_time_s=0.103, gates=PASS) for c in cells])
    res = compare(load_runs([base]), load_runs([cur]))
    assert res.regressions == []
    steps = [f for f in res.findings if f.metric == "step_time"]
    assert all(0.0 < f.change < 0.05 and f.detail == "within 5%" for f in steps)
    assert cli("compare", base, cur).exit_code == 0


def test_big_change_without_statistical_evidence_is_not_a_regression(tmp_path, cells):
    # medians 110 ms -> 120 ms (+9%), but the samples interleave: U test p ~ 0.3, so no regression
    def timed(c, times, seed):
        return make_result(c, seed=seed, gates=PASS).model_copy(update={"step_times_s": times})

    base = store(tmp_path, "base", [timed(c, [0.10, 0.13, 0.09, 0.12], 0) for c in cells])
    cur = store(tmp_path, "cur", [timed(c, [0.115, 0.095, 0.14, 0.125], 1) for c in cells])
    res = compare(load_runs([base]), load_runs([cur]))
    for f in (f for f in res.findings if f.metric == "step_time"):
        assert f.change == pytest.approx(0.12 / 0.11 - 1)
        assert f.verdict == "unchanged" and f.p_value > 0.2 and "not significant" in f.detail
    # the same change with the samples separated is a regression
    base2 = store(tmp_path, "base2", [timed(c, [0.10, 0.105, 0.11, 0.108], 0) for c in cells])
    cur2 = store(tmp_path, "cur2", [timed(c, [0.12, 0.125, 0.118, 0.122], 1) for c in cells])
    res = compare(load_runs([base2]), load_runs([cur2]))
    assert {f.metric for f in res.regressions} == {"step_time"}  # tokens/s stays the stored (unchanged) value


def test_improvement_is_reported_and_passes(cli, tmp_path, cells):
    base = baseline(tmp_path, cells)
    cur = store(tmp_path, "cur", [make_result(c, seed=1, step_time_s=0.08, gates=PASS) for c in cells])
    res = compare(load_runs([base]), load_runs([cur]))
    assert {f.metric for f in res.improvements} == {"step_time", "tokens_per_s"} and len(res.improvements) == 8
    result = cli("compare", base, cur, "--format", "md")
    assert result.exit_code == 0 and "| improvement |" in result.stdout


def test_memory_increase_is_a_regression(cli, tmp_path, cells):
    base = baseline(tmp_path, cells)
    cur = store(tmp_path, "cur", [make_result(c, seed=1, gates=PASS, memory_scale=1.05 * (1.03 if c.strategy == "zero3"
                                                                                           else 1.0)) for c in cells])
    res = compare(load_runs([base]), load_runs([cur]))
    [reg] = res.regressions
    assert reg.metric == "peak_memory" and reg.change == pytest.approx(0.03)
    assert cli("compare", base, cur).exit_code == 1
    # a looser tolerance lets it through
    assert cli("compare", base, cur, "--threshold", "peak_memory=5%").exit_code == 0


def test_newly_diverged_cell_is_a_regression_and_its_metrics_are_skipped(cli, tmp_path, cells):
    base = baseline(tmp_path, cells)
    cur = store(tmp_path, "cur", [make_result(c, seed=1, gates=PASS, status="diverged" if c.strategy == "zero2"
                                              else "ok") for c in cells])
    res = compare(load_runs([base]), load_runs([cur]))
    z2 = next(c.id for c in cells if c.strategy == "zero2")
    assert verdicts(res, z2) == {"status": "regression", **{m: "skipped" for m in
                                 ("tokens_per_s", "step_time", "peak_memory", "convergence", "final_loss")}}
    assert [f.cell_id for f in res.regressions] == [z2]
    assert cli("compare", base, cur).exit_code == 1


def test_convergence_gate_now_failing_and_final_loss_moved(tmp_path, cells):
    base = baseline(tmp_path, cells)
    fail = [Gate(name="match", passed=False, detail="step 12 differs", step=12)]
    cur = store(tmp_path, "cur", [
        make_result(cells[0], seed=1, gates=PASS, loss_end=2.6),          # final loss moved +4%
        make_result(cells[1], seed=1, gates=fail, status="gate-failed"),   # gate now failing (still measured)
        *(make_result(c, seed=1, gates=PASS) for c in cells[2:])])
    res = compare(load_runs([base]), load_runs([cur]))
    assert verdicts(res, cells[0].id)["final_loss"] == "regression"
    v1 = verdicts(res, cells[1].id)
    assert v1["convergence"] == "regression" and v1["status"] == "unchanged" and v1["step_time"] == "unchanged"
    assert {(f.cell_id, f.metric) for f in res.regressions} == {(cells[0].id, "final_loss"),
                                                                (cells[1].id, "convergence")}


def test_cells_on_one_side_only_are_listed_not_failed(cli, tmp_path, cells):
    base = baseline(tmp_path, cells)
    cur = store(tmp_path, "cur", [make_result(c, seed=1, gates=PASS) for c in cells[:3]])
    res = compare(load_runs([base]), load_runs([cur]))
    assert [cid for cid, _ in res.only_baseline] == [cells[3].id] and res.only_current == []
    assert res.matched == 3 and res.regressions == []
    result = cli("compare", base, cur, "--format", "md")
    assert result.exit_code == 0
    assert "### Only in baseline (1)" in result.stdout and cells[3].id in result.stdout


def test_environment_differences_warn_and_strict_refuses(cli, tmp_path, cells):
    base = baseline(tmp_path, cells)
    cur = store(tmp_path, "cur", [make_result(c, seed=1, gates=PASS) for c in cells], torch="2.15.0",
                container_image_digest="sha256:feed")
    res = compare(load_runs([base]), load_runs([cur]))
    assert {(d.field, d.baseline, d.current) for d in res.env} == {
        ("torch", "2.14.1", "2.15.0"), ("image_digest", "None", "sha256:feed")}
    result = cli("compare", base, cur)
    assert result.exit_code == 0 and "environments differ" in result.stdout and "torch (2.14.1 -> 2.15.0)" in result.stderr
    assert cli("compare", base, cur, "--strict").exit_code == 2
    assert cli("compare", base, cur, "--strict", "--ignore-env", "image_digest").exit_code == 2  # torch still differs
    assert cli("compare", base, cur, "--strict", "--ignore-env", "image_digest", "--ignore-env", "torch").exit_code == 0
    assert cli("compare", base, cur, "--ignore-env", "colour").exit_code == 2


def test_latest_run_wins_when_a_side_holds_a_cell_twice(tmp_path, cells):
    base = baseline(tmp_path, cells)
    write_run(tmp_path / "cur", make_manifest(run_no=1), [make_result(c, step_time_s=0.2, gates=PASS) for c in cells])
    write_run(tmp_path / "cur", make_manifest(run_no=2), [make_result(c, seed=3, gates=PASS) for c in cells])
    res = compare(load_runs([base]), load_runs([tmp_path / "cur"]))
    assert res.regressions == [] and res.matched == 4


def test_usage_errors_exit_2(cli, tmp_path, cells):
    base = baseline(tmp_path, cells)
    other = store(tmp_path, "other", [make_result(c) for c in make_cells(seq_len=128)])
    assert cli("compare", base, other).exit_code == 2                      # no cell in common
    assert cli("compare", base, tmp_path / "nope").exit_code == 2
    assert cli("compare", base, base, "--threshold", "speed=5%").exit_code == 2
    assert cli("compare", base, base, "--threshold", "tokens_per_s").exit_code == 2
    assert cli("compare", base, base, "--alpha", "1.5").exit_code == 2
    assert cli("compare", base, base, "--format", "html").exit_code == 2
    assert cli("compare", base, base).exit_code == 0


def test_parse_threshold():
    assert parse_threshold("tokens_per_s=5%") == ("tokens_per_s", 0.05)
    assert parse_threshold("step_time=0.1") == ("step_time", 0.1)
    with pytest.raises(CompareUsageError, match="unknown metric"):
        parse_threshold("latency=5%")


def test_junit_xml_one_testcase_per_cell_and_metric(cli, tmp_path, cells):
    base = baseline(tmp_path, cells)
    cur = store(tmp_path, "cur", [
        make_result(cells[0], seed=1, gates=PASS, step_time_s=0.12),
        make_result(cells[1], status="timeout"),
        make_result(cells[2], seed=1, gates=PASS)])
    out = tmp_path / "junit.xml"
    result = cli("compare", base, cur, "--format", "junit", "--out", out)
    assert result.exit_code == 1
    root = ET.parse(out).getroot()
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == 3 * 6 + 1  # three matched cells x six metrics, one cell only in the baseline
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert failed == {f"{cells[0].id}.step_time", f"{cells[0].id}.tokens_per_s", f"{cells[1].id}.status"}
    assert suite.get("failures") == "3" and root.get("tests") == str(len(cases))
    presence = next(c for c in cases if c.get("name") == f"{cells[3].id}.presence")
    assert presence.find("skipped").get("message") == "only in baseline"
    skipped = {c.get("name") for c in cases if c.find("skipped") is not None}
    assert f"{cells[1].id}.peak_memory" in skipped and int(suite.get("skipped")) == len(skipped)
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["threshold.tokens_per_s"] == "0.05" and props["alpha"] == "0.05"
