"""`suite report`: stored results -> rows -> pivots (-> plots) -> Markdown / HTML / CSV / JSON.

Pure functions over stored files: suite.results.reader.load_runs reads the run folders, tables/pivots arrange
them, and this module writes the formats asked for.  With --out DIR every format is a file in DIR (report.md, report.html with
the plots embedded plus plots/*.png, cells.csv, peaks.csv, report.json); without it a single text format goes to stdout.
"""

from __future__ import annotations

import csv
import io
import json
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from suite.axes import AXES
from suite.report.launch_cost import launch_cost_pivot
from suite.report.markdown import report_markdown
from suite.report.peaks import peak_pivot, peaks_csv, public_peaks
from suite.report.pivots import pivots as build_pivots
from suite.report.tables import COLUMN_KEYS, CellRow, cell_rows, public
from suite.results.reader import Run
from suite.results.store import write_file

FORMATS = ("md", "html", "csv", "json")
FILES = {"md": "report.md", "html": "report.html", "csv": "cells.csv", "json": "report.json"}


class ReportUsageError(Exception):
    """Bad options (exit 2)."""


def check_options(formats: list[str], out: Path | None, group_by: list[str]) -> None:
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ReportUsageError(f"--format {unknown[0]!r} is not one of {', '.join(FORMATS)}")
    bad = [a for a in group_by if a not in AXES]
    if bad:
        raise ReportUsageError(f"--group-by {bad[0]!r} is not an axis; axes: {', '.join(AXES)}")
    if out is None and "html" in formats:
        raise ReportUsageError("--format html writes a file (and its plots): give --out DIR")
    if out is None and len(set(formats)) > 1:
        raise ReportUsageError(f"{len(set(formats))} formats without --out: give --out DIR, or one text format")


def to_csv(rows: list[CellRow]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(COLUMN_KEYS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(public(r) for r in rows)
    return buf.getvalue()


def to_json(runs: list[Run], rows: list[CellRow], pivots: list) -> str:
    doc = {
        "runs": [{"label": r.label, "path": str(r.path), "manifest": r.manifest.model_dump(mode="json")} for r in runs],
        "columns": list(COLUMN_KEYS),
        "cells": [public(r) for r in rows],
        "pivots": [{"name": p.name, "title": p.title, "question": p.question, "header": p.header, "rows": p.rows,
                    "notes": p.notes, "marks": {str(i): {str(j): m for j, m in cols.items()}
                                                for i, cols in p.marks.items()}} for p in pivots],
        "peaks": public_peaks(rows),  # predicted vs measured peak, as numbers (the Markdown/HTML section's rows)
    }
    return json.dumps(doc, indent=1) + "\n"


def render(runs: list[Run], formats: list[str], out: Path | None, group_by: list[str]) -> dict[str, str | Path]:
    """Render the runs in each format: {format: path written} with --out, else {format: text}."""
    check_options(formats, out, group_by)
    rows = cell_rows(runs, group_by)
    plots = _plots_meanwhile(rows) if "html" in formats else []  # drawn while the tables are built
    pivots = build_pivots(rows)
    # what Markdown and HTML show; JSON carries the peaks as numbers and the launch cost as a pivot
    sections = pivots + peak_pivot(rows) + launch_cost_pivot(rows)
    produced: dict[str, str | Path] = {}
    texts = {}
    for f in dict.fromkeys(formats):
        if f == "md":
            texts[f] = report_markdown(runs, rows, sections, group_by,
                                       [(p.title, f"plots/{p.name}.png") for p in plots] if out else [])
        elif f == "html":
            from suite.report.html import report_html

            texts[f] = report_html(runs, rows, sections, plots, group_by)
        elif f == "csv":
            texts[f] = to_csv(rows)
        else:
            texts[f] = to_json(runs, rows, pivots + launch_cost_pivot(rows))
    if out is None:
        return texts
    # every file atomically (store.write_file): a reader of --out sees the old file or the new one, and a
    # read-only folder or a file in the way is a WriteError naming the path (exit 3)
    for p in plots:
        write_file(out / "plots" / f"{p.name}.png", p.png)
    for f, text in texts.items():
        produced[f] = write_file(out / FILES[f], text)
    peaks = peaks_csv(rows) if "csv" in texts else None
    if peaks:  # the section's own table beside cells.csv (whose columns stay fixed)
        produced["peaks-csv"] = write_file(out / "peaks.csv", peaks)
    return produced


# From this many rows on, the plots are drawn in a forked child while this process builds the tables: importing
# matplotlib and drawing take about as long as the tables of 10,000 cells, and on two cores they overlap.
PARALLEL_PLOT_ROWS = 2000
_ROWS: list[CellRow] = []  # what the forked child draws (inherited at the fork: nothing is pickled to it)


def _draw_inherited() -> list:
    from suite.report.plots import all_plots

    return all_plots(_ROWS)


class LatePlots(Sequence):
    """The plots a forked child is drawing, as a list that waits for them when first looked at: the report's
    tables (rendered before its plots section) are built meanwhile."""

    def __init__(self, pool: ProcessPoolExecutor, future: Future, rows: list[CellRow]) -> None:
        self._pool, self._future, self._rows, self._plots = pool, future, rows, None

    def _get(self) -> list:
        if self._plots is None:
            try:
                self._plots = self._future.result()
            except BrokenProcessPool:  # the child died (killed, out of memory): draw here instead
                from suite.report.plots import all_plots

                self._plots = all_plots(self._rows)
            finally:
                self._pool.shutdown()
        return self._plots

    def __getitem__(self, i):  # type: ignore[override]
        return self._get()[i]

    def __len__(self) -> int:
        return len(self._get())


def _plots_meanwhile(rows: list[CellRow]) -> Sequence:
    """The rows' plots: drawn here and now for a few rows (or one CPU, or no fork), else started in a forked child
    and returned as LatePlots.  PlotError when matplotlib is missing (raised where the plots are looked at)."""
    global _ROWS
    from suite.report.plots import all_plots

    if len(rows) < PARALLEL_PLOT_ROWS or (os.cpu_count() or 1) < 2 \
            or "fork" not in multiprocessing.get_all_start_methods():
        return all_plots(rows)
    _ROWS = rows
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork"))
    try:
        future = pool.submit(_draw_inherited)  # forks now: the child sees the rows as they are
    finally:
        _ROWS = []
    return LatePlots(pool, future, rows)
