"""`suite compare BASELINE CURRENT`: cell-by-cell verdicts for nightly CI (see docs/compare.md for the why).

Cells are matched by id (a hash of the settings that change what is computed, so the same cell in two runs has
the same id).  When one side holds the cell in several runs, its latest run is used, with all its repeats; on
the baseline side the earlier runs are kept too (the latest 10, or --history N): 5 or more stored runs of a cell
are a history, the noise model its timing checks are judged against (noise.py).
Per matched cell and metric the verdict is regression, improvement, unchanged, inconclusive or skipped; each
metric is one check object in checks.py (status, step_time, tokens_per_s, peak_memory, convergence,
final_loss), and every check but status is skipped for a cell that did not run on both sides.
Environment differences that matter are collected for the caller to warn about (or refuse with --strict).
Each result records the state of its machine around the timed launch (suite/machine/): when the two sides'
states differ beyond machine.policy.Thresholds (another process kept a CPU busy, a GPU throttled, clocks or
device models differ), the cell's timing verdicts become "machine-differs", naming what differed, and are never
a regression unless --strict (which keeps the timing verdict and adds the note); results without a recorded
state say "machine state unknown".  Stored baseline runs that were busy are left out of a history's band.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from suite.axes import AXES, AXIS_HEADERS, varying_axes
from suite.compare.checks import DEFAULT_THRESHOLDS, METRICS, RAN, Check, Side, Verdict, make_checks
from suite.machine.policy import Thresholds, differences
from suite.results.reader import Run
from suite.results.schema import CellResult, Manifest


class CompareUsageError(Exception):
    """Bad options or inputs (exit 2)."""


def parse_threshold(text: str) -> tuple[str, float]:
    """'tokens_per_s=5%' or 'step_time=0.05' -> (metric, 0.05)."""
    m = re.fullmatch(r"\s*([a-z_]+)\s*=\s*([0-9.]+(?:e-?[0-9]+)?)\s*(%?)\s*", text)
    if not m:
        raise CompareUsageError(f"--threshold {text!r}: expected METRIC=VALUE, e.g. tokens_per_s=5% or step_time=0.05")
    metric, value, pct = m.group(1), float(m.group(2)), m.group(3)
    if metric not in DEFAULT_THRESHOLDS:
        raise CompareUsageError(f"--threshold {text!r}: unknown metric {metric!r}; metrics: {', '.join(DEFAULT_THRESHOLDS)}")
    return metric, value / 100 if pct else value


@dataclass
class Finding:
    cell_id: str
    cell: str           # the cell's axes, for people
    metric: str
    verdict: str        # regression | improvement | unchanged | inconclusive | skipped | machine-differs
    baseline: str
    current: str
    change: float | None = None   # relative (current / baseline - 1)
    p_value: float | None = None
    detail: str = ""
    noise: str = ""                # what a timing change was judged against
    detectable: float | None = None  # the smallest change (fraction, worse direction) the check could flag
    band: tuple[float, float] | None = None  # timing, with a history: where an unchanged run falls
    method: str = ""  # timing: history | repeats | threshold (a threshold-only verdict had no noise estimate)


@dataclass
class EnvDiff:
    field: str
    baseline: str
    current: str


@dataclass
class Comparison:
    findings: list[Finding]
    only_baseline: list[tuple[str, str]]   # (cell id, axes)
    only_current: list[tuple[str, str]]
    env: list[EnvDiff]
    thresholds: dict[str, float]
    alpha: float
    matched: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict == "regression"]

    @property
    def improvements(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict == "improvement"]


def select(runs: list[Run], history: int = 10) -> dict[str, Side]:
    """cell id -> its results in the latest run that has it (runs come oldest first from load_runs), with the
    `history` latest runs that have it, oldest first, as its history."""
    out: dict[str, Side] = {}
    for run in runs:
        by_cell: dict[str, list[CellResult]] = {}
        for r in run.results:
            by_cell.setdefault(r.cell_id, []).append(r)
        for cell_id, results in by_cell.items():
            past = out[cell_id].history if cell_id in out else []
            out[cell_id] = Side(run, results, (past + [(run, results)])[-history:])
    return out


def describe(result: CellResult, axes: tuple[str, ...] = AXES) -> str:
    """The cell's values on the given axes (compare passes the axes that vary among the compared cells)."""
    return " ".join(f"{AXIS_HEADERS[a]}={result.axes.get(a)}" for a in axes if a in AXIS_HEADERS)


def varying(sides: list[Side]) -> tuple[str, ...]:
    """The axes that tell the compared cells apart (all of them when none varies)."""
    return tuple(varying_axes(side.results[0].axes.as_dict() for side in sides)) or AXES


def _finding(cid: str, desc: str, check: Check, v: Verdict) -> Finding:
    return Finding(cid, desc, check.name, v.verdict, v.baseline, v.current, v.change, v.p_value, v.detail,
                   v.noise, v.detectable, v.band, v.method)


def machine_differences(b: Side, c: Side, t: Thresholds | None = None) -> list[str] | None:
    """What differs between the machines of the two sides' repeats (each baseline repeat against each current
    one; at most 4 reasons, the first of each kind); None when a repeat has no recorded state."""
    if any(r.machine is None for r in b.results + c.results):
        return None
    out: list[str] = []
    for rb in b.results:
        for rc in c.results:
            out += [why for why in differences(rb.machine, rc.machine, t) or [] if why not in out]
    return out[:4]


def _judge_machines(findings: list[Finding], timing: set[str], diff: list[str] | None, strict: bool) -> None:
    """Timing findings of a cell whose machines differed become machine-differs (strict: keep the verdict and
    say why it may be the machine); with no recorded state they say so."""
    for f in findings:
        if f.metric not in timing or f.verdict not in ("regression", "improvement", "unchanged"):
            continue
        if diff is None:
            f.detail = (f.detail + "; " if f.detail else "") + "machine state unknown (a result without one)"
        elif diff:
            said = "machine state differs: " + "; ".join(diff)
            if strict:
                f.detail = f"{f.detail}; {said} (--strict: judged anyway)"
            else:
                f.detail = f"{said}; the timing alone reads {f.verdict}" + (f" ({f.detail})" if f.detail else "")
                f.verdict = "machine-differs"


def _compare_cell(cid: str, desc: str, b: Side, c: Side, checks: list[Check], strict: bool = False) -> list[Finding]:
    """The status check always; the others when the cell ran on both sides, else one 'skipped' each (checks
    that do not apply to the cell, e.g. held-out ones of a cell never evaluated, give nothing)."""
    checks = [k for k in checks if k.applies(b, c)]
    findings = [_finding(cid, desc, k, k.check(b, c)) for k in checks if not k.measured_only]
    if b.status not in RAN or c.status not in RAN:
        why = f"not measured on both sides (baseline {b.status}, current {c.status})"
        measured = {k.name for k in checks if k.measured_only}
        return findings + [Finding(cid, desc, m, "skipped", "-", "-", detail=why) for m in METRICS if m in measured]
    measured = [_finding(cid, desc, k, k.check(b, c)) for k in checks if k.measured_only]
    _judge_machines(measured, {k.name for k in checks if k.timing}, machine_differences(b, c), strict)
    return findings + measured


# What must match for two results to be comparable (the names --ignore-env takes).
ENV_FIELDS = ("device_model", "device_count", "world_size", "precision", "torch", "cuda", "nccl", "image_digest",
              "packages", "lock")


def device_kind(m: Manifest) -> str:
    """What a run's numbers were measured on: its device models, or the CPU's model when it used no GPU."""
    return ", ".join(sorted(set(m.devices))) if m.devices else f"cpu: {m.cpu_model}"


def _env_values(run: Run) -> dict[str, str]:
    m = run.manifest
    return {"device_model": device_kind(m), "device_count": str(m.device_count), "torch": str(m.torch),
            "cuda": str(m.cuda), "nccl": str(m.nccl), "image_digest": str(m.container_image_digest),
            "packages": str(m.packages_digest), "lock": str(m.lock_digest)}


def environment_diffs(pairs: list[tuple[Side, Side]]) -> list[EnvDiff]:
    """Fields that matter and differ between the runs the matched cells came from."""
    base: dict[str, set[str]] = {}
    cur: dict[str, set[str]] = {}
    for b, c in pairs:  # the baseline's whole history: a noise model from other environments is worth a word
        for side, runs, acc in ((b, [run for run, _ in b.history] or [b.run], base), (c, [c.run], cur)):
            for run in runs:
                values = _env_values(run)
                values["world_size"] = str(side.results[0].axes.get("gpus"))
                values["precision"] = str(side.results[0].axes.get("precision"))
                for k, v in values.items():
                    acc.setdefault(k, set()).add(v)
    return [EnvDiff(k, ", ".join(sorted(base[k])), ", ".join(sorted(cur[k])))
            for k in ENV_FIELDS if k in base and base[k] != cur.get(k)]


def compare(baseline: list[Run], current: list[Run], thresholds: dict[str, float] | None = None,
            alpha: float = 0.05, history: int = 10, strict: bool = False) -> Comparison:
    """history: how many of the latest stored baseline runs of a cell its timing checks may use; strict: timing
    verdicts stand when the machines differed (the difference is only noted)."""
    if not 0 < alpha < 1:
        raise CompareUsageError(f"--alpha {alpha} must be between 0 and 1")
    if history < 1:
        raise CompareUsageError(f"--history {history} must be at least 1")
    thr = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    b = select(baseline, history)
    c = select(current, history=1)  # the current side is its latest run only
    axes = varying(list(b.values()) + list(c.values()))
    desc = {cid: describe(side.results[0], axes) for side_map in (b, c) for cid, side in side_map.items()}
    common = sorted(set(b) & set(c), key=lambda cid: (desc[cid], cid))
    checks = make_checks(thr, alpha)
    findings = [f for cid in common for f in _compare_cell(cid, desc[cid], b[cid], c[cid], checks, strict)]
    only_b = sorted((cid, desc[cid]) for cid in set(b) - set(c))
    only_c = sorted((cid, desc[cid]) for cid in set(c) - set(b))
    env = environment_diffs([(b[cid], c[cid]) for cid in common])
    return Comparison(findings, only_b, only_c, env, thr, alpha, matched=len(common))
