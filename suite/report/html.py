"""One self-contained HTML file: tables, pivots and plots (PNG as base64 data URIs), inline CSS, no scripts.

It opens from disk in any browser and survives being mailed or uploaded as a CI artifact: nothing is fetched.
Every piece of text from the results is escaped (cell ids, error tails and paths are data, not markup).
"""

from __future__ import annotations

import base64
from html import escape
from suite.axes import AXIS_HEADERS
from suite.report.figure import Plot
from suite.report.pivots import Pivot
from suite.report.tables import (RUN_HEADERS, CellRow, display_columns, fixed_axes, footnotes, groups, run_table,
                                 text_table)
from suite.results.reader import Run

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.85rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: right; white-space: nowrap; }
th { background: #f2f2f2; position: sticky; top: 0; }
td:first-child, th:first-child { text-align: left; }
td.status-ok { color: #1a7f37; } td.status-bad { color: #cf222e; font-weight: bold; }
p.question { font-style: italic; color: #555; }
figure { margin: 1rem 0 2rem; } figcaption { font-size: 0.9rem; color: #555; }
img { max-width: 100%; border: 1px solid #eee; }
.notes { font-size: 0.8rem; color: #555; }
.scroll { overflow-x: auto; max-width: 100%; }
"""


def _table(header: list[str], body: list[list[str]], cls: str, status_col: int | None = None) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    lines = []
    for line in body:
        cells = []
        for i, v in enumerate(line):
            klass = ""
            if i == status_col:
                klass = ' class="status-ok"' if v == "ok" else ' class="status-bad"'
            cells.append(f"<td{klass}>{escape(v)}</td>")
        lines.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="scroll"><table class="{cls}"><thead><tr>{head}</tr></thead><tbody>\n' + "\n".join(lines)
            + "\n</tbody></table></div>")


def _pivot(p: Pivot) -> str:
    notes = "".join(f"<li>{escape(n)}</li>" for n in p.notes)
    return (f'<section class="pivot" id="pivot-{escape(p.name)}"><h2>{escape(p.title)}</h2>'
            f'<p class="question">{escape(p.question)}</p>{_table(p.header, p.rows, "pivot")}'
            + (f'<ul class="notes">{notes}</ul>' if notes else "") + "</section>")


def _plot(p: Plot) -> str:
    data = base64.b64encode(p.png).decode("ascii")
    return (f'<figure id="plot-{escape(p.name)}"><img alt="{escape(p.title)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{escape(p.title)}</figcaption></figure>")


def report_html(runs: list[Run], rows: list[CellRow], pivots: list[Pivot], plots: list[Plot],
                group_by: list[str]) -> str:
    parts = [f"<h1>suite report</h1><h2>Runs ({len(runs)})</h2>", _table(RUN_HEADERS, run_table(runs), "runs")]
    fixed = fixed_axes(rows)
    if fixed:
        parts.append("<p>Same in every cell: " + escape(", ".join(f"{AXIS_HEADERS[a]}={v}" for a, v in fixed.items()))
                     + "</p>")
    parts.append(f"<h2>Cells ({len(rows)})</h2>")
    columns = display_columns(rows)
    status_col = next((i for i, c in enumerate(columns) if c.key == "status"), None)
    notes: dict[str, int] = {}
    for title, section in groups(rows, group_by):
        header, body = text_table(section, columns, notes)
        if title:
            parts.append(f"<h3>{escape(title)}</h3>")
        parts.append(_table(header, body, "cells", status_col))
    if notes:
        parts.append('<p class="notes">MFU accounting: ' + escape("; ".join(footnotes(notes))) + "</p>")
    parts += [_pivot(p) for p in pivots]
    if plots:
        parts.append("<h2>Plots</h2>")
        parts += [_plot(p) for p in plots]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>suite report</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")
