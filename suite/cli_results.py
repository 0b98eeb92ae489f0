"""`suite results ...`: list run folders, show a run or a cell (and pack / unpack them for another machine).

Argument parsing and dispatch only, like cli.py (which mounts this sub-app as `results`).
"""

from __future__ import annotations

from pathlib import Path

import typer

from suite.console import print_error as _error

results_app = typer.Typer(no_args_is_help=True, help="Stored results: list run folders, show a run or a cell.")


@results_app.command("ls")
def results_ls(root: Path = typer.Argument(Path("results"), help="Results root.")) -> None:
    """List run folders: scenario, time, commit, counts per status (unreadable ones too, with why)."""
    from rich.markup import escape

    from suite.console import EXIT_INPUT, console, err_console
    from suite.results.show import runs_table

    if root.exists() and not root.is_dir():  # listing nothing would hide the mistake
        err_console.print(f"[red]error:[/red] {escape(str(root))}: not a folder; give the results root (the "
                          "folder `suite run --results` wrote to)", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_INPUT)
    console.print(runs_table(root))


@results_app.command("show")
def results_show(target: str = typer.Argument(..., help="Run folder, run name, cell JSON file or cell id."),
                 root: Path = typer.Option(Path("results"), "--results", help="Results root to search.")) -> None:
    """Show one run's cells as a table, or one cell result in detail."""
    from suite.console import console
    from suite.results import reader
    from suite.results.show import cell_detail, cells_table, find

    try:
        kind, found = find(target, root)
        if kind == "run":
            console.print(cells_table(reader.read_cell_results(found), str(found)))
        else:
            console.print(cell_detail(found))
    except reader.StoreError as exc:
        _error(exc)
        raise typer.Exit(2)
