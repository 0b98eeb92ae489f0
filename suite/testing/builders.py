"""Cells and stored results for tests and scripts: real `Cell`s from a small scenario, real `CellResult`s.

One place builds them, so a test never hand-writes a cell's fields (which drift from the scenario's) or a
result's settings as a loose dict:

    make_cell(**overrides)           one cell of a small gpt-tiny scenario with any Scenario field overridden
    make_result(cell=None, **fields) a CellResult of that cell (status ok, no measurements) with any field set;
                                     `axes` may override single axis values: make_result(axes={"strategy": "[x]"})
    make_row(**values)               a report row (CellRow) with some columns, axes and raw material set
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from suite.axes import AXES
from suite.report.tables import CellRow
from suite.results.schema import Axes, CellResult
from suite.scenario import Cell, Scenario, expand

BASE: dict[str, Any] = dict(name="test", model="gpt-tiny", seq_len=32, steps=6, warmup_steps=1, device="cpu",
                            micro_batch_size=2, global_batch_size=4, gpus=2, optimizer={"lr": 5e-3})


def make_cell(**overrides: Any) -> Cell:
    """One cell from BASE plus overrides (any Scenario field, single values only)."""
    (cell,) = expand(Scenario(**{**BASE, **overrides}))
    return cell


def make_result(cell: Cell | None = None, *, axes: dict[str, Any] | None = None, **fields: Any) -> CellResult:
    """A stored result of `cell` (default: make_cell()): its id, axes and settings, status ok, nothing measured.
    `axes` overrides single axis values (e.g. hostile text); `fields`, any other CellResult field."""
    cell = cell or make_cell()
    values = {"cell_id": cell.id, "status": "ok", "started_at": "t0", "finished_at": "t1", "launcher": "torchrun",
              "prediction": {}, **fields}
    return CellResult(axes=Axes(**{**cell.axes(), **(axes or {})}), cell=cell, **values)


def make_row(*, results: list[CellResult] | None = None, **values: Any) -> CellRow:
    """A report row (suite/report/tables.CellRow) with the given columns, axis values and raw material set, and
    everything else empty; its axes start from make_cell()'s (or the first result's)."""
    axes = (results[0].axes if results else Axes(**make_cell().axes())).as_dict()
    axes.update({k: values.pop(k) for k in list(values) if k in AXES})
    columns = {f.name: None for f in fields(CellRow) if f.default is MISSING and f.default_factory is MISSING}
    columns.update(run="0001", cell=(results[0].cell_id if results else "cell"), status="ok", repeats=1)
    return CellRow(**{**columns, "axes": Axes(**axes), "results": list(results or []), **values})
