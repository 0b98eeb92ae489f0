"""The pieces every page of the site is made of, as data: links, spans, tables, and numbers with their spread.

The site is plain HTML and one stylesheet (templates/style.css, written as style.css at the site's root), no
scripts, nothing fetched: it opens from disk and from any static host.  The pages are Jinja2 templates
(templates/*.html.j2, suite/report/templating.py: autoescape on); this module writes no markup.  A table cell
is text, a `Link`, a `Span` (text with a class and a tooltip), a `BR`, or a tuple of them, and the templates'
`cell` macro renders each — every piece of text from the results is escaped there.  Links are relative to the
page (`href(depth, path)`), so a site can be moved or served under any prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Union

from suite.publish.series import METRICS, Point
from suite.report import templating
from suite.results.schema import TimeToTarget

TEMPLATES = Path(__file__).parent / "templates"
CSS = (TEMPLATES / "style.css").read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class Link:
    url: str
    text: str
    cls: str = ""
    kind = "link"


@dataclass(frozen=True, slots=True)
class Span:
    """Text (or pieces) in a <span>: a class (None: no class attribute) and a tooltip (None: none)."""
    text: "Cell"
    cls: str | None = None
    title: str | None = None
    kind = "span"


@dataclass(frozen=True, slots=True)
class _Break:
    kind = "br"


BR = _Break()
Piece = Union[str, Link, Span, _Break]
Cell = Union[Piece, tuple]  # a piece, or a tuple of cells shown one after the other


@dataclass(frozen=True, slots=True)
class Row:
    cells: list[tuple[str, Cell]]  # (kind, cell): kind "n" (a number: right-aligned), "text" (wrapped) or ""
    cls: str = ""


@dataclass(frozen=True, slots=True)
class Table:
    header: list[str]  # plain text
    rows: list[Row]


def require_templates() -> None:
    """PagesUnavailable (a PlotError saying what to install) unless the templates can render: publish asks
    before it writes anything."""
    templating.environment(TEMPLATES)


def render(name: str, **data) -> str:
    """Page template `name` (templates/<name>) with `data`; the template is compiled once per process."""
    return templating.template(TEMPLATES, name).render(**data)


def href(depth: int, path: str) -> str:
    """`path` (relative to the site's root) as a link from a page `depth` folders below the root."""
    return "../" * depth + path


def link(url: str, text: str, cls: str = "") -> Link:
    return Link(url, str(text), cls)


def table(header: Iterable[str], rows: Iterable[Iterable[Cell]], row_classes: Iterable[str] = (),
          num: Iterable[int] = (), wrap: Iterable[int] = ()) -> Table:
    """A table for the `table` macro: cells are text or pieces (never markup); header is plain text.  Columns
    in `num` are numbers (right-aligned), those in `wrap` long text (wrapped)."""
    header, rows, classes, num, wrap = list(header), [list(r) for r in rows], list(row_classes), set(num), set(wrap)
    width = max([len(header), *map(len, rows)])
    kinds = ["n" if j in num else "text" if j in wrap else "" for j in range(width)]
    return Table(header, [Row(list(zip(kinds, row)), classes[i] if i < len(classes) else "")
                          for i, row in enumerate(rows)])


def when(manifest) -> str:
    """A run's time as the pages show it: 2026-12-01 17:35 (UTC, to the minute)."""
    return manifest.created_at[:16].replace("T", " ")


def number(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    if metric == "step_time":
        return f"{value:,.2f} ms"
    if metric == "tokens_per_s":
        return f"{value:,.0f}"
    if metric in ("mfu", "accuracy"):
        return f"{value:.1f}%"
    if metric == "peak_memory":
        return f"{value:,.1f} MiB"
    return f"{value:.4f}"


def target_text(t: TimeToTarget | None) -> Cell:
    """A time to target as the pages show it: "step 30: 0.53 s train, 0.95 s wall" or "not reached
    (best 0.41)", the target itself as the tooltip; "-" without one."""
    if t is None:
        return "-"
    if t.reached:
        times = ", ".join(f"{v:.3g} s {what}" for v, what in ((t.train_s, "train"), (t.wall_s, "wall")) if v is not None)
        text = (f"step {t.step}" if t.step is not None else "reached") + (f": {times}" if times else "")
    else:
        text = "not reached" + (f" (best {t.best:.4g})" if t.best is not None else "")
    return Span(text, title=f"target: {t.metric} {t.value:g}")


def with_spread(metric: str, p: Point, runs_sd: float | None = None, n_runs: int = 0, quiet: bool = False) -> Cell:
    """The value and how much it moves between runs: between this run's repeats, else from run to run over
    the machine's latest runs (runs_sd, over n_runs); quiet: say nothing when neither is known."""
    text = number(metric, p.values.get(metric))
    sd = p.spread.get(metric)
    if p.values.get(metric) is None:
        return text
    if sd is not None:
        return text, " ", Span(f"±{sd:.1%} ({p.measured} rep)", "spread")
    if runs_sd is not None:
        return text, " ", Span(f"±{runs_sd:.1%} ({n_runs} runs)", "spread")
    if metric in ("step_time", "tokens_per_s") and not quiet:
        return text, " ", Span("(1 run)", "spread")
    return text


def joined(pieces: list[Cell], sep: str = ", ") -> tuple:
    """The pieces one after the other, `sep` (text) between them."""
    out: list[Cell] = []
    for i, piece in enumerate(pieces):
        out += [sep, piece] if i else [piece]
    return tuple(out)


def verdict_text(p: Point) -> Cell:
    """The point's regressions (compare's details as the tooltip), else improvements, else unchanged."""
    if not p.findings:
        return Span("first run", "muted")
    bad = p.regressions
    if bad:
        return joined([Span(f'{f.metric} {"" if f.change is None else f"{f.change:+.1%}"}', "bad", f.detail)
                        for f in bad])
    if p.suspects:
        return joined([Span(f"{f.metric} {f.change:+.1%}, no noise estimate yet", "suspect", f.detail)
                        for f in p.suspects])
    moved = [f for f in p.findings if f.verdict == "machine-differs"]
    if moved:  # the timing is not comparable: the machine was busy or different on one side
        return joined([Span(f"{f.metric}: machine state differs", "muted", f.detail) for f in moved])
    good = [f for f in p.findings if f.verdict == "improvement"]
    if good:  # a threshold-only improvement is as unsure as a threshold-only regression: said so, not green
        return joined([Span(f"{f.metric} better", "good", f.detail) if f.method != "threshold" else
                        Span(f"{f.metric} {f.change:+.1%}, no noise estimate yet", "muted", f.detail) for f in good])
    measured = [f for f in p.findings if f.metric != "status"]
    if measured and all(f.verdict in ("inconclusive", "skipped") for f in measured):
        why = "; ".join(f"{f.metric}: {f.detail}" for f in measured if f.detail)
        return Span("inconclusive", "muted", why)
    return Span("unchanged", "muted")


def metric_label(metric: str) -> str:
    label, unit = METRICS[metric]
    return label + (f" ({unit})" if unit else "")
