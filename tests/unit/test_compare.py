"""`suite compare` on stored result sets with planted changes: each verdict, each exit code, the JUnit XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from report_fixtures import make_cells, make_manifest, make_result, write_run

from suite.compare.comparison import compare, parse_threshold, CompareUsageError
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


def repeated(c, n=3, seed=0, step_times=None, **kw):
    """n repeats of cell c (each repeat its own seeded run; step_times: one step time per repeat)."""
    return [make_result(c, repeat=k, seed=seed * 100 + k, gates=PASS,
                        **({"step_time_s": step_times[k]} if step_times else {}), **kw) for k in range(n)]


def test_15_percent_throughput_drop_with_low_noise_is_a_regression(cli, tmp_path, cells):
    base = store(tmp_path, "base", [r for c in cells for r in repeated(c, noise=0.01)])
    cur = store(tmp_path, "cur", [r for c in cells for r in repeated(
        c, seed=1, noise=0.01, step_time_s=0.115 if c.strategy == "zero1" else 0.1)])
    res = compare(load_runs([base]), load_runs([cur]))
    slow = next(c.id for c in cells if c.strategy == "zero1")
    assert verdicts(res, slow) == {"status": "unchanged", "step_time": "regression", "tokens_per_s": "regression",
                                   "peak_memory": "unchanged", "convergence": "unchanged", "final_loss": "unchanged"}
    tps = next(f for f in res.findings if f.cell_id == slow and f.metric == "tokens_per_s")
    assert -0.16 < tps.change < -0.11 and tps.p_value < 1e-3
    assert tps.noise.startswith("run-to-run sd") and "3+3 repeats" in tps.noise and 0.05 < tps.detectable < 0.1
    assert {f.cell_id for f in res.regressions} == {slow}
    result = cli("compare", base, cur)
    assert result.exit_code == 1 and "REGRESSION" in result.stdout and "run-to-run sd" in result.stdout


def test_3_percent_drop_inside_the_threshold_is_not_a_regression(cli, tmp_path, cells):
    # a 3% slowdown with little noise is real, but below the 5% threshold: significance alone fails no build
    base = store(tmp_path, "base", [r for c in cells for r in repeated(c, noise=0.02)])
    cur = store(tmp_path, "cur", [r for c in cells for r in repeated(c, seed=1, noise=0.02, step_time_s=0.103)])
    res = compare(load_runs([base]), load_runs([cur]))
    assert res.regressions == []
    steps = [f for f in res.findings if f.metric == "step_time"]
    assert all(0.0 < f.change < 0.05 and f.detail.startswith("within 5% (flags > ") for f in steps)
    assert cli("compare", base, cur).exit_code == 0


def test_big_change_inside_the_run_to_run_noise_is_not_a_regression(tmp_path, cells):
    # the repeats' medians: 100, 130, 90 ms -> 115, 95, 140 ms (+9%), but the runs overlap: no regression
    base = store(tmp_path, "base", [r for c in cells for r in repeated(c, step_times=[0.10, 0.13, 0.09], noise=0.001)])
    cur = store(tmp_path, "cur", [r for c in cells for r in repeated(c, seed=1, step_times=[0.115, 0.095, 0.14],
                                                                      noise=0.001)])
    res = compare(load_runs([base]), load_runs([cur]))
    for f in (f for f in res.findings if f.metric == "step_time"):
        assert 0.05 < f.change < 0.15 and f.verdict == "unchanged" and f.p_value > 0.2
        assert "but within the noise" in f.detail and f.detectable > 0.3
    # the same change with the runs apart is a regression
    base2 = store(tmp_path, "base2", [r for c in cells for r in repeated(c, step_times=[0.10, 0.105, 0.11],
                                                                         noise=0.001)])
    cur2 = store(tmp_path, "cur2", [r for c in cells for r in repeated(c, seed=1, step_times=[0.12, 0.125, 0.118],
                                                                        noise=0.001)])
    res = compare(load_runs([base2]), load_runs([cur2]))
    assert {f.metric for f in res.regressions} == {"step_time", "tokens_per_s"}


def test_a_history_of_stored_runs_is_the_noise_model(cli, tmp_path, cells):
    nights = [0.100, 0.103, 0.097, 0.101, 0.099]
    for i, t in enumerate(nights):
        write_run(tmp_path / "hist", make_manifest(run_no=i + 1),
                  [make_result(c, seed=i, step_time_s=t, noise=0.005, gates=PASS) for c in cells])
    inside = store(tmp_path, "inside", [make_result(c, seed=9, step_time_s=0.104, noise=0.005, gates=PASS)
                                        for c in cells])
    res = compare(load_runs([tmp_path / "hist"]), load_runs([inside]))
    assert res.regressions == [] and res.matched == 4
    step = next(f for f in res.findings if f.metric == "step_time")
    assert step.noise.startswith("night-to-night sd") and "history of 5 runs" in step.noise
    assert "an unchanged run falls in" in step.detail and abs(float(step.baseline.split()[0]) - 100) < 1
    slow = store(tmp_path, "slow", [make_result(c, seed=9, noise=0.005, gates=PASS,
                                                step_time_s=0.13 if c.strategy == "zero2" else 0.1) for c in cells])
    res = compare(load_runs([tmp_path / "hist"]), load_runs([slow]))
    assert {(f.cell_id, f.metric) for f in res.regressions} == {
        (c.id, m) for c in cells if c.strategy == "zero2" for m in ("step_time", "tokens_per_s")}
    md = cli("compare", tmp_path / "hist", slow, "--format", "md")
    assert md.exit_code == 1 and "### Timing: noise and the smallest detectable change" in md.stdout
    assert "**regression**: 4 cells compared: 2 regression(s) in 1 cell(s)" in md.stdout
    assert md.stdout.count("night-to-night sd") >= 8  # every cell's two timing checks, unchanged ones too


def test_two_stored_runs_are_no_history_the_latest_is_used(tmp_path, cells):
    # the older run was twice as fast: had it been used, every timing check would be a regression
    write_run(tmp_path / "two", make_manifest(run_no=1), [make_result(c, step_time_s=0.05, gates=PASS) for c in cells])
    write_run(tmp_path / "two", make_manifest(run_no=2), [make_result(c, seed=3, gates=PASS) for c in cells])
    cur = store(tmp_path, "cur", [make_result(c, seed=4, gates=PASS) for c in cells])
    res = compare(load_runs([tmp_path / "two"]), load_runs([cur]))
    assert res.regressions == [] and res.improvements == []
    assert all("no noise estimate" in f.noise for f in res.findings if f.noise)
    step = next(f for f in res.findings if f.metric == "step_time")
    assert abs(float(step.baseline.split()[0]) - 100) < 2


def test_improvement_is_reported_and_passes(cli, tmp_path, cells):
    base = baseline(tmp_path, cells)
    cur = store(tmp_path, "cur", [make_result(c, seed=1, step_time_s=0.08, gates=PASS) for c in cells])
    res = compare(load_runs([base]), load_runs([cur]))
    assert {f.metric for f in res.improvements} == {"step_time", "tokens_per_s"} and len(res.improvements) == 8
    result = cli("compare", base, cur, "--format", "md")
    assert result.exit_code == 0 and "| improvement |" in result.stdout
    assert "no regression: 4 cells compared: 0 regression(s) in 0 cell(s), 8 improvement(s)" in result.stdout
    term = cli("compare", base, cur)
    assert term.exit_code == 0 and "ok 4 cells compared: 0 regression(s) in 0 cell(s), 8 improvement(s)" in " ".join(
        term.stdout.split())


def test_memory_increase_is_a_regression(cli, tmp_path, cells):
    base = baseline(tmp_path, cells)
    cur = store(tmp_path, "cur", [make_result(c, seed=1, gates=PASS, memory_scale=1.05 * (1.03 if c.strategy == "zero3"
                                                                                           else 1.0)) for c in cells])
    res = compare(load_runs([base]), load_runs([cur]))
    [reg] = res.regressions
    assert reg.metric == "peak_memory" and reg.change == pytest.approx(0.03, rel=1e-4)  # bytes are integers, as measured ones are
    result = cli("compare", base, cur)
    assert result.exit_code == 1 and "REGRESSION 4 cells compared: 1 regression(s) in 1 cell(s)" in result.stdout
    assert "peak_memory" in result.stdout and "up 3.0%" in result.stdout
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
    result = cli("compare", base, cur)
    assert result.exit_code == 1 and "REGRESSION 4 cells compared: 1 regression(s) in 1 cell(s)" in result.stdout
    assert z2 in result.stdout and "diverged" in result.stdout


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
    assert result.exit_code == 1 and "REGRESSION 3 cells compared: 3 regression(s) in 2 cell(s)" in result.stderr
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
    step = next(c for c in cases if c.get("name") == f"{cells[0].id}.step_time")
    own = {p.get("name"): p.get("value") for p in step.find("properties")}
    assert own["noise"].startswith("no noise estimate") and float(own["detectable"]) == 0.05
    assert "judged against no noise estimate" in step.find("failure").get("message")


def test_cells_only_in_current_are_listed_and_pass(cli, tmp_path, cells):
    base = store(tmp_path, "base", [make_result(c, gates=PASS) for c in cells[:3]])
    cur = store(tmp_path, "cur", [make_result(c, seed=1, gates=PASS) for c in cells])  # the fourth is new
    res = compare(load_runs([base]), load_runs([cur]))
    assert [cid for cid, _ in res.only_current] == [cells[3].id] and res.only_baseline == []
    assert res.matched == 3 and res.regressions == []
    term = cli("compare", base, cur)
    assert term.exit_code == 0, term.output
    text = " ".join(term.stdout.split())
    assert f"only in current: {cells[3].id}" in text
    assert "ok 3 cells compared: 0 regression(s)" in text and "0 cell(s) only in baseline, 1 only in current" in text
    md = cli("compare", base, cur, "--format", "md")
    assert md.exit_code == 0 and "### Only in current (1)" in md.stdout and cells[3].id in md.stdout


def test_no_like_for_like_memory_is_inconclusive_not_a_regression(cli, tmp_path, cells):
    # the baseline measured a CUDA peak, the current run only counted tensor bytes (a CPU run): not comparable
    base = baseline(tmp_path, cells)
    cur = store(tmp_path, "cur", [make_result(c, seed=1, gates=PASS, memory="states") for c in cells])
    res = compare(load_runs([base]), load_runs([cur]))
    memory = [f for f in res.findings if f.metric == "peak_memory"]
    assert len(memory) == 4 and {f.verdict for f in memory} == {"inconclusive"}
    assert all(f.detail.startswith("no like-for-like measurement") for f in memory)
    assert res.regressions == []
    term = cli("compare", base, cur)
    assert term.exit_code == 0, term.output
    text = " ".join(term.stdout.split())
    assert "ok 4 cells compared: 0 regression(s) in 0 cell(s), 0 improvement(s), 4 inconclusive" in text
    assert "inconclusive" in text and "no like-for-like" in text
    junit = tmp_path / "j.xml"
    assert cli("compare", base, cur, "--format", "junit", "--out", junit).exit_code == 0
    root = ET.parse(junit).getroot()
    skipped = {c.get("name") for c in root.iter("testcase") if c.find("skipped") is not None}
    assert {f"{c.id}.peak_memory" for c in cells} <= skipped
