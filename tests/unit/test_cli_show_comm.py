"""`suite results show CELL` on stored fixtures, and `suite comm`'s exit codes with its ranks replaced (the
real two-rank benchmark: tests/dist/test_comm.py).  Each asserts what is printed, not only the code."""

from __future__ import annotations

import pytest
from report_fixtures import make_cells, make_manifest, make_result, write_run

from suite.results.schema import Gate


@pytest.fixture
def stored(tmp_path):
    cells = make_cells(strategy=["ddp", "zero3"])
    results = [make_result(cells[0], gates=[Gate(name="match", passed=True, detail="within rtol 1e-4")]),
               make_result(cells[0], repeat=1), make_result(cells[1], status="timeout")]
    run = write_run(tmp_path / "results", make_manifest(), results)  # results/<scenario>/<run>
    return tmp_path / "results", run, cells


def flat(text: str) -> str:
    return " ".join(text.split())


def test_show_a_cell_by_id_prefix_and_repeat(cli, stored):
    root, run, cells = stored
    ok = cells[0]
    detail = cli("results", "show", ok.id[:6], "--results", root)
    assert detail.exit_code == 0, detail.output
    text = flat(detail.stdout)
    assert f"cell {ok.id}-r0" in text and "strategy=ddp" in text
    for section in ("step time (measured steps), ms", "throughput", "MFU", "memory per rank (rank 0) vs planner",
                    "gates", "within rtol 1e-4"):
        assert section in text, section
    second = cli("results", "show", f"{ok.id}-r1", "--results", root)
    assert second.exit_code == 0 and f"cell {ok.id}-r1" in flat(second.stdout)


def test_show_a_failed_cell_prints_its_error_and_a_cell_file_works_too(cli, stored):
    root, run, cells = stored
    timed = cells[1]
    detail = cli("results", "show", timed.id, "--results", root)
    assert detail.exit_code == 0 and "timeout" in detail.stdout and "planted timeout" in detail.stdout
    by_file = cli("results", "show", run / "cells" / f"{timed.id}-r0.json")
    assert by_file.exit_code == 0 and f"cell {timed.id}-r0" in flat(by_file.stdout)


def test_show_an_unknown_cell_or_a_plain_folder_exits_2_saying_what_to_give(cli, stored, tmp_path):
    root, _, _ = stored
    missing = cli("results", "show", "ffffffffff", "--results", root)
    assert missing.exit_code == 2 and "not a run folder, cell file, run name or cell id found under" in flat(
        missing.stderr)
    plain = cli("results", "show", tmp_path)
    assert plain.exit_code == 2 and "not a run folder" in plain.stderr


@pytest.fixture
def comm_raises(monkeypatch):
    """comm_raises(exc): `suite comm`'s measurement (suite.comm.run.run_comm) raises exc instead of launching."""
    import suite.comm.run as comm_run

    def set_to(exc):
        def raiser(**kwargs):
            raise exc
        monkeypatch.setattr(comm_run, "run_comm", raiser)

    return set_to


@pytest.mark.parametrize("make, code, text", [
    (lambda: ("suite.comm.launch", "CommError", ("rank 1 exited 1: gloo connection closed",), {}), 1,
     "rank 1 exited 1: gloo connection closed"),
    (lambda: ("suite.comm.launch", "CommError", ("interrupted",), {"interrupted": True}), 130, "interrupted"),
    (lambda: ("suite.comm.sizes", "CommArgError", ("--ops: 'all_sum' is not an op",), {}), 2,
     "--ops: 'all_sum' is not an op"),
    (lambda: ("builtins", "PermissionError", (13, "Permission denied", "/ro/comm"), {}), 3, "/ro/comm"),
], ids=["ranks-failed-1", "interrupted-130", "bad-option-2", "unwritable-3"])
def test_comm_exit_codes(cli, comm_raises, tmp_path, make, code, text):
    import importlib

    module, name, args, kwargs = make()
    comm_raises(getattr(importlib.import_module(module), name)(*args, **kwargs))
    result = cli("comm", "--device", "cpu", "--results", tmp_path)
    assert result.exit_code == code, result.output
    assert text in result.stderr and result.stderr.lstrip().startswith("error:")
    assert "Traceback" not in result.stderr


def test_comm_wrong_numbers_exit_1_after_the_table(cli, monkeypatch, tmp_path):
    """Every op ran, one gave a wrong result: the table is printed and stored, then exit 1 says why."""
    import suite.comm.run as comm_run
    import suite.comm.table as comm_table
    from types import SimpleNamespace

    row = SimpleNamespace(correct=False, world_size=2, device_name="cpu")
    run = SimpleNamespace(results=[row], args=SimpleNamespace(backend="gloo", iters=2, warmup=1))
    monkeypatch.setattr(comm_run, "run_comm", lambda **kw: (tmp_path / "comm" / "0001", run))
    monkeypatch.setattr(comm_table, "comm_table", lambda run, title: title)
    result = cli("comm", "--device", "cpu", "--results", tmp_path)
    assert result.exit_code == 1, result.output
    assert "collectives on 2 x cpu (gloo)" in result.stdout and "stored:" in result.stdout
    assert "some results were numerically wrong (column 'correct')" in result.stderr
