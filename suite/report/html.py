"""One self-contained HTML file: tables, pivots and plots (PNG as base64 data URIs), inline CSS, no scripts.

It opens from disk in any browser and survives being mailed or uploaded as a CI artifact: nothing is fetched.
The page is a Jinja2 template (templates/report.html.j2, autoescape on: suite/report/templating.py); this
module hands it text only, so every piece of text from the results is escaped (cell ids, error tails and
paths are data, not markup).

The page fits a 1400 px window: the cells table, too wide for one with every column, is drawn as two tables
over the same rows — what identifies a row (run, cell, the axes that vary, status) then speed in the first
(class `cells`), memory and convergence in the second (class `cells-memory`) — header cells wrap, and every
table sits in a box that scrolls sideways rather than widen the page (tests/e2e/test_report_browser.py).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from suite.axes import AXIS_HEADERS
from suite.report import templating
from suite.report.figure import Plot
from suite.report.pivots import Pivot
from suite.report.tables import (RUN_HEADERS, CellRow, Column, display_columns, fixed_axes, footnotes, groups,
                                 run_table, text_table)
from suite.results.reader import Run

TEMPLATES = Path(__file__).parent / "templates"
IDENTITY = ("status",)  # besides run, cell and the axes: repeated in both tables, so each reads on its own
SPEED = ("repeats", "tokens_per_s", "tokens_per_s_per_device", "step_median_ms", "step_p90_ms", "mfu_pct",
         "mfu_basis")  # the first table's; every other column (memory, losses, convergence) is the second's


@dataclass(frozen=True)
class Table:
    """What the template's `table` macro draws: header and body are text; status_col: the column whose cells
    are coloured by status (ok or not), None for none."""
    header: list[str]
    body: list[list[str]]
    cls: str
    status_col: int | None = None
    caption: str = ""


def _split(columns: list[Column]) -> tuple[list[int], list[int]]:
    """Indices of `columns` in the speed table and in the memory-and-convergence table: each starts with the
    columns that identify a row (run, cell, axes, status)."""
    ident = [i for i, c in enumerate(columns) if c.key in ("run", "cell", *AXIS_HEADERS, *IDENTITY)]
    speed = [i for i, c in enumerate(columns) if c.key in SPEED]
    rest = [i for i in range(len(columns)) if i not in ident and i not in speed]
    return ident + speed, ident + rest


def _cells_tables(header: list[str], body: list[list[str]], columns: list[Column]) -> list[Table]:
    tables = []
    for pick, cls, caption in zip(_split(columns), ("cells", "cells-memory"), ("Speed", "Memory and convergence")):
        keys = [columns[i].key for i in pick]
        tables.append(Table([header[i] for i in pick], [[line[i] for i in pick] for line in body], cls,
                            keys.index("status") if "status" in keys else None, caption))
    return tables


def report_html(runs: list[Run], rows: list[CellRow], pivots: list[Pivot], plots: list[Plot],
                group_by: list[str]) -> str:
    page = templating.template(TEMPLATES, "report.html.j2")  # compiled once per process
    fixed = fixed_axes(rows)
    columns = display_columns(rows)
    notes: dict[str, int] = {}
    sections = []
    for title, section in groups(rows, group_by):
        header, body = text_table(section, columns, notes)
        sections.append((title, _cells_tables(header, body, columns)))
    return page.render(
        runs=Table(RUN_HEADERS, run_table(runs), "runs"), n_runs=len(runs), n_rows=len(rows),
        fixed=", ".join(f"{AXIS_HEADERS[a]}={v}" for a, v in fixed.items()), sections=sections,
        footnotes="; ".join(footnotes(notes)),
        pivots=[(p, Table(p.header, p.rows, "pivot")) for p in pivots],
        plots=[(p, base64.b64encode(p.png).decode("ascii")) for p in plots])
