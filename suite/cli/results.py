"""`suite results ...`: list run folders, show a run or a cell (and pack / unpack them for another machine).

Argument parsing and dispatch only, like cli.py (which mounts this sub-app as `results`).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from suite.cli.help import PlainFlagsGroup, SuiteTyper
from suite.console import print_error as _error

RESULTS_ROOT = Path("results")  # `suite run --results`'s default: where ls and show look unless told

results_app = SuiteTyper(cls=PlainFlagsGroup, no_args_is_help=True,
                         help="Stored results: list run folders, show a run or a cell, pack run folders into one "
                         "checksummed archive for another machine and unpack one.")


@results_app.command("ls")
def results_ls(results: Optional[Path] = typer.Option(None, "--results", help="Results root (default: results).",
                                                      show_default=False),
               root: Optional[Path] = typer.Argument(None, show_default=False,
                                                     help="Results root, the older form of --results.")) -> None:
    """List run folders: scenario, time, commit, counts per status (unreadable ones too, with why)."""
    from rich.markup import escape

    from suite.console import EXIT_INPUT, console, err_console, one_line
    from suite.results.show import runs_table

    if results is not None and root is not None and results != root:
        _error(f"results root given twice ({root} and --results {results}); give it once, as --results ROOT")
        raise typer.Exit(EXIT_INPUT)
    root = results or root or RESULTS_ROOT
    if root.exists() and not root.is_dir():  # listing nothing would hide the mistake
        err_console.print(f"[red]error:[/red] {escape(str(root))}: not a folder; give the results root (the "
                          "folder `suite run --results` wrote to)", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_INPUT)
    warnings: list[str] = []
    console.print(runs_table(root, warnings))
    for warning in warnings:  # listed above with why; the whole line here, on stderr
        err_console.print(f"[yellow]warning:[/yellow] {escape(one_line(warning))}", highlight=False, soft_wrap=True)


@results_app.command("show")
def results_show(target: str = typer.Argument(..., help="Run folder, run name, cell JSON file or cell id."),
                 root: Path = typer.Option(RESULTS_ROOT, "--results", help="Results root to search.")) -> None:
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


def _archive_work(work, cannot: str):
    """work()'s value; a refused archive exits 2 (its message), the OS refusing to write exits 3 (`cannot`)."""
    from suite.console import EXIT_ENVIRONMENT, EXIT_INPUT
    from suite.results.pack import PackError

    try:
        return work()
    except PackError as exc:
        _error(exc)
        raise typer.Exit(EXIT_INPUT)
    except OSError as exc:
        _error(f"{cannot} ({exc})")
        raise typer.Exit(EXIT_ENVIRONMENT)


@results_app.command("pack")
def results_pack(runs: List[Path] = typer.Argument(..., help="Run folders, scenario folders or results trees."),
                 out: Path = typer.Option(..., "--out", help="The .tar.gz to write (never overwritten); its sha256 "
                                          "goes to <out>.sha256 beside it.")) -> None:
    """Pack run folders into one .tar.gz with a checksum list, for another machine to report, compare or publish.

    Each run's manifest, scenario.yaml, runlog.jsonl and cells/ are packed; work/ (rank records, logs,
    checkpoints: possibly large) is left out.
    """
    from suite.console import console, nbytes
    from suite.results.pack import pack

    info = _archive_work(lambda: pack(runs, out), f"{out}: cannot write the archive")
    console.print(f"packed {len(info.runs)} run(s), {info.files} file(s), {nbytes(info.bytes)} into {info.path} "
                  f"({nbytes(info.archive_bytes)})\nsha256 {info.sha256} (also in {info.sha256_path})",
                  markup=False, highlight=False, soft_wrap=True)


@results_app.command("unpack")
def results_unpack(archive: Path = typer.Argument(..., help="A .tar.gz made by `suite results pack`."),
                   into: Path = typer.Option(..., "--into", help="Results root to unpack the run folders into."),
                   sha256: Optional[str] = typer.Option(None, "--sha256", help="The archive's sha256, obtained out "
                                                        "of band: refuse the archive unless it matches.")) -> None:
    """Verify an archive's checksums, then unpack its run folders (all or none; existing identical ones are skipped)."""
    from suite.console import console
    from suite.results.unpack import unpack

    done = _archive_work(lambda: unpack(archive, into, sha256), f"{into}: cannot unpack there")
    lines = [f"unpacked {p}" for p in done] + [f"skipped {p} (there already, identical)" for p in done.skipped]
    console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)
