"""The shared pieces of compare's checks: a cell's two sides (Side), a check's result (Verdict), the Check base
class, the held-out mixin and small helpers (RAN, fmt, _ran).

They live apart from checks.py because the check classes of both checks.py (status, timing, memory) and
quality_checks.py (convergence, losses, accuracy) build on them, and checks.py lists every check in CHECKS:
keeping the base here avoids a circular import between those two modules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from suite import stats
from suite.report.tables import fold_status
from suite.results.memory import measured_memory
from suite.machine.policy import busy
from suite.results.reader import Run
from suite.results.schema import CellResult

RAN = ("ok", "gate-failed")


@dataclass
class Side:
    """All repeats of one cell from one run; on the baseline side also every stored run of the cell."""

    run: Run
    results: list[CellResult]
    # the baseline's stored runs of this cell, oldest first (the latest is `results`): a history when long
    # enough (noise.HISTORY_MIN), else only the latest run is used
    history: list[tuple[Run, list[CellResult]]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return fold_status(self.results)

    @property
    def memory(self) -> tuple[float | None, str | None]:
        mem = [measured_memory(r) for r in self.results]
        values = [m for m, _, _ in mem if m is not None]
        return (max(values) if values else None), mem[0][2]

    @property
    def final_loss(self) -> float | None:
        vals = [r.final_loss for r in self.results if r.final_loss is not None and math.isfinite(r.final_loss)]
        return stats.median(vals) if vals else None

    def last_eval(self, field: str) -> float | None:
        """The median over repeats of the last held-out evaluation's loss or accuracy (None: not evaluated)."""
        vals = [getattr(r.eval[-1], field) for r in self.results if r.eval]
        vals = [v for v in vals if v is not None and math.isfinite(v)]
        return stats.median(vals) if vals else None

    @property
    def gates(self) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for r in self.results:
            for g in r.gates:
                out[g.name] = out.get(g.name, True) and g.passed
        return out


@dataclass
class Verdict:
    verdict: str        # regression | improvement | unchanged | inconclusive (compare adds skipped, machine-differs)
    baseline: str       # each side's value, formatted for people
    current: str
    change: float | None = None   # relative (current / baseline - 1)
    p_value: float | None = None
    detail: str = ""
    noise: str = ""               # what the change was judged against (timing checks)
    detectable: float | None = None  # the smallest change (fraction, worse direction) the check could flag
    band: tuple[float, float] | None = None  # with a history: where an unchanged run falls (the metric's units)
    method: str = ""  # timing: what it was judged against (noise.judge's history | repeats | threshold)


def fmt(v: float | None, spec: str, unit: str = "") -> str:
    return "-" if v is None else format(v, spec) + unit


@dataclass(frozen=True)
class Check:
    """One metric's check; `threshold` is the relative change it tolerates (None for the checks without one)."""

    threshold: float | None = None
    alpha: float = 0.05
    name: ClassVar[str] = ""
    # where thresholds and skipped checks list this metric (an order older than CHECKS'; kept so outputs stay
    # put); a new check may leave it: it is listed last
    listed_at: ClassVar[int] = 100
    default_threshold: ClassVar[float | None] = None  # set: the check takes --threshold NAME=VALUE
    measured_only: ClassVar[bool] = True  # skipped unless the cell ran (ok / gate-failed) on both sides
    timing: ClassVar[bool] = False  # a timing check: its verdict depends on the machine's state (comparison.py)

    def check(self, baseline: Side, current: Side) -> Verdict:
        raise NotImplementedError

    def applies(self, baseline: Side, current: Side) -> bool:
        """False: the check has nothing to say about these cells (no finding at all, not even skipped)."""
        return True


class _HeldOut:
    """Mixin of the held-out checks: they speak only about cells that were evaluated (scenario `eval:`)."""

    def applies(self, baseline: Side, current: Side) -> bool:
        return any(r.eval for side in (baseline, current) for r in side.results)


def quiet_history(side: Side) -> list[list[CellResult]]:
    """The stored runs of a cell a history's band may learn from: the latest always, the earlier ones unless a
    repeat's recorded machine state was busy (machine.policy.busy; no state recorded: kept)."""
    runs = [rs for _, rs in side.history]
    return [rs for rs in runs[:-1] if not any(r.machine is not None and busy(r.machine) for r in rs)] + runs[-1:]


def _ran(results: list[CellResult]) -> list[CellResult]:
    return [r for r in results if r.status in RAN]
