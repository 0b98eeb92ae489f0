"""The bodies of `suite report`, `suite compare` and `suite export`: options in, files/console out, exit code back.

Exit codes: 0 fine; 1 regression (compare only); 2 usage error — unreadable or missing results, bad options,
a record from a newer suite, no cells in common, or (with --strict) environments that differ.
cli.py only parses arguments and calls these.  Every input may also be an archive of `suite results pack`
(*.tar.gz): results/unpack.open_inputs verifies and unpacks it into a temp folder for the command's duration.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

from suite.console import console, err_console


def _error(message: str, code: int = 2) -> int:
    from rich.markup import escape

    from suite.console import one_line

    err_console.print(f"[red]error:[/red] {escape(one_line(message))}", highlight=False, soft_wrap=True)
    return code


def _cannot_write(exc: OSError) -> int:
    """A report / export / compare file that could not be written: the path and what to do, exit 3."""
    from suite.console import EXIT_ENVIRONMENT
    from suite.results.store import WriteError

    text = str(exc) if isinstance(exc, WriteError) else f"{exc.filename or ''}: cannot write ({exc.strerror or exc})"
    return _error(text, EXIT_ENVIRONMENT)


def report(paths: list[Path], formats: list[str], out: Path | None, group_by: list[str]) -> int:
    from suite.results.pack import PackError
    from suite.results.unpack import open_inputs
    from suite.results.reader import StoreError, load_runs
    from suite.report.figure import PlotError
    from suite.report.render import ReportUsageError, check_options, render

    try:
        check_options(formats, out, group_by)
        with ExitStack() as stack:
            runs = load_runs(open_inputs(paths, stack))
            produced = render(runs, formats, out, group_by)
    except (StoreError, ReportUsageError, PlotError, PackError) as exc:
        return _error(str(exc))
    except OSError as exc:  # --out: read-only, full, a file in the way
        return _cannot_write(exc)
    if out is None:
        for text in produced.values():
            print(text, end="")
    else:
        cells = sum(len({r.cell_id for r in run.results}) for run in runs)
        for path in produced.values():
            err_console.print(f"wrote {path} ({len(runs)} run(s), {cells} cell(s))", highlight=False, markup=False)
    return 0


def compare(baseline: Path, current: Path, thresholds: list[str], alpha: float, strict: bool, fmt: str,
            out: Path | None, ignore_env: list[str] = (), history: int = 10) -> int:
    from suite.compare.comparison import ENV_FIELDS, CompareUsageError, compare as run_compare, parse_threshold
    from suite.compare.output import print_terminal, to_markdown
    from suite.compare.junit import to_junit
    from suite.results.store import write_file
    from suite.results.pack import PackError
    from suite.results.unpack import open_inputs
    from suite.results.reader import StoreError, load_runs

    if fmt not in ("term", "md", "junit"):
        return _error(f"--format {fmt!r} is not one of term, md, junit")
    unknown = [f for f in ignore_env if f not in ENV_FIELDS]
    if unknown:
        return _error(f"--ignore-env {unknown[0]!r} is not one of {', '.join(ENV_FIELDS)}")
    if fmt == "term" and out is not None:
        return _error("--out needs --format md or junit (term prints to the console)")
    try:
        parsed = dict(parse_threshold(t) for t in thresholds)
        with ExitStack() as stack:
            base_dir, cur_dir = open_inputs([baseline, current], stack)
            result = run_compare(load_runs([base_dir]), load_runs([cur_dir]), parsed, alpha, history, strict)
    except (StoreError, CompareUsageError, PackError) as exc:
        return _error(str(exc))
    if result.matched == 0:
        return _error(f"no cell of {current} is in {baseline} (cells are matched by id): nothing to compare")
    # The console always gets the table; the chosen format goes to --out or replaces it on stdout.
    if fmt == "term" or out is not None:
        print_terminal(result, console if fmt == "term" else err_console)
    if fmt != "term":
        text = to_markdown(result) if fmt == "md" else to_junit(result)
        if out is None:
            print(text, end="" if text.endswith("\n") else "\n")
        else:
            try:
                write_file(out, text)
            except OSError as exc:
                return _cannot_write(exc)
            err_console.print(f"wrote {out}", highlight=False, markup=False)
    if result.env:
        from suite.console import one_line

        err_console.print(one_line("warning: the environments differ in: " + "; ".join(
            f"{d.field} ({one_line(str(d.baseline), 120)} -> {one_line(str(d.current), 120)})" for d in result.env)),
            style="yellow", highlight=False, markup=False, soft_wrap=True)
        refused = [d.field for d in result.env if d.field not in ignore_env]
        if strict and refused:
            return _error(f"--strict: refusing to compare results whose environments differ in {', '.join(refused)}"
                          " (--ignore-env FIELD accepts an expected difference)")
    return 1 if result.regressions else 0


def export(paths: list[Path], fmt: str, out: Path) -> int:
    from suite.report.export import to_pytest_benchmark
    from suite.results.store import write_file
    from suite.results.pack import PackError
    from suite.results.unpack import open_inputs
    from suite.results.reader import StoreError, load_runs

    if fmt != "pytest-benchmark":
        return _error(f"--format {fmt!r}: the only export format is pytest-benchmark")
    try:
        with ExitStack() as stack:
            doc = to_pytest_benchmark(load_runs(open_inputs(paths, stack)))
    except (StoreError, PackError) as exc:
        return _error(str(exc))
    try:
        write_file(out, json.dumps(doc, indent=1) + "\n")
    except OSError as exc:
        return _cannot_write(exc)
    err_console.print(f"wrote {out} ({len(doc['benchmarks'])} benchmark(s))", highlight=False, markup=False)
    return 0
