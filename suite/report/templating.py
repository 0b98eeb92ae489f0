"""The HTML pages' templates (the report's, the site's): Jinja2, autoescape on, each template compiled once.

Every HTML page suite writes is a Jinja2 template in a `templates/` folder beside the module that renders it
(suite/report/templates/, suite/publish/templates/); those modules hand the templates data — text, numbers,
links as (url, text) — and never markup, so every value from the results is escaped by the template engine,
not by each caller remembering to.  Two things put markup together outside a template: the `cells` filter
(a long table's row, each value escaped by it, for speed), and `trusted()`, which marks markup suite drew itself
(the site's inline SVG trends, made by matplotlib) at the one place it enters a page.

One Environment per templates folder for the life of the process (functools.cache): a template is compiled
the first time it is asked for and never looked up again on disk (auto_reload off), so a site of thousands of
cell pages compiles its cell template once.  Jinja2 comes with torch (lock/base.txt), and is imported only
when a page is rendered: the Markdown, CSV and JSON reports never need it.
"""

from __future__ import annotations

import functools
import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.report.figure import PlotError

if TYPE_CHECKING:
    import jinja2


class PagesUnavailable(PlotError):
    """HTML pages cannot be rendered: Jinja2 is missing (a PlotError, so every command reports it as one:
    exit 2, saying what to install)."""


INSTALL = ("HTML pages need Jinja2, which suite's dependencies bring with torch: pip install jinja2 (or "
           "reinstall suite from lock/base.txt); the Markdown, CSV and JSON reports need nothing more")


@functools.cache
def environment(folder: Path) -> "jinja2.Environment":
    """The Environment of one templates folder: autoescape on, undefined names an error, block tags on their
    own lines leave no blank line behind (trim_blocks, lstrip_blocks)."""
    try:
        import jinja2
    except ImportError as exc:
        raise PagesUnavailable(INSTALL) from exc
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(folder), autoescape=True, auto_reload=False,
                             cache_size=-1, undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["cells"] = cells
    return env


def cells(values) -> Any:
    """`{{ row|cells }}` inside `<td>...</td>`: each value (text) escaped, the values joined by `</td><td>`.
    The one filter of the templates that writes markup, for the long tables: escaping with html.escape and
    joining in one call renders a 10,000-row table several times faster than a loop over its cells does."""
    from markupsafe import Markup

    return Markup("</td><td>".join(map(html.escape, map(str, values))))


@functools.cache
def template(folder: Path, name: str) -> "jinja2.Template":
    """Template `name` of `folder`, compiled once per process."""
    return environment(folder).get_template(name)


def trusted(markup: str) -> Any:
    """Markup suite made itself (not text from results), to be put into a page as it is."""
    try:
        from markupsafe import Markup  # Jinja2's own escaping
    except ImportError as exc:
        raise PagesUnavailable(INSTALL) from exc
    return Markup(markup)
