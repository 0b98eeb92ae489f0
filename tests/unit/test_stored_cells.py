"""A stored result's cell is re-validated as a `Cell`, and never resolved again: a result is data from a
stranger, so reading one must not read a config path or import a factory module it names."""

from __future__ import annotations

import json
import sys

import pytest

from suite.results.reader import StoreError, read_cell_result
from suite.results.schema import CellResult
from suite.scenario import Cell
from suite.testing.builders import make_cell, make_result

SPY = "suite_stored_cell_spy"  # a module that records being imported


@pytest.fixture
def spy(tmp_path, monkeypatch):
    (tmp_path / f"{SPY}.py").write_text(
        "import pathlib, os\npathlib.Path(os.environ['SPY_MARK']).write_text('imported')\n"
        "def build(**kw):\n    raise SystemExit('a stored cell ran its factory')\n")
    mark = tmp_path / "imported"
    monkeypatch.setenv("SPY_MARK", str(mark))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield mark
    sys.modules.pop(SPY, None)


def _stored(model: dict, tmp_path) -> dict:
    """A real stored result whose cell's model is replaced by `model` (as a hostile folder would)."""
    record = json.loads(make_result().model_dump_json())
    record["cell"]["model"] = model
    path = tmp_path / "cells" / "x-r0.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def test_a_stored_python_model_without_its_probe_is_refused_not_imported(spy, tmp_path):
    path = _stored({"family": "python", "factory": f"{SPY}:build", "inputs": "tokens", "vocab": 64}, tmp_path)
    with pytest.raises(StoreError, match="does not import"):
        read_cell_result(path)
    assert not spy.exists() and SPY not in sys.modules


def test_a_stored_hf_model_without_its_contents_is_refused_not_read(tmp_path):
    secret = tmp_path / "config.json"
    secret.write_text('{"model_type": "llama"}')
    path = _stored({"family": "hf", "config": str(secret)}, tmp_path)
    with pytest.raises(StoreError, match="does not read"):
        read_cell_result(path)


def test_the_same_python_model_in_a_scenario_is_probed(spy, monkeypatch):
    # the contrast: a scenario the user declared resolves its own model (which is what imports the factory),
    # once the module is declared theirs (SUITE_TRUST; models/trust.py)
    monkeypatch.setenv("SUITE_TRUST", SPY)
    with pytest.raises(BaseException):
        make_cell(model={"family": "python", "factory": f"{SPY}:build", "inputs": "tokens", "vocab": 64})
    assert spy.exists()


def test_a_stored_cell_reads_back_as_the_cell_and_writes_back_as_written():
    cell = make_cell(strategy="zero3")
    stored = json.loads(make_result(cell).model_dump_json())
    del stored["cell"]["tensor_parallel"]  # as a result older than that field wrote it
    back = CellResult.model_validate(stored)
    assert isinstance(back.cell, Cell) and back.cell.strategy == "zero3" and back.cell.tensor_parallel == 1
    assert json.loads(back.model_dump_json())["cell"] == stored["cell"]  # byte-stable when re-published
    replaced = back.model_copy(update={"cell": cell})
    assert json.loads(replaced.model_dump_json())["cell"]["tensor_parallel"] == 1  # a new cell dumps in full
