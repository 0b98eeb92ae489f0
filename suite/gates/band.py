"""The seed band gate (`convergence.band`): is this cell's held-out curve one the reference seeds could give?

MLPerf checks a submission's convergence against reference convergence points: many runs of the reference
with different seeds.  suite does it per evaluation, on runs short enough for a nightly: with `seed: [0, 1,
2, 3]` and `band: {reference: {strategy: ddp}, k: 3}`, the reference cells of a cell are the DDP cells equal
to it on every other axis, one per seed.  At each evaluation step the band is

    mean(ref) +- (k x std(ref) + atol)        (std: the sample standard deviation, n - 1)

and the cell's value there must lie inside.  Why a band and not `match`: strategies are the same mathematics,
but a change that is not (another learning rate, a lost gradient bucket, a wrong loss scale) moves a curve by
more than seed noise, while a reordering of a sum moves it by far less; the band tells the two apart without
asking every cell to match bit for bit.  The reference cells are the band and pass; the others are judged.
The same numbers (`band_points`) draw the band in the report.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from suite.gates.loss import is_reference  # a band's reference cells, as a match gate's: axis at value
from suite.results.schema import EvalPoint, Gate
from suite.scenario.references import reference_axes

OK = ("ok", "gate-failed")  # a gate-failed reference still has a whole curve (as for match)


def metric_of(p: EvalPoint, metric: str) -> float | None:
    return {"eval_loss": p.loss, "accuracy": p.accuracy, "perplexity": p.perplexity}[metric]


def band_references(cell, cells: Sequence, band) -> list:
    """The reference cells of `cell`'s band: every seed, the reference axis at its value, all else equal."""
    want = reference_axes(cell.axes(), band.axis, band.value)
    return [c for c in cells if {**c.axes(), "seed": want["seed"]} == want]


@dataclass(frozen=True)
class BandPoint:
    step: int
    mean: float
    sd: float
    lo: float
    hi: float
    n: int


def band_points(curves: Sequence[Sequence[EvalPoint]], band) -> dict[int, BandPoint]:
    """The band at every step that at least two reference curves evaluated."""
    by_step: dict[int, list[float]] = {}
    for curve in curves:
        for p in curve:
            value = metric_of(p, band.metric)
            if value is not None and math.isfinite(value):
                by_step.setdefault(p.step, []).append(value)
    out = {}
    for step, values in sorted(by_step.items()):
        if len(values) < 2:
            continue
        mean, sd = statistics.fmean(values), statistics.stdev(values)
        half = band.k * sd + band.atol
        out[step] = BandPoint(step, mean, sd, mean - half, mean + half, len(values))
    return out


def band_gate(cell, evals: Sequence[EvalPoint], band, refs: Sequence[tuple]) -> Gate:
    """The band gate of `cell` given its reference cells and their results: [(cell, result or None), ...]."""
    want = f"{band.axis}={band.value}"
    if is_reference(cell, band):
        return Gate(name="band", passed=True, detail=f"this cell is one of the {len(refs)} reference seeds ({want})")
    bad = [(c, r) for c, r in refs if r is None or r.status not in OK]
    if bad:
        c, r = bad[0]
        why = "has no result in this run" if r is None else f"did not finish ok (status {r.status})"
        return Gate(name="band", passed=False, detail=f"reference {c.id} ({want}, seed {c.seed}) {why}")
    points = band_points([r.eval for _, r in refs], band)
    seeds = ", ".join(str(c.seed) for c, _ in refs)
    label = f"the band of {want} over seeds {seeds} (mean +- {band.k:g} sd" + (f" + {band.atol:g})" if band.atol
                                                                               else ")")
    judged, worst = 0, 0.0
    for p in evals:
        value, b = metric_of(p, band.metric), points.get(p.step)
        if b is None:
            continue
        judged += 1
        if value is None or not math.isfinite(value) or not b.lo <= value <= b.hi:
            shown = "none" if value is None else f"{value:.6g}"
            return Gate(name="band", passed=False, step=p.step,
                        detail=f"step {p.step}: {band.metric} {shown} outside {label}: [{b.lo:.6g}, {b.hi:.6g}] "
                               f"(mean {b.mean:.6g}, sd {b.sd:.3g})")
        worst = max(worst, abs(value - b.mean) / (b.hi - b.mean) if b.hi > b.mean else 0.0)
    if not judged:
        return Gate(name="band", passed=False, step=cell.steps,
                    detail=f"no evaluation of this cell has a band point ({len(evals)} evaluations; the references "
                           f"evaluated at {sorted(points) or 'no common step'})")
    return Gate(name="band", passed=True,
                detail=f"{judged} evaluations inside {label}; the farthest used {worst:.0%} of the half-width")
