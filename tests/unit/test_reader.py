"""suite.results.reader: ls/show/--resume know run folders by their NNNN_sha_utc name; report, compare and
export read every folder that holds a manifest."""

from __future__ import annotations

import json

import pytest
from report_fixtures import make_cells, make_manifest, make_result, write_run

from suite.results import reader, store
from suite.results.schema import CellResult


@pytest.fixture
def root(tmp_path):
    cells = make_cells()
    write_run(tmp_path / "results", make_manifest("smoke", 1), [make_result(c) for c in cells])
    return tmp_path / "results"


def test_a_run_folder_is_known_by_its_name(root):
    starting = root / "smoke" / "0002_abc1234_20250102T000000Z"
    (starting / "cells").mkdir(parents=True)  # made, manifest not written yet
    renamed = root / "smoke" / "mine"
    (renamed / "cells").mkdir(parents=True)
    first = root / "smoke" / "0001_abc1234_20250101T000000Z"
    (renamed / "manifest.json").write_text((first / "manifest.json").read_text())  # a manifest, not a run name
    assert [p.name for p in reader.iter_run_dirs(root)] == ["0001_abc1234_20250101T000000Z", starting.name]
    # report/compare/export: a folder with a manifest, whatever its name (a renamed copy of a baseline)
    assert [p.name for p in reader.find_run_dirs(root)] == ["0001_abc1234_20250101T000000Z", "mine"]
    assert [p.name for p in reader.find_run_dirs(renamed)] == ["mine"]
    with pytest.raises(reader.StoreError, match="no run folders"):
        reader.load_runs([starting])
    assert reader.is_run_dir(starting) and not reader.is_run_dir(renamed)


def test_store_reads_through_the_reader():
    assert store.read_cell_results is reader.read_cell_results and store.StoreError is reader.StoreError
    assert store.iter_run_dirs is reader.iter_run_dirs and store.read_manifest is reader.read_manifest


def test_a_record_without_schema_version_is_version_1(root):
    f = next((root / "smoke").glob("*/cells/*.json"))
    data = json.loads(f.read_text())
    del data["schema_version"]
    f.write_text(json.dumps(data))
    assert reader.DEFAULT_SCHEMA_VERSION == 1
    assert isinstance(reader.read_cell_result(f), CellResult)


@pytest.mark.parametrize("text, problem", [("[1]", "expected a JSON object, got list"),
                                           ("{", "cannot read cell result"),
                                           ('{"cell_id": 3}', "not a valid CellResult: cell_id")])
def test_unreadable_records_name_file_and_problem(tmp_path, text, problem):
    f = tmp_path / "x.json"
    f.write_text(text)
    with pytest.raises(reader.StoreError, match=problem) as exc:
        reader.read_cell_result(f)
    assert str(f) in str(exc.value)
