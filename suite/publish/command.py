"""`suite publish RESULTS... --out SITE`: add runs to a static site and re-render only what changed.

Each page is rendered from data; the digest of that data is kept in index.json (`pages`), and a page whose
digest is unchanged (and whose file is there) is neither rendered nor written again.  A cell page — the one
with a figure, the costly part — is skipped before its figure is drawn.  So publishing one more night
re-renders the index, that scenario's page and cell pages (each got a point) and the new run's page; every
other run page and every other scenario stays as it is.
Exit codes: 0 published (regressions do not fail publishing: `compare` gates, the site shows); 2 bad input
(no runs, a damaged run folder or site, a bad archive); 3 the site could not be written.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import multiprocessing
import os
import time
import urllib.parse
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from suite import __version__
from suite.publish import pages, state as site_state
from suite.publish.html import CSS
from suite.publish.series import Group, ScenarioView, build
from suite.results.store import write_atomic

TEMPLATE = 2  # part of every page's digest, with the code that renders pages (below)


@functools.lru_cache(maxsize=1)
def _code() -> str:
    """What renders the pages: this package's source and templates, suite's and matplotlib's versions.  Part of
    every page's digest, so a changed template or figure renders every page again without anyone remembering to
    bump."""
    try:
        mpl = importlib.metadata.version("matplotlib")
    except importlib.metadata.PackageNotFoundError:  # publish refuses to run without it (require_matplotlib)
        mpl = "-"
    h = hashlib.sha256(f"{TEMPLATE} {__version__} {mpl}".encode())
    here = Path(__file__).parent
    for f in sorted([*here.glob("*.py"), *(here / "templates").glob("*")]):  # the templates and style.css too
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


@dataclass
class Published:
    site: Path
    added: int = 0         # run folders read (new, or changed since last time)
    known: int = 0         # run folders already in the site, unchanged
    runs: int = 0          # runs the site holds
    rendered: list[str] = field(default_factory=list)
    unchanged: int = 0
    regressions: int = 0   # in the runs added now
    suspects: int = 0      # ... timing past the threshold with no noise estimate yet
    seconds: float = 0.0


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps([_code(), data], sort_keys=True, default=str).encode()).hexdigest()[:20]


def _cell_data(view: ScenarioView, cell_id: str) -> object:
    """Everything a cell page shows, for its digest."""
    return [view.name, view.cells.get(cell_id), view.axes.get(cell_id), [g.label for g in view.groups()],
            [[m.machine.label, m.machine.group.label,
              [[p.run_key, p.status, p.repeats, p.measured, p.values, p.spread, p.band, p.env,
                p.target.model_dump(mode="json") if p.target else None,
                [[f.metric, f.verdict, f.method, f.change, f.detail] for f in p.findings]] for p in m.points[cell_id]]]
             for m in view.machines if cell_id in m.points]]


class _Writer:
    def __init__(self, site: Path, st: site_state.SiteState, result: Published):
        self.site, self.state, self.result = site, st, result

    def put(self, rel: str, digest: str, render) -> None:
        """Write `rel` from render() unless the page's data digest is the one it was last rendered from."""
        path = self.site / rel
        if self.state.pages.get(rel) == digest and path.is_file():
            self.result.unchanged += 1
            if path.stat().st_mode & 0o444 != 0o444:  # a site written before pages were made readable
                path.chmod(0o644)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, render(), overwrite=True)
        path.chmod(0o644)  # a site is for reading: a static host serving it as another user must read it too
        self.state.pages[rel] = digest
        self.result.rendered.append(rel)

    def current(self, rel: str, digest: str) -> bool:
        """Whether `rel` was rendered from this digest already (put() would leave it as it is)."""
        return self.state.pages.get(rel) == digest and (self.site / rel).is_file()

    def text(self, rel: str, text: str) -> None:
        self.put(rel, _digest(text), lambda: text)


# From this many cell pages on, they are rendered by one forked process per CPU: a page's trend figures
# (matplotlib, ~0.1 s a page) are nearly all of a night's publishing time, and each page is independent.
PARALLEL_PAGES = 40
_PAGES: list[tuple[ScenarioView, str]] = []  # what the forked workers render (inherited: nothing is pickled)


def _cell_page(i: int) -> str:
    view, cell_id = _PAGES[i]
    return pages.cell_html(view, cell_id, _figures(view, cell_id))


def _cell_pages(todo: list[tuple[ScenarioView, str]]) -> Iterator[str]:
    """The cell pages of `todo`, in order: here, or (many pages, several CPUs, fork) by a pool of forked
    workers, each page's HTML sent back as text.  A worker that dies (killed, out of memory) is a
    BrokenProcessPool: the pages it did not return are rendered here instead."""
    global _PAGES
    cpus = os.cpu_count() or 1
    if len(todo) < PARALLEL_PAGES or cpus < 2 or "fork" not in multiprocessing.get_all_start_methods():
        yield from (pages.cell_html(v, c, _figures(v, c)) for v, c in todo)
        return
    _PAGES = todo
    done = 0
    try:
        with ProcessPoolExecutor(max_workers=cpus, mp_context=multiprocessing.get_context("fork")) as pool:
            for html in pool.map(_cell_page, range(len(todo)), chunksize=8):
                done += 1
                yield html
    except BrokenProcessPool:
        yield from (pages.cell_html(v, c, _figures(v, c)) for v, c in todo[done:])
    finally:
        _PAGES = []


def _figures(view: ScenarioView, cell_id: str) -> dict[Group, str]:
    from suite.publish.trend import trend_svg

    out = {}
    for i, group in enumerate(view.groups()):
        lines = [(m.machine.label, m.points[cell_id]) for m in view.machines
                 if m.machine.group == group and cell_id in m.points]
        if lines:
            out[group] = trend_svg(lines, lambda p: "../../" + pages.run_path(p.run_key),
                                   salt=f"{view.slug}-{cell_id}-{group.label}", prefix=f"g{i}-")
    return out


def _flags(items) -> list[dict]:
    return [{"scenario": v.name, "cell_id": f.cell_id, "cell": v.cells.get(f.cell_id), "host": m.machine.host,
             "device_kind": m.machine.group.device_kind, "run": p.run_key, "run_id": p.run.manifest.run_id,
             "created_at": p.run.manifest.created_at, "metric": f.metric, "change": f.change, "detail": f.detail,
             "page": pages.cell_path(v, f.cell_id)} for v, m, p, f in items]


def shown(views: list[ScenarioView]) -> dict:
    """What the pages show, for other tools (index.json beside the state)."""
    def findings(p):
        return [{"metric": f.metric, "verdict": f.verdict, "change": f.change, "detail": f.detail,
                 "noise": f.noise, "band": f.band} for f in p.findings]
    return {
        "scenarios": [{"name": v.name, "page": pages.scenario_path(v),
                       "cells": [{"id": c, "description": d, "page": pages.cell_path(v, c), "axes": v.axes.get(c)}
                                 for c, d in v.cells.items()],
                       "machines": [{"device_kind": m.machine.group.device_kind, "suite_major": m.machine.group.suite_major,
                                     "host": m.machine.host, "image": m.machine.image or None, "runs": m.keys,
                                     "latest_run": m.latest[0]} for m in v.machines]} for v in views],
        "series": [{"scenario": v.name, "cell_id": c, "device_kind": m.machine.group.device_kind,
                    "suite_major": m.machine.group.suite_major, "host": m.machine.host, "image": m.machine.image or None,
                    "points": [{"run": p.run_key, "run_id": p.run.manifest.run_id, "created_at": p.run.manifest.created_at,
                                "git_commit": p.run.manifest.git_commit, "status": p.status, "repeats": p.repeats,
                                "values": p.values, "spread": p.spread, "band": p.band, "verdicts": findings(p),
                                "time_to_target": p.target.model_dump(mode="json") if p.target else None}
                               for p in pts]}
                   for v in views for m in v.machines for c, pts in m.points.items()],
        "flagged": _flags(pages.flagged(views)),  # regressions, judged against the noise
        "suspects": _flags(pages.flagged(views, "suspects")),  # timing past the threshold, no noise estimate yet
    }


def summary_md(views: list[ScenarioView], added: set[str], base_url: str | None) -> str:
    """The regressions (and timing changes past the threshold with no noise estimate yet) of the runs this
    publish added, with links to their cell pages: the nightly job's summary."""
    base = (base_url.rstrip("/") + "/") if base_url else ""
    bad = [x for x in pages.flagged(views) if x[2].run_key in added]
    suspects = [x for x in pages.flagged(views, "suspects") if x[2].run_key in added]
    lines = [f"## suite publish: {len(bad)} regression(s) in the {len(added)} run(s) published now"
             + (f", {len(suspects)} past the threshold with no noise estimate yet" if suspects else ""), ""]
    if base:
        lines += [f"Site: [{base}index.html]({base}index.html)", ""]
    for title, items in (("Regressions (judged against the noise)", bad),
                         ("Past the threshold, no noise estimate yet (fewer than 5 earlier runs, under 3 repeats)",
                          suspects)):
        if not items:
            continue
        lines += [f"### {title}", "", "| scenario | cell | machine | metric | change | why |", "|---|---|---|---|---|---|"]
        for v, m, p, f in items:
            cell = f"[{_md(v.cells.get(f.cell_id, f.cell_id))}]({base}{pages.cell_path(v, f.cell_id)})"
            change = "" if f.change is None else f"{f.change:+.1%}"
            lines.append(f"| {_md(v.name)} | {cell} | {_md(m.machine.label)} | {f.metric} | {change} | {_md(f.detail)} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _md(text: str) -> str:
    """Text from results inside a Markdown table cell: no column breaks, no markup, no HTML."""
    return "".join("\\" + c if c in "|[]*`<>" else c for c in str(text).replace("\n", " "))


def publish(paths: list[Path], site: Path, history: int = 10, base_url: str | None = None,
            progress=lambda line: None) -> Published:
    t0 = time.perf_counter()
    st = site_state.load_state(site)
    result = Published(site)
    added, result.known = site_state.ingest(paths, st, progress)
    result.added = len(added)
    from suite.publish.html import require_templates
    from suite.publish.trend import require_matplotlib

    require_matplotlib()  # before a single page is written
    require_templates()
    runs = site_state.runs_of(st, site)
    result.runs = len(runs)
    views = build(runs, history)
    site.mkdir(parents=True, exist_ok=True)
    if not (site / site_state.INDEX).is_file():
        # a new site gets its index first: a publish killed while writing pages leaves a site the next publish
        # recognises (and completes), not a folder of pages it must refuse
        site_state.save_state(site, site_state.SiteState(), {})
    w = _Writer(site, st, result)
    w.text("style.css", CSS)
    by_key = {k: v for v in views for m in v.machines for k in m.keys}
    for key, run in runs.items():
        w.text(f"runs/{key}.json", json.dumps(run.manifest.model_dump(mode="json"), indent=1) + "\n")
        w.text(pages.run_path(key), pages.run_html(key, run, by_key[key]))
    cells = []
    for view in views:
        w.text(pages.scenario_path(view), pages.scenario_html(view))
        cells += [(view, cell_id, _digest(_cell_data(view, cell_id))) for cell_id in view.cells]
    stale = [(v, c, d) for v, c, d in cells if not w.current(pages.cell_path(v, c), d)]
    for (view, cell_id, digest), html in zip(stale, _cell_pages([(v, c) for v, c, _ in stale])):
        w.put(pages.cell_path(view, cell_id), digest, lambda html=html: html)
    w.text("index.html", pages.index_html(views, history))
    w.text("summary.md", summary_md(views, set(added), base_url))
    result.regressions = sum(1 for x in pages.flagged(views) if x[2].run_key in added)
    result.suspects = sum(1 for x in pages.flagged(views, "suspects") if x[2].run_key in added)
    site_state.save_state(site, st, shown(views))
    result.seconds = time.perf_counter() - t0
    return result


def base_url_problem(base_url: str | None) -> str | None:
    """Why --base-url cannot head the summary's links (None when it can): http(s)://host/... or a relative path,
    no `javascript:` or other scheme, nothing that ends a Markdown link or opens markup."""
    if base_url is None:
        return None
    if len(base_url) > 2000 or any(c.isspace() or c in "<>()[]\"'`\\" or ord(c) < 32 for c in base_url):
        return "spaces, quotes, brackets and control characters cannot be in a link; percent-encode them"
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme in ("http", "https") and parts.netloc:
        return None
    if not parts.scheme and not parts.netloc and not base_url.startswith("//"):
        return None
    return "must be http(s)://host/path or a relative path (no other scheme)"


def run(paths: list[Path], site: Path, history: int, base_url: str | None) -> int:
    """The CLI's body: errors -> exit codes, a line per new run read, one summary line."""
    from suite.console import EXIT_ENVIRONMENT, EXIT_INPUT, err_console, print_error
    from suite.report.figure import PlotError
    from suite.results.reader import StoreError

    if history < 1:
        print_error(f"--history {history} must be at least 1")
        return EXIT_INPUT
    problem = base_url_problem(base_url)
    if problem:
        print_error(f"--base-url {base_url[:200]!r}: {problem}")
        return EXIT_INPUT
    try:
        with contextlib.ExitStack() as stack:
            from suite.results.pack import PackError
            from suite.results.unpack import open_inputs

            try:
                inputs = open_inputs(list(paths), stack)
                done = publish(inputs, site, history, base_url,
                               lambda line: err_console.print(line, highlight=False, markup=False, soft_wrap=True))
            except (PackError, StoreError, site_state.SiteError, PlotError) as exc:
                print_error(exc)
                return EXIT_INPUT
    except OSError as exc:
        print_error(f"{exc}; the site could not be written")
        return EXIT_ENVIRONMENT
    err_console.print(f"published {done.added} new run(s) ({done.known} already there, {done.runs} in all): "
                      f"{len(done.rendered)} file(s) written, {done.unchanged} unchanged, in {done.seconds:.1f} s; "
                      f"{done.regressions} regression(s) in the new runs"
                      + (f" ({done.suspects} more past the threshold, no noise estimate yet)" if done.suspects else "")
                      + f" -> {site / 'index.html'}",
                      highlight=False, markup=False, soft_wrap=True)
    return 0
