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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from suite.axes import AXIS_HEADERS
from suite.report import templating
from suite.report.figure import Plot
from suite.report.pivots import Pivot
from suite.report.tables import (CellRow, Column, display_columns, fixed_line, footnotes, groups,
                                 run_table, text_table)
from suite.results.reader import Run

TEMPLATES = Path(__file__).parent / "templates"
IDENTITY = ("status",)  # besides run, cell and the axes: repeated in both tables, so each reads on its own
SPEED = ("repeats", "tokens_per_s", "tokens_per_s_per_device", "step_median_ms", "step_p90_ms", "mfu_pct",
         "mfu_basis")  # the first table's; every other column (memory, losses, convergence) is the second's


# What the cells tables mark: the best and the worst value of each of these columns among a section's rows
# (True: higher is better), and a measured/predicted memory ratio off by more than PREDICTION_TOLERANCE.
RANKED = {"tokens_per_s_per_device": True, "step_median_ms": False, "memory_measured_mib": False}
PREDICTION_TOLERANCE = 0.10  # |measured / predicted - 1| beyond this: the prediction missed (class "miss")
LEGEND = (f"Marked: the best and the worst tokens/s per device, step time and measured memory among the rows "
          f"(green, red); a measured/predicted memory ratio off by more than {PREDICTION_TOLERANCE:.0%} (amber).")


@dataclass(frozen=True)
class Table:
    """What the template's `table` macro draws: header and body are text; status_col: the column whose cells
    are coloured by status (ok or not), None for none; marks: row -> {column: CSS class} for the few cells
    marked best, worst or missed (the other rows are drawn in one piece, fast), in cells tables and pivots."""
    header: list[str]
    body: list[list[str]]
    cls: str
    status_col: int | None = None
    caption: str = ""
    marks: dict[int, dict[int, str]] = field(default_factory=dict)


def marks(rows: list[CellRow], columns: list[Column]) -> dict[int, dict[int, str]]:
    """row -> {column index: "best" | "worst" | "miss"} over `columns` (see RANKED, PREDICTION_TOLERANCE)."""
    out: dict[int, dict[int, str]] = {}
    for j, c in enumerate(columns):
        if c.key in RANKED:
            values = [(v, i) for i, r in enumerate(rows) if (v := r.get(c.key)) is not None]
            if len({v for v, _ in values}) < 2:
                continue  # nothing to tell apart
            hi, lo = max(values)[0], min(values)[0]
            best, worst = (hi, lo) if RANKED[c.key] else (lo, hi)
            for v, i in values:
                if v in (best, worst):
                    out.setdefault(i, {})[j] = "best" if v == best else "worst"
        elif c.key == "memory_ratio":
            for i, r in enumerate(rows):
                if r.memory_ratio is not None and abs(r.memory_ratio - 1) > PREDICTION_TOLERANCE:
                    out.setdefault(i, {})[j] = "miss"
    return out


def _split(columns: list[Column]) -> tuple[list[int], list[int]]:
    """Indices of `columns` in the speed table and in the memory-and-convergence table: each starts with the
    columns that identify a row (run, cell, axes, status)."""
    ident = [i for i, c in enumerate(columns) if c.key in ("run", "cell", *AXIS_HEADERS, *IDENTITY)]
    speed = [i for i, c in enumerate(columns) if c.key in SPEED]
    rest = [i for i in range(len(columns)) if i not in ident and i not in speed]
    return ident + speed, ident + rest


def _cells_tables(header: list[str], body: list[list[str]], columns: list[Column],
                  marked: dict[int, dict[int, str]]) -> list[Table]:
    tables = []
    for pick, cls, caption in zip(_split(columns), ("cells", "cells-memory"), ("Speed", "Memory and convergence")):
        keys = [columns[i].key for i in pick]
        where = {old: new for new, old in enumerate(pick)}
        mine = {i: {where[j]: m for j, m in cols.items() if j in where} for i, cols in marked.items()}
        tables.append(Table([header[i] for i in pick], [[line[i] for i in pick] for line in body], cls,
                            keys.index("status") if "status" in keys else None, caption,
                            {i: cols for i, cols in mine.items() if cols}))
    return tables


class _Embedded(Sequence):
    """The plots as (plot, base64 PNG), made when the template reaches them: a forked child may still be drawing
    them while the tables above are rendered (report/render.py)."""

    def __init__(self, plots: Sequence[Plot]) -> None:
        self._plots = plots

    def __getitem__(self, i):  # type: ignore[override]
        p = self._plots[i]
        return p, base64.b64encode(p.png).decode("ascii")

    def __len__(self) -> int:
        return len(self._plots)


def report_html(runs: list[Run], rows: list[CellRow], pivots: list[Pivot], plots: Sequence[Plot],
                group_by: list[str]) -> str:
    page = templating.template(TEMPLATES, "report.html.j2")  # compiled once per process
    fixed = fixed_line(rows)
    columns = display_columns(rows)
    notes: dict[str, int] = {}
    sections = []
    for title, section in groups(rows, group_by):
        header, body = text_table(section, columns, notes)
        sections.append((title, _cells_tables(header, body, columns, marks(section, columns))))
    return page.render(
        runs=Table(*run_table(runs), "runs"), n_runs=len(runs), n_rows=len(rows),
        fixed=", ".join(f"{AXIS_HEADERS[a]}={v}" for a, v in fixed.items()), sections=sections,
        footnotes="; ".join(footnotes(notes)),
        pivots=[(p, Table(p.header, p.rows, "pivot", marks=p.marks)) for p in pivots],
        legend=LEGEND, plots=_Embedded(plots))
