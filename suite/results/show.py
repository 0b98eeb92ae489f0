"""Rich tables over stored results (`suite results ls`, `suite results show`, and `suite run`'s summary).

Reads files only (no torch), through reader.py: run folders and cell records written by store.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table

from suite.axes import varying_axes
from suite.console import PlainTable, nbytes, si, styled, table
from suite.results import reader
from suite.results.memory import memory_ratio
from suite.results.schema import CellResult

STATUS_STYLE = {"ok": "green", "infeasible": "yellow", "gate-failed": "magenta", "interrupted": "yellow"}


def _status(s: str):
    return styled(s, STATUS_STYLE.get(s, "red"))


def _f(x: float | None, fmt: str = ".4g") -> str | None:
    return None if x is None else format(x, fmt)


def first_line(error: str | None, limit: int = 160) -> str:
    """The summary line of an error (the runner puts the cause first, the log tail after)."""
    lines = (error or "").strip().splitlines()
    return lines[0][:limit] if lines else ""


def _varying_axes(results: list[CellResult]) -> list[str]:
    """Axes whose value differs between the results (the ones worth a column); model always."""
    axes = list(results[0].axes.as_dict()) if results else []
    varying = set(varying_axes([r.axes.as_dict() for r in results], axes))
    return [a for a in axes if a == "model" or a in varying]


def cells_table(results: list[CellResult], title: str) -> Table | PlainTable:
    """One row per cell result: axes that vary, status, loss, timing, throughput, MFU, memory ratio, overhead."""
    axes = _varying_axes(results)
    cols = ["cell", *axes, "status", "final loss", "step ms (p50)", "tokens/s/dev", "MFU",
            "memory measured/predicted", "launch+setup s", "train s", "teardown s", "gates / error"]
    rows = []
    for r in results:
        ratio, scope = memory_ratio(r)  # the report's ratio, like for like (suite/results/memory.py)
        mem = f"{ratio:.2f} ({scope})" if ratio is not None else "-"
        o = r.overhead_s
        gates = ", ".join(f"{g.name} {'ok' if g.passed else 'FAILED'}" for g in r.gates)
        note = gates if r.status == "ok" else first_line(r.error)
        rows.append([f"{r.cell_id}-r{r.repeat}", *(str(r.axes.get(a)) for a in axes), _status(r.status),
                    _f(r.final_loss) or "-", _f(r.step_time.median * 1e3, ".1f") if r.step_time else "-",
                    si(r.throughput.tokens_per_s_per_device) if r.throughput else "-",
                    f"{r.mfu.value:.1%}" if r.mfu and r.mfu.value is not None else "-", mem,
                    _f(o.launch + o.setup, ".1f") if o else "-", _f(o.train, ".1f") if o else "-",
                    _f(o.teardown, ".1f") if o else "-", note])
    # least important first: what a narrow terminal leaves out (the caption says which)
    optional = ["teardown s", "launch+setup s", "train s", "memory measured/predicted", "MFU", "final loss",
                "tokens/s/dev"]
    return table(title, cols, rows, optional=optional, flexible="gates / error")


def status_counts(results: list[CellResult]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    return counts


def _within(run: Path, exc: Exception) -> str:
    """A read error's first line, its file named relative to the run folder (the table names the folder)."""
    return str(exc).splitlines()[0].replace(f"{run}/", "")[:160] if str(exc) else type(exc).__name__


def runs_table(root: Path, warnings: list[str] | None = None) -> Table:
    """Every run folder under a results root: scenario, run, time, commit, counts per status.  A run whose
    manifest or cells cannot be read is listed with why; its full error is appended to `warnings`."""
    rows = []
    for run in reader.iter_run_dirs(root):
        try:
            m = reader.read_manifest(run)
            when, commit = m.created_at, (m.git_commit or "-")[:7] + ("*" if m.git_dirty else "")
        except reader.StoreError as exc:  # listed anyway, with why it is unreadable
            when, commit = f"unreadable manifest: {_within(run, exc)}", "-"
            if warnings is not None:
                warnings.append(str(exc).splitlines()[0])
        try:
            results = reader.read_cell_results(run)
        except reader.StoreError as exc:
            rows.append([run.parent.name, run.name, when, commit, "-", f"unreadable: {_within(run, exc)}", str(run)])
            if warnings is not None:
                warnings.append(str(exc).splitlines()[0])
            continue
        counts = " ".join(f"{k} {v}" for k, v in sorted(status_counts(results).items())) or "no cells yet"
        rows.append([run.parent.name, run.name, when, commit, len(results), counts, str(run)])
    return table(f"runs under {root}", ["scenario", "run", "created (UTC)", "commit", "cells", "statuses",
                                        "folder"], rows)


def _kv(title: str, items: list[tuple[str, Any]]) -> Table:
    return table(title, ["", ""], [[k, v] for k, v in items])


def cell_detail(r: CellResult) -> Group:
    """One cell result in full: what ran, how it ended, timing, throughput, MFU accounting, memory, gates."""
    parts: list[Any] = [_kv(f"cell {r.cell_id}-r{r.repeat}", [
        ("status", _status(r.status)), ("axes", ", ".join(f"{k}={v}" for k, v in r.axes.as_dict().items())),
        ("launcher", r.launcher), ("started / finished", f"{r.started_at} / {r.finished_at}"),
        ("ranks", ", ".join(f"{x.rank}@{x.hostname} {x.device_name}" for x in r.ranks) or "-"),
        ("restarts", r.restarts), ("losses", f"{len(r.losses)} steps, first {_f(r.losses[0]) if r.losses else '-'}, "
                                             f"final {_f(r.final_loss) or '-'}")])]
    if r.step_time:
        s = r.step_time
        parts.append(_kv("step time (measured steps), ms", [("n", s.n), ("median", f"{s.median * 1e3:.2f}"),
                          ("p10 / p90", f"{s.p10 * 1e3:.2f} / {s.p90 * 1e3:.2f}"), ("mean", f"{s.mean * 1e3:.2f}")]))
    if r.throughput:
        t = r.throughput
        parts.append(_kv("throughput", [("tokens/s", si(t.tokens_per_s)), ("tokens/s per device",
                          si(t.tokens_per_s_per_device)), ("samples/s", si(t.samples_per_s))]))
    if r.mfu:
        m = r.mfu
        parts.append(_kv("MFU", [("value", f"{m.value:.2%}" if m.value is not None else "none (no peak known)"),
                                 ("precision", m.precision), ("FLOPs/token", si(m.flops_per_token)),
                                 ("peak", si(m.peak_flops, "FLOP/s")), ("peak source", m.peak_source),
                                 ("formula", m.formula)]))
    if r.memory:
        keys = list(dict.fromkeys([*r.memory.measured, *r.memory.predicted]))
        parts.append(table("memory per rank (rank 0) vs planner", ["category", "measured", "predicted", "ratio"],
                           [[k, nbytes(r.memory.measured.get(k)), nbytes(r.memory.predicted.get(k)),
                             _f(r.memory.ratio.get(k), ".3f")] for k in keys]))
    if r.overhead_s:
        o = r.overhead_s
        parts.append(_kv("where the wall time went, s", [(k, f"{getattr(o, k):.2f}") for k in
                                                          ("launch", "setup", "train", "teardown", "wall")]))
    if r.gates:
        parts.append(table("gates", ["gate", "passed", "step", "detail"],
                           [[g.name, g.passed, g.step, g.detail] for g in r.gates]))
    if r.error:
        parts.append(_kv("error (tail)", [("", r.error[-2000:])]))
    return Group(*parts)


def find(target: str, root: Path) -> tuple[str, Path | CellResult]:
    """Resolve `results show`'s argument: a run folder, a cell JSON file, a run name, or a cell id (prefix,
    optionally with -r<k>) looked up in the newest run under `root` that has it."""
    path = Path(target)
    if path.is_dir() and reader.is_run_dir(path):
        return "run", path
    if path.is_dir():  # a folder, but not a run's: say what is missing instead of "not found"
        raise reader.StoreError(f"{path}: not a run folder (a folder named NNNN_sha_utc holding cells/); give a "
                                "run folder, a cell file, a run name or a cell id")
    if path.is_file():
        return "cell", reader.read_cell_result(path)
    runs = list(reader.iter_run_dirs(root))
    named = [run for run in runs if run.name == target or run.name.startswith(target + "_")]
    if named:
        return "run", named[-1]
    cell, _, rep = target.partition("-r")
    for run in sorted(runs, key=lambda p: p.stat().st_mtime, reverse=True):
        hits = [p for p in reader.cell_files(run)
                if p.name.startswith(cell) and (not rep or p.stem.endswith(f"-r{rep}"))]
        if hits:
            return "cell", reader.read_cell_result(hits[0])
    raise reader.StoreError(f"{target}: not a run folder, cell file, run name or cell id found under {root}")
