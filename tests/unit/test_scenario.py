"""Scenario files through `suite validate`: the shipped ones pass, each kind of bad file gives one clear error.

Every bad file below must produce exactly one `error: FILE:LINE: ...` line on stderr, naming the field and the
numbers involved, and exit 2 (never a traceback).  Line numbers are those of the dedented YAML text.
"""

from __future__ import annotations

import re
import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suite.scenario import load_cells, load_scenario, Scenario, ScenarioError

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"
PYTHON = sys.executable  # the virtualenv's interpreter running pytest
SHIPPED = sorted(SCENARIOS.glob("*.yaml"))
REQUIRED = {"smoke", "zero-stages", "activation-checkpointing", "seq-len-sweep", "vit-cifar10"}


def errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def assert_one_error(result, path: Path, line: int, *needles: str) -> str:
    """Exit 2, exactly one error line, at `path:line`, containing every needle; returns the line."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    errs = errors(result)
    assert len(errs) == 1, errs
    assert errs[0].startswith(f"error: {path}:{line}: "), errs[0]
    for needle in needles:
        assert needle in errs[0], (needle, errs[0])
    return errs[0]


# ---------------------------------------------------------------- shipped scenarios

def test_required_scenarios_are_shipped():
    assert REQUIRED <= {p.stem for p in SHIPPED}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_scenario_validates(cli, path, monkeypatch):
    monkeypatch.chdir(REPO)
    rel = path.relative_to(REPO)
    result = cli("validate", rel)
    assert result.exit_code == 0, result.output
    scenario, cells = load_cells(str(path))
    assert scenario.name == path.stem  # the name is the results folder; keep it equal to the file name
    assert result.stdout.strip() == f"{rel}: ok ({len(cells)} cells)"


def test_validate_console_script_in_a_subprocess():
    """The installed console script, as a user runs it, on every shipped file at once."""
    suite = Path(PYTHON).parent / "suite"
    assert suite.exists(), f"console script missing: {suite} (is the package installed in the venv?)"
    proc = subprocess.run([str(suite), "validate", *map(str, SHIPPED)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(": ok (") == len(SHIPPED)


def test_python_dash_m_suite_reports_bad_file_and_exits_2(write_scenario):
    path = write_scenario("""
        name: t
        model: gpt-tiny
        seq_len: 64
        stratgy: ddp
    """)
    proc = subprocess.run([PYTHON, "-m", "suite", "validate", str(path)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert [l for l in proc.stderr.splitlines() if l.startswith("error:")] == [
        f"error: {path}:4: stratgy: unknown key (not allowed; check the spelling); did you mean 'strategy'?"
    ]


def test_validate_reports_every_file_and_fails_if_any_fails(cli, write_scenario):
    good = write_scenario("name: g\nmodel: gpt-tiny\nseq_len: 8\n", "good.yaml")
    bad = write_scenario("name: b\nmodel: gpt-tiny\nseq_len: 8\nsteps: 0\n", "bad.yaml")
    result = cli("validate", bad, good)
    assert result.exit_code == 2
    assert f"{good}: ok (1 cells)" in result.stdout
    assert len(errors(result)) == 1 and f"{bad}:4:" in errors(result)[0]


# ---------------------------------------------------------------- bad files: one clear error each

BAD = {
    # name: (yaml, line, needles)
    "unknown-key": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        stratgy: ddp
    """, 4, ["stratgy", "unknown key"]),
    "unknown-nested-key": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        convergence:
          min_loss_drop: 0.5
          max_final_los: 3
    """, 6, ["convergence.max_final_los", "unknown key"]),
    "wrong-type-scalar": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        steps: many
    """, 4, ["steps", "valid integer", "'many'"]),
    "wrong-type-axis": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        gpus: two
    """, 4, ["gpus:", "valid integer", "'two'"]),
    "wrong-literal-axis": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        strategy: zero9
    """, 4, ["strategy", "'zero9'", "'zero3'"]),
    "wrong-item-in-axis-list": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        gpus:
          - 1
          - -2
    """, 6, ["gpus.1", "greater than 0", "-2"]),
    "non-dividing-batch": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        strategy: [ddp, zero3]
        gpus: 8
        micro_batch_size: 4
        global_batch_size: 60
    """, 7, ["global_batch_size 60 is not divisible by micro_batch_size 4 x gpus 8"]),
    "nodes-with-torchrun": ("""
        name: t
        launcher: torchrun
        model: gpt-tiny
        seq_len: 64
        gpus: 4
        nodes: 2
        global_batch_size: 4
    """, 6, ["nodes 2 > 1", "launcher: ray", "torchrun"]),
    "empty-axis": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        strategy: []
    """, 4, ["strategy", "empty"]),
    "negative-steps": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        steps: -3
    """, 4, ["steps", "greater than 0", "-3"]),
    "warmup-not-below-steps": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        steps: 10
        warmup_steps: 10
    """, 5, ["warmup_steps 10 must be below steps 10"]),
    "malformed-yaml-unclosed-list": ("""
        name: t
        model: gpt-tiny
        seq_len: [64
        steps: 3
    """, 4, ["malformed YAML", "started on line 3"]),
    "malformed-yaml-indent": ("""
        name: t
        model: gpt-tiny
          seq_len: 64
        steps: 3
    """, 3, ["malformed YAML"]),
    "duplicate-key": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        seq_len: 32
    """, 4, ["seq_len", "twice", "line 3"]),
    "unknown-preset": ("""
        name: t
        model:
          - gpt-tiny
          - gpt5
        seq_len: 64
    """, 4, ["model.1", "unknown model preset 'gpt5'", "gpt2-small"]),
    "bad-inline-shape": ("""
        name: t
        model: {family: gpt, layers: 2, hidden: 65, heads: 4, vocab: 256}
        seq_len: 64
    """, 2, ["hidden 65 is not divisible by heads 4"]),
    "match-non-axis": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        convergence:
          match: {colour: red}
    """, 5, ["match axis 'colour' is not an axis"]),
    "match-value-not-in-axis": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        strategy: [ddp, zero1]
        convergence:
          match: {strategy: zero2, rtol: 1.0e-4}
    """, 6, ["match strategy: 'zero2'", "['ddp', 'zero1']"]),
    "match-reference-excluded": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        strategy: [ddp, zero1]
        gpus: [1, 2]
        global_batch_size: 2
        convergence:
          match: {strategy: ddp}
        exclude:
          - {strategy: ddp, gpus: 2}
    """, 8, ["reference of cell", "strategy=zero1", "gpus=2", "exclude"]),
    "exclude-unknown-axis": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        exclude:
          - {strategy: ddp}
          - {colour: red}
    """, 6, ["exclude.1", "['colour']"]),
    "exclude-drops-everything": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        exclude:
          - {strategy: ddp}
    """, 4, ["exclude drops every cell"]),
    "vit-with-seq-len": ("""
        name: t
        model: vit-cifar10
        seq_len: 64
        data: {kind: cifar10}
    """, 3, ["seq_len 64 does not fit vit-cifar10", "65"]),
    "cifar10-with-gpt": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        data: {kind: cifar10}
    """, 4, ["data kind cifar10 needs an image model", "gpt"]),
    "seq-len-beyond-positions": ("""
        name: t
        model: gpt-tiny
        seq_len: 1000
    """, 3, ["seq_len 1000 exceeds max_seq_len 256"]),
    "missing-seq-len": ("""
        name: t
        model: gpt-tiny
    """, 1, ["seq_len is required"]),
    "unknown-data-kind": ("""
        name: t
        model: gpt-tiny
        seq_len: 64
        data: {kind: imagenet}
    """, 4, ["data", "'imagenet'"]),
    "not-a-mapping": ("""
        - name: t
    """, 1, ["must be a mapping"]),
    "bad-name": ("""
        name: Has Spaces
        model: gpt-tiny
        seq_len: 64
    """, 1, ["name", "'Has Spaces'"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_scenario_gives_one_error_at_its_line(cli, write_scenario, case):
    text, line, needles = BAD[case]
    path = write_scenario(text)
    assert_one_error(cli("validate", path), path, line, *needles)


def test_plan_refuses_bad_files_the_same_way(cli, write_scenario):
    text, line, needles = BAD["non-dividing-batch"]
    path = write_scenario(text)
    assert_one_error(cli("plan", path, "--json"), path, line, *needles)


def test_the_same_problem_in_many_cells_is_reported_once(write_scenario):
    path = write_scenario("""
        name: t
        model: gpt-tiny
        seq_len: [32, 64]
        strategy: [ddp, zero1, zero2, zero3]
        gpus: 3
        global_batch_size: 4
    """)
    with pytest.raises(ScenarioError) as info:
        load_cells(str(path))
    assert len(info.value.problems) == 1
    assert "global_batch_size 4 is not divisible by micro_batch_size 1 x gpus 3" in info.value.problems[0]


def test_nodes_above_one_are_fine_with_ray(write_scenario):
    path = write_scenario(BAD["nodes-with-torchrun"][0].replace("torchrun", "ray"))
    _, cells = load_cells(str(path))
    assert [(c.nodes, c.gpus, c.launcher) for c in cells] == [(2, 4, "ray")]


def test_unreadable_file_is_an_error_not_a_traceback(cli, tmp_path):
    missing = tmp_path / "nope.yaml"
    result = cli("validate", missing)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert errors(result) == [f"error: {missing}: cannot read scenario file: No such file or directory"]


def test_load_scenario_returns_line_map(write_scenario):
    path = write_scenario("name: t\nmodel: gpt-tiny\nseq_len: [32, 64]\ngpus: 2\n")
    scenario, source = load_scenario(path)
    assert scenario.axis_values("seq_len") == [32, 64] and scenario.axis_values("gpus") == [2]
    assert source.where("gpus") == f"{path}:4" and source.where("nowhere") == f"{path}:1"


# ---------------------------------------------------------------- properties

@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("prop")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(micro=st.integers(1, 8), gpus=st.integers(1, 8), glob=st.integers(1, 256))
def test_validate_accepts_exactly_the_dividing_batches(cli, scratch, micro, gpus, glob):
    path = scratch / "batch.yaml"
    path.write_text(f"name: t\nmodel: gpt-tiny\nseq_len: 8\ngpus: {gpus}\nmicro_batch_size: {micro}\n"
                    f"global_batch_size: {glob}\n")
    result = cli("validate", path)
    if glob % (micro * gpus) == 0:
        assert result.exit_code == 0, result.output
        _, (cell,) = load_cells(str(path))
        assert cell.grad_accum * micro * gpus == glob
    else:
        assert_one_error(result, path, 6, f"global_batch_size {glob} is not divisible by "
                                          f"micro_batch_size {micro} x gpus {gpus}")


_KEY_CHARS = string.ascii_letters + string.digits + "_-[]."
garbage_keys = st.text(_KEY_CHARS, min_size=1, max_size=12).filter(lambda k: k not in Scenario.model_fields)
yaml_values = st.one_of(st.integers(-5, 5), st.booleans(), st.text(string.ascii_letters, max_size=5),
                        st.lists(st.integers(0, 3), max_size=3))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=garbage_keys, value=yaml_values)
def test_garbage_keys_are_rejected_with_exit_2_never_a_traceback(cli, scratch, key, value):
    import json

    path = scratch / "garbage.yaml"
    # json.dumps quotes the key, so YAML keeps it a string (`on`, `123`, `[x]` would otherwise change type).
    path.write_text(f"name: t\nmodel: gpt-tiny\nseq_len: 8\n{json.dumps(key)}: {json.dumps(value)}\n")
    result = cli("validate", path)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert_one_error(result, path, 4, f"{key}: unknown key")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(string.printable, max_size=80))
def test_arbitrary_text_never_crashes_validate(cli, scratch, text):
    path = scratch / "text.yaml"
    path.write_text(text)
    result = cli("validate", path)
    assert result.exit_code in (0, 2), (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 2:
        assert errors(result) and all(re.match(rf"error: {re.escape(str(path))}:\d+", e) for e in errors(result))


def test_shipped_scenarios_conform_to_exported_json_schema():
    """Editors complete against `suite schema`; the shipped files must be valid under it too."""
    import jsonschema
    import yaml

    schema = Scenario.model_json_schema()
    for path in SHIPPED:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
