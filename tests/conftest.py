"""Shared pytest fixtures: a scenario-file writer and the in-process CLI runner.

Keep this file small: fixtures used by one test file belong in that file.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest


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


@pytest.fixture
def cli():
    """cli(*args) -> click Result of the `suite` typer app run in-process (stdout and stderr kept apart)."""
    from typer.testing import CliRunner

    from suite.cli import app

    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, [str(a) for a in args])

    return invoke
