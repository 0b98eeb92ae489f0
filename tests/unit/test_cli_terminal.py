"""What a person meets at the terminal: `suite --version`, `suite presets`, "did you mean" in scenario errors,
help pages without typer's `<bool>` tags or swallowed text, and `--results ROOT` on every `results` command
that reads a results root."""

from __future__ import annotations

import json
import re

import pytest
import typer.main
from report_fixtures import make_cells, make_manifest, make_result, write_run

from suite import __version__
from suite.cli import app
from suite.models.presets import PRESETS
from suite.scenario import Scenario


def flat(text: str) -> str:
    """A help page or table as one line: box drawing gone, whitespace collapsed (wrapping no longer matters)."""
    return " ".join(re.sub(r"[│┃║╭╮╰╯─━┏┓┗┛┡┩┠┨╇╈┳┻╋┣┫┯┷┿╂]", " ", text).split())


def errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


# --- 1. suite --version ---------------------------------------------------------------------------------------

def test_version_option_prints_the_version_and_exits_0(cli):
    result = cli("--version")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{__version__}\n"


def test_version_option_is_eager_and_listed_in_help(cli):
    assert cli("--version", "validate").stdout == f"{__version__}\n"  # before any command (and its arguments)
    assert "--version" in flat(cli("--help").stdout)


# --- 2. suite presets -------------------------------------------------------------------------------------------

def test_presets_lists_every_preset_with_its_shape(cli):
    result = cli("presets")
    assert result.exit_code == 0, result.output
    text = flat(result.stdout)
    for name in PRESETS:
        assert name in text
    for header in ("family", "parameters", "layers", "hidden", "heads", "vocab"):
        assert header in text
    row = re.search(r"llama3-8b llama (\S+) 32 4096 32 8 14336 128256", text)
    assert row and row.group(1) == "8.03B", text  # the planner's exact count, rounded
    assert re.search(r"gpt2-small gpt 124M 12 768 12 - 3072 50257", text), text


def test_presets_json_has_exact_parameter_counts(cli):
    result = cli("presets", "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert [p["name"] for p in listed] == list(PRESETS)
    for entry in listed:
        shape = PRESETS[entry["name"]]
        assert entry["parameters"] == shape.num_parameters()
        assert entry["family"] == shape.family and entry["layers"] == shape.layers


def test_an_unknown_preset_names_suite_presets_and_the_closest(cli, write_scenario):
    path = write_scenario("""
        name: t
        model: lama3-8b
        seq_len: 64
    """)
    result = cli("validate", path)
    assert result.exit_code == 2
    (line,) = errors(result)
    assert "unknown model preset 'lama3-8b'" in line and "`suite presets`" in line
    assert line.endswith("did you mean 'llama3-8b'?"), line


# --- 3. did you mean ----------------------------------------------------------------------------------------------

CASES = {  # a scenario's lines after `name` -> (line, the field named, the suggestion)
    "top-level key": ("model: gpt-tiny\nseq_len: 64\nstratgy: ddp", 4, "stratgy: unknown key", "strategy"),
    "strategy value": ("model: gpt-tiny\nseq_len: 64\nstrategy: zero4", 4, "strategy: strategy 'zero4'", "zero3"),
    "strategy in a list": ("model: gpt-tiny\nseq_len: 64\nstrategy: [ddp, zreo2]", 4, "strategy.1:", "zero2"),
    "precision value": ("model: gpt-tiny\nseq_len: 64\nprecision: bf16mixed", 4, "precision:", "bf16-mixed"),
    "precision in a list": ("model: gpt-tiny\nseq_len: 64\nprecision: [fp32, fp16mixed]", 4, "precision.1:",
                            "fp16-mixed"),
    "checkpointing value": ("model: gpt-tiny\nseq_len: 64\nactivation_checkpointing: selctive", 4,
                            "activation_checkpointing:", "selective"),
    "value in any case": ("model: gpt-tiny\nseq_len: 64\noptimizer: {name: AdamW}", 4, "optimizer.name:", "adamw"),
    "nested key": ("model: gpt-tiny\nseq_len: 64\noptimizer:\n  nmae: sgd", 5, "optimizer.nmae: unknown key",
                   "name"),
    "key of a tagged union's model": ("model: {family: llama, layers: 2, hidden: 64, heads: 4, kv_head: 2, "
                                      "ffn: 172, vocab: 256}\nseq_len: 64", 2, "model.kv_head: unknown key",
                                      "kv_heads"),
    "a union's tag": ("model: gpt-tiny\nseq_len: 64\ndata: {kind: synthetc}", 4, "data:", "synthetic"),
    "preset name": ("model: gpt2-smal\nseq_len: 64", 2, "model: unknown model preset", "gpt2-small"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_misspelt_key_or_value_names_the_field_and_the_closest(cli, write_scenario, case):
    body, line_no, names, meant = CASES[case]
    path = write_scenario("name: t\n" + body + "\n")
    result = cli("validate", path)
    assert result.exit_code == 2, result.output
    (line,) = [e for e in errors(result) if names in e]
    assert line.startswith(f"error: {path}:{line_no}: {names}"), line
    assert line.endswith(f"; did you mean {meant!r}?"), line


def test_nothing_close_suggests_nothing(cli, write_scenario):
    path = write_scenario("name: t\nmodel: gpt-tiny\nseq_len: 64\nzzqqxx: 1\nprecision: int3\n")
    result = cli("validate", path)
    assert result.exit_code == 2
    assert len(errors(result)) == 2 and not any("did you mean" in e for e in errors(result)), result.stderr


@pytest.mark.parametrize("field", sorted(Scenario.model_fields))
def test_every_scenario_key_is_suggested_for_its_misspelling(cli, write_scenario, field):
    """Generic, not per field: swapping two letters of any key of Scenario suggests that key."""
    i = len(field) // 2
    typo = field[:i - 1] + field[i] + field[i - 1] + field[i + 1:]
    if typo == field or typo in Scenario.model_fields:
        pytest.skip("the swap spells the same or another key")
    path = write_scenario(f"name: t\nmodel: gpt-tiny\nseq_len: 64\n{typo}: 1\n")
    lines = [e for e in errors(cli("validate", path)) if f": {typo}: unknown key" in e]
    assert len(lines) == 1 and lines[0].endswith(f"did you mean {field!r}?"), lines


# --- 4. help pages ------------------------------------------------------------------------------------------------

def _commands(group, prefix=()):
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from _commands(command, prefix + (name,))
        else:
            yield prefix + (name,)


COMMANDS = [(), *_commands(typer.main.get_command(app))]


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) or "suite" for c in COMMANDS])
def test_help_shows_flags_plainly_and_swallows_no_text(cli, command):
    result = cli(*command, "--help")
    assert result.exit_code == 0, result.output
    text = flat(result.stdout)
    assert "<bool>" not in text, text
    assert not re.search(r"\S \.( |$)", text), text  # "Ranks ." was "Ranks [default: ...]." read as markup
    assert "--help Show this message and exit." in text


def test_run_and_comm_help_read_correctly(cli):
    run = flat(cli("run", "--help").stdout)
    assert "--resume Continue the latest run folder" in run and "--force Launch cells" in run
    comm = flat(cli("comm", "--help").stdout)
    assert "Ranks (default: every GPU; 2 on CPU)." in comm
    assert "all_to_all (default: the first four)." in comm
    assert "(default: 1KiB..1GiB cuda, 1KiB..64MiB cpu)." in comm
    plan = flat(cli("plan", "--help").stdout)
    assert "--trace --no-trace Trace each cell" in plan


# --- 5. --results ROOT on results ls and show ------------------------------------------------------------------

@pytest.fixture
def stored(tmp_path):
    cells = make_cells(strategy=["ddp", "zero3"])
    run = write_run(tmp_path / "results", make_manifest(), [make_result(cells[0]), make_result(cells[1])])
    return tmp_path / "results", run


@pytest.mark.parametrize("form", ["--results", "positional"])
def test_results_ls_takes_the_root_as_results_option_or_argument(cli, stored, form):
    root, run = stored
    result = cli("results", "ls", *(["--results", root] if form == "--results" else [root]))
    assert result.exit_code == 0, result.output
    text = flat(result.stdout)
    assert run.name in text and "ok 2" in text, text


def test_results_ls_and_show_default_to_results_here(cli, stored, monkeypatch):
    root, run = stored
    monkeypatch.chdir(root.parent)
    assert run.name in flat(cli("results", "ls").stdout)
    shown = cli("results", "show", run.name)
    assert shown.exit_code == 0, shown.output
    assert "ddp" in flat(shown.stdout)


def test_results_show_takes_results_option(cli, stored, tmp_path, monkeypatch):
    root, run = stored
    monkeypatch.chdir(tmp_path / "..")  # no results/ here
    shown = cli("results", "show", run.name, "--results", root)
    assert shown.exit_code == 0, shown.output
    assert "zero3" in flat(shown.stdout)


def test_results_ls_refuses_two_different_roots(cli, stored, tmp_path):
    root, run = stored
    result = cli("results", "ls", "--results", root, tmp_path / "elsewhere")
    assert result.exit_code == 2
    (line,) = errors(result)
    assert "results root given twice" in line
    same = cli("results", "ls", "--results", root, root)  # the same root twice is no contradiction
    assert same.exit_code == 0 and run.name in flat(same.stdout)


def test_checkpointing_modes_are_described_once_and_alike():
    """The schema's description and the README say what each mode does in the axis table's words."""
    from pathlib import Path

    from suite.axes import CHECKPOINTING, CHECKPOINTING_DOC
    from suite.scenario.experiment import Scenario

    assert tuple(CHECKPOINTING_DOC) == CHECKPOINTING
    schema = Scenario.model_json_schema()["properties"]["activation_checkpointing"]["description"]
    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    for mode, doc in CHECKPOINTING_DOC.items():
        assert f"{mode} ({doc})" in schema and f"`{mode}` ({doc})" in readme, mode
