"""Predicted vs measured peak: how close each of the planner's three memory models comes to the real peak.

The planner predicts a cell's per-rank memory three ways (suite.plan.Prediction, stored dumped in every result):
- textbook: ZeRO's static bytes plus Korthikanti's activations (`memory_bytes.total`) — the paper's model;
- as implemented: the same static + activation model with what this code base really keeps (`as_implemented`);
- traced: the real parallelize/train code run on fake tensors under torch's MemTracker (`traced.peak`); a cell
  that could not be traced says why (`trace_error`) and shows "untraced".
The measured side is rank 0's peak (its record), the largest over a cell's repeats:
torch.cuda.max_memory_allocated on a GPU ("cuda allocated"), else the MemTracker peak of the `measure_peaks: true` pass ("tracker").  Both are peaks of
allocated bytes, which is what the predictions are, so the ratios measured / predicted compare like with like
(the cell table's measured/predicted also falls back to model states on CPU; this section never does).

Results written before the as-implemented and traced predictions existed simply lack them: every key is read
as possibly missing and shown as '-'.  Cells without a measured peak are left out; with none the section is.
The section is a Pivot (rendered like the others in Markdown and HTML) plus numbers for JSON and CSV, and a
plot drawn with plots.py's helpers.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Any

from suite.axes import AXES, varying_axes
from suite.report.figure import MAX_BARS, Plot, figure, png, short_label
from suite.report.pivots import Pivot
from suite.report.tables import COLUMNS, CellRow, Column, MiB, fmt
from suite.results.schema import Axes, CellResult

# Measured peaks, best first, with the name the table gives their source.
SOURCES = (("total_cuda", "cuda allocated"), ("total_tracker", "tracker"))
KINDS = (("textbook", "textbook"), ("as_implemented", "as implemented"), ("traced", "traced"))

_ID_COLUMNS = {c.key: c for c in COLUMNS if c.key in ("run", "cell", *AXES)}  # the cell table's own headers
NUMBER_COLUMNS: tuple[Column, ...] = (
    Column("measured_mib", "measured peak (MiB)", ",.1f"),
    Column("measured_source", "measured by", ""),
    Column("textbook_mib", "textbook (MiB)", ",.1f"),
    Column("as_implemented_mib", "as implemented (MiB)", ",.1f"),
    Column("traced_mib", "traced (MiB)", ",.1f"),
    Column("ratio_textbook", "measured/textbook", ".2f"),
    Column("ratio_as_implemented", "measured/as-implemented", ".2f"),
    Column("ratio_traced", "measured/traced", ".2f"),
)
KEYS = ("run", "cell", *AXES, *(c.key for c in NUMBER_COLUMNS), "trace_status", "trace_error", "trace_notes")


@dataclass
class PeakRow:
    """The section's row for one cell: its measured peak beside the planner's three predictions (MiB)."""

    run: str
    cell: str
    axes: Axes
    measured_mib: float
    measured_source: str  # cuda allocated | tracker
    textbook_mib: float | None = None
    as_implemented_mib: float | None = None
    traced_mib: float | None = None
    ratio_textbook: float | None = None  # measured / predicted
    ratio_as_implemented: float | None = None
    ratio_traced: float | None = None
    trace_status: str | None = None  # traced | untraced (trace_error says why) | None: not in these results
    trace_error: str | None = None
    trace_notes: str | None = None

    def get(self, key: str) -> Any:
        """The value of a KEYS key (an axis by name)."""
        return self.axes.get(key) if key in AXES else getattr(self, key) if key in KEYS else None


def _get(d: Any, *keys: str) -> Any:
    """d[k1][k2]... or None as soon as a level is missing or not a dict (old results, a None 'traced')."""
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def measured_peak(results: list[CellResult]) -> tuple[float | None, str | None]:
    """(bytes, source) of the largest peak over the repeats, from the best source any repeat has.

    The source is chosen once for the cell (a CUDA peak when any repeat has one), so a repeat's tracker peak is
    never maxed against another's allocator peak.
    """
    for key, source in SOURCES:
        values = [r.memory.measured.get(key) for r in results if r.memory is not None]
        values = [v for v in values if v is not None]
        if values:
            return max(values), source
    return None, None


def predicted_peaks(prediction: dict[str, Any]) -> dict[str, Any]:
    """The three predicted per-rank totals (bytes or None) and the trace's status, error and notes."""
    traced = _get(prediction, "traced")
    error = _get(prediction, "trace_error")
    notes = []
    if isinstance(traced, dict):
        if traced.get("attention_kernel"):
            notes.append(f"attention kernel: {traced['attention_kernel']}")
        notes += [str(n) for n in traced.get("notes") or []]
    status = "traced" if _get(traced, "peak") is not None else "untraced" if error else None
    return {"textbook": _get(prediction, "memory_bytes", "total"),
            "as_implemented": _get(prediction, "as_implemented", "total"), "traced": _get(traced, "peak"),
            "trace_status": status, "trace_error": error, "trace_notes": "; ".join(notes) or None}


def peak_row(row: CellRow) -> PeakRow | None:
    """The section's row for one cell-table row (all repeats of a cell), or None without a measured peak."""
    results = row.results
    measured, source = measured_peak(results)
    if measured is None:
        return None
    pred = predicted_peaks(results[0].prediction)  # one prediction per cell: every repeat carries the same
    kinds = {}
    for kind, _ in KINDS:
        value = pred[kind]
        kinds[f"{kind}_mib"] = None if value is None else value / MiB
        kinds[f"ratio_{kind}"] = measured / value if value else None
    return PeakRow(run=row.run, cell=row.cell, axes=row.axes, measured_mib=measured / MiB, measured_source=source,
                   trace_status=pred["trace_status"], trace_error=pred["trace_error"],
                   trace_notes=pred["trace_notes"], **kinds)


def peak_rows(rows: list[CellRow]) -> list[PeakRow]:
    """Section rows in the cell table's order (cells without a measured peak left out)."""
    return [p for p in (peak_row(r) for r in rows) if p is not None]


def _id_columns(rows: list[CellRow]) -> list[Column]:
    """run (with several runs), cell, and the axes that vary among all the report's cells (as the cell table):
    an axis fixed for the whole report is already stated once above it."""
    keys = (["run"] if len({r.run for r in rows}) > 1 else []) + ["cell", *varying_axes(rows)]
    return [_ID_COLUMNS[k] for k in keys]


def peak_pivot(rows: list[CellRow]) -> list[Pivot]:
    """[the section] for Markdown/HTML, or [] when no cell has a measured peak (a list, to extend pivots with)."""
    prows = peak_rows(rows)
    if not prows:
        return []
    ids = _id_columns(rows)
    header = [c.header for c in ids] + [c.header for c in NUMBER_COLUMNS] + ["trace notes"]
    notes: dict[str, int] = {}
    body = []
    for p in prows:
        line = [fmt(c, p.get(c.key)) for c in ids]
        for c in NUMBER_COLUMNS:
            untraced = p.trace_status == "untraced" and c.key in ("traced_mib", "ratio_traced")
            line.append("untraced" if untraced else fmt(c, p.get(c.key)))
        text = f"untraced: {p.trace_error}" if p.trace_status == "untraced" else p.trace_notes
        line.append(f"[{notes.setdefault(text, len(notes) + 1)}]" if text else "-")
        body.append(line)
    left_out = len(rows) - len(prows)
    intro = [
        "measured: rank 0's peak, the largest over a cell's repeats; cuda allocated = torch.cuda."
        "max_memory_allocated, tracker = torch's MemTracker in the measure_peaks pass",
        "textbook = ZeRO states + Korthikanti activations; as implemented = the same with what this code keeps; "
        "traced = the real code run on fake tensors ('-': not in these results, from before it was predicted)",
    ]
    if left_out:
        intro.append(f"{left_out} cell(s) without a measured peak (CPU runs without measure_peaks, failed cells) "
                     "left out")
    return [Pivot("peaks", "Predicted vs measured peak memory per rank",
                  "Which memory model comes closest to the measured peak: textbook, as implemented or traced?",
                  header, body, intro + [f"[{n}] {text}" for text, n in notes.items()])]


def public_peaks(rows: list[CellRow]) -> list[dict[str, Any]]:
    """The section's rows as numbers (JSON), keys in KEYS order."""
    return [{k: p.get(k) for k in KEYS} for p in peak_rows(rows)]


def peaks_csv(rows: list[CellRow]) -> str | None:
    """The section as CSV (peaks.csv beside cells.csv), or None when no cell has a measured peak."""
    prows = public_peaks(rows)
    if not prows:
        return None
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(KEYS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(prows)
    return buf.getvalue()


BAR_COLORS = {"measured": "#222222", "textbook": "#4c72b0", "as_implemented": "#dd8452", "traced": "#55a868"}


def peak_plot(rows: list[CellRow], axes: list[str], runs: bool):
    """Grouped horizontal bars, one group per cell: the measured peak above its three predictions.

    Bars rather than a scatter because a cell's four numbers are read together (which prediction is nearest to
    this cell's peak?) and cell labels fit on the y axis.  Cut to figure.MAX_BARS cells like the memory plot.
    """

    prows = peak_rows(rows)[:MAX_BARS]
    if not prows:
        return None
    series = [("measured", "measured peak"), *KINDS]
    height = 0.8 / len(series)
    fig = figure(8.0, max(3.0, 0.6 * len(prows) + 1.5))
    ax = fig.add_subplot()
    top = max(v for p in prows for v in (p.get(f"{k}_mib") for k, _ in series) if v is not None)
    for j, (kind, label) in enumerate(series):
        ys = [i + (j - (len(series) - 1) / 2) * height for i in range(len(prows))]
        values = [p.get(f"{kind}_mib") for p in prows]
        ax.barh([y for y, v in zip(ys, values) if v is not None], [v for v in values if v is not None], height,
                color=BAR_COLORS[kind], label=label)
        if kind == "traced":
            for y, p in zip(ys, prows):
                if p.trace_status == "untraced":
                    ax.text(top * 0.01, y, "untraced", va="center", fontsize=7, color=BAR_COLORS[kind])
    ax.set_yticks(range(len(prows)), [short_label(p, axes, runs) for p in prows], fontsize=8)
    ax.invert_yaxis()  # first cell on top, as in the table
    ax.set_xlabel("MiB per rank")
    ax.set_title("Peak memory per rank: measured vs predicted")
    ax.legend(fontsize=8)
    return Plot("peaks", "Predicted vs measured peak memory per rank", png(fig))
