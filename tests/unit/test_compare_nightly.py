"""The nightly workflow's own `suite` commands, run on stored fixtures: what CI calls is what is tested.

Every `docker compose run --rm suite ARGS` line of .github/workflows/nightly.yml is `suite ARGS` in the image
(compose/entrypoint.sh; a scenario file first means `suite run`).  This test extracts those lines, fills in the
workflow's environment with temporary folders, and runs them in-process against a baseline and a night with
the image digest changed (expected: passes), a planted regression (exit 1) and a torch upgrade (--strict: 2).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from report_fixtures import make_cells, make_manifest, make_result, write_run

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "nightly.yml"


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def suite_commands(workflow: dict) -> list[list[str]]:
    """The argument lists of every `docker compose run --rm suite ...` in the job's steps, env not yet expanded."""
    out = []
    for step in workflow["jobs"]["nightly"]["steps"]:
        script = step.get("run", "").replace("\\\n", " ")
        for m in re.finditer(r"docker compose run --rm suite (.+?)(?:\|\||$)", script, re.M):
            out.append(shlex.split(m.group(1)))
    return out


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    return [re.sub(r"\$\{?(\w+)\}?", lambda m: env[m.group(1)], a) for a in args]


def test_workflow_shape(workflow):
    job = workflow["jobs"]["nightly"]
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    text = WORKFLOW.read_text()
    assert "scripts/docker-setup" in text and "$GITHUB_STEP_SUMMARY" in text and "actions/upload-artifact" in text
    names = [cmd[0] for cmd in suite_commands(workflow)]
    assert names == ["$s", "compare", "compare", "report", "publish"]
    # steps after the comparison still publish when it fails (a regression fails the job at compare)
    after = job["steps"][[s.get("name", "") for s in job["steps"]].index("Compare with the baseline") + 1:]
    assert after and all(s.get("if", "").startswith("${{ !cancelled()") for s in after)
    assert "SUITE_EXTRAS=hf,report scripts/docker-setup" in text  # the image can draw the report's and site's plots
    pages = workflow["jobs"]["pages"]
    assert pages["needs"] == "nightly" and "SUITE_PAGES" in pages["if"] and pages["environment"]["name"] == "github-pages"


def test_suite_run_accepts_the_workflow_options(cli, workflow):
    run = suite_commands(workflow)[0]
    options = [a for a in run if a.startswith("--")]
    help_text = cli("run", "--help").stdout
    assert options and all(o in help_text for o in options)


def night(tmp_path: Path, cells, digest: str, **kw) -> tuple[dict[str, str], list]:
    env = {"BASELINE": str(tmp_path / "results/baselines/nightly"), "NIGHTLY": str(tmp_path / "results/nightly"),
           "REPORT": str(tmp_path / "results/nightly-report"), "SITE": str(tmp_path / "results/site"),
           "PAGES_URL": "https://example.org/suite"}
    write_run(Path(env["BASELINE"]), make_manifest("zero-stages", 1, container_image_digest="sha256:aaa"),
              [make_result(c) for c in cells])
    slow = kw.pop("slow", None)
    results = [make_result(c, seed=1, step_time_s=0.12 if c.id == slow else 0.1) for c in cells]
    write_run(Path(env["NIGHTLY"]), make_manifest("zero-stages", 1, container_image_digest=digest, **kw), results)
    Path(env["REPORT"]).mkdir(parents=True)
    return env, [expand(cmd, env) for cmd in suite_commands(yaml.safe_load(WORKFLOW.read_text()))[1:]]


CELLS = dict(strategy=["ddp", "zero3"], gpus=[2, 4])


def test_a_quiet_night_passes_and_publishes(cli, tmp_path):
    env, (junit, md, report, publish) = night(tmp_path, make_cells(**CELLS), "sha256:bbb")
    assert cli(*junit).exit_code == 0
    assert cli(*md).exit_code == 0
    result = cli(*report)
    assert result.exit_code == 0, result.stderr
    out = Path(env["REPORT"])
    assert {"compare.xml", "compare.md", "report.md", "report.html"} <= {p.name for p in out.iterdir()}
    assert "no regression" in (out / "compare.md").read_text()
    assert "image_digest" in (out / "compare.md").read_text()  # shown, accepted
    assert cli(*publish).exit_code == 0
    summary = (Path(env["SITE"]) / "summary.md").read_text()
    assert "0 regression(s) in the 2 run(s) published now" in summary and "https://example.org/suite/index.html" in summary


def test_a_regression_fails_the_compare_step(cli, tmp_path):
    cells = make_cells(**CELLS)
    env, (junit, md, _, publish) = night(tmp_path, cells, "sha256:bbb", slow=cells[0].id)
    for cmd in (junit, md):  # exit 1 is the verdict, shown as such (a crash would be 70 and fail here)
        result = cli(*cmd)
        assert result.exit_code == 1 and "REGRESSION 4 cells compared: 2 regression(s) in 1 cell(s)" in result.stderr
    assert "**regression**" in (Path(env["REPORT"]) / "compare.md").read_text()
    xml = (Path(env["REPORT"]) / "compare.xml").read_text()
    assert f'name="{cells[0].id}.step_time"' in xml and xml.count("<failure") == 2
    assert cli(*publish).exit_code == 0  # publishing shows regressions; compare is the gate
    summary = (Path(env["SITE"]) / "summary.md").read_text()
    # one run a side: compare's verdict is the threshold's alone, and the summary says so
    assert "0 regression(s) in the 2 run(s) published now, 2 past the threshold with no noise estimate yet" in summary
    assert f"(https://example.org/suite/s/zero-stages/cell-{cells[0].id}.html)" in summary


def test_another_torch_is_refused(cli, tmp_path):
    _, (_, md, _, _) = night(tmp_path, make_cells(**CELLS), "sha256:bbb", torch="2.15.0")
    result = cli(*md)
    assert result.exit_code == 2 and "torch" in result.stderr
