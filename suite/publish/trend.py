"""A cell's trend in one group, as inline SVG: one panel per metric, one line per machine, over time.

- x: the runs in the order they were made (manifest created_at), evenly spaced and labelled with date and
  commit; each point is a link to its run's page, which shows the manifest (versions, git commit, image
  digest, driver);
- a shaded bar (timing panels): where compare expected an unchanged run to fall, from that machine's history
  before the point (compare/noise.py; drawn from a machine's 6th run on);
- a red ring: compare's verdict against the earlier runs was a regression for that metric; an amber ring: a
  timing change past the threshold when there was no noise estimate yet (too few earlier runs and repeats).
The SVG keeps text as text (svg.fonttype none: small, searchable) and each set of rings is a group with an id
`regression-<metric>-<prefix><n>` (or `suspect-...`), which the browser test looks for.  matplotlib draws it (the
`report` extra).

Speed: a night of 1,000 cells draws 1,000 of these.  Making a figure's axes (and their ticks) costs as much as
drawing it, so each process keeps one blank figure per panel count and clears what the last trend drew on it
(`_canvas`) instead of building a new one.
"""

from __future__ import annotations

import io
import math
import re
from typing import Callable

from suite.publish.series import METRICS, TABLE_ONLY, Point
from suite.report.figure import figure as _figure

COLORS = ("#4c72b0", "#dd8452", "#55a868", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974")
RED, AMBER = "#cf222e", "#d4a72c"
# The metric a check's regression is drawn on (status and convergence regressions are in the table below).
DRAWN_ON = {"step_time": "step_time", "tokens_per_s": "tokens_per_s", "peak_memory": "peak_memory",
            "final_loss": "final_loss", "eval_loss": "eval_loss", "accuracy": "accuracy"}


def _order(lines: list[tuple[str, list[Point]]]) -> dict[str, int]:
    """Every run of the figure at its position in time (runs are evenly spaced: nights, not clock time)."""
    runs = sorted({(p.run.manifest.created_at, p.run_key) for _, pts in lines for p in pts})
    return {key: i for i, (_, key) in enumerate(runs)}


def _ticks(lines: list[tuple[str, list[Point]]], order: dict[str, int], most: int = 8) -> tuple[list, list]:
    first = {}
    for _, pts in lines:
        for p in pts:
            m = p.run.manifest
            first.setdefault(order[p.run_key], f"{m.created_at[5:16].replace('T', ' ')}\n{(m.git_commit or '-')[:7]}")
    xs = sorted(first)
    step = max(1, -(-len(xs) // most))
    xs = xs[::step]
    return xs, [first[x] for x in xs]


def _rings(ax, points: list[Point], metric: str, x, findings: str, color: str, gid: str, link) -> bool:
    hit = [p for p in points if any(DRAWN_ON.get(f.metric) == metric for f in getattr(p, findings))]
    if not hit:
        return False
    ring = ax.scatter([x(p) for p in hit], [p.values[metric] for p in hit], s=110, facecolors="none",
                      edgecolors=color, linewidths=2, zorder=4,
                      label="regression" if findings == "regressions" else "past threshold, no noise estimate yet")
    ring.set_gid(gid)
    ring.set_urls([link(p) for p in hit])
    return True


def require_matplotlib() -> None:
    """PlotError (with what to install) unless matplotlib imports: publish asks before it writes anything."""
    _figure(1, 1)


def trend_svg(lines: list[tuple[str, list[Point]]], link: Callable[[Point], str], salt: str,
              prefix: str = "") -> str:
    """lines: (machine label, its points oldest first); link(point) -> the URL of the point's run page;
    prefix: makes the SVG's element ids unique among the figures of one page."""
    import matplotlib

    # labels are text from the results (host names): never matplotlib's math markup ($...$)
    with matplotlib.rc_context({"text.parse_math": False, "svg.fonttype": "none", "svg.hashsalt": salt}):
        fig = _draw(lines, link, prefix)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    # matplotlib numbers its groups figure_1, axes_1, ... in every figure: unique ids on a page of several
    return re.sub(r'id="([A-Za-z][\w.]*_\d+)"', lambda m: f'id="{prefix}{m.group(1)}"', text[text.index("<svg"):])


# Values matplotlib can place on an axis: a stored record may hold a final loss of -1e308 (finite, so valid),
# whose axis range has no computable ticks.  Such a point is listed in the tables, not drawn.
PLOTTABLE = 1e15


def _plottable(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and abs(value) <= PLOTTABLE


_CANVASES: dict[int, tuple] = {}  # panel count -> (figure, its axes): this process's blank figures


def _canvas(panels: int):
    """A figure with `panels` axes stacked on one x axis, blank: made once per process and panel count, then
    cleared of the lines, points, bands, rings, notes and legend the previous trend drew on it."""
    from matplotlib.ticker import MaxNLocator

    if panels not in _CANVASES:
        height = 1.5 * panels + 1.0
        fig = _figure(9.5, height, layout=None)  # fixed margins: constrained layout would cost half the time
        axes = fig.subplots(panels, 1, sharex=True, squeeze=False)[:, 0]
        fig.subplots_adjust(left=0.09, right=0.985, top=1 - 0.45 / height, bottom=0.45 / height, hspace=0.12)
        for ax in axes:
            ax.tick_params(labelsize=7)
            ax.yaxis.set_major_locator(MaxNLocator(4))  # few ticks: each costs a drawn artist, and the SVG's size
            ax.grid(True, alpha=0.3)
        _CANVASES[panels] = fig, axes
    fig, axes = _CANVASES[panels]
    for legend in list(fig.legends):
        legend.remove()
    for ax in axes:
        for container in list(ax.containers):  # an errorbar's container, then its lines
            container.remove()
        for artist in [*ax.lines, *ax.collections, *ax.texts]:
            artist.remove()
        ax.relim()  # no data left: the next trend's values set the y range
        ax.autoscale(enable=True, axis="y")
    return fig, axes


def _draw(lines: list[tuple[str, list[Point]]], link: Callable[[Point], str], prefix: str):
    order = _order(lines)

    def x(p: Point) -> int:
        return order[p.run_key]

    # a panel per metric with a value (MFU needs the device's peak FLOPs: none on CPUs); at least one
    shown = [m for m in METRICS if m not in TABLE_ONLY
             and any(p.values.get(m) is not None for _, pts in lines for p in pts)] or ["step_time"]
    fig, axes = _canvas(len(shown))
    marked = 0
    for ax, metric in zip(axes, shown):
        label, unit = METRICS[metric]
        ax.set_ylabel(f"{label}" + (f" ({unit})" if unit else ""), fontsize=8)
        drawn, off = False, 0
        for i, (name, points) in enumerate(lines):
            color = COLORS[i % len(COLORS)]
            have = [p for p in points if _plottable(p.values.get(metric))]
            off += sum(p.values.get(metric) is not None for p in points) - len(have)
            if not have:
                continue
            drawn = True
            xs, ys = [x(p) for p in have], [p.values[metric] for p in have]
            banded = [p for p in have if metric in p.band]
            if banded:  # one bar per run: where an unchanged run was expected, from the runs before it
                mid = [(p.band[metric][0] + p.band[metric][1]) / 2 for p in banded]
                ax.errorbar([x(p) for p in banded], mid, yerr=[[m - p.band[metric][0] for m, p in zip(mid, banded)],
                                                               [p.band[metric][1] - m for m, p in zip(mid, banded)]],
                            fmt="none", ecolor=color, alpha=0.25, elinewidth=7, capsize=0,
                            label=f"{name}: noise band" if metric == "step_time" else None)
            ax.plot(xs, ys, color=color, linewidth=1, label=name if not name.startswith("_") else " " + name)
            dots = ax.scatter(xs, ys, s=14, color=color, zorder=3)
            dots.set_urls([link(p) for p in have])
            for findings, ring_color, kind in (("regressions", RED, "regression"), ("suspects", AMBER, "suspect")):
                if _rings(ax, have, metric, x, findings, ring_color, f"{kind}-{metric}-{prefix}{marked}", link):
                    marked += 1
        if not drawn:
            ax.text(0.5, 0.5, "no values", transform=ax.transAxes, ha="center", va="center", fontsize=8, color="#777")
        if off:
            ax.text(0.99, 0.95, f"{off} value(s) beyond ±{PLOTTABLE:.0e} not drawn", transform=ax.transAxes,
                    ha="right", va="top", fontsize=7, color="#777")
    ticks, labels = _ticks(lines, order)
    axes[-1].set_xticks(ticks, labels, fontsize=7)
    axes[-1].set_xlim(-0.5, max(order.values()) + 0.5)
    handles, names = [], []
    for ax in axes:
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    if handles:
        fig.legend(handles, names, loc="upper center", ncols=min(4, len(names)), fontsize=8, frameon=False)
    return fig
