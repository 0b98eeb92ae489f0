"""`suite run`'s exit codes tell apart a failed cell (1), bad input (2) and results that cannot be written (3),
each with a one-line error naming the path; and a gloo-style `[/...]` error prints in the summary table.

In-process (the `cli` fixture) with torch's probe and the launcher replaced: no process is started."""

from __future__ import annotations

import errno
import os

import pytest

from suite.console import EXIT_ENVIRONMENT, EXIT_FAILED, EXIT_INPUT, EXIT_OK
from suite.results import store
from suite.runner import cell as cell_mod, run as run_mod, session as session_mod
from tests.scenario_texts import infeasible

INFEASIBLE = infeasible("big")
GLOO = "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"


@pytest.fixture
def scenario(tmp_path, monkeypatch):
    monkeypatch.setattr(session_mod, "torch_info", lambda: {"torch": "x", "cuda": None, "nccl": None, "devices": []})
    path = tmp_path / "big.yaml"
    path.write_text(INFEASIBLE)
    return path


def _errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def test_infeasible_cells_exit_0_and_the_help_lists_the_codes(cli, scenario, tmp_path):
    result = cli("run", scenario, "--results", tmp_path / "results")
    assert result.exit_code == EXIT_OK, result.stderr
    assert "infeasible" in result.stdout
    help_text = " ".join(cli("run", "--help").stdout.split())
    assert "3 suite could not write its results" in help_text and "1 a cell failed" in help_text


def test_a_failed_cell_with_a_gloo_error_exits_1_and_prints_it(cli, write_scenario, tmp_path, monkeypatch):
    monkeypatch.setattr(session_mod, "torch_info", lambda: {"torch": "x", "cuda": None, "nccl": None, "devices": []})

    def gloo_failure(request, *, stop, on_poll):
        raise RuntimeError(GLOO)

    monkeypatch.setattr(cell_mod, "launch", gloo_failure)
    path = write_scenario(INFEASIBLE.replace("gpus: 64", "gpus: 2").replace("[ddp, zero1]", "ddp"))
    result = cli("run", path, "--results", tmp_path / "results")
    assert result.exit_code == EXIT_FAILED, result.stderr
    assert "[/pytorch/third_party/gloo" in result.stdout and "failed" in result.stdout


def test_results_under_a_file_exit_3_naming_the_path(cli, scenario, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    for results in (blocker, blocker / "results"):  # the root is a file; the root's parent is a file
        result = cli("run", scenario, "--results", results)
        assert result.exit_code == EXIT_ENVIRONMENT, (results, result.stderr)
        (line,) = _errors(result)
        assert str(blocker) in line and "--results" in line, line
        assert "Traceback" not in result.stderr


def test_a_full_disk_while_writing_a_cell_exits_3(cli, scenario, tmp_path, monkeypatch):
    real = store.write_atomic

    def full_for_cells(path, text, **kw):
        if path.parent.name == "cells":  # the run folder and manifest are written; the first cell is not
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, text, **kw)

    monkeypatch.setattr(store, "write_atomic", full_for_cells)
    result = cli("run", scenario, "--results", tmp_path / "results")
    assert result.exit_code == EXIT_ENVIRONMENT, result.stderr
    (line,) = _errors(result)
    assert "No space left on device" in line and "/cells/" in line and "free some space" in line


def test_enospc_in_the_real_atomic_write_is_a_write_error(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(store.WriteError, match=r"a\.json: cannot write results \(No space left on device\)"):
        store.write_atomic(tmp_path / "a.json", "data")
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_proc_path_is_a_write_error_for_root_too(tmp_path):
    # /proc refuses new files even for root (chmod would not stop root): a real OS refusal, not a mock
    with pytest.raises(store.WriteError, match="/proc"):
        store.create_run_dir("/proc", "smoke", None)


def test_suite_comm_under_a_file_exits_3_naming_the_path(cli, tmp_path):
    """`suite comm` creates its run folder before it starts any rank: an unwritable root is exit 3, no traceback."""
    (tmp_path / "file").write_text("x")
    out = cli("comm", "--results", tmp_path / "file" / "sub", "--sizes", "1KiB", "--iters", "1", "--device", "cpu")
    assert out.exit_code == EXIT_ENVIRONMENT, out.output
    assert "cannot write results" in out.output and str(tmp_path / "file") in out.output


def test_a_record_written_first_by_another_run_and_a_stopped_preflight_are_clean_errors(cli, scenario, monkeypatch):
    """Two resumes of one folder race for a record name (StoreError: input, 2); Ctrl-C during --preflight stops
    its ranks (CommError: 130, as a signal). One line each, no traceback."""
    from suite.comm.launch import CommError

    for exc, code, says in ((store.StoreError("x/cells/a-r0.json: exists already; results are never overwritten"),
                             EXIT_INPUT, "exists already"),
                            (CommError("interrupted (Ctrl-C)", interrupted=True), 130, "--preflight: interrupted")):
        def boom(*_a, exc=exc, **_k):
            raise exc

        monkeypatch.setattr(run_mod, "run_scenario", boom)
        result = cli("run", scenario)
        assert result.exit_code == code, result.stderr
        (line,) = _errors(result)
        assert says in line and "Traceback" not in result.stderr, line
