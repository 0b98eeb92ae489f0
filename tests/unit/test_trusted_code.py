"""A scenario file is data: `family: python` imports a factory only from a module the user declared as theirs
(suite/models/trust.py), and SUITE_PLUGINS / SUITE_FAULT / SUITE_TRUST are checked once, up front.

Every refusal happens before anything is imported: a spy module that writes a mark file on import shows it.
"""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from suite.cli import app
from suite.models import trust

SPY = "suite_trust_spy"
FACTORY_SOURCE = textwrap.dedent("""
    import os, pathlib
    pathlib.Path(os.environ["SPY_MARK"]).write_text("imported")
    from torch import nn

    class M(nn.Module):
        def __init__(self, vocab=64, hidden=16):
            super().__init__()
            self.emb = nn.Embedding(vocab, hidden)
            self.blocks = nn.ModuleList([nn.Linear(hidden, hidden)])
            self.head = nn.Linear(hidden, vocab)

        def forward(self, x, y=None):
            h = self.emb(x)
            for b in self.blocks:
                h = b(h)
            logits = self.head(h)
            return logits if y is None else nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())

    def build(vocab=64):
        return M(vocab)
""")


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """tmp/proj (a project: pyproject.toml, the spy factory module) and tmp/elsewhere (no project), the project's
    folder on the import path as a user's PYTHONPATH would put it."""
    proj, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    proj.mkdir()
    elsewhere.mkdir()
    (proj / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (proj / f"{SPY}.py").write_text(FACTORY_SOURCE)
    mark = tmp_path / "imported"
    monkeypatch.setenv("SPY_MARK", str(mark))
    monkeypatch.delenv(trust.TRUST_ENV, raising=False)
    monkeypatch.syspath_prepend(str(proj))
    yield proj, elsewhere, mark
    sys.modules.pop(SPY, None)


def _scenario(folder, factory: str, extra: str = "") -> str:
    path = folder / "s.yaml"
    path.write_text(f'name: t\nmodel: {{family: python, factory: "{factory}", args: {{{extra}}}, inputs: tokens, '
                    'vocab: 64}\nseq_len: 8\n')
    return str(path)


def _validate(*args: str):
    return CliRunner().invoke(app, ["validate", *args])


@pytest.mark.parametrize("factory", ["os:system", "builtins:exit", "os:_exit", "os:abort", "subprocess:run",
                                     "importlib:import_module", "suite.cli:main", "yaml:safe_load",
                                     "torch.hub:load"])
def test_standard_library_installed_and_suite_modules_are_refused(layout, tmp_path, factory):
    proj, _, _ = layout
    marker = tmp_path / "PWNED"
    result = _validate(_scenario(proj, factory, f'command: "touch {marker}"'))
    assert result.exit_code == 2, result.output
    assert "declare" in result.output and factory in result.output
    assert not marker.exists()


@pytest.mark.parametrize("factory", ["../x:y", "os/path:join", ".hidden:f", "a..b:c", "x:", ":f", "a.b:c.d",
                                     "x:y:z", "a b:c"])
def test_malformed_names_are_refused_by_form(layout, factory):
    proj, _, mark = layout
    result = _validate(_scenario(proj, factory))
    assert result.exit_code == 2 and "package.module:function" in result.output, result.output
    assert not mark.exists()


def test_a_module_of_the_scenarios_project_is_trusted(layout):
    proj, _, mark = layout
    result = _validate(_scenario(proj, f"{SPY}:build"))
    assert result.exit_code == 0, result.output
    assert mark.exists()


def test_the_same_module_from_a_scenario_outside_the_project_is_refused_unimported(layout):
    _, elsewhere, mark = layout
    result = _validate(_scenario(elsewhere, f"{SPY}:build"))
    assert result.exit_code == 2 and "not inside the scenario's project" in result.output, result.output
    assert not mark.exists() and SPY not in sys.modules


def test_trust_on_the_command_line_or_in_the_environment(layout, monkeypatch):
    _, elsewhere, mark = layout
    path = _scenario(elsewhere, f"{SPY}:build")
    assert _validate(path, "--trust", SPY).exit_code == 0 and mark.exists()
    mark.unlink()
    sys.modules.pop(SPY, None)
    monkeypatch.delenv(trust.TRUST_ENV, raising=False)  # --trust set it for the process (and its children)
    monkeypatch.setenv(trust.TRUST_ENV, f"other,{SPY}")
    assert _validate(path).exit_code == 0 and mark.exists()


def test_a_trusted_name_covers_its_submodules_not_its_siblings(monkeypatch):
    monkeypatch.setenv(trust.TRUST_ENV, "mypkg.models")
    assert trust.check_factory("mypkg.models.big:build", None) == ("mypkg.models.big", "build")
    with pytest.raises(ValueError, match="not declared"):
        trust.check_factory("mypkg.modelsX:build", None)
    with pytest.raises(ValueError, match="not declared"):
        trust.check_factory("mypkg:build", None)


def test_an_entry_point_declares_a_module(layout, monkeypatch):
    _, elsewhere, mark = layout
    real = importlib.metadata.entry_points

    def entry_points(**kw):
        if kw.get("group") == trust.ENTRY_POINTS:
            return [importlib.metadata.EntryPoint(name="mine", value=SPY, group=trust.ENTRY_POINTS)]
        return real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    assert _validate(_scenario(elsewhere, f"{SPY}:build")).exit_code == 0 and mark.exists()


def test_a_malformed_trust_value_is_one_clean_error(layout, monkeypatch):
    proj, _, mark = layout
    monkeypatch.setenv(trust.TRUST_ENV, "ok,../bad")
    result = _validate(_scenario(proj, f"{SPY}:build"))
    assert result.exit_code == 2 and "SUITE_TRUST" in result.output and "../bad" in result.output
    assert not mark.exists()
    monkeypatch.delenv(trust.TRUST_ENV)
    result = _validate(_scenario(proj, f"{SPY}:build"), "--trust", "a/b")
    assert result.exit_code == 2 and "--trust" in result.output and not mark.exists()


@pytest.mark.parametrize("value", ["..", ".foo", "os,.x", "a/b", "x..y"])
def test_malformed_plugins_are_exit_2_up_front(monkeypatch, value):
    monkeypatch.setenv("SUITE_PLUGINS", value)
    result = CliRunner().invoke(app, ["strategies"])
    assert result.exit_code == 2 and "SUITE_PLUGINS" in result.output, result.output
    assert "Traceback" not in result.output


def test_a_plugin_that_raises_on_import_is_exit_2(tmp_path, monkeypatch):
    from suite.strategies import registry

    (tmp_path / "suite_bad_plugin.py").write_text("raise RuntimeError('broken plugin')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SUITE_PLUGINS", "suite_bad_plugin")
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    result = CliRunner().invoke(app, ["strategies"])
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    monkeypatch.delenv("SUITE_PLUGINS")
    sys.modules.pop("suite_bad_plugin", None)
    assert result.exit_code == 2 and "raised RuntimeError" in result.output and "broken plugin" in result.output


@pytest.mark.parametrize("value,problem", [("x:raise@-1", "before the first step"), ("x:boom@3", "kind 'boom'"),
                                           ("x:raise", "malformed"), ("x:slow=fast", "malformed"),
                                           ("x:slow=1000", "between")])
def test_a_malformed_fault_is_exit_2_before_anything_runs(monkeypatch, value, problem):
    monkeypatch.setenv("SUITE_FAULT", value)
    result = CliRunner().invoke(app, ["strategies"])
    assert result.exit_code == 2 and problem in result.output and "SUITE_FAULT" in result.output, result.output
