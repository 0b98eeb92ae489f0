"""How suite's `--help` pages show options: a boolean flag plainly (`--force`), never as `--force <bool>`.

typer's rich help prints a type after every option, flags included (`--resume <bool>`, even `--help <bool>`),
which reads as if the flag took a value.  A flag whose metavar is the empty string is printed with nothing
after it, so the commands and groups here give every flag (an `is_flag` option: `--force`, `--trace/--no-trace`,
`--help`) an empty metavar before their help is drawn.  Options that take a value keep their type.

`SuiteTyper` is a `typer.Typer` whose commands are `PlainFlagsCommand`s unless a command names another class,
so every command of suite's apps (cli/__init__.py, cli/results.py) gets this without saying so.  Help texts are
rich markup: a `[word ...]` in one is read as a style tag and vanishes, so defaults are written `(default: ...)`.
"""

from __future__ import annotations

import typer
from typer.core import TyperCommand, TyperGroup


class PlainFlags:
    """A click command mixin: boolean flags are shown without a type in `--help`."""

    def format_help(self, ctx, formatter):
        for param in self.get_params(ctx):  # the help option included (it is made on first use)
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        return super().format_help(ctx, formatter)


class PlainFlagsCommand(PlainFlags, TyperCommand):
    """A typer command whose `--help` shows its flags plainly."""


class PlainFlagsGroup(PlainFlags, TyperGroup):
    """A typer group (a sub-app such as `suite results`) whose `--help` shows its flags plainly."""


class SuiteTyper(typer.Typer):
    """A typer app whose commands show their flags plainly in `--help` (PlainFlagsCommand by default)."""

    def command(self, *args, cls=None, **kwargs):
        return super().command(*args, cls=cls or PlainFlagsCommand, **kwargs)
