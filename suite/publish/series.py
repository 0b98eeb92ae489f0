"""Which numbers may sit together, and every run judged against the runs before it.

Comparable means: the same cell id (the settings that change what is computed), the same *device kind* (the
device models a run used, or the CPU's when it used none) and the same major version of suite (a new major may
measure differently).  Those two run-level facts make a `Group`; numbers from two groups never share a table
column or a trend line — the pages list the other groups apart, with the reason.  Within a group a `Machine`
is where a run ran: its host and its container image (an A/B run of two images is two machines).

Each run of a machine is judged by `suite compare` (report/compare.py) with the machine's earlier runs as the
baseline — the latest `history` of them: from 5 on, a history whose spread is the noise band the trend draws.
The verdicts, thresholds and noise model are compare's, so a point marked here is what `suite compare` would
have said that night.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from dataclasses import dataclass, field

from suite import stats
from suite.compare.checks import Side, StepTimeCheck, TokensPerSCheck
from suite.compare.comparison import Finding, compare, describe, device_kind, varying
from suite.machine.policy import describe as describe_machine
from suite.report.tables import fold_status
from suite.results.memory import measured_memory
from suite.results.reader import Run
from suite.results.schema import CellResult, Manifest, TimeToTarget

VERDICTS = ("regression", "improvement", "unchanged", "inconclusive", "skipped", "machine-differs")
# metric -> (label, unit) as the pages and the trend show it; the timing ones carry compare's noise band
METRICS = {"step_time": ("step time", "ms"), "tokens_per_s": ("tokens/s", ""), "mfu": ("MFU", "%"),
           "peak_memory": ("peak memory", "MiB"), "predicted_memory": ("predicted memory", "MiB"),
           "final_loss": ("final loss", ""),
           "eval_loss": ("held-out loss", ""), "accuracy": ("accuracy", "%")}
# in the tables only, beside what was measured (a prediction does not change night to night: no trend panel)
TABLE_ONLY = ("predicted_memory",)
# the held-out metrics (scenario `eval:`): shown where some point has a value, never listed as missing, so the
# pages of runs without `eval:` look as they did before these existed
HELD_OUT = ("eval_loss", "accuracy")


def slug(text: str) -> str:
    """A file-name-safe name: the text when it is already one, else its safe part and a short digest."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in text).strip("._") or "x"
    return safe if safe == text else f"{safe[:40]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


@dataclass(frozen=True, order=True)
class Group:
    device_kind: str
    suite_major: str

    @property
    def label(self) -> str:
        return f"{self.device_kind} · suite {self.suite_major}.x"

    def apart(self, other: "Group") -> str:
        """Why numbers of `other` are not put beside this group's."""
        why = []
        if other.device_kind != self.device_kind:
            why.append(f"device kind differs ({other.device_kind} vs {self.device_kind})")
        if other.suite_major != self.suite_major:
            why.append(f"suite major version differs ({other.suite_major} vs {self.suite_major})")
        return "; ".join(why)


@dataclass(frozen=True, order=True)
class Machine:
    group: Group
    host: str
    image: str  # "" when the cells ran without a container

    @property
    def label(self) -> str:
        return self.host + (f" · {self.image}" if self.image else "")


def group_of(m: Manifest) -> Group:
    return Group(device_kind(m), m.suite_version.split(".")[0])


def machine_of(m: Manifest) -> Machine:
    return Machine(group_of(m), m.hostname, m.container_image or "")


def _rel_sd(values: list[float]) -> float | None:
    """Spread between repeats: sample sd over the median, None with fewer than 2."""
    return statistics.stdev(values) / stats.median(values) if len(values) >= 2 and stats.median(values) else None


@dataclass
class Point:
    """One cell in one run of one machine: what the trend draws and the tables show."""

    run_key: str
    run: Run
    status: str
    repeats: int
    values: dict[str, float | None]           # METRICS keys, in the units METRICS names
    spread: dict[str, float | None]           # relative sd between repeats (timing), None with one repeat
    band: dict[str, tuple[float, float]]      # noise band from the machine's history (timing), shown units
    findings: list[Finding] = field(default_factory=list)  # compare's verdicts against the earlier runs
    peak_scope: str | None = None
    env: list[str] = field(default_factory=list)  # what differs from the earlier runs' environment (compare's)
    measured: int = 0                               # repeats with a measured step time (the spread's n)
    target: TimeToTarget | None = None              # the first repeat's time to target (convergence.target)
    machine: str | None = None                      # the machine during its repeats (machine.policy.describe)

    @property
    def regressions(self) -> list[Finding]:
        """Regressions judged against noise (a history or repeats), and those of the checks without noise."""
        return [f for f in self.findings if f.verdict == "regression" and f.method != "threshold"]

    @property
    def suspects(self) -> list[Finding]:
        """Timing changes past the threshold with no noise estimate yet (fewer than 5 earlier runs and fewer
        than 3 repeats): compare flags them too, saying so; the site shows them apart, not as regressions."""
        return [f for f in self.findings if f.verdict == "regression" and f.method == "threshold"]


def point(key: str, run: Run, results: list[CellResult], findings: list[Finding]) -> Point:
    side = Side(run, results)
    step = StepTimeCheck().values(results)
    tok = TokensPerSCheck().values(results)
    mfu = [r.mfu.value for r in results if r.mfu and r.mfu.value is not None]
    peak, scope = side.memory
    loss = side.final_loss
    values = {"step_time": stats.median(step) * 1e3 if step else None,
              "tokens_per_s": stats.median(tok) if tok else None,
              "mfu": stats.median(mfu) * 100 if mfu else None,
              "peak_memory": peak / 2**20 if peak is not None else None,
              # the prediction for the same scope as the measured peak (suite/results/memory.py: like for like)
              "predicted_memory": predicted / 2**20 if (predicted := measured_memory(results[0])[1]) else None,
              "final_loss": loss if loss is not None and math.isfinite(loss) else None,
              # the last held-out evaluation, the median over repeats (compare's EvalLossCheck / AccuracyCheck)
              "eval_loss": side.last_eval("loss"), "accuracy": _pct(side.last_eval("accuracy"))}
    band = {}
    for f in findings:
        if f.band and f.metric in ("step_time", "tokens_per_s"):
            scale = 1e3 if f.metric == "step_time" else 1.0
            band[f.metric] = (f.band[0] * scale, f.band[1] * scale)
    return Point(key, run, side.status, len(results), values,
                 {"step_time": _rel_sd(step), "tokens_per_s": _rel_sd(tok)}, band, findings, scope, measured=len(step),
                 target=next((r.time_to_target for r in results if r.time_to_target is not None), None),
                 machine=describe_machine([r.machine for r in results if r.machine is not None]))


def _pct(fraction: float | None) -> float | None:
    return None if fraction is None else fraction * 100


@dataclass
class MachineRuns:
    """A machine's runs of one scenario, oldest first, and each cell's points."""

    machine: Machine
    keys: list[str]
    runs: list[Run]
    points: dict[str, list[Point]] = field(default_factory=dict)  # cell id -> points, oldest first

    @property
    def latest(self) -> tuple[str, Run]:
        """The newest run that holds cell results (a run folder killed while starting holds none)."""
        i = next((i for i in range(len(self.runs) - 1, -1, -1) if self.runs[i].results), len(self.runs) - 1)
        return self.keys[i], self.runs[i]

    def latest_findings(self) -> list[Finding]:
        key = self.latest[0]
        return [f for pts in self.points.values() for p in pts if p.run_key == key for f in p.findings]


@dataclass
class ScenarioView:
    name: str
    slug: str
    machines: list[MachineRuns]
    cells: dict[str, str]                          # cell id -> its description (the axes that vary)
    axes: dict[str, dict]                          # cell id -> every axis value

    def groups(self) -> list[Group]:
        """The groups, the one with the most runs first (usually the machine the pipeline runs on)."""
        runs: dict[Group, int] = {}
        for m in self.machines:
            runs[m.machine.group] = runs.get(m.machine.group, 0) + len(m.runs)
        return sorted(runs, key=lambda g: (-runs[g], g.label))


def _judge(machine: Machine, keyed: list[tuple[str, Run]], history: int) -> MachineRuns:
    mr = MachineRuns(machine, [k for k, _ in keyed], [r for _, r in keyed])
    for i, (key, run) in enumerate(keyed):
        # every earlier run: compare keeps, per cell, the latest `history` runs that hold it (as it does for a
        # baseline folder), so a night that skipped a cell does not shorten that cell's history
        prior = [r for r in mr.runs[:i] if r.results]
        by_cell: dict[str, list[Finding]] = {}
        env: list[str] = []
        if prior and run.results:
            done = compare(prior, [run], history=history)
            env = [f"{d.field} ({d.baseline} -> {d.current})" for d in done.env]
            for f in done.findings:
                by_cell.setdefault(f.cell_id, []).append(f)
        cells: dict[str, list[CellResult]] = {}
        for r in run.results:
            cells.setdefault(r.cell_id, []).append(r)
        for cell_id, results in cells.items():
            p = point(key, run, results, by_cell.get(cell_id, []))
            p.env = env
            mr.points.setdefault(cell_id, []).append(p)
    return mr


def build(runs: dict[str, Run], history: int = 10) -> list[ScenarioView]:
    """Every scenario with its machines' judged runs, from the site's runs (key -> Run)."""
    by_scenario: dict[str, dict[Machine, list[tuple[str, Run]]]] = {}
    for key, run in runs.items():
        by_scenario.setdefault(run.manifest.scenario, {}).setdefault(machine_of(run.manifest), []).append((key, run))
    views = []
    for name in sorted(by_scenario):
        machines = []
        for machine in sorted(by_scenario[name]):
            keyed = sorted(by_scenario[name][machine], key=lambda kr: (kr[1].manifest.created_at, kr[1].manifest.run_id))
            machines.append(_judge(machine, keyed, history))
        latest: dict[str, CellResult] = {}
        for mr in machines:
            for run in mr.runs:
                for r in run.results:
                    latest[r.cell_id] = r
        axes = varying([Side(None, [r]) for r in latest.values()])  # type: ignore[arg-type]
        cells = {cid: describe(r, axes) or cid for cid, r in sorted(latest.items(), key=lambda kv: kv[0])}
        seen = list(cells.values())  # the same axes, other settings (steps, optimizer): say which id
        cells = {cid: f"{desc} ({cid})" if seen.count(desc) > 1 else desc for cid, desc in cells.items()}

        views.append(ScenarioView(name, slug(name), machines, dict(sorted(cells.items(), key=lambda kv: kv[1])),
                                  {cid: r.axes.as_dict() for cid, r in latest.items()}))
    return views


def status_counts(results: list[CellResult]) -> dict[str, int]:
    cells: dict[str, list[CellResult]] = {}
    for r in results:
        cells.setdefault(r.cell_id, []).append(r)
    counts: dict[str, int] = {}
    for rs in cells.values():
        s = fold_status(rs)
        counts[s] = counts.get(s, 0) + 1
    return counts
