"""`suite run` through the CLI, in-process, with a stand-in launcher (no processes): what a user types after
Ctrl-C (`suite run RUN_DIR --resume`), a resume refusing a changed scenario, the first session's options carried
over, and `--force` on infeasible cells.  The real launches: tests/e2e/test_run_smoke.py and test_run_kill9.py."""

from __future__ import annotations

import json
import signal

import pytest

from suite.console import EXIT_INPUT, EXIT_OK
from suite.scenario import load_cells
from tests.scenario_texts import infeasible
from stand_in_launcher import install

SCENARIO = """\
name: resumed
model: gpt-tiny
seq_len: 16
strategy: [ddp, zero1]
gpus: 2
micro_batch_size: 2
global_batch_size: [4, 8]
steps: 3
warmup_steps: 1
device: cpu
"""


@pytest.fixture
def world(tmp_path, monkeypatch):
    """(scenario path, results root, launched cells, behaviour by cell id: "ok" | "SIGINT"): stand_in_launcher."""
    return install(monkeypatch, tmp_path, SCENARIO, "resumed")


def _cells(path):
    return {(c.strategy, c.global_batch_size): c for c in load_cells(str(path))[1]}


def _stored(run_dir):
    return sorted(p.name for p in (run_dir / "cells").iterdir())


def _interrupted_run(cli, world, *options):
    """A run stopped by Ctrl-C at its second launch; -> (result, run folder)."""
    path, results, calls, behaviour = world
    order = list(_cells(path).values())
    first = cli("run", path, "--results", results, *options)
    (run_dir,) = [p for p in (results / "resumed").iterdir() if p.is_dir()]
    return first, run_dir, order


def test_resume_by_the_run_folder_the_cli_prints_after_ctrl_c(cli, world):
    path, results, calls, behaviour = world
    cells = _cells(path)
    behaviour[cells[("ddp", 8)].id] = "SIGINT"  # the second cell of the plan (references first)
    first, run_dir, _ = _interrupted_run(cli, world)
    assert first.exit_code == 128 + signal.SIGINT, first.output
    hint = f"suite run {run_dir} --resume"
    assert hint in " ".join(first.stderr.split()), first.stderr
    assert _stored(run_dir) == [f"{cells[('ddp', 4)].id}-r0.json"]

    behaviour.clear()
    calls.clear()
    again = cli(*hint.split()[1:])  # exactly what it said to type (no --results: the folder is enough)
    assert again.exit_code == EXIT_OK, again.output
    assert str(run_dir) in " ".join(again.stdout.split())
    assert {c.id for c in calls} == {c.id for c in cells.values()} - {cells[("ddp", 4)].id}
    assert _stored(run_dir) == sorted(f"{c.id}-r0.json" for c in cells.values())
    assert (run_dir / "resume-01.json").is_file()
    assert [p for p in (results / "resumed").iterdir() if p.is_dir()] == [run_dir]  # no new run folder


def test_resume_refuses_a_changed_scenario_and_writes_nothing(cli, world):
    path, results, calls, behaviour = world
    behaviour[_cells(path)[("ddp", 8)].id] = "SIGINT"
    _, run_dir, _ = _interrupted_run(cli, world)
    before = sorted(p.name for p in run_dir.iterdir())
    calls.clear()
    path.write_text(SCENARIO.replace("steps: 3", "steps: 4"))
    result = cli("run", path, "--results", results, "--resume")
    assert result.exit_code == EXIT_INPUT, result.output
    assert f"differs from {run_dir}/scenario.yaml; start a new run instead" in " ".join(result.stderr.split())
    assert calls == [] and sorted(p.name for p in run_dir.iterdir()) == before  # no resume-01.json
    # the run folder alone still resumes, with its stored scenario
    behaviour.clear()
    assert cli("run", run_dir, "--resume").exit_code == EXIT_OK
    assert {c.steps for c in calls} == {3}


def test_resume_carries_over_the_first_sessions_options(cli, world):
    path, results, calls, behaviour = world
    cells = _cells(path)
    target = cells[("zero1", 8)]
    ref = cells[("ddp", 8)]  # not asked for: zero1's match gate does not exist here, so only the target runs
    behaviour[target.id] = "SIGINT"
    first, run_dir, _ = _interrupted_run(cli, world, "--only", target.id[:6], "--repeats", "2", "--shuffle", "3")
    assert first.exit_code == 128 + signal.SIGINT, first.output
    options = json.loads((run_dir / "manifest.json").read_text())["extra"]["options"]
    assert (options["only"], options["repeats"], options["shuffle"]) == ([target.id[:6]], 2, 3)

    behaviour.clear()
    calls.clear()
    again = cli("run", run_dir, "--resume")  # no options: the first session's hold
    assert again.exit_code == EXIT_OK, again.output
    assert {c.id for c in calls} == {target.id} and ref.id not in {c.id for c in calls}
    assert _stored(run_dir) == [f"{target.id}-r0.json", f"{target.id}-r1.json"]  # --repeats 2 kept
    resumed = json.loads((run_dir / "resume-01.json").read_text())["extra"]["options"]
    assert (resumed["only"], resumed["repeats"], resumed["shuffle"]) == ([target.id[:6]], 2, 3)


def test_force_launches_infeasible_cells_and_says_so(cli, world, tmp_path):
    _, results, calls, _ = world
    path = tmp_path / "big.yaml"
    path.write_text(infeasible("big"))
    plain = cli("run", path, "--results", results)
    assert plain.exit_code == EXIT_OK and calls == [] and "infeasible" in plain.stdout
    forced = cli("run", path, "--results", results, "--force")
    assert forced.exit_code == EXIT_OK, forced.output
    assert sorted(c.strategy for c in calls) == ["ddp", "zero1"]  # launched despite "needs 64 CPU ranks"
    run_dir = sorted(p for p in (results / "big").iterdir() if p.is_dir())[-1]
    for f in (run_dir / "cells").iterdir():
        record = json.loads(f.read_text())
        assert record["status"] == "ok" and "needs 64 CPU ranks" in record["extra"]["forced_infeasible"]
