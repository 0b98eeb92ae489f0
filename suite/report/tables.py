"""The per-cell table: one row per (run, cell), repeats folded together, in fixed columns with units.

A row is a `CellRow`: typed fields for every column of COLUMNS (values already in the unit the header names:
ms, MiB, %), so CSV/JSON writers dump them as they are and Markdown/HTML only format numbers, the cell's typed
`Axes`, and the raw material pivots and plots read (step-time samples, loss curve, memory breakdowns, the
repeats themselves), which is never printed.  `row.get(key)` looks a column or an axis up by its key, for the
renderers that walk COLUMNS.

Repeats of a cell are folded: step times are pooled, throughput, MFU and a pipeline's bubble take the median over
repeats, memory the largest measured peak, and the status is the first repeat's that was not ok (a flaky cell must show).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable

from suite import axes, stats
from suite.axes import AXES, AXIS_HEADERS, in_use, varying_axes
from suite.compat import PINNED_TORCH, is_pinned
from suite.results.env import cuda_text, device_text
from suite.results.memory import measured_memory, memory_parts, states_bytes
from suite.results.reader import Run
from suite.results.schema import Axes, CellResult
from suite.scenario.convergence import MatchGate
from suite.strategies import registry

MiB = 2.0**20


@dataclass(frozen=True)
class Column:
    key: str     # CSV/JSON key (unit in the name)
    header: str  # Markdown/HTML header (unit in parentheses)
    fmt: str     # format spec for numbers; "" for text


COLUMNS: tuple[Column, ...] = (
    Column("run", "run", ""),
    Column("cell", "cell", ""),
    *(Column(axis, header, "") for axis, header in AXIS_HEADERS.items()),
    Column("status", "status", ""),
    Column("repeats", "repeats", ""),
    Column("tokens_per_s", "tokens/s", ",.0f"),
    Column("tokens_per_s_per_device", "tokens/s/device", ",.0f"),
    Column("step_median_ms", "step median (ms)", ",.2f"),
    Column("step_p90_ms", "step p90 (ms)", ",.2f"),
    Column("mfu_pct", "MFU (%)", ".1f"),
    Column("mfu_basis", "MFU basis", ""),
    Column("memory_measured_mib", "memory measured (MiB)", ",.1f"),
    Column("memory_predicted_mib", "memory predicted (MiB)", ",.1f"),
    Column("memory_ratio", "measured/predicted", ".2f"),
    Column("memory_scope", "memory scope", ""),
    Column("bubble_pct", "bubble measured (%)", ".1f"),
    Column("bubble_predicted_pct", "bubble predicted (%)", ".1f"),
    Column("stage_states_mib", "model states per stage (MiB)", ""),
    Column("final_loss", "final loss", ".4f"),
    Column("eval_loss", "held-out loss", ".4f"),
    Column("accuracy_pct", "held-out accuracy (%)", ".1f"),
    Column("time_to_target", "time to target", ""),
    Column("convergence", "convergence", ""),
)
COLUMN_KEYS = tuple(c.key for c in COLUMNS)


@dataclass
class CellRow:
    """One row of the per-cell table: all repeats of one cell in one run, folded (see the module docstring)."""

    run: str  # the run folder's label
    cell: str  # the cell id
    axes: Axes  # the cell's value on every axis (model by its label)
    status: str  # the first repeat's status that was not ok, else ok
    repeats: int
    tokens_per_s: float | None
    tokens_per_s_per_device: float | None
    step_median_ms: float | None  # over the repeats' measured steps pooled
    step_p90_ms: float | None
    mfu_pct: float | None
    mfu_basis: str | None  # how MFU was counted (a footnote in Markdown/HTML)
    memory_measured_mib: float | None
    memory_predicted_mib: float | None
    memory_ratio: float | None  # measured / predicted, like for like (memory_scope)
    memory_scope: str | None  # peak (cuda) | peak (tracker) | peak | states
    bubble_pct: float | None  # pipelines: the measured bubble (median over repeats), else None
    bubble_predicted_pct: float | None  # pipelines: the planner's bubble for the schedule
    stage_states_mib: str | None  # pipelines: "first / ... / last" stage's model states (the first repeat's)
    final_loss: float | None
    eval_loss: float | None
    accuracy_pct: float | None
    time_to_target: str | None
    convergence: str | None  # pass | fail: <gate>@<step>, ... | None without gates
    # raw material for pivots and plots, never printed
    created_at: str = ""  # the run's creation time (the newer of two rows of one pivot slot wins)
    step_times_s: list[float] = field(default_factory=list)  # measured steps of every repeat, pooled
    losses: list[float] = field(default_factory=list)  # the first repeat's loss curve
    measured: dict[str, float | None] = field(default_factory=dict)  # rank 0's bytes by category
    predicted: dict[str, float] = field(default_factory=dict)  # the planner's bytes by category
    states_measured_mib: float | None = None
    states_predicted_mib: float | None = None
    activations_measured_mib: float | None = None
    match: MatchGate | None = None  # the cell's match gate, for the loss-curve plots
    results: list[CellResult] = field(default_factory=list)  # the repeats themselves (peaks.py, bands.py)
    run_index: int = 0  # the run's position among the report's runs (oldest first)

    def get(self, key: str) -> Any:
        """The value of a column (a COLUMNS key) or of an axis (an AXES name); None for any other key."""
        if key in AXIS_HEADERS:
            return getattr(self.axes, key, None)  # (Axes.get, one call less: tables ask millions of times)
        return getattr(self, key) if key in _ROW_KEYS else None


_ROW_KEYS = frozenset(COLUMN_KEYS) - frozenset(AXIS_HEADERS)


def fmt(column: Column, value: Any) -> str:
    """A value as a table shows it; missing values are '-'."""
    if value is None:
        return "-"
    if column.fmt and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, column.fmt)
    return str(value)


def _mib(n: float | None) -> float | None:
    return None if n is None else n / MiB


def _median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return stats.median(vals) if vals else None


def mfu_basis(r: CellResult) -> str | None:
    """How MFU was counted: formula, peak and its source, precision (or why there is no MFU)."""
    m = r.mfu
    if m is None:
        return None
    if m.peak_flops is None:
        return f"no known peak for this device at {m.precision} ({m.formula})"
    return f"{m.formula}; peak {m.peak_flops / 1e12:,.0f} TFLOP/s {m.precision} ({m.peak_source or 'unknown source'})"


def convergence_verdict(results: list[CellResult]) -> str | None:
    """'pass', 'fail: <gate>@<step>, ...' over all repeats, or None when the cell has no gates."""
    gates = [g for r in results for g in r.gates]
    if not gates:
        return None
    failed = sorted({g.name + (f"@{g.step}" if g.step is not None else "") for g in gates if not g.passed})
    return "fail: " + ", ".join(failed) if failed else "pass"


def target_text(r: CellResult) -> str | None:
    """'step 30: 0.53 s train, 0.95 s wall' or 'missed (best 0.41)'; None without a target."""
    t = r.time_to_target
    if t is None:
        return None
    if not t.reached:
        return "missed" + (f" (best {t.best:.4g})" if t.best is not None else "")
    return f"step {t.step}: {t.train_s:.3g} s train, {t.wall_s:.3g} s wall"


def fold_status(results: list[CellResult]) -> str:
    return next((r.status for r in results if r.status != "ok"), "ok")


def cell_row(run: Run, results: list[CellResult]) -> CellRow:
    """One table row from all repeats of one cell in one run."""
    first = results[0]
    pooled = [t for r in results for t in r.step_times_s]
    if pooled:
        step_median, step_p90 = stats.median(pooled), stats.quantile(pooled, 0.9)
    elif first.step_time is not None:
        step_median, step_p90 = first.step_time.median, first.step_time.p90
    else:
        step_median = step_p90 = None
    mem = [measured_memory(r) for r in results]
    mem_measured = max((m for m, _, _ in mem if m is not None), default=None)
    _, mem_predicted, mem_scope = mem[0]
    measured, predicted = memory_parts(first)
    states_m, states_p = states_bytes(first)
    return CellRow(
        run=run.label,
        cell=first.cell_id,
        axes=first.axes,
        status=fold_status(results),
        repeats=len(results),
        tokens_per_s=_median(r.throughput.tokens_per_s if r.throughput else None for r in results),
        tokens_per_s_per_device=_median(
            r.throughput.tokens_per_s_per_device if r.throughput else None for r in results),
        step_median_ms=None if step_median is None else step_median * 1e3,
        step_p90_ms=None if step_p90 is None else step_p90 * 1e3,
        mfu_pct=_median(r.mfu.value * 100 if r.mfu and r.mfu.value is not None else None for r in results),
        mfu_basis=mfu_basis(first),
        memory_measured_mib=_mib(mem_measured),
        memory_predicted_mib=_mib(mem_predicted),
        memory_ratio=None if mem_measured is None or not mem_predicted else mem_measured / mem_predicted,
        memory_scope=mem_scope,
        bubble_pct=_median(r.pipeline.bubble * 100 if r.pipeline and r.pipeline.bubble is not None else None
                           for r in results),
        bubble_predicted_pct=(first.pipeline.bubble_predicted * 100
                              if first.pipeline and first.pipeline.bubble_predicted is not None else None),
        stage_states_mib=(" / ".join(f"{b / MiB:,.1f}" for b in first.pipeline.stage_states)
                          if first.pipeline and first.pipeline.stage_states else None),
        final_loss=_median(r.final_loss for r in results),
        eval_loss=_median(r.eval[-1].loss if r.eval else None for r in results),
        accuracy_pct=_median(r.eval[-1].accuracy * 100 if r.eval and r.eval[-1].accuracy is not None else None
                             for r in results),
        time_to_target=target_text(first),
        convergence=convergence_verdict(results),
        created_at=run.manifest.created_at,
        step_times_s=pooled,
        losses=first.losses,
        measured=measured,
        predicted=predicted,
        states_measured_mib=_mib(states_m),
        states_predicted_mib=_mib(states_p),
        activations_measured_mib=_mib(measured.get("activations")),
        match=(first.cell.convergence.match if first.cell.convergence else None) or None,
        results=results,
    )


def cell_rows(runs: list[Run], group_by: Iterable[str] = ()) -> list[CellRow]:
    """Rows for every cell of every run, sorted by the group-by axes, then run (oldest first), then the axes."""
    group_by = list(group_by)
    rows = []
    for n, run in enumerate(runs):
        by_cell: dict[str, list[CellResult]] = {}
        for r in run.results:
            by_cell.setdefault(r.cell_id, []).append(r)
        for results in by_cell.values():
            row = cell_row(run, results)
            row.run_index = n
            rows.append(row)
    order = [*group_by, "run_index", *(a for a in AXES if a not in group_by)]
    strategies = {name: i for i, name in enumerate(registry.order())}  # once per sort, not once per row
    rows.sort(key=lambda row: tuple(_sort_key(a, row.run_index if a == "run_index" else row.get(a), strategies)
                                    for a in order))
    return rows


def _sort_key(axis: str, value: Any, strategies: dict[str, int]) -> tuple[int, Any, str]:
    """Numbers in numeric order, checkpointing modes by cost, strategies in the registry's order (by family:
    dp, zero1, zero2, zero3, each native strategy followed by its hand-written twins, so a table pairs them:
    ddp, scratch-dp, scratch-dp-overlap, scratch-dp-bucketed, zero1, scratch-zero1, zero2, ...), other text
    (and strategies unknown to the registry) alphabetically.  `strategies`: name -> position in that order."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value, "")
    if (place := axes.rank(axis, value)) is not None:  # checkpointing modes by cost (suite/axes.py)
        return (1, place, "")
    if axis == "strategy" and value in strategies:
        return (1, strategies[value], "")
    return (2, 0, str(value))


def fixed_axes(rows: list[CellRow]) -> dict[str, Any]:
    """Axes with a single value among the rows (shown once above a table instead of in every row)."""
    varying = set(varying_axes(rows))
    return {a: rows[0].get(a) for a in AXES if a not in varying} if rows else {}



def fixed_line(rows: list[CellRow]) -> dict[str, Any]:
    """The fixed axes a report states above its tables: those in use (suite.axes.in_use; an unused layout such as
    tensor_parallel 1 is left out)."""
    return {a: v for a, v in fixed_axes(rows).items() if in_use(a, v)}


def display_columns(rows: list[CellRow]) -> list[Column]:
    """Columns for Markdown/HTML: every column but the axes that do not vary (and run, when there is one run)."""
    drop = set(fixed_axes(rows))
    if len({r.run for r in rows}) <= 1:
        drop.add("run")
    # the held-out columns only when something was evaluated (`eval:`): other tables stay as they were
    # and the pipeline columns only when a pipeline ran
    drop |= {k for k in ("eval_loss", "accuracy_pct", "time_to_target", "bubble_pct", "bubble_predicted_pct",
                         "stage_states_mib") if all(r.get(k) is None for r in rows)}
    return [c for c in COLUMNS if c.key not in drop]


def public(row: CellRow) -> dict[str, Any]:
    """The row's columns, in column order (for CSV and JSON)."""
    return {k: row.get(k) for k in COLUMN_KEYS}


def groups(rows: list[CellRow], group_by: list[str]) -> list[tuple[str, list[CellRow]]]:
    """Rows split into sections by the group-by axes, as (title, rows); one untitled section without them."""
    if not group_by:
        return [("", rows)]
    out: dict[str, list[CellRow]] = {}
    for row in rows:
        out.setdefault(", ".join(f"{a}={row.get(a)}" for a in group_by), []).append(row)
    return list(out.items())


def text_table(rows: list[CellRow], columns: list[Column],
               notes: dict[str, int]) -> tuple[list[str], list[list[str]]]:
    """(headers, formatted body) for Markdown/HTML.  The long MFU basis becomes a footnote [n]: `notes` maps each
    basis text to its number and is shared by the sections of one report (see footnotes())."""
    body = []
    for row in rows:
        line = []
        for c in columns:
            v = row.get(c.key)
            if c.key == "mfu_basis" and v is not None:
                v = f"[{notes.setdefault(v, len(notes) + 1)}]"
            line.append(fmt(c, v))
        body.append(line)
    return [c.header for c in columns], body


def footnotes(notes: dict[str, int]) -> list[str]:
    return [f"[{i}] {text}" for text, i in notes.items()]


RUN_HEADERS = ["run", "created (UTC)", "commit", "devices", "torch", "CUDA", "NCCL", "image digest", "host"]


def sweep_text(results: list[CellResult]) -> str:
    """How a run scheduled its launches: "serial", or for a cluster sweep its wall time against the sum of its
    cells' launch times - the speed-up the schedule bought ("pack: 25 s for 34 s of cells, 1.36x")."""
    swept = [r for r in results if r.schedule is not None]
    if not swept:
        return "serial"
    walls = [r.extra.get("wall_s") for r in swept]
    spans = [(datetime.fromisoformat(r.started_at), datetime.fromisoformat(r.finished_at)) for r in swept]
    wall = (max(b for _, b in spans) - min(a for a, _ in spans)).total_seconds()
    busy = sum(w for w in walls if isinstance(w, (int, float)))
    modes = "/".join(sorted({r.schedule.mode for r in swept}))
    retried = sum(1 for r in swept if r.schedule.attempts > 1)
    shared = sum(1 for r in swept if r.machine is not None and r.machine.shared_with)
    more = (f", {shared} shared a node" if shared else "") + (f", {retried} retried" if retried else "")
    if wall <= 0:
        return f"{modes}{more}"
    return f"{modes}: {wall:.0f} s for {busy:.0f} s of cells, {busy / wall:.2f}x{more}"


def run_table(runs: list[Run]) -> tuple[list[str], list[list[str]]]:
    """(headers, one line per run folder): where and with what its results were obtained; a `schedule` column
    (sweep_text) when some run was a cluster sweep."""
    out = []
    for run in runs:
        m = run.manifest
        commit = (m.git_commit or "-")[:7] + ("+dirty" if m.git_dirty else "")
        devices = device_text(m)
        digest = (m.container_image_digest or "-")[:19]
        torch = (m.torch + ("" if is_pinned(m.torch) else f" (not the pinned {PINNED_TORCH})")) if m.torch else "-"
        out.append([run.label, m.created_at, commit, devices, torch, cuda_text(m), m.nccl or "-", digest, m.hostname])
    if any(r.schedule is not None for run in runs for r in run.results):
        return RUN_HEADERS + ["schedule"], [row + [sweep_text(run.results)] for row, run in zip(out, runs)]
    return RUN_HEADERS, out
