"""What every figure of the report shares: a matplotlib figure on the Agg canvas (no pyplot, nothing global, no
display), its PNG bytes, a cell's short label, the size limits and colours.  plots.py, bands.py and peaks.py draw
with these.  matplotlib is an optional extra (`pip install 'suite[report]'`), imported only when a figure is made.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from suite.report.tables import CellRow

MAX_BARS, MAX_BOXES, MAX_LINES, MAX_LOSS_FIGURES = 24, 40, 12, 4
COLORS = {"parameters": "#4c72b0", "gradients": "#dd8452", "optimizer_states": "#55a868",
          "master_weights": "#8172b3", "activations": "#c44e52", "other": "#b0b0b0"}


class PlotError(Exception):
    """Plots cannot be drawn (matplotlib missing)."""


@dataclass
class Plot:
    name: str   # file stem
    title: str
    png: bytes


def figure(width: float, height: float, layout: str | None = "constrained"):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise PlotError("plots need matplotlib: pip install 'suite[report]' (or run the report with --format md, "
                        "csv or json)") from exc
    fig = Figure(figsize=(width, height), dpi=100, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def short_label(row: CellRow, axes: list[str], runs: bool) -> str:
    label = " ".join(str(row.get(a)) for a in axes) or row.cell
    return f"{row.run} {label}" if runs else label
