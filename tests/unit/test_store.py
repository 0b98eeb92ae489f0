"""Run folders and records: atomic writes, exclusive numbering, never overwriting, reading back."""

from __future__ import annotations

import os
import threading
from datetime import datetime, timezone

import pytest

from suite.results import store
from suite.results.schema import SCHEMA_VERSION, CellResult
from suite.testing.builders import make_result

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def _result(cell_id="abc", repeat=0, status="ok", **kw) -> CellResult:
    return make_result(cell_id=cell_id, repeat=repeat, status=status, **kw)


def test_write_atomic_writes_and_leaves_no_temp(tmp_path):
    path = store.write_atomic(tmp_path / "a.json", '{"x": 1}')
    assert path.read_text() == '{"x": 1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_write_atomic_never_overwrites(tmp_path):
    store.write_atomic(tmp_path / "a.json", "first")
    with pytest.raises(store.StoreError, match="never overwritten"):
        store.write_atomic(tmp_path / "a.json", "second")
    assert (tmp_path / "a.json").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]  # the temp file of the refused write is gone
    store.write_atomic(tmp_path / "a.json", "third", overwrite=True)
    assert (tmp_path / "a.json").read_text() == "third"


def test_write_atomic_failure_leaves_neither_temp_nor_target(tmp_path, monkeypatch):
    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        store.write_atomic(tmp_path / "a.json", "data")
    assert list(tmp_path.iterdir()) == []


def test_run_dirs_are_numbered_and_exclusive(tmp_path):
    first = store.create_run_dir(tmp_path, "smoke", "0123456789abcdef", NOW)
    second = store.create_run_dir(tmp_path, "smoke", "0123456789abcdef", NOW)  # same second, same commit
    assert first.name == "0001_0123456_20260102T030405Z"
    assert second.name == "0002_0123456_20260102T030405Z"
    assert (first / "cells").is_dir() and (first / "work").is_dir()
    (tmp_path / "smoke" / "0041_deadbee_20250101T000000Z").mkdir()  # numbers continue after the highest
    assert store.create_run_dir(tmp_path, "smoke", None, NOW).name == "0042_nogit_20260102T030405Z"
    assert store.create_run_dir(tmp_path, "other", None, NOW).name.startswith("0001_")
    assert [p.name[:4] for p in store.iter_run_dirs(tmp_path)] == ["0001", "0001", "0002", "0041", "0042"]
    assert store.latest_run_dir(tmp_path, "smoke").name.startswith("0042_")
    assert store.latest_run_dir(tmp_path, "nothing") is None


def test_concurrent_run_dirs_never_collide(tmp_path):
    made, errors = [], []

    def make():
        try:
            made.append(store.create_run_dir(tmp_path, "s", "abcdefg", NOW))
        except Exception as exc:  # collected and asserted below, so a failure is visible
            errors.append(exc)

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len({p.name for p in made}) == 8


def test_work_dirs_get_new_attempt_numbers(tmp_path):
    run = store.create_run_dir(tmp_path, "s", None, NOW)
    assert store.create_work_dir(run, "abc", 0).name == "abc-r0-a1"
    assert store.create_work_dir(run, "abc", 0).name == "abc-r0-a2"
    assert store.create_work_dir(run, "abc", 1).name == "abc-r1-a1"


def test_cell_results_round_trip_and_are_never_replaced(tmp_path):
    run = store.create_run_dir(tmp_path, "s", None, NOW)
    nan_curve = _result(losses=[3.0, float("nan")], status="diverged")
    store.write_cell_result(run, nan_curve)
    store.write_cell_result(run, _result("abc", 1))
    with pytest.raises(store.StoreError):
        store.write_cell_result(run, _result("abc", 0, status="failed"))
    back = store.read_cell_results(run)
    assert [(r.cell_id, r.repeat, r.status) for r in back] == [("abc", 0, "diverged"), ("abc", 1, "ok")]
    assert back[0].losses[0] == 3.0 and back[0].losses[1] != back[0].losses[1]  # NaN survives the file


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(_result().model_dump_json().replace(f'"schema_version":{SCHEMA_VERSION}',
                                                        f'"schema_version":{SCHEMA_VERSION + 1}'))
    with pytest.raises(store.StoreError, match="newer"):
        store.read_cell_result(path)


def test_runlog_appends(tmp_path):
    store.append_runlog(tmp_path, "a", x=1)
    store.append_runlog(tmp_path, "b")
    lines = (tmp_path / "runlog.jsonl").read_text().splitlines()
    assert len(lines) == 2 and '"event": "a"' in lines[0] and '"x": 1' in lines[0]


def test_resume_manifest_names(tmp_path):
    assert store.next_resume_name(tmp_path) == "resume-01.json"
    (tmp_path / "resume-01.json").write_text("{}")
    assert store.next_resume_name(tmp_path) == "resume-02.json"
