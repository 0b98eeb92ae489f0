"""Human-readable rendering shared by the CLI commands: units, rich tables, exit codes.

Untrusted text (cell errors, file paths, pydantic messages) is never parsed as rich markup: `table()` and
`add_row()` turn every plain value into a `rich.text.Text`, so `[/tmp/x]` in a gloo error or `[type=...]` in
a validation message is printed as it is instead of raising MarkupError.  Deliberate styling goes through
`styled()`, which builds the Text itself.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

# Exit codes of every command (README and `suite run --help` list them): what went wrong, not only that.
EXIT_OK = 0
EXIT_FAILED = 1  # the work ran and something in it failed: a cell, a regression, a wrong collective
EXIT_INPUT = 2  # the user's input: a scenario file, an option, a damaged or missing results folder
EXIT_ENVIRONMENT = 3  # suite could not write its results (full disk, read-only or not a folder) or the OS refused
EXIT_INTERNAL = 70  # an uncaught exception: a bug in suite (traceback on stderr), never a verdict (cli/crash.CrashGroup)

# Wide tables stay readable when piped (rich falls back to 80 columns without a terminal), unless COLUMNS says
# how wide the output may be (rich reads it when no width is given).
PIPE_WIDTH = 240
_piped_width = None if os.environ.get("COLUMNS", "").isdigit() else PIPE_WIDTH
console = Console(width=None if Console().is_terminal else _piped_width)
err_console = Console(stderr=True, width=None if Console(stderr=True).is_terminal else _piped_width)


def nbytes(n: float | None) -> str:
    """Bytes with a binary unit (KiB, MiB, GiB, TiB)."""
    if n is None:
        return "-"
    for scale, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def si(n: float | None, unit: str = "") -> str:
    if n is None:
        return "-"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {prefix}{unit}"
    return f"{n:.3g} {unit}".strip()


def styled(text: Any, style: str) -> Text:
    """Text in a style, without markup parsing (the text may come from a file or an error)."""
    return Text(str(text), style=style)


def cell_text(value: Any) -> Any:
    """One table cell: None is "-", a rich renderable (Text, Table, Group) is kept, anything else is plain Text."""
    if value is None:
        return Text("-")
    if not isinstance(value, str) and (hasattr(value, "__rich_console__") or hasattr(value, "__rich__")):
        return value  # already rendered by the caller (styled(), a nested table)
    return Text(str(value))


def add_row(t: Table, values: Iterable[Any]) -> None:
    """Add a row of untrusted values to a table (see cell_text): the one way suite fills tables."""
    t.add_row(*(cell_text(v) for v in values))


LARGE_TABLE = 2000  # rows: beyond this a table is drawn as aligned plain lines (rich's layout costs ~1 ms a row)


class PlainTable:
    """A large table as aligned plain-text lines: the same title, columns and cells as `table`, drawn in O(rows)
    (20,000 cells print in a fraction of a second); cells are one line each, without styles."""

    def __init__(self, title: str, columns: list[str], rows: list[list[Any]]):
        self.title, self.columns = title, columns
        self.rows = [[_plain(v) for v in r] for r in rows]

    def lines(self) -> list[str]:
        widths = [max([len(c), *(len(r[i]) for r in self.rows if i < len(r))]) for i, c in enumerate(self.columns)]
        rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

        def line(values: list[str]) -> str:
            return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"

        return [self.title, rule, line(self.columns), rule, *(line(r) for r in self.rows), rule]

    def __rich_console__(self, console, options):
        from rich.segment import Segment

        for text in self.lines():
            yield Segment(text)
            yield Segment.line()


def _plain(value: Any) -> str:
    text = "-" if value is None else value.plain if isinstance(value, Text) else str(value)
    return text if text.isprintable() else "".join(c if c.isprintable() else " " for c in text)


def table(title: str, columns: list[str], rows: Iterable[list[Any]], *, optional: Sequence[str] = (),
          flexible: str | None = None, width: int | None = None) -> Table | PlainTable | FittedTable:
    """A table whose title, headers and cells are plain text (never markup), folded rather than cut; past
    LARGE_TABLE rows, a PlainTable (the same content as aligned lines, in linear time).  With `optional` or
    `flexible` columns, a FittedTable: laid out for the width it is printed at (see there)."""
    rows = [list(r) for r in rows]
    if len(rows) > LARGE_TABLE:
        return PlainTable(title, columns, rows)
    if optional or flexible:
        return FittedTable(title, columns, rows, optional, flexible, width)
    t = Table(title=Text(title), show_lines=False)
    for c in columns:
        t.add_column(Text(c), overflow="fold")
    for r in rows:
        add_row(t, r)
    return t


class FittedTable:
    """A table sized to the output it is printed on (the terminal, COLUMNS in a pipe, PIPE_WIDTH otherwise; or
    `width`): when the columns do not fit, the `optional` ones are left out in the order given (least important
    first) and the caption names them; the `flexible` column (free text: errors, gates) folds onto more lines
    and gets what the others leave; every other column keeps its widest value on one line (headers wrap
    between words), so a cell id is never cut."""

    def __init__(self, title: str, columns: list[str], rows: list[list[Any]], optional: Sequence[str],
                 flexible: str | None, width: int | None) -> None:
        self.title, self.columns, self.rows = title, columns, rows
        self.optional, self.flexible, self.width = list(optional), flexible, width

    def layout(self, limit: int) -> Table:
        columns, flexible = self.columns, self.flexible
        natural = {c: max([max(map(len, c.split() or [""])), *(len(_plain(r[i])) for r in self.rows if i < len(r))])
                   for i, c in enumerate(columns)}
        needed = {c: min(w, FLEXIBLE_MIN) if c == flexible else w for c, w in natural.items()}
        shown = list(columns)
        for c in self.optional:  # rich draws "│ value │": 3 characters a column and 1 for the table's edge
            if sum(needed[k] + 3 for k in shown) + 1 <= limit:
                break
            if c in shown:
                shown.remove(c)
        left_out = [c for c in columns if c not in shown]
        caption = f"left out to fit {limit} columns: {', '.join(left_out)} (COLUMNS=N for more)" if left_out else None
        t = Table(title=Text(self.title), show_lines=False, caption=Text(caption) if caption else None)
        rest = sum(natural[c] + 3 for c in shown if c != flexible) + 1
        for c in shown:
            if c == flexible:  # what the others leave, down to a few characters a line
                t.add_column(Text(c), overflow="fold", width=max(8, min(natural[c], limit - rest - 3)))
            else:
                t.add_column(Text(c), overflow="fold", width=natural[c])
        keep = [columns.index(c) for c in shown]
        for r in self.rows:
            add_row(t, [r[i] if i < len(r) else None for i in keep])
        return t

    def __rich_console__(self, console, options):
        yield self.layout(self.width or options.max_width)


FLEXIBLE_MIN = 24  # characters the free-text column keeps at least, folding its text onto more lines


MAX_MESSAGE = 2000  # characters of one error or warning line: a hostile file's name or value can be megabytes


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """A message as one line of at most `limit` characters (the middle cut out, saying how much)."""
    text = " ".join(str(text).split("\n")) if "\n" in str(text) else str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit * 3 // 4]} [... {len(text) - limit} characters ...] {text[-limit // 4:]}"


def print_error(exc: BaseException | str) -> None:
    """One `error: ...` line on stderr; the text is the user's or the OS's, so never read as rich markup."""
    from rich.markup import escape

    err_console.print(f"[red]error:[/red] {escape(one_line(str(exc)))}", highlight=False, soft_wrap=True)
