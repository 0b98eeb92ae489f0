"""`suite compare BASELINE CURRENT`: cell-by-cell verdicts for nightly CI (see docs/compare.md for the why).

Cells are matched by id (a hash of the settings that change what is computed, so the same cell in two runs has
the same id).  When one side holds the cell in several runs, its latest run is used, with all its repeats.
Per matched cell and metric the verdict is regression, improvement, unchanged, inconclusive or skipped:
- tokens_per_s / step_time: a regression needs BOTH a relative change beyond the metric's threshold AND a
  one-sided Mann-Whitney U test on the measured step times (repeats pooled) at level alpha; a big change that
  the test cannot tell from noise is 'unchanged' (and says so), too few samples 'inconclusive';
- peak_memory: measured per-rank memory (same scope on both sides) up by more than its tolerance;
- convergence: a gate that passed now fails;  final_loss: moved (either way) by more than its tolerance —
  the same cell is the same mathematics, so a lower loss is a change to explain too;
- status: a cell that ran (ok / gate-failed) now failed, oom, timeout, diverged, infeasible or interrupted.
Environment differences that matter are collected for the caller to warn about (or refuse with --strict).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from suite.report import stats
from suite.report.load import Run
from suite.report.tables import AXES, AXIS_HEADERS, convergence_verdict, fold_status, measured_memory
from suite.results.schema import CellResult

METRICS = ("status", "tokens_per_s", "step_time", "peak_memory", "convergence", "final_loss")
DEFAULT_THRESHOLDS = {"tokens_per_s": 0.05, "step_time": 0.05, "peak_memory": 0.01, "final_loss": 0.01}
RAN = ("ok", "gate-failed")
MIN_SAMPLES = 3  # below this on either side the U test cannot reach alpha = 0.05 at all


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
class Side:
    """All repeats of one cell from one run."""

    run: Run
    results: list[CellResult]

    @property
    def status(self) -> str:
        return fold_status(self.results)

    @property
    def step_times(self) -> list[float]:
        return [t for r in self.results for t in r.step_times_s]

    @property
    def tokens_per_s(self) -> float | None:
        vals = [r.throughput.tokens_per_s for r in self.results if r.throughput]
        return stats.median(vals) if vals else None

    @property
    def memory(self) -> tuple[float | None, str | None]:
        mem = [measured_memory(r) for r in self.results]
        values = [m for m, _, _ in mem if m is not None]
        return (max(values) if values else None), mem[0][2]

    @property
    def final_loss(self) -> float | None:
        vals = [r.final_loss for r in self.results if r.final_loss is not None and math.isfinite(r.final_loss)]
        return stats.median(vals) if vals else None

    @property
    def gates(self) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for r in self.results:
            for g in r.gates:
                out[g.name] = out.get(g.name, True) and g.passed
        return out


@dataclass
class Finding:
    cell_id: str
    cell: str           # the cell's axes, for people
    metric: str
    verdict: str        # regression | improvement | unchanged | inconclusive | skipped
    baseline: str
    current: str
    change: float | None = None   # relative (current / baseline - 1)
    p_value: float | None = None
    detail: str = ""


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


def select(runs: list[Run]) -> dict[str, Side]:
    """cell id -> its results in the latest run that has it (runs come oldest first from load_runs)."""
    out: dict[str, Side] = {}
    for run in runs:
        by_cell: dict[str, list[CellResult]] = {}
        for r in run.results:
            by_cell.setdefault(r.cell_id, []).append(r)
        for cell_id, results in by_cell.items():
            out[cell_id] = Side(run, results)
    return out


def describe(result: CellResult, axes: tuple[str, ...] = AXES) -> str:
    """The cell's values on the given axes (compare passes the axes that vary among the compared cells)."""
    return " ".join(f"{AXIS_HEADERS[a]}={result.axes[a]}" for a in axes if a in result.axes)


def varying(sides: list[Side]) -> tuple[str, ...]:
    values: dict[str, set[str]] = {}
    for side in sides:
        for a in AXES:
            values.setdefault(a, set()).add(repr(side.results[0].axes.get(a)))
    return tuple(a for a in AXES if len(values[a]) > 1) or AXES


def _fmt(v: float | None, spec: str, unit: str = "") -> str:
    return "-" if v is None else format(v, spec) + unit


def _timing(cid: str, desc: str, b: Side, c: Side, thr: dict[str, float], alpha: float) -> list[Finding]:
    bt, ct = b.step_times, c.step_times
    bm, cm = (stats.median(bt) if bt else None), (stats.median(ct) if ct else None)
    btp, ctp = b.tokens_per_s, c.tokens_per_s
    step = Finding(cid, desc, "step_time", "unchanged", _fmt(bm and bm * 1e3, ",.2f", " ms"), _fmt(cm and cm * 1e3, ",.2f", " ms"))
    tps = Finding(cid, desc, "tokens_per_s", "unchanged", _fmt(btp, ",.0f"), _fmt(ctp, ",.0f"))
    if len(bt) < MIN_SAMPLES or len(ct) < MIN_SAMPLES:
        for f in (step, tps):
            f.verdict, f.detail = "inconclusive", f"too few measured steps to test (baseline {len(bt)}, current {len(ct)})"
        return [step, tps]
    slower = stats.mann_whitney_u(ct, bt, "greater").p_value
    faster = stats.mann_whitney_u(ct, bt, "less").p_value
    step.change = cm / bm - 1 if bm else None
    tps.change = ctp / btp - 1 if btp and ctp is not None else None
    # a slower step is positive change for step_time and negative for tokens_per_s
    for f, worse in ((step, step.change), (tps, None if tps.change is None else -tps.change)):
        limit = thr[f.metric]
        if worse is None:
            f.verdict, f.detail = "inconclusive", "no value on one side"
            continue
        p = slower if worse > 0 else faster
        f.p_value = p
        words = ("slower", "faster") if f.metric == "step_time" else ("lower", "higher")
        moved = f"{abs(worse):.1%} {words[0] if worse > 0 else words[1]}"
        if abs(worse) <= limit:
            f.detail = f"within {limit:.0%}"
        elif p >= alpha:
            f.detail = f"{moved} but not significant (p={p:.3g} >= {alpha})"
        else:
            f.verdict = "regression" if worse > 0 else "improvement"
            f.detail = f"{moved} (> {limit:.0%}), p={p:.3g}"
    return [step, tps]


def _compare_cell(cid: str, desc: str, b: Side, c: Side, thr: dict[str, float], alpha: float) -> list[Finding]:
    bs, cs = b.status, c.status
    status = Finding(cid, desc, "status", "unchanged", bs, cs)
    if bs in RAN and cs not in RAN:
        status.verdict, status.detail = "regression", f"was {bs}, now {cs}: {(c.results[0].error or '')[-200:]}".rstrip(": ")
    elif bs not in RAN and cs in RAN:
        status.verdict, status.detail = "improvement", f"was {bs}, now runs"
    elif bs != cs:
        status.detail = f"was {bs}, now {cs}"
    findings = [status]
    if bs not in RAN or cs not in RAN:
        why = f"not measured on both sides (baseline {bs}, current {cs})"
        return findings + [Finding(cid, desc, m, "skipped", "-", "-", detail=why) for m in METRICS[1:]]
    findings += _timing(cid, desc, b, c, thr, alpha)
    (bm, bscope), (cm, cscope) = b.memory, c.memory
    mem = Finding(cid, desc, "peak_memory", "unchanged", _fmt(bm and bm / 2**20, ",.1f", " MiB"),
                  _fmt(cm and cm / 2**20, ",.1f", " MiB"))
    if bm is None or cm is None or bscope != cscope:
        mem.verdict, mem.detail = "inconclusive", f"no like-for-like measurement (baseline {bscope}, current {cscope})"
    else:
        mem.change = cm / bm - 1 if bm else None
        limit = thr["peak_memory"]
        if mem.change is not None and abs(mem.change) > limit:
            mem.verdict = "regression" if mem.change > 0 else "improvement"
            mem.detail = f"{bscope} {'up' if mem.change > 0 else 'down'} {abs(mem.change):.1%} (tolerance {limit:.0%})"
        else:
            mem.detail = f"{bscope} within {limit:.0%}"
    conv = Finding(cid, desc, "convergence", "unchanged", convergence_verdict(b.results) or "-",
                   convergence_verdict(c.results) or "-")
    bg, cg = b.gates, c.gates
    newly_failed = sorted(n for n, ok in cg.items() if not ok and bg.get(n, True))
    newly_passed = sorted(n for n, ok in cg.items() if ok and bg.get(n) is False)
    if newly_failed:
        conv.verdict, conv.detail = "regression", "gate(s) now failing: " + ", ".join(newly_failed)
    elif newly_passed:
        conv.verdict, conv.detail = "improvement", "gate(s) now passing: " + ", ".join(newly_passed)
    bl, cl = b.final_loss, c.final_loss
    loss = Finding(cid, desc, "final_loss", "unchanged", _fmt(bl, ".5f"), _fmt(cl, ".5f"))
    if bl is None or cl is None:
        loss.verdict, loss.detail = "inconclusive", "no finite final loss on one side"
    else:
        loss.change = (cl - bl) / abs(bl) if bl else cl - bl
        limit = thr["final_loss"]
        if abs(loss.change) > limit:
            loss.verdict = "regression"
            loss.detail = f"moved {loss.change:+.2%} (tolerance {limit:.2%}): the same cell computes something else"
        else:
            loss.detail = f"within {limit:.2%}"
    return findings + [mem, conv, loss]


# What must match for two results to be comparable (the names --ignore-env takes).
ENV_FIELDS = ("device_model", "device_count", "world_size", "precision", "torch", "cuda", "nccl", "image_digest")


def _env_values(run: Run) -> dict[str, str]:
    m = run.manifest
    device = ", ".join(sorted(set(m.devices))) if m.devices else f"cpu: {m.cpu_model}"
    return {"device_model": device, "device_count": str(m.device_count), "torch": str(m.torch),
            "cuda": str(m.cuda), "nccl": str(m.nccl), "image_digest": str(m.container_image_digest)}


def environment_diffs(pairs: list[tuple[Side, Side]]) -> list[EnvDiff]:
    """Fields that matter and differ between the runs the matched cells came from."""
    base: dict[str, set[str]] = {}
    cur: dict[str, set[str]] = {}
    for b, c in pairs:
        for side, acc in ((b, base), (c, cur)):
            values = _env_values(side.run)
            values["world_size"] = str(side.results[0].axes.get("gpus"))
            values["precision"] = str(side.results[0].axes.get("precision"))
            for k, v in values.items():
                acc.setdefault(k, set()).add(v)
    return [EnvDiff(k, ", ".join(sorted(base[k])), ", ".join(sorted(cur[k])))
            for k in ENV_FIELDS if k in base and base[k] != cur.get(k)]


def compare(baseline: list[Run], current: list[Run], thresholds: dict[str, float] | None = None,
            alpha: float = 0.05) -> Comparison:
    if not 0 < alpha < 1:
        raise CompareUsageError(f"--alpha {alpha} must be between 0 and 1")
    thr = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    b, c = select(baseline), select(current)
    axes = varying(list(b.values()) + list(c.values()))
    desc = {cid: describe(side.results[0], axes) for side_map in (b, c) for cid, side in side_map.items()}
    common = sorted(set(b) & set(c), key=lambda cid: (desc[cid], cid))
    findings = [f for cid in common for f in _compare_cell(cid, desc[cid], b[cid], c[cid], thr, alpha)]
    only_b = sorted((cid, desc[cid]) for cid in set(b) - set(c))
    only_c = sorted((cid, desc[cid]) for cid in set(c) - set(b))
    env = environment_diffs([(b[cid], c[cid]) for cid in common])
    return Comparison(findings, only_b, only_c, env, thr, alpha, matched=len(common))
