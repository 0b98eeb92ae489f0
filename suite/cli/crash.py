"""What the `suite` command line does with an exception no command handled: a crash is never a verdict.

An uncaught exception is a bug in suite, never a verdict: Python and click would exit 1, which is also
`run`'s "a cell failed" and `compare`'s "regression", so CI would read a crash as a finding.  It exits
EXIT_INTERNAL (70, BSD's EX_SOFTWARE) with its traceback instead, in-process (CliRunner) as from the shell.
typer's own ends pass through (usage errors: 2). Not EOFError: suite never prompts, so one is a truncated file
read by suite (typer would turn it into "Aborted.", exit 1).  cli.py's app is a CrashGroup.
"""

from __future__ import annotations

import errno

import typer
from typer.core import TyperGroup

from suite.console import print_error

PASS_THROUGH = (typer.Exit, typer.Abort, typer.TyperException)


def crash(exc: Exception) -> typer.Exit:
    """The traceback and one `error:` line on stderr; the Exit to raise (a bad SUITE_PLUGINS is the user's: 2)."""
    import sys
    import traceback

    from suite.console import EXIT_INPUT, EXIT_INTERNAL
    from suite.strategies.registry import PluginError

    if isinstance(exc, PluginError):  # a bad SUITE_PLUGINS: a clean error, whichever command met it first
        print_error(exc)
        return typer.Exit(EXIT_INPUT)
    traceback.print_exception(exc, file=sys.stderr)
    print_error(f"internal error (a bug in suite, exit {EXIT_INTERNAL}): {type(exc).__name__}: {exc}; "
                "please report it with the traceback above")
    return typer.Exit(EXIT_INTERNAL)


class CrashGroup(TyperGroup):
    """suite's top-level group: every sub-command runs inside its invoke, so one handler sees every crash."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except PASS_THROUGH:
            raise
        except OSError as exc:
            if exc.errno == errno.EPIPE:  # stdout closed early (`suite ... | head`): nothing is wrong, but click
                raise typer.Exit(141) from None  # would exit 1 (a "regression"); 128 + SIGPIPE, as a shell reports it
            raise crash(exc) from None
        except Exception as exc:
            raise crash(exc) from None
