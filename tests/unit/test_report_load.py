"""suite.results.reader as report, compare and export use it: run folders under any path, records validated, newer refused."""

from __future__ import annotations

import json

import pytest
from report_fixtures import make_cells, make_manifest, make_result, write_run

from suite.results.reader import StoreError as LoadError, find_run_dirs, load_runs
from suite.results.schema import SCHEMA_VERSION


@pytest.fixture
def tree(tmp_path):
    cells = make_cells(strategy=["ddp", "zero3"])
    a = write_run(tmp_path / "results", make_manifest("smoke", 1), [make_result(c) for c in cells])
    b = write_run(tmp_path / "results", make_manifest("smoke", 2),
                  [make_result(c, repeat=k, seed=k) for c in cells for k in range(2)])
    c = write_run(tmp_path / "results", make_manifest("other", 1, created_at="2024-12-31T00:00:00Z"),
                  [make_result(cells[0])])
    return tmp_path / "results", a, b, c


def test_finds_runs_from_a_run_a_scenario_folder_or_a_tree(tree):
    root, a, b, c = tree
    assert find_run_dirs(a) == [a]
    assert find_run_dirs(root / "smoke") == [a, b]
    assert find_run_dirs(root) == sorted([a, b, c])
    runs = load_runs([root, a])  # a given twice is loaded once
    assert [r.path for r in runs] == [c, a, b]  # oldest first by created_at
    assert [len(r.results) for r in runs] == [1, 2, 4]
    assert [(r.cell_id, r.repeat) for r in runs[2].results] == sorted((r.cell_id, r.repeat) for r in runs[2].results)
    assert runs[1].label == "smoke/0001" and runs[1].scenario_yaml == "name: fixture\n"


def test_skips_temp_and_hidden_files(tree):
    _, a, _, _ = tree
    (a / "cells" / ".x.json.abc.tmp").write_text("partial")
    (a / "cells" / ".hidden.json").write_text("{")
    assert len(load_runs([a])[0].results) == 2


def test_refuses_a_newer_schema_version(tree):
    _, a, _, _ = tree
    f = next((a / "cells").glob("*.json"))
    data = json.loads(f.read_text())
    data["schema_version"] = SCHEMA_VERSION + 1
    f.write_text(json.dumps(data))
    with pytest.raises(LoadError, match=rf"schema_version {SCHEMA_VERSION + 1} is newer .*\({SCHEMA_VERSION}\)"):
        load_runs([a])


def test_invalid_record_names_file_and_field(tree):
    _, a, _, _ = tree
    f = next((a / "cells").glob("*.json"))
    data = json.loads(f.read_text())
    data["throughput"]["tokens_per_s"] = "fast"
    f.write_text(json.dumps(data))
    with pytest.raises(LoadError) as exc:
        load_runs([a])
    assert f.name in str(exc.value) and "throughput.tokens_per_s" in str(exc.value)


def test_missing_and_empty_paths(tmp_path):
    with pytest.raises(LoadError, match="no such file"):
        load_runs([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(LoadError, match="no run folders"):
        load_runs([tmp_path / "empty"])
