"""Plots of the per-cell rows, as PNG bytes (the HTML embeds them; the report also writes them as files).

matplotlib is an optional extra (`pip install 'suite[report]'`), imported only when plots are drawn.  Figures
are drawn on matplotlib's Agg canvas directly (no pyplot), so nothing global changes and no display is needed.
- memory breakdown: stacked bars per cell, predicted beside measured (parameters, gradients, optimizer states,
  master weights, activations; 'other' is what the measured peak holds beyond the measured categories);
- scaling: tokens/s versus GPU count per configuration, with the linear ideal;
- loss curves of cells that must match (a `match` gate), and their distance to the reference curve;
- held-out curves against their seed band (a `band` gate; drawn in bands.py);
- step-time distributions (box plots over the measured steps, repeats pooled);
- measured peak beside its three predictions (drawn in peaks.py with this module's helpers).
Plots with nothing to show are left out; long lists are cut to the first cells (the tables have them all).
"""

from __future__ import annotations

from suite.axes import AXES, varying_axes
from suite.report.bands import band_plots
from suite.report.figure import (COLORS, MAX_BARS, MAX_BOXES, MAX_LINES, MAX_LOSS_FIGURES, Plot, figure, png,
                                 short_label)
from suite.report.peaks import peak_plot
from suite.report.tables import CellRow, MiB
from suite.results.memory import BREAKDOWN, PEAK_KEYS


def memory_breakdown(rows: list[CellRow], axes: list[str], runs: bool) -> Plot | None:
    """Stacked bars per cell, predicted (left) beside measured (right), like for like: a category the run did not
    measure (activations on a CPU run without peaks) is drawn hatched and pale on the predicted bar, so the two
    bars compare the same categories and the rest reads as "predicted, not measured".  One bar call per category
    and side (not per segment): drawing is what costs here."""
    rows = [r for r in rows if r.predicted][:MAX_BARS]
    if not rows:
        return None
    fig = figure(max(6.0, 0.7 * len(rows) + 2), 4.5)
    ax = fig.add_subplot()
    xs = range(len(rows))
    bottoms = {"predicted": [0.0] * len(rows), "measured": [0.0] * len(rows)}
    unmeasured = False
    for cat in BREAKDOWN:
        for side, offset in (("predicted", -0.2), ("measured", 0.2)):
            heights = []
            faded = []
            for r in rows:
                v = (r.predicted if side == "predicted" else r.measured).get(cat) or 0.0
                heights.append(v / MiB)
                faded.append(side == "predicted" and r.measured.get(cat) is None and bool(r.measured))
            solid = [0.0 if f else h for h, f in zip(heights, faded)]
            pale = [h if f else 0.0 for h, f in zip(heights, faded)]
            label = cat.replace("_", " ") if side == "predicted" else None
            if any(solid):
                ax.bar([x + offset for x in xs], solid, 0.38, bottom=bottoms[side], color=COLORS[cat], label=label)
            if any(pale):
                unmeasured = True
                ax.bar([x + offset for x in xs], pale, 0.38, bottom=bottoms[side], color=COLORS[cat], alpha=0.3,
                       hatch="//", label=None if any(solid) else label)
            bottoms[side] = [b + h for b, h in zip(bottoms[side], heights)]
    beyond = []
    for i, r in enumerate(rows):
        total = next((r.measured[k] for k, _ in PEAK_KEYS if r.measured.get(k) is not None), None)
        top = bottoms["measured"][i]
        beyond.append(total / MiB - top if total is not None and total / MiB > top * 1.001 else 0.0)
    if any(beyond):
        ax.bar([x + 0.2 for x in xs], beyond, 0.38, bottom=bottoms["measured"], color=COLORS["other"],
               label="other (measured peak beyond categories)")
    ax.set_xticks(list(xs), [short_label(r, axes, runs) for r in rows], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("MiB per rank")
    title = "Memory per rank: predicted (left bar) vs measured (right bar)"
    ax.set_title(title + ("\nhatched: predicted, not measured by the run" if unmeasured else ""), fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return Plot("memory_breakdown", "Memory breakdown per rank, predicted vs measured", png(fig))


def scaling(rows: list[CellRow], axes: list[str]) -> Plot | None:
    if "gpus" not in axes:
        return None
    others = [a for a in axes if a != "gpus"]
    lines: dict[str, dict[int, float]] = {}
    for r in rows:
        if r.tokens_per_s:
            lines.setdefault(" ".join(str(r.get(a)) for a in others) or "all", {})[r.get("gpus")] = r.tokens_per_s
    if not lines:
        return None
    fig = figure(6.5, 4.5)
    ax = fig.add_subplot()
    for label, points in list(lines.items())[:MAX_LINES]:
        xs = sorted(points)
        line, = ax.plot(xs, [points[x] for x in xs], marker="o", label=label)
        ax.plot(xs, [points[xs[0]] * x / xs[0] for x in xs], linestyle=":", color=line.get_color())
    ax.set_xlabel("GPUs (world size)")
    ax.set_ylabel("tokens/s")
    ax.set_title("Throughput scaling (dotted: linear from the smallest world size)")
    ax.legend(fontsize=8)
    return Plot("scaling", "Throughput scaling", png(fig))


def loss_curves(rows: list[CellRow], axes: list[str], runs: bool) -> list[Plot]:
    rows = [r for r in rows if r.losses]
    groups: dict[tuple, list[CellRow]] = {}
    for r in rows:
        if r.match:
            axis = r.match.axis
            groups.setdefault((r.run, axis) + tuple(str(r.get(a)) for a in AXES if a != axis), []).append(r)
    groups = {k: v for k, v in groups.items() if len(v) > 1}  # a curve alone has nothing to match
    plots = []
    for n, (key, members) in enumerate(list(groups.items())[:MAX_LOSS_FIGURES], start=1):
        axis, ref_value = key[1], members[0].match.value
        ref = next((m for m in members if m.get(axis) == ref_value), None)
        fig = figure(9.0, 3.8)
        ax, dx = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        largest = 0.0
        for m in members[:MAX_LINES]:
            ax.plot(range(len(m.losses)), m.losses, label=f"{axis}={m.get(axis)}")
            if ref is not None and m is not ref:
                steps = range(min(len(m.losses), len(ref.losses)))
                diffs = [abs(m.losses[i] - ref.losses[i]) for i in steps]
                largest = max([largest, *(d for d in diffs if d == d)])  # d == d skips NaN
                dx.semilogy(list(steps), [max(d, 1e-12) for d in diffs], label=f"{axis}={m.get(axis)}")
        if ref is not None and largest == 0.0:
            dx.text(0.5, 0.6, "every curve is bitwise identical\nto the reference", transform=dx.transAxes,
                    ha="center", fontsize=9)
        others = ", ".join(f"{a}={members[0].get(a)}" for a in axes if a != axis)
        ax.set_title(f"Loss ({others or 'all cells'})", fontsize=9)
        ax.set_xlabel("step")
        ax.legend(fontsize=8)
        dx.set_title(f"|loss - loss({axis}={ref_value})| (floor 1e-12)", fontsize=9)
        dx.set_xlabel("step")
        plots.append(Plot(f"loss_{n}", f"Loss curves that must match ({axis}={ref_value}; {others or 'all'})",
                          png(fig)))
    if not groups and rows:
        fig = figure(6.5, 4.5)
        ax = fig.add_subplot()
        for r in rows[:MAX_LINES]:
            ax.plot(range(len(r.losses)), r.losses, label=short_label(r, axes, runs))
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.legend(fontsize=8)
        plots.append(Plot("loss", "Loss curves", png(fig)))
    return plots


def step_times(rows: list[CellRow], axes: list[str], runs: bool) -> Plot | None:
    rows = [r for r in rows if r.step_times_s][:MAX_BOXES]
    if not rows:
        return None
    fig = figure(max(6.0, 0.45 * len(rows) + 2), 4.5)
    ax = fig.add_subplot()
    ax.boxplot([[t * 1e3 for t in r.step_times_s] for r in rows])
    ax.set_xticks(range(1, len(rows) + 1), [short_label(r, axes, runs) for r in rows], rotation=45, ha="right",
                  fontsize=8)
    ax.set_ylabel("step time (ms), measured steps")
    ax.set_title("Step-time distributions")
    return Plot("step_times", "Step-time distributions", png(fig))


def all_plots(rows: list[CellRow]) -> list[Plot]:
    """Every plot the rows have data for (raises PlotError when matplotlib is missing)."""
    axes = varying_axes(rows)
    runs = len({r.run for r in rows}) > 1
    plots = [memory_breakdown(rows, axes, runs), peak_plot(rows, axes, runs), scaling(rows, axes),
             *loss_curves(rows, axes, runs), *band_plots(rows, axes), step_times(rows, axes, runs)]
    return [p for p in plots if p is not None]
