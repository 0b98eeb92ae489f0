"""The report's seed-band figures: for each band of a `convergence.band` gate, the reference seeds' band
(mean +- k sd + atol at each evaluation, computed by the gate's own code, suite.gates.band) shaded, and every
judged cell's held-out curve drawn over it, points outside the band marked.  Drawn with plots.py's helpers."""

from __future__ import annotations

from suite.gates.band import band_points, metric_of
from suite.report.figure import MAX_LINES, MAX_LOSS_FIGURES, Plot, figure, png
from suite.report.tables import CellRow
from suite.results.schema import EvalPoint
from suite.scenario.convergence import BandGate
from suite.scenario.references import reference_axes

LABELS = {"eval_loss": "held-out loss", "accuracy": "held-out accuracy", "perplexity": "held-out perplexity"}


def _band_of(row: CellRow) -> BandGate | None:
    first = row.results[0] if row.results else None
    spec = first.cell.convergence.band if first is not None and first.cell.convergence else None
    return BandGate.model_validate(spec) if spec else None


def _curve(row: CellRow) -> list[EvalPoint]:
    return list(row.results[0].eval) if row.results else []


def band_plots(rows: list[CellRow], axes: list[str]) -> list[Plot]:
    """One figure per band (run and every axis but seed and the reference axis), at most MAX_LOSS_FIGURES."""
    groups: dict[tuple, tuple[BandGate, list[CellRow]]] = {}
    for r in rows:
        band = _band_of(r)
        if band is None or not _curve(r):
            continue
        # grouped as the gate finds references: the reference axis at its value, seed apart (reference_axes also
        # clears shard_size for a reference strategy without shard groups)
        ref_axes = reference_axes({a: r.get(a) for a in axes}, band.axis, band.value)
        key = (r.run,) + tuple(str(v) for a, v in ref_axes.items() if a != "seed")
        groups.setdefault(key, (band, []))[1].append(r)
    plots = []
    for n, (band, members) in enumerate(list(groups.values())[:MAX_LOSS_FIGURES], start=1):
        refs = [m for m in members if m.get(band.axis) == band.value]
        points = band_points([_curve(m) for m in refs], band)
        if not points:
            continue
        fig = figure(7.0, 4.2)
        ax = fig.add_subplot()
        steps = sorted(points)
        ax.fill_between(steps, [points[s].lo for s in steps], [points[s].hi for s in steps], color="#4c72b0",
                        alpha=0.18, label=f"band of {band.axis}={band.value}: mean +- {band.k:g} sd over "
                                          f"{len(refs)} seeds")
        ax.plot(steps, [points[s].mean for s in steps], color="#4c72b0", linestyle="--", linewidth=1)
        judged = [m for m in members if m not in refs][:MAX_LINES]
        for m in judged:
            pts = [(p.step, metric_of(p, band.metric)) for p in _curve(m)]
            pts = [(s, v) for s, v in pts if v is not None]
            line, = ax.plot([s for s, _ in pts], [v for _, v in pts], marker="o", markersize=3,
                            label=f"{band.axis}={m.get(band.axis)} seed={m.get('seed')}")
            out = [(s, v) for s, v in pts if s in points and not points[s].lo <= v <= points[s].hi]
            if out:
                ax.plot([s for s, _ in out], [v for _, v in out], "x", color="#c44e52", markersize=9,
                        markeredgewidth=2, label=None)
        others = ", ".join(f"{a}={members[0].get(a)}" for a in axes if a not in ("seed", band.axis))
        ax.set_title(f"Seed band ({others or 'all cells'}); red x: outside the band", fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel(LABELS[band.metric])
        ax.legend(fontsize=7)
        plots.append(Plot(f"band_{n}", f"Held-out curves against the seed band of {band.axis}={band.value}"
                                       f"{' (' + others + ')' if others else ''}", png(fig)))
    return plots
