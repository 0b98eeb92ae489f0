"""GitHub-flavoured Markdown: what people paste into READMEs, pull requests and CI job summaries.

Columns come in a fixed order (tables.COLUMNS; axes that do not vary are stated once above the table instead of
repeated in every row), every number's unit is in its header, and the long MFU accounting becomes a footnote.
"""

from __future__ import annotations

from typing import Any

from suite.axes import AXIS_HEADERS
from suite.report.pivots import Pivot
from suite.report.tables import (CellRow, display_columns, fixed_line, footnotes, groups, run_table,
                                 text_table)
from suite.results.reader import Run


def escape(text: Any) -> str:
    """A table cell: pipes escaped, newlines flattened (GFM tables are one line per row), and no HTML: a `<`
    from a stored result (a scenario name, an error) is written as `&lt;`, so the text shows as text wherever
    the Markdown is rendered, and never opens a tag."""
    return plain(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def plain(text: Any) -> str:
    """Text from results outside a table (titles, notes, the fixed axes): no HTML tag can open."""
    return str(text).replace("<", "&lt;")


MARKED = {"best": "**{}**", "worst": "_{}_"}  # a pivot's marks (Pivot.marks), around the escaped value


def table(header: list[str], body: list[list[str]], marks: dict[int, dict[int, str]] | None = None) -> str:
    lines = ["| " + " | ".join(escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    marks = marks or {}
    lines += ["| " + " | ".join(MARKED[marks[i][j]].format(escape(v)) if j in marks.get(i, ()) and v else escape(v)
                                for j, v in enumerate(line)) + " |" for i, line in enumerate(body)]
    return "\n".join(lines)


def pivot_markdown(p: Pivot, level: str = "###") -> str:
    parts = [f"{level} {p.title}", "", f"_{p.question}_", ""]
    if p.marked:
        parts += [f"{plain(p.marked)} Best in bold, worst in italics.", ""]
    parts.append(table(p.header, p.rows, p.marks))
    if p.notes:
        parts += [""] + [f"- {plain(n)}" for n in p.notes]
    return "\n".join(parts)


def report_markdown(runs: list[Run], rows: list[CellRow], pivots: list[Pivot], group_by: list[str],
                    plots: list[tuple[str, str]] = ()) -> str:
    """The whole report.  plots: (title, relative path) of PNG files written beside the Markdown, if any."""
    parts = ["# suite report", "", table(*run_table(runs)), ""]
    fixed = fixed_line(rows)
    if fixed:
        parts += ["Same in every cell: " + ", ".join(f"{AXIS_HEADERS[a]}={plain(v)}" for a, v in fixed.items()), ""]
    parts += [f"## Cells ({len(rows)})", ""]
    columns = display_columns(rows)
    notes: dict[str, int] = {}
    for title, section in groups(rows, group_by):
        header, body = text_table(section, columns, notes)
        if title:
            parts += [f"### {plain(title)}", ""]
        parts += [table(header, body), ""]
    if notes:
        parts += ["MFU accounting: " + "; ".join(footnotes(notes)), ""]
    for p in pivots:
        parts += [pivot_markdown(p, "##"), ""]
    if plots:
        parts += ["## Plots", ""] + [f"![{title}]({path})" for title, path in plots] + [""]
    return "\n".join(parts)
