"""A damaged run folder (scenario.yaml or manifest missing or invalid, a truncated cell file, wrong types) is
one error line naming the file and what to do, exit 2, for `run --resume`, `results ls` and `results show`;
and a refused resume writes nothing (no resume-NN.json, no runlog line)."""

from __future__ import annotations

import json

import pytest

from suite.console import EXIT_INPUT, EXIT_OK
from suite.runner import session as session_mod
from tests.scenario_texts import infeasible

SCENARIO = infeasible("big")


def _cell_file(run):
    return sorted((run / "cells").glob("*.json"))[0]


def _set_option(run, name, value):
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["extra"]["options"][name] = value
    (run / "manifest.json").write_text(json.dumps(manifest))


DAMAGES = {  # name: (how to damage the run folder, the file the error must name, what it must say)
    "no scenario": (lambda run: (run / "scenario.yaml").unlink(), "scenario.yaml", "is missing"),
    "scenario not yaml": (lambda run: (run / "scenario.yaml").write_text("name: [unclosed\n"), "scenario.yaml",
                          "cannot read it"),
    "scenario wrong types": (lambda run: (run / "scenario.yaml").write_text("name: big\ngpus: many\n"),
                             "scenario.yaml", "gpus"),
    "no manifest": (lambda run: (run / "manifest.json").unlink(), "manifest.json", "is missing"),
    "manifest wrong types": (lambda run: (run / "manifest.json").write_text('{"run_id": 5}'), "manifest.json",
                             "not a valid Manifest"),
    "options wrong types": (lambda run: _set_option(run, "repeats", "two"), "manifest.json", "options.repeats"),
    # found by the results fuzz campaign (seed 7): a crash and a resume planning 2**53 launches
    "options only nulls": (lambda run: _set_option(run, "only", [None, None]), "manifest.json", "options.only.0"),
    "options 2**53 repeats": (lambda run: _set_option(run, "repeats", 2**53 + 1), "manifest.json",
                              "options.repeats: Input should be less than or equal to 10000"),
    "options bool repeats": (lambda run: _set_option(run, "repeats", True), "manifest.json", "options.repeats"),
    "truncated cell": (lambda run: _cell_file(run).write_text('{"cell_id": "x", "rep'), "cells/",
                       "cannot read cell result"),
    "cell wrong types": (lambda run: _cell_file(run).write_text('{"cell_id": 5, "repeat": "x"}'), "cells/",
                         "not a valid CellResult"),
}


@pytest.fixture
def stored_run(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(session_mod, "torch_info", lambda: {"torch": "x", "cuda": None, "nccl": None, "devices": []})
    path = tmp_path / "big.yaml"
    path.write_text(SCENARIO)
    results = tmp_path / "results"
    first = cli("run", path, "--results", results)
    assert first.exit_code == EXIT_OK, first.stderr
    (run,) = [p for p in (results / "big").iterdir() if p.is_dir()]  # not the number's reservation
    return path, results, run


def _error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_resume_of_a_damaged_folder_is_one_line_and_writes_nothing(cli, stored_run, damage):
    path, results, run = stored_run
    how, names, says = DAMAGES[damage]
    how(run)
    before = sorted(p.relative_to(run).as_posix() for p in run.rglob("*"))
    runlog = (run / "runlog.jsonl").read_text()
    result = cli("run", run, "--resume", "--results", results)
    assert result.exit_code == EXIT_INPUT, result.stderr
    (line,) = _error_lines(result)
    assert line.startswith("error: --resume:") and names in line and says in line, line
    assert str(run) in line and "start a new run" in line
    if says == "is missing":  # nothing to repair or move out: only a new run helps
        assert "cannot be resumed" in line and "repair" not in line, line
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*")) == before  # no resume-01.json
    assert (run / "runlog.jsonl").read_text() == runlog


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_results_ls_lists_a_damaged_folder(cli, stored_run, damage):
    _, results, run = stored_run
    DAMAGES[damage][0](run)
    result = cli("results", "ls", results)
    assert result.exit_code == EXIT_OK, result.stderr
    assert run.name in result.stdout
    if "cell" in damage or "manifest" in damage:
        assert "unreadable" in result.stdout


@pytest.mark.parametrize("damage", ["truncated cell", "cell wrong types"])
def test_results_show_of_a_damaged_cell_names_the_file(cli, stored_run, damage):
    _, results, run = stored_run
    DAMAGES[damage][0](run)
    cell = _cell_file(run)
    for target in (run, cell, cell.stem):  # the run folder, the cell file, the cell id
        result = cli("results", "show", target, "--results", results)
        assert result.exit_code == EXIT_INPUT, (target, result.stderr)
        (line,) = _error_lines(result)
        assert str(cell) in line and "repair" in line, line


@pytest.mark.parametrize("damage", ["no scenario", "no manifest", "manifest wrong types"])
def test_results_show_of_a_run_needs_only_its_cells(cli, stored_run, damage):
    _, results, run = stored_run
    DAMAGES[damage][0](run)
    result = cli("results", "show", run, "--results", results)
    assert result.exit_code == EXIT_OK, result.stderr
    assert "infeasible" in result.stdout


def test_results_show_of_a_folder_without_cells_says_so(cli, stored_run):
    _, results, run = stored_run
    for f in (run / "cells").iterdir():
        f.unlink()
    (run / "cells").rmdir()
    result = cli("results", "show", run, "--results", results)
    assert result.exit_code == EXIT_INPUT
    (line,) = _error_lines(result)
    assert str(run) in line and "cells" in line, line


def test_results_ls_of_a_file_is_an_input_error(cli, tmp_path):
    f = tmp_path / "results.txt"
    f.write_text("not a folder")
    result = cli("results", "ls", f)
    assert result.exit_code == EXIT_INPUT
    (line,) = _error_lines(result)
    assert str(f) in line and "not a folder" in line
