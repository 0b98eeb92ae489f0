"""The site's pages: the index, one per scenario, one per cell, one per run.  Layout (links are relative):

    index.html, index.json, style.css, summary.md
    s/<scenario>/index.html          the latest run of every machine side by side, one table per group
    s/<scenario>/cell-<cell>.html    the cell's trend per group (trend.py) and every point, newest first
    runs/<key>.html, runs/<key>.json the run's manifest (versions, commit, image digest, driver) and its cells
"""

from __future__ import annotations

import math
from typing import Callable

from suite.publish.html import (BR, Span, href, joined, link, metric_label, number, render, table, target_text,
                                verdict_text, when, with_spread)
from suite.publish.series import (HELD_OUT, METRICS, VERDICTS, Group, MachineRuns, Point, ScenarioView, slug,
                                  status_counts)
from suite import stats
from suite.axes import in_use
from suite.compare.comparison import Finding
from suite.report.templating import trusted
from suite.results.env import cuda_text, device_text
from suite.results.reader import Run

TABLE_METRICS = ("step_time", "tokens_per_s", "mfu", "peak_memory", "predicted_memory", "final_loss", "eval_loss",
                 "accuracy")
MAX_FLAGGED = 100  # rows of the index's "every flagged run" table (index.json holds them all)


def scenario_path(view: ScenarioView) -> str:
    return f"s/{view.slug}/index.html"


def cell_path(view: ScenarioView, cell_id: str) -> str:
    return f"s/{view.slug}/{cell_file(cell_id)}"


def cell_file(cell_id: str) -> str:
    """A cell page's name in its scenario's folder (prefixed: no cell id can be the scenario's index.html)."""
    return f"cell-{slug(cell_id)}.html"


def run_path(key: str) -> str:
    return f"runs/{key}.html"


def night_sd(points: list[Point], metric: str, last: int = 10) -> tuple[float | None, int]:
    """Night-to-night relative sd (robust) of a metric over a machine's latest `last` points; None under 3."""
    vals = [p.values[metric] for p in points[-last:] if p.values.get(metric)]
    vals = [v for v in vals if v > 0]
    if len(vals) < 3:
        return None, len(vals)
    return stats.mad_sigma([math.log(v) for v in vals]), len(vals)


def _counts(counts: dict[str, int], bad: Callable[[str], bool]) -> tuple:
    return joined([Span(f"{k} {n}", "bad" if bad(k) and n else None) for k, n in sorted(counts.items())])


def _verdict_counts(findings: list[Finding]) -> dict[str, int]:
    counts = {v: 0 for v in VERDICTS}
    for f in findings:
        counts[f.verdict] = counts.get(f.verdict, 0) + 1
    return {k: n for k, n in counts.items() if n}


def flagged(views: list[ScenarioView], kind: str = "regressions") -> list[tuple[ScenarioView, MachineRuns, Point,
                                                                                 Finding]]:
    """Every regression (kind "suspects": every timing change past its threshold without a noise estimate) of
    every run, newest first."""
    out = [(v, m, p, f) for v in views for m in v.machines for pts in m.points.values() for p in pts
           for f in getattr(p, kind)]
    return sorted(out, key=lambda x: x[2].run.manifest.created_at, reverse=True)


def _flag_rows(items) -> list[list]:
    """The index's rows of flagged findings (links from the site's root)."""
    return [[when(p.run.manifest), link(scenario_path(v), v.name),
             link(cell_path(v, f.cell_id), v.cells.get(f.cell_id, f.cell_id)), m.machine.label,
             f.metric, "" if f.change is None else f"{f.change:+.1%}", str(f.detail),
             link(run_path(p.run_key), p.run.manifest.run_id)] for v, m, p, f in items]


FLAG_HEADER = ["when (UTC)", "scenario", "cell", "machine", "metric", "change", "why", "run"]
FLAG_COLUMNS = dict(num=(5,), wrap=(6,))


def index_html(views: list[ScenarioView], history: int = 10) -> str:
    rows = []
    for v in views:
        for m in v.machines:
            key, run = m.latest
            latest = m.latest_findings()
            rows.append([link(scenario_path(v), v.name), m.machine.group.label, m.machine.label,
                         str(len(m.runs)), link(run_path(key), run.manifest.run_id),
                         when(run.manifest), (run.manifest.git_commit or "-")[:7],
                         _counts(status_counts(run.results), lambda s: s != "ok"),
                         _counts(_verdict_counts(latest), lambda s: s == "regression") if latest else
                         Span("first run", "muted")])
    every = flagged(views)
    latest_keys = {m.latest[0] for v in views for m in v.machines}
    recent = [x for x in every if x[2].run_key in latest_keys]
    earlier = [x for x in every if x[2].run_key not in latest_keys]  # the latest runs' rows are listed above
    suspects = [x for x in flagged(views, "suspects") if x[2].run_key in latest_keys]
    return render("index.html.j2", title="suite results", root=href(0, ""), history=history, scenarios=len(views),
                  runs=sum(len(m.runs) for v in views for m in v.machines),
                  machines=len({m.machine for v in views for m in v.machines}),
                  latest=table(["scenario", "group (comparable)", "machine", "runs", "latest run", "when (UTC)",
                                "commit", "statuses", "verdicts vs. earlier runs"], rows, num=(3,), wrap=(8,)),
                  recent=table(FLAG_HEADER, _flag_rows(recent), **FLAG_COLUMNS),
                  suspects=table(FLAG_HEADER, _flag_rows(suspects), **FLAG_COLUMNS),
                  every=table(FLAG_HEADER, _flag_rows(earlier[:MAX_FLAGGED]), **FLAG_COLUMNS), flagged=len(every),
                  earlier=len(earlier))


def _env_note(p: Point) -> tuple:
    """What differs from the earlier runs' environment (compare's --strict would refuse these)."""
    if not p.env:
        return ()
    return BR, Span("environment differs: " + ", ".join(e.split(" (")[0] for e in p.env), "suspect", "; ".join(p.env))


def _apart(group: Group, groups: list[Group]) -> list[tuple[str, str]]:
    """The other groups, each with why its numbers are not beside this group's."""
    return [(g.label, group.apart(g)) for g in groups if g != group]


def _column_heads(machines: list[MachineRuns]) -> list[str]:
    """Each column's label: the fields that vary among the columns (host, image, commit, torch, date)."""
    fields = {"host": lambda r, m: m.machine.host, "image": lambda r, m: m.machine.image or "-",
              "commit": lambda r, m: (r.manifest.git_commit or "-")[:7], "torch": lambda r, m: r.manifest.torch or "-",
              "date": lambda r, m: when(r.manifest)}
    values = {f: [get(m.latest[1], m) for m in machines] for f, get in fields.items()}
    vary = [f for f, vs in values.items() if len(set(vs)) > 1] or ["host", "commit", "date"]
    return [" · ".join(f"{f} {values[f][i]}" for f in vary) for i in range(len(machines))]


def scenario_html(view: ScenarioView) -> str:
    groups = view.groups()
    shown = []
    for group in groups:
        machines = [m for m in view.machines if m.machine.group == group]
        heads = _column_heads(machines)
        cells = [c for c in view.cells if any(c in m.points for m in machines)]
        empty = [k for k in TABLE_METRICS if not any(p.values.get(k) is not None for m in machines
                                                      for pts in m.points.values() for p in pts)]
        missing = [k for k in empty if k not in HELD_OUT]  # a scenario without `eval:` has none: not news
        tables = []
        for metric in [k for k in TABLE_METRICS if k not in empty]:
            rows = []
            for c in cells:
                row = [link(cell_file(c), view.cells[c])]
                for m in machines:
                    pts = m.points.get(c, [])
                    last = pts[-1] if pts and pts[-1].run_key == m.latest[0] else None
                    if last is None:
                        row.append(Span("not in this run", "muted"))
                        continue
                    sd, n = night_sd(pts, metric)
                    cell = [with_spread(metric, last, sd, n)]
                    if last.status != "ok":
                        cell += [" ", Span(last.status, "bad")]
                    if any(f.metric == metric for f in last.regressions):
                        cell += [" ", Span("regression", "bad")]
                    row.append(tuple(cell))
                rows.append(row)
            tables.append((metric_label(metric), table(["cell", *heads], rows, num=range(1, len(heads) + 1))))
        shown.append(dict(label=group.label, apart=_apart(group, groups), tables=tables,
                          missing=[metric_label(k) for k in missing], no_mfu="mfu" in empty))
    return render("scenario.html.j2", title=view.name, root=href(2, ""), cells=len(view.cells), groups=shown)


def cell_html(view: ScenarioView, cell_id: str, figures: dict[Group, str]) -> str:
    groups = view.groups()
    axes = view.axes.get(cell_id, {})
    shown = []
    for group in groups:
        machines = [m for m in view.machines if m.machine.group == group and cell_id in m.points]
        if not machines:
            continue
        pts = sorted(((m, p) for m in machines for p in m.points[cell_id]),
                     key=lambda mp: mp[1].run.manifest.created_at, reverse=True)
        digests = any(p.run.manifest.container_image_digest for _, p in pts)  # the column only when containers ran
        shown_metrics = [k for k in TABLE_METRICS if any(p.values.get(k) is not None for _, p in pts)]
        targets = any(p.target for _, p in pts)  # the column only when some run had a target to reach
        states = any(p.machine for _, p in pts)  # the column only when some run recorded its machine's state
        rows = [[when(p.run.manifest), m.machine.label,
                 # the run's number alone repeats across results folders (each counts from 0001): with its
                 # page's key it is unique on the site
                 link(href(2, run_path(p.run_key)), f"{p.run.manifest.run_id.split('_')[0]} · {p.run_key[:6]}"),
                 (p.run.manifest.git_commit or "-")[:7],
                 *([(p.run.manifest.container_image_digest or "-")[:19]] if digests else []), p.status,
                 *[with_spread(k, p, quiet=True) for k in shown_metrics], *([target_text(p.target)] if targets else []),
                 (Span(verdict_text(p), "verdict"), *_env_note(p)),
                 *([p.machine or "not recorded"] if states else [])]
                for m, p in pts]
        first = 6 if digests else 5  # where the numbers start; the verdict is last but the machine state (wrapped)
        verdict_at = first + len(shown_metrics) + targets
        shown.append(dict(
            label=group.label, apart=_apart(group, groups),
            figure=trusted(figures[group]),  # inline SVG drawn by matplotlib (trend.py), not text from results
            table=table(["when (UTC)", "machine", "run", "commit", *(["image digest"] if digests else []), "status",
                         *[metric_label(k) for k in shown_metrics], *(["time to target"] if targets else []),
                         "verdict", *(["machine state"] if states else [])],
                        rows, num=range(first, first + len(shown_metrics)),
                        wrap=(verdict_at, verdict_at + 1) if states else (verdict_at,),
                        row_classes=["regression" if p.regressions else "" for _, p in pts])))
    settings = ", ".join(f"{k}={v}" for k, v in axes.items() if in_use(k, v))
    return render("cell.html.j2", title=f"{view.name}: {view.cells.get(cell_id, cell_id)}", root=href(2, ""),
                  cell_id=cell_id, scenario=view.name, axes=settings,
                  groups=shown)


MANIFEST_FIELDS = ("run_id", "scenario", "created_at", "hostname", "suite_version", "git_commit", "git_dirty",
                   "python", "torch", "cuda", "nccl", "driver", "devices", "device_count", "cpu_model",
                   "container_image", "container_image_digest", "seed", "env", "command")


def run_html(key: str, run: Run, view: ScenarioView) -> str:
    m = run.manifest
    info = [["ran on", device_text(m)],
            *([f, cuda_text(m) if f == "cuda" else str(getattr(m, f))] for f in MANIFEST_FIELDS)]
    cells = {}
    for r in run.results:
        cells.setdefault(r.cell_id, []).append(r)
    order = sorted(cells.items(), key=lambda kv: view.cells.get(kv[0], kv[0]))
    points = {cid: next((p for mr in view.machines for p in mr.points.get(cid, []) if p.run_key == key), None)
              for cid, _ in order}
    # every metric as before; the held-out ones only when a cell of this run was evaluated
    shown = [k for k in TABLE_METRICS if k not in HELD_OUT or any(p and p.values.get(k) is not None
                                                                   for p in points.values())]
    targets = any(p and p.target for p in points.values())
    rows = []
    for cid, results in order:
        p = points[cid]
        rows.append([link(href(1, cell_path(view, cid)), view.cells.get(cid, cid)), results[0].status,
                     str(len(results)), *[number(k, p.values.get(k) if p else None) for k in shown],
                     *([target_text(p.target if p else None)] if targets else []), verdict_text(p) if p else "-"])
    env = next((p.env for mr in view.machines for pts in mr.points.values() for p in pts if p.run_key == key), [])
    return render("run.html.j2", title=f"run {m.scenario}/{m.run_id} on {m.hostname}", root=href(1, ""), key=key,
                  scenario=view.name, scenario_url=href(1, scenario_path(view)), env=env,
                  manifest=table(["field", "value"], info, wrap=(1,)),
                  cells=table(["cell", "status", "repeats", *[metric_label(k) for k in shown],
                               *(["time to target"] if targets else []), "verdict"], rows,
                              num=range(2, 3 + len(shown))))


__all__ = ["index_html", "scenario_html", "cell_html", "run_html", "flagged", "METRICS"]
