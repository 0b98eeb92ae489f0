"""Shared pytest fixtures: a scenario-file writer and the in-process CLI runner.

Keep this file small: fixtures used by one test file belong in that file.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true", default=bool(os.environ.get("SUITE_LONG")),
                     help="also run the tests marked `long` (the campaign tier: scripts/test-long); SUITE_LONG=1 "
                          "does the same")


def pytest_collection_modifyitems(config, items):
    """Tests marked `long` are deselected unless --long (or SUITE_LONG=1) is given.

    The default tier is what CI runs in its 45 minutes on 2 cores: one case of each behaviour. The `long` tier holds
    the rest of a parametrized product (more families, schedules, policies of a check one default case already
    makes) and campaigns too slow for CI; scripts/test-long runs it, and closing notes report its results.
    """
    if config.getoption("--long"):
        return
    keep = [item for item in items if item.get_closest_marker("long") is None]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("long")])
        items[:] = keep


@pytest.fixture
def write_scenario(tmp_path: Path):
    """write_scenario(text, name="s.yaml") -> Path: a dedented scenario file in a fresh temporary folder.

    Dedenting lets tests write YAML inline; the line numbers the tests assert are those of the dedented text
    (line 1 is the first line after the opening triple quote's newline is stripped).
    """

    def write(text: str, name: str = "s.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    return write


def checked(result, crash_ok: bool = False):
    """The click Result, unless the command crashed: then the test fails here, with the traceback.

    A crash is never a verdict: the CLI turns an uncaught exception into exit 70 (suite.console.EXIT_INTERNAL),
    and CliRunner would turn one that escaped into exit 1 (`compare`'s "regression", `run`'s "a cell failed").
    Neither may pass a test by its exit code; `crash_ok=True` is for the tests of the crash path itself.
    """
    from suite.console import EXIT_INTERNAL

    if crash_ok:
        return result
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        import traceback

        pytest.fail("the command raised " + "".join(traceback.format_exception(exc)), pytrace=False)
    if result.exit_code == EXIT_INTERNAL:
        pytest.fail(f"the command crashed (exit {EXIT_INTERNAL}):\n{result.stderr}", pytrace=False)
    return result


@pytest.fixture
def cli():
    """cli(*args, crash_ok=False) -> click Result of the `suite` app run in-process (stdout, stderr apart).

    Fails the test when the command crashed (see `checked`), so no test passes on an uncaught exception.
    """
    from typer.testing import CliRunner

    from suite.cli import app

    runner = CliRunner()

    def invoke(*args: str, crash_ok: bool = False):
        return checked(runner.invoke(app, [str(a) for a in args]), crash_ok)

    return invoke


@pytest.fixture(autouse=True)
def _own_trace_cache(tmp_path_factory, monkeypatch):
    """Every test (and every process a test starts) has a trace cache of its own, never the user's
    ~/.cache/suite nor another test's: a trace found there would hide what the code under test computes."""
    monkeypatch.setenv("SUITE_CACHE_DIR", str(tmp_path_factory.mktemp("trace-cache")))
