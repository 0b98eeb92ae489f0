"""The pieces every page of the site is made of: the page frame, links, tables, and numbers with their spread.

Plain HTML and one stylesheet (style.css at the site's root), no scripts, nothing fetched: the site opens from
disk and from any static host.  Every piece of text from the results is escaped.  Links are relative to the
page (`href(depth, path)`), so a site can be moved or served under any prefix.
"""

from __future__ import annotations

from html import escape
from typing import Iterable

from suite.publish.series import METRICS, Point
from suite.results.schema import TimeToTarget

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem auto; max-width: 80rem;
       padding: 0 1rem; color: #222; }
nav { font-size: 0.9rem; margin-bottom: 1rem; } nav a { margin-right: 0.75rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.85rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; white-space: nowrap;
         vertical-align: top; }
th { background: #f2f2f2; } td.n { text-align: right; } td.text { white-space: normal; min-width: 16rem; }
.bad, tr.regression .verdict { color: #cf222e; font-weight: bold; } .good { color: #1a7f37; }
.suspect { color: #9a6700; }
tr.regression { background: #fff0f0; }
.spread, .muted { color: #666; font-size: 0.8em; }
.apart { border-left: 4px solid #d4a72c; background: #fff8e5; padding: 0.4rem 0.75rem; }
.scroll { overflow-x: auto; max-width: 100%; }
figure { margin: 0.5rem 0 1rem; } svg { max-width: 100%; height: auto; }
h2 { margin-top: 2rem; border-bottom: 1px solid #ddd; } code { font-size: 0.85em; }
"""


def href(depth: int, path: str) -> str:
    """`path` (relative to the site's root) as a link from a page `depth` folders below the root."""
    return "../" * depth + path


def link(url: str, text: str, cls: str = "") -> str:
    klass = f' class="{cls}"' if cls else ""
    return f'<a href="{escape(url)}"{klass}>{escape(text)}</a>'


def page(title: str, body: str, depth: int) -> str:
    nav = f'<nav>{link(href(depth, "index.html"), "all scenarios")}{link(href(depth, "index.json"), "index.json")}</nav>'
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{escape(title)}</title>"
            f"<link rel=\"stylesheet\" href=\"{href(depth, 'style.css')}\"></head><body>\n{nav}\n"
            f"<h1>{escape(title)}</h1>\n{body}\n</body></html>\n")


def table(header: Iterable[str], rows: Iterable[Iterable[str]], row_classes: Iterable[str] = (),
          num: Iterable[int] = (), wrap: Iterable[int] = ()) -> str:
    """Cells are HTML already (escape text with esc()); header is plain text.  Columns in `num` are numbers
    (right-aligned), those in `wrap` long text (wrapped)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    classes, num, wrap = list(row_classes), set(num), set(wrap)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{classes[i]}"' if i < len(classes) and classes[i] else ""
        tds = (f'<td class="n">{c}</td>' if j in num else f'<td class="text">{c}</td>' if j in wrap else f"<td>{c}</td>"
               for j, c in enumerate(row))
        body.append(f"<tr{cls}>" + "".join(tds) + "</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>\n' + "\n".join(body) + \
        "\n</tbody></table></div>"


def when(manifest) -> str:
    """A run's time as the pages show it: 2026-12-01 17:35 (UTC, to the minute)."""
    return manifest.created_at[:16].replace("T", " ")


def esc(value: object) -> str:
    return escape(str(value))


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


def target_text(t: TimeToTarget | None) -> str:
    """A time to target as the pages show it (HTML): "step 30: 0.53 s train, 0.95 s wall" or "not reached
    (best 0.41)", the target itself as the tooltip; "-" without one."""
    if t is None:
        return "-"
    if t.reached:
        times = ", ".join(f"{v:.3g} s {what}" for v, what in ((t.train_s, "train"), (t.wall_s, "wall")) if v is not None)
        text = (f"step {t.step}" if t.step is not None else "reached") + (f": {times}" if times else "")
    else:
        text = "not reached" + (f" (best {t.best:.4g})" if t.best is not None else "")
    return f'<span title="{esc(f"target: {t.metric} {t.value:g}")}">{esc(text)}</span>'


def with_spread(metric: str, p: Point, runs_sd: float | None = None, n_runs: int = 0, quiet: bool = False) -> str:
    """The value and how much it moves between runs: between this run's repeats, else from run to run over
    the machine's latest runs (runs_sd, over n_runs); quiet: say nothing when neither is known."""
    text = esc(number(metric, p.values.get(metric)))
    sd = p.spread.get(metric)
    if p.values.get(metric) is None:
        return text
    if sd is not None:
        text += f' <span class="spread">±{sd:.1%} ({p.measured} rep)</span>'
    elif runs_sd is not None:
        text += f' <span class="spread">±{runs_sd:.1%} ({n_runs} runs)</span>'
    elif metric in ("step_time", "tokens_per_s") and not quiet:
        text += ' <span class="spread">(1 run)</span>'
    return text


def verdict_text(p: Point) -> str:
    """The point's regressions (compare's details as the tooltip), else improvements, else unchanged."""
    if not p.findings:
        return '<span class="muted">first run</span>'
    bad = p.regressions
    if bad:
        return ", ".join(f'<span class="bad" title="{esc(f.detail)}">{esc(f.metric)} '
                         f'{"" if f.change is None else f"{f.change:+.1%}"}</span>' for f in bad)
    if p.suspects:
        return ", ".join(f'<span class="suspect" title="{esc(f.detail)}">{esc(f.metric)} {f.change:+.1%}, no noise '
                         'estimate yet</span>' for f in p.suspects)
    moved = [f for f in p.findings if f.verdict == "machine-differs"]
    if moved:  # the timing is not comparable: the machine was busy or different on one side
        return ", ".join(f'<span class="muted" title="{esc(f.detail)}">{esc(f.metric)}: machine state differs</span>'
                         for f in moved)
    good = [f for f in p.findings if f.verdict == "improvement"]
    if good:  # a threshold-only improvement is as unsure as a threshold-only regression: said so, not green
        return ", ".join(f'<span class="good" title="{esc(f.detail)}">{esc(f.metric)} better</span>'
                         if f.method != "threshold" else
                         f'<span class="muted" title="{esc(f.detail)}">{esc(f.metric)} {f.change:+.1%}, no noise '
                         'estimate yet</span>' for f in good)
    measured = [f for f in p.findings if f.metric != "status"]
    if measured and all(f.verdict in ("inconclusive", "skipped") for f in measured):
        why = "; ".join(f"{f.metric}: {f.detail}" for f in measured if f.detail)
        return f'<span class="muted" title="{esc(why)}">inconclusive</span>'
    return '<span class="muted">unchanged</span>'


def metric_label(metric: str) -> str:
    label, unit = METRICS[metric]
    return label + (f" ({unit})" if unit else "")
