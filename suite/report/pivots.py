"""Pivot views: the per-cell rows rearranged to answer one question each.

- memory: model-state bytes per rank by strategy x GPU count — does ZeRO's memory fall as 1/N, as predicted?
- scaling: tokens/s versus GPU count and the scaling efficiency relative to the smallest world size;
- checkpointing: memory saved versus step time added by selective / full recomputation against none;
- seq_len: peak memory and step time versus sequence length;
- scratch: each hand-written strategy (suite/strategies/scratch/) beside its native twin — same loss, what cost?
- layout: memory and tokens/s by tensor-parallel degree (or hsdp's shard group size) — what does a layout buy?
- pipeline: step time and the bubble (measured / predicted) by pipeline schedule, or by pipeline or
  context-parallel degree — what does a schedule cost?
Each pivot but the scratch one marks the best and the worst of its comparison (`Pivot.marks`: green and red in
HTML, bold and italics in Markdown): per column (the same GPU count, sequence length) across the configurations of the rows, or per
row (one configuration) across the columns' values, as `Pivot.marked` says.
A pivot is only built when the rows have the axis it needs with at least two values (the memory pivot needs
two strategies or two GPU counts); otherwise it would be a one-column table that answers nothing.  Rows of a
pivot are the combinations of the other axes that vary; when two results land in the same slot (the same cell
in several runs) the latest run's is shown and a note says so.  Only cells that ran (ok or gate-failed) count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from suite.axes import AXES, AXIS_HEADERS, rank as axis_rank, varying_axes
from suite.report.tables import CellRow
from suite.strategies import registry

MEASURED = ("ok", "gate-failed")


@dataclass
class Pivot:
    name: str            # slug (file names, JSON key)
    title: str
    question: str
    header: list[str]    # first entry heads the row labels
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    marks: dict[int, dict[int, str]] = field(default_factory=dict)  # row -> {column: "best" | "worst"}
    marked: str = ""  # what the marks compare, in words ("" when nothing is marked)


@dataclass(frozen=True)
class Ranking:
    """What a pivot marks: the best and the worst `score` (None: not measured, never marked), either down each
    column (`along="column"`: the configurations at one value of the column axis) or along each row
    (`along="row"`: one configuration at the column axis's values)."""
    score: Callable[[CellRow], float | None]
    higher_is_better: bool
    along: str  # "column" | "row"
    what: str   # e.g. "tokens/s": named in the pivot's legend


def _marks(table: dict[str, dict[Any, CellRow]], cols: list[Any], ranking: Ranking) -> dict[int, dict[int, str]]:
    """row index -> {column index: "best" | "worst"}; a comparison with fewer than two distinct values marks
    nothing.  Column indices count the label column (the first)."""
    labels = list(table)
    if ranking.along == "column":
        groups = [[(i, 1 + j, table[label][c]) for i, label in enumerate(labels) if c in table[label]]
                  for j, c in enumerate(cols)]
    else:
        groups = [[(i, 1 + j, table[label][c]) for j, c in enumerate(cols) if c in table[label]]
                  for i, label in enumerate(labels)]
    out: dict[int, dict[int, str]] = {}
    for group in groups:
        scored = [(v, i, j) for i, j, row in group if (v := ranking.score(row)) is not None]
        values = {v for v, _, _ in scored}
        if len(values) < 2:
            continue
        best = max(values) if ranking.higher_is_better else min(values)
        worst = min(values) if ranking.higher_is_better else max(values)
        for v, i, j in scored:
            if v in (best, worst):
                out.setdefault(i, {})[j] = "best" if v == best else "worst"
    return out


def _label(row: CellRow, axes: list[str]) -> str:
    return ", ".join(f"{AXIS_HEADERS[a]}={row.get(a)}" for a in axes) or "all"


def _slots(rows: list[CellRow], varying_axes: list[str], col_axis: str,
           keep: tuple[str, ...] = ()) -> tuple[dict[str, dict[Any, CellRow]], list[Any], int]:
    """{row label: {column value: row}}, the sorted column values, and how many slots had several results."""
    varying = set(varying_axes) | set(keep)
    row_axes = [a for a in AXES if a in varying and a != col_axis]
    table: dict[str, dict[Any, CellRow]] = {}
    collisions = 0
    for row in rows:
        slot = table.setdefault(_label(row, row_axes), {})
        key = row.get(col_axis)
        if key in slot:
            collisions += 1
            if slot[key].created_at > row.created_at:
                continue
        slot[key] = row
    # None (an axis a strategy does not use, e.g. zero3's shard_size) sorts first
    cols = sorted({r.get(col_axis) for r in rows},
                  key=lambda v: (v is not None, axis_rank(col_axis, v) or 0, v if v is not None else 0))
    return table, cols, collisions


def _num(v: float | None, spec: str, unit: str = "") -> str:
    return "-" if v is None else format(v, spec) + unit


def _pct(new: float | None, old: float | None) -> str:
    if new is None or not old:
        return ""
    change = round((new / old - 1) * 100)
    return f" ({change:+d}%)" if change else " (+0%)"


def _build(rows: list[CellRow], varying: list[str], name: str, title: str, question: str, col_axis: str, col_header: Callable[[Any], str],
           cell: Callable[[dict[Any, CellRow], Any], str], keep: tuple[str, ...] = (),
           extra: tuple[str, Callable[[dict[Any, CellRow], list[Any]], str]] | None = None,
           ranking: Ranking | None = None) -> Pivot:
    table, cols, collisions = _slots(rows, varying, col_axis, keep)
    header = ["cells"] + [col_header(c) for c in cols] + ([extra[0]] if extra else [])
    body = []
    for label, slot in table.items():
        line = [label] + [cell(slot, c) if c in slot else "" for c in cols]
        if extra:
            line.append(extra[1](slot, [c for c in cols if c in slot]))
        body.append(line)
    notes = [f"{collisions} slot(s) held results from several runs; the latest run is shown."] if collisions else []
    marks = _marks(table, cols, ranking) if ranking else {}
    marked = ""
    if marks and ranking:
        where = (f"down each column (one {AXIS_HEADERS[col_axis]} value)" if ranking.along == "column"
                 else "along each row")
        good, bad = ("highest", "lowest") if ranking.higher_is_better else ("lowest", "highest")
        marked = f"Marked {where}: the {good} {ranking.what} (best) and the {bad} (worst)."
    return Pivot(name, title, question, header, body, notes, marks, marked)


def memory_pivot(rows: list[CellRow], varying: list[str]) -> Pivot | None:
    if not ({"strategy", "gpus"} & set(varying)):
        return None

    def cell(slot: dict[Any, CellRow], gpus: Any) -> str:
        r = slot[gpus]
        return f"{_num(r.states_measured_mib, ',.1f')} / {_num(r.states_predicted_mib, ',.1f')}"

    def check(slot: dict[Any, CellRow], present: list[Any]) -> str:
        if len(present) < 2:
            return ""
        lo, hi = slot[present[0]], slot[present[-1]]
        m = (hi.states_measured_mib / lo.states_measured_mib
             if hi.states_measured_mib and lo.states_measured_mib else None)
        p = (hi.states_predicted_mib / lo.states_predicted_mib
             if hi.states_predicted_mib and lo.states_predicted_mib else None)
        return f"{present[0]}->{present[-1]} gpus: x{_num(m, '.2f')} (predicted x{_num(p, '.2f')})"

    pv = _build(rows, varying, "memory", "Model-state memory per rank by strategy and GPU count",
                "Does sharding cut per-rank memory as predicted (ZeRO-3: 1/N)? Parameters + gradients + optimizer "
                "states (+ master weights), measured / predicted, MiB per rank.",
                "gpus", lambda g: f"{g} gpus (MiB)", cell, keep=("strategy",), extra=("measured vs predicted change", check),
                ranking=Ranking(lambda r: r.states_measured_mib, False, "column", "measured model-state memory"))
    if all(line[-1] == "" for line in pv.rows):
        pv.header, pv.rows = pv.header[:-1], [line[:-1] for line in pv.rows]
    return pv


def scaling_pivot(rows: list[CellRow], varying: list[str]) -> Pivot | None:
    if "gpus" not in varying:
        return None

    def cell(slot: dict[Any, CellRow], gpus: Any) -> str:
        measured = [g for g in slot if slot[g].tokens_per_s]
        tps = slot[gpus].tokens_per_s
        if tps is None or not measured:
            return "-"
        base_gpus = min(measured)
        eff = (tps / gpus) / (slot[base_gpus].tokens_per_s / base_gpus)
        return f"{tps:,.0f} ({eff * 100:.0f}%)"

    return _build(rows, varying, "scaling", "Throughput scaling with GPU count",
                  "How close is throughput to linear in the number of GPUs? tokens/s (efficiency = tokens/s per GPU "
                  "relative to the smallest world size in the row).", "gpus", lambda g: f"{g} gpus (tokens/s)", cell,
                  ranking=Ranking(lambda r: r.tokens_per_s, True, "column", "tokens/s"))


def checkpointing_pivot(rows: list[CellRow], varying: list[str]) -> Pivot | None:
    values = {r.get("activation_checkpointing") for r in rows} if "activation_checkpointing" in varying else set()
    if "none" not in values:
        return None

    def mem(r: CellRow) -> float | None:
        peak = (r.memory_scope or "").startswith("peak")
        return r.memory_measured_mib if peak else r.activations_measured_mib

    def cell(slot: dict[Any, CellRow], mode: Any) -> str:
        r, base = slot[mode], slot.get("none")
        text = f"{_num(mem(r), ',.1f', ' MiB')}, {_num(r.step_median_ms, ',.2f', ' ms')}"
        if mode != "none" and base is not None:
            text = (f"{_num(mem(r), ',.1f', ' MiB')}{_pct(mem(r), mem(base))}, "
                    f"{_num(r.step_median_ms, ',.2f', ' ms')}{_pct(r.step_median_ms, base.step_median_ms)}")
        return text

    pivot = _build(rows, varying, "checkpointing", "Cost of activation checkpointing",
                   "What does recomputation save in memory, and what does it add to step time? Peak memory per rank "
                   "(measured activations where no peak was measured) and median step time; percentages against "
                   "no checkpointing.", "activation_checkpointing",
                   lambda m: f"{m}", cell, ranking=Ranking(mem, False, "row", "memory"))
    pivot.notes += _recompute_notes(rows)
    return pivot


# The claims the seed set out to check (Korthikanti et al. 2022, ../shared/reference.md)
SEED_CLAIMS = ("The seed's claims: selective recomputation saves up to 70% of activation memory for about 2.7% more "
               "compute; full recomputation costs 30-40% more compute.  Compare with the percentages above.")


def _recompute_notes(rows: list[CellRow]) -> list[str]:
    """The claim, and per policy the forward FLOPs it recomputes as a share of the model's (planned, from the
    stored prediction: plan/recompute.py), the hardware work behind the step time added."""
    shares: dict[str, set[str]] = {}
    for row in rows:
        for result in row.results[:1]:
            flops = result.prediction.get("flops_per_token")
            extra = result.prediction.get("recompute_flops_per_token")
            if flops and extra is not None:
                shares.setdefault(row.get("activation_checkpointing"), set()).add(f"{100 * extra / flops:.1f}%")
    planned = [f"{mode} +{'/'.join(sorted(v))}" for mode, v in
               sorted(shares.items(), key=lambda mv: axis_rank("activation_checkpointing", mv[0]) or 0)]
    out = [SEED_CLAIMS]
    if planned:
        out.append("Planned recompute, forward FLOPs rerun as a share of the model's FLOPs: " + ", ".join(planned)
                   + ".")
    return out


def seq_len_pivot(rows: list[CellRow], varying: list[str]) -> Pivot | None:
    if "seq_len" not in varying:
        return None

    def cell(slot: dict[Any, CellRow], s: Any) -> str:
        r = slot[s]
        mem = r.memory_measured_mib if (r.memory_scope or "").startswith("peak") else None
        return f"{_num(mem, ',.1f', ' MiB')}, {_num(r.step_median_ms, ',.2f', ' ms')}"

    return _build(rows, varying, "seq_len", "Memory and time versus sequence length",
                  "How do peak memory per rank and median step time grow with the sequence length?", "seq_len",
                  lambda s: f"seq {s}", cell,
                  ranking=Ranking(lambda r: r.step_median_ms, False, "column", "step time"))


def scratch_pivot(rows: list[CellRow], varying: list[str]) -> Pivot | None:
    """One line per hand-written strategy and configuration, against its native twin in the same configuration
    (its registry entry's twin: scratch-dp* ~ ddp, scratch-zeroK ~ zeroK).  Built only when some twin is present."""
    if "strategy" not in varying:
        return None
    table, _, collisions = _slots(rows, varying, "strategy")
    body = []
    for label, slot in table.items():
        for name in (s for s in registry.order() if s in slot and registry.native(s) != s):
            mine, native = slot[name], slot.get(registry.native(name))
            if native is None:
                continue  # nothing to pair with: the cell table still shows it
            t_n, t_s = native.step_median_ms, mine.step_median_ms
            l_n, l_s = native.final_loss, mine.final_loss
            body.append([
                f"{name} vs {registry.native(name)}" + ("" if label == "all" else f", {label}"),
                f"{_num(t_n, ',.2f')} / {_num(t_s, ',.2f')}",
                "-" if t_n is None or t_s is None or not t_n else f"x{t_s / t_n:.2f}",
                f"{_num(native.memory_measured_mib, ',.1f')} / {_num(mine.memory_measured_mib, ',.1f')}"
                f" ({mine.memory_scope or 'not measured'})",
                "-" if l_n is None or l_s is None else f"{l_s - l_n:+.2e}",
            ])
    if not body:
        return None
    notes = [f"{collisions} slot(s) held results from several runs; the latest run is shown."] if collisions else []
    return Pivot("scratch", "Hand-written strategies beside their native twins",
                 "Do the strategies written from collectives compute what PyTorch's do, and what does the native one "
                 "buy? Median step time, measured memory per rank (its scope in parentheses) and final loss, "
                 "native / scratch.",
                 ["pair", "step median native / scratch (ms)", "scratch / native", "memory native / scratch (MiB)",
                  "final loss scratch - native"], body, notes)


def layout_pivot(rows: list[CellRow], varying: list[str]) -> Pivot | None:
    """Tensor-parallel degree (or, without one, hsdp's shard group size) against memory and throughput."""
    axis = next((a for a in ("tensor_parallel", "shard_size") if a in varying), None)
    if axis is None:
        return None

    def cell(slot: dict[Any, CellRow], value: Any) -> str:
        r = slot[value]
        return (f"{_num(r.states_measured_mib, ',.1f')} / {_num(r.states_predicted_mib, ',.1f')} MiB, "
                f"{_num(r.tokens_per_s, ',.0f', ' tok/s')}")

    what = "tensor-parallel degree" if axis == "tensor_parallel" else "HSDP shard group size"
    return _build(rows, varying, "layout", f"Memory and throughput by {what}",
                  f"What does each {what} hold per rank (model states, measured / predicted) and how fast does it "
                  "train (tokens/s)?", axis, lambda v: f"{AXIS_HEADERS[axis]} {'-' if v is None else v}", cell,
                  ranking=Ranking(lambda r: r.tokens_per_s, True, "row", "tokens/s"))


def pipeline_pivot(rows: list[CellRow], varying: list[str]) -> Pivot | None:
    """The pipeline schedule (or, with one schedule, the pipeline or context-parallel degree) against step time
    and the bubble, measured / predicted."""
    axis = next((a for a in ("pipeline_schedule", "pipeline_parallel", "context_parallel") if a in varying), None)
    if axis is None:
        return None

    def cell(slot: dict[Any, CellRow], value: Any) -> str:
        r = slot[value]
        bubble = ("" if r.bubble_pct is None and r.bubble_predicted_pct is None else
                  f", bubble {_num(r.bubble_pct, '.1f')} / {_num(r.bubble_predicted_pct, '.1f')} %")
        return f"{_num(r.step_median_ms, ',.1f', ' ms')}{bubble}"

    return _build(rows, varying, "pipeline", f"Step time and bubble by {AXIS_HEADERS[axis]}",
                  "How long does a step take, and how much of it do the pipeline's ranks sit idle (the bubble, "
                  "measured / predicted)?", axis, lambda v: f"{AXIS_HEADERS[axis]} {'-' if v is None else v}", cell,
                  ranking=Ranking(lambda r: r.step_median_ms, False, "row", "step time"))


BUILDERS = (memory_pivot, scaling_pivot, checkpointing_pivot, seq_len_pivot, scratch_pivot, layout_pivot,
            pipeline_pivot)


def pivots(rows: list[CellRow]) -> list[Pivot]:
    """Every pivot the rows have the axes for, built from the cells that ran."""
    measured = [r for r in rows if r.status in MEASURED]
    if not measured:
        return []
    varying = varying_axes(measured)
    return [p for p in (b(measured, varying) for b in BUILDERS) if p is not None]
