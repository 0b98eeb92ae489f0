"""A crash is never a verdict: an uncaught exception in any command exits 70 with its traceback, not 1.

Exit 1 is `compare`'s "regression" and `run`'s "a cell failed"; were a crash also 1, CI would read a bug in the
renderer as a finding (and tests asserting "exit 1 means a regression" would pass on it).  The `cli` fixture
(tests/conftest.py) fails any test whose command crashed, unless the test asks for the crash (`crash_ok`).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from report_fixtures import make_cells, make_manifest, make_result, write_run

from suite.console import EXIT_INTERNAL
from tests.scenario_texts import infeasible


def boom(*args, **kwargs):
    raise ZeroDivisionError("planted by the test")


@pytest.fixture
def run_dir(tmp_path):
    return write_run(tmp_path / "base", make_manifest(), [make_result(c) for c in make_cells()])


def test_exit_code_70_is_documented_and_distinct():
    from suite.console import EXIT_ENVIRONMENT, EXIT_FAILED, EXIT_INPUT, EXIT_OK

    assert EXIT_INTERNAL == 70 and EXIT_INTERNAL not in (EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_ENVIRONMENT)


def test_a_crash_in_compare_exits_70_with_its_traceback(cli, run_dir, monkeypatch):
    import suite.compare.output as compare_out

    monkeypatch.setattr(compare_out, "print_terminal", boom)  # rendering crashes after the verdicts are known
    result = cli("compare", run_dir, run_dir, crash_ok=True)
    assert result.exit_code == EXIT_INTERNAL, (result.exit_code, result.output)
    assert "Traceback (most recent call last)" in result.stderr and "ZeroDivisionError: planted by the test" in result.stderr
    assert "internal error (a bug in suite, exit 70)" in result.stderr
    assert "REGRESSION" not in result.stdout


def test_the_cli_fixture_fails_a_test_whose_command_crashed(cli, run_dir, monkeypatch):
    import suite.compare.output as compare_out

    monkeypatch.setattr(compare_out, "print_terminal", boom)
    with pytest.raises(pytest.fail.Exception, match="(?s)crashed .exit 70.*ZeroDivisionError"):
        cli("compare", run_dir, run_dir)


def test_the_fixture_also_fails_on_an_exception_that_escaped_the_cli(monkeypatch):
    from click.testing import Result

    from tests.conftest import checked

    escaped = Result(runner=None, stdout_bytes=b"", stderr_bytes=b"", output_bytes=b"", return_value=None,
                     exit_code=1, exception=KeyError("x"), exc_info=None)
    with pytest.raises(pytest.fail.Exception, match="raised"):
        checked(escaped)
    assert checked(escaped, crash_ok=True) is escaped


def test_a_crash_in_run_exits_70_not_a_cell_failed(cli, write_scenario, monkeypatch):
    import suite.runner.run as runner

    monkeypatch.setattr(runner, "run_scenario", boom)
    path = write_scenario(infeasible("big"))
    result = cli("run", path, "--results", path.parent / "results", crash_ok=True)
    assert result.exit_code == EXIT_INTERNAL and "ZeroDivisionError" in result.stderr


def test_a_bad_plugin_is_still_the_users_error_exit_2(cli, run_dir, monkeypatch):
    import suite.compare.output as compare_out
    from suite.strategies.registry import PluginError

    def plugin(*args, **kwargs):
        raise PluginError("SUITE_PLUGINS: cannot import 'nope'")

    monkeypatch.setattr(compare_out, "print_terminal", plugin)
    result = cli("compare", run_dir, run_dir)
    assert result.exit_code == 2 and "cannot import 'nope'" in result.stderr and "Traceback" not in result.stderr


def test_usage_errors_stay_typers_exit_2(cli):
    result = cli("compare", "--no-such-option")
    assert result.exit_code == 2 and "No such option" in result.output


def test_the_installed_entry_point_exits_70_on_a_crash(run_dir):
    # the shell's path (main()), not CliRunner's: what CI sees
    code = f"""
import sys
import suite.compare.output as compare_out
def boom(*a, **k):
    raise ZeroDivisionError("planted")
compare_out.print_terminal = boom
sys.argv = ["suite", "compare", {str(run_dir)!r}, {str(run_dir)!r}]
from suite.cli import main
main()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == EXIT_INTERNAL, (out.returncode, out.stdout, out.stderr)
    assert "ZeroDivisionError: planted" in out.stderr and "internal error" in out.stderr


def test_an_eof_error_is_a_crash_not_an_abort(cli, run_dir, monkeypatch):
    """suite never prompts: an EOFError is a truncated file read by suite (typer's Abort would exit 1)."""
    import suite.compare.output as compare_out

    def truncated(*args, **kwargs):
        raise EOFError("Ran out of input")

    monkeypatch.setattr(compare_out, "print_terminal", truncated)
    result = cli("compare", run_dir, run_dir, crash_ok=True)
    assert result.exit_code == EXIT_INTERNAL and "EOFError: Ran out of input" in result.stderr


def test_a_closed_pipe_is_not_a_regression(cli, run_dir, monkeypatch):
    """`suite compare A B | head` under pipefail: 141 (128 + SIGPIPE), never compare's 1."""
    import errno

    import suite.compare.output as compare_out

    def closed(*args, **kwargs):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(compare_out, "print_terminal", closed)
    result = cli("compare", run_dir, run_dir)
    assert result.exit_code == 141 and "Traceback" not in result.stderr
