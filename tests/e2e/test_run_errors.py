"""`python -m suite run` as a real process: results that cannot be written exit 3 with one error line naming
the path (no traceback), and a refused resume of a damaged run folder exits 2 and writes nothing."""

from __future__ import annotations

import pytest

from tests.e2e.run_helpers import env, run_cli, run_dirs, write
from tests.scenario_texts import infeasible

pytestmark = pytest.mark.slow

SCENARIO = infeasible("errs")


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def test_unwritable_results_exit_3_and_a_damaged_resume_exits_2(tmp_path):
    path = write(tmp_path / "errs.yaml", SCENARIO)
    blocker = write(tmp_path / "afile", "a regular file where the results folder should be")
    bad = run_cli(["run", str(path), "--results", str(blocker / "results")], tmp_path, env())
    assert bad.returncode == 3, bad.stderr
    (line,) = _errors(bad.stderr)
    assert str(blocker) in line and "--results" in line and "Traceback" not in bad.stderr

    results = tmp_path / "results"
    good = run_cli(["run", str(path), "--results", str(results)], tmp_path, env())
    assert good.returncode == 0, good.stderr
    (run,) = run_dirs(results, "errs")
    (run / "manifest.json").write_text('{"run_id": ')  # truncated
    before = sorted(p.name for p in run.iterdir())
    resumed = run_cli(["run", str(run), "--resume"], tmp_path, env())
    assert resumed.returncode == 2, resumed.stderr
    (line,) = _errors(resumed.stderr)
    assert "manifest.json" in line and "repair it or move it" in line
    assert sorted(p.name for p in run.iterdir()) == before  # no resume-01.json
