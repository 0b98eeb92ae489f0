"""Hostile scenario files: every one is answered with one `file:line: field: message` error and exit 2, quickly
and in little memory (suite/scenario/yaml_loader.py bounds the YAML; the validators bound the values).

Each test is one way a file used to crash or hang `suite validate` / `plan` (issue 12): a traceback, a
RecursionError, gigabytes of memory or minutes of CPU.  Time and memory are asserted, not just the message.
"""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest

from suite.scenario import load_cells, ScenarioError
from suite.scenario.expand import MAX_CELLS
from suite.scenario.yaml_loader import MAX_ALIASES, MAX_BYTES, MAX_DEPTH, MAX_INT_DIGITS, MAX_NODES

HEAD = "name: t\nmodel: gpt-tiny\nseq_len: 8\n"  # lines 1-3 of a valid scenario; the tests add line 4 on


def errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def one_error(result, path, line: int, *needles: str) -> str:
    """Exit 2, no traceback, exactly one error line, at `path:line`, containing every needle."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    errs = errors(result)
    assert len(errs) == 1, errs
    assert errs[0].startswith(f"error: {path}:{line}: "), errs[0]
    for needle in needles:
        assert needle in errs[0], (needle, errs[0])
    assert len(errs[0]) < 600, len(errs[0])  # a value is quoted clipped, never whole
    return errs[0]


def bounded(path, seconds: float = 20.0, megabytes: float = 100) -> ScenarioError:
    """load_cells(path) raises ScenarioError within `seconds` and `megabytes` of Python allocations.

    Timed in a run of its own: tracemalloc slows allocation-heavy code (the YAML parser) several times.  The
    time limit guards against a runaway expansion (minutes to hours), not the machine's speed: generous."""
    start = time.perf_counter()
    with pytest.raises(ScenarioError) as info:
        load_cells(str(path))
    elapsed = time.perf_counter() - start
    tracemalloc.start()
    try:
        with pytest.raises(ScenarioError):
            load_cells(str(path))
        peak = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert elapsed < seconds, elapsed
    assert peak < megabytes, peak
    return info.value


# ---------------------------------------------------------------- reading the bytes

def test_non_utf8_file_names_line_and_byte(cli, tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(HEAD.encode() + "description: caf\xe9\n".encode("latin-1"))
    one_error(cli("validate", path), path, 4, "not UTF-8", "0xe9", "column 17", "save the file as UTF-8")


def test_control_character_is_a_line_error(cli, tmp_path):
    path = tmp_path / "ctrl.yaml"
    path.write_text(HEAD + "description: a\x07b\n")
    one_error(cli("validate", path), path, 4, "malformed YAML", "not allowed")


def test_file_over_the_size_limit_is_refused_without_reading_it_all(cli, tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(HEAD + "description: " + "x" * (10 * 2**20) + "\n")  # 10 MB
    one_error(cli("validate", path), path, 1, f"larger than {MAX_BYTES:,} bytes", "split")
    bounded(path, megabytes=5)


def test_long_list_under_the_byte_limit_stops_at_the_node_budget(cli, tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text(HEAD + "gpus: [" + ",".join(["1"] * 100_000) + "]\n")  # 200 KB, 100,000 values
    one_error(cli("validate", path), path, 4, f"more than {MAX_NODES:,} values")
    bounded(path)


# ---------------------------------------------------------------- structure: depth and aliases

def test_recursive_alias_is_refused(cli, write_scenario):
    path = write_scenario(HEAD + "exclude: &loop [*loop]\n")
    one_error(cli("validate", path), path, 4, "alias *loop", "recursive")


def test_recursive_mapping_alias_is_refused(cli, write_scenario):
    path = write_scenario(HEAD + "ray: &r\n  inner: *r\n")
    one_error(cli("validate", path), path, 5, "recursive")


@pytest.mark.parametrize("text", ["[" * 500 + "]" * 500, "{a: " * 500 + "1" + "}" * 500])
def test_deep_nesting_is_refused_before_python_recursion(cli, write_scenario, text):
    path = write_scenario(HEAD + f"description: {text}\n")
    one_error(cli("validate", path), path, 4, f"deeper than {MAX_DEPTH} levels")


def test_billion_laughs_is_refused_in_bounded_memory_even_when_unused(cli, write_scenario):
    # Ten levels of ten aliases each: 10^10 values once expanded, though no field reads `lol`.
    lines = ["a0: &a0 [lol]"] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    path = write_scenario(HEAD + "x-lol:\n" + "".join(f"  {line}\n" for line in lines))
    result = cli("validate", path)
    assert result.exit_code == 2 and "expand to more than" in errors(result)[0], result.output
    bounded(path, megabytes=20)


def test_chained_aliases_cannot_nest_past_the_depth_limit(cli, write_scenario):
    lines = ["a0: &a0 [1]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, 40)]
    path = write_scenario(HEAD + "".join(f"{line}\n" for line in lines))
    assert "nests the document deeper" in errors(cli("validate", path))[0]


def test_too_many_aliases(cli, write_scenario):
    path = write_scenario(HEAD + "gpus: &g 1\nnodes: [" + ", ".join(["*g"] * (MAX_ALIASES + 1)) + "]\n")
    one_error(cli("validate", path), path, 5, f"more than {MAX_ALIASES} aliases")


def test_a_few_aliases_are_fine(cli, write_scenario):
    path = write_scenario(HEAD + "gpus: &g 2\nglobal_batch_size: *g\n")
    result = cli("validate", path)
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------- numbers

def test_integer_of_thousands_of_digits(cli, write_scenario):
    path = write_scenario(HEAD + "steps: " + "9" * 5000 + "\n")
    one_error(cli("validate", path), path, 4, "integer of 5000 digits", f"limit is {MAX_INT_DIGITS}")


def test_impossible_date_is_a_line_error(cli, write_scenario):
    path = write_scenario(HEAD + "description: 2001-13-45\n")
    one_error(cli("validate", path), path, 4, "malformed YAML", "2001-13-45", "month must be in 1..12")


@pytest.mark.parametrize("line, field", [
    ("optimizer: {lr: .inf}", "optimizer.lr"),
    ("optimizer: {betas: [0.9, .nan]}", "optimizer.betas.1"),
    ("bucket_cap_mb: .inf", "bucket_cap_mb"),
    ("convergence: {min_loss_drop: .nan}", "convergence.min_loss_drop"),
    ("convergence: {max_final_loss: -.inf}", "convergence.max_final_loss"),
    ("gpu_memory_gb: 1e400", "gpu_memory_gb"),
])
def test_every_float_must_be_finite(cli, write_scenario, line, field):
    path = write_scenario(HEAD + line + "\n")
    one_error(cli("validate", path), path, 4, f"{field}: ", "finite number")


def test_inline_shape_rope_theta_must_be_finite(cli, write_scenario):
    path = write_scenario("name: t\nseq_len: 8\nmodel: {family: llama, layers: 2, hidden: 64, heads: 4, kv_heads: 2,"
                          " ffn: 128, vocab: 256, rope_theta: .inf}\n")
    one_error(cli("validate", path), path, 3, "rope_theta", "finite number")


@pytest.mark.parametrize("text, line, needles", [
    ("name: t\nmodel: gpt2-small\nseq_len: 99999999999999999\n", 3, ["seq_len", "less than or equal to 16777216"]),
    ("name: t\nseq_len: 8\nmodel: {family: gpt, layers: 1.0e300, hidden: 64, heads: 4, vocab: 256}\n", 3,
     ["model.layers", "integer"]),
    ("name: t\nseq_len: 8\nmodel: {family: gpt, layers: 20000, hidden: 64, heads: 4, vocab: 256}\n", 3,
     ["model.layers", "less than or equal to 10000"]),
    ("name: t\nseq_len: 8\nmodel: {family: gpt, layers: 2, hidden: 64, heads: 4, vocab: '99999999999999999999'}\n", 3,
     ["model.vocab", "16777216"]),
    (HEAD + "gpus: 2000000\n", 4, ["gpus", "1048576"]),
    (HEAD + "timeout_s: 99999999999\n", 4, ["timeout_s", "2592000"]),
])
def test_huge_dimensions_are_refused_with_the_bound(cli, write_scenario, text, line, needles):
    path = write_scenario(text)
    one_error(cli("validate", path), path, line, *needles)


def test_plan_json_at_the_largest_allowed_model_is_finite_strict_json(cli, write_scenario):
    big = 2**20
    path = write_scenario(f"name: t\nseq_len: {2**24}\nmicro_batch_size: 512\ngpus: [1, {big}]\n"
                          f"global_batch_size: {512 * big}\nstrategy: [ddp, zero3]\nactivation_checkpointing: none\n"
                          f"model: {{family: gpt, layers: 10000, hidden: {big}, heads: {big}, vocab: {2**24}, "
                          f"ffn: {2**22}, max_seq_len: {2**24}}}\n")
    result = cli("plan", path, "--json", "--no-trace")
    assert result.exit_code == 0, result.output

    def refuse(constant: str):
        raise AssertionError(f"plan --json wrote {constant}")

    rows = json.loads(result.stdout, parse_constant=refuse)
    assert len(rows) == 4 and all(1e25 < r["memory_bytes"]["total"] < 1e300 for r in rows)
    assert cli("plan", path, "--no-trace").exit_code == 0  # the table renders the same numbers


# ---------------------------------------------------------------- sizes of what the file asks for

def test_a_1000_by_1000_sweep_is_refused_before_expanding(cli, write_scenario):
    path = write_scenario(f"name: t\nmodel: gpt-tiny\nseq_len: {list(range(1, 1001))}\n"
                          f"micro_batch_size: {list(range(1, 1001))}\n")
    one_error(cli("validate", path), path, 3, "1,000,000 cells", "seq_len 1000 x micro_batch_size 1000",
              f"limit is {MAX_CELLS:,}")
    bounded(path, megabytes=60)


def test_too_many_exclude_entries(cli, write_scenario):
    entries = "".join(f"  - {{gpus: {i}}}\n" for i in range(2, 70))
    path = write_scenario(HEAD + "exclude:\n" + entries)
    one_error(cli("validate", path), path, 4, "exclude", "at most 64 items")


def test_error_quotes_a_huge_value_clipped(cli, write_scenario):
    path = write_scenario(f"name: t\nseq_len: 8\nmodel: {'g' * 200_000}\n")
    err = one_error(cli("validate", path), path, 3, "unknown model preset", "(200,002 characters)")
    assert err.count("g" * 81) == 0


def test_huge_unknown_key_is_clipped(cli, write_scenario):
    path = write_scenario(HEAD + "? " + "k" * 100_000 + "\n: 1\n")  # `? key` is YAML's form for long keys
    one_error(cli("validate", path), path, 4, "unknown key", "(100,000 characters)")


def test_many_wrong_values_are_reported_by_the_first_twenty(write_scenario):
    path = write_scenario(HEAD + "gpus: [" + ", ".join(["-1"] * 500) + "]\n")
    problems = bounded(path).problems
    assert len(problems) == 21 and problems[-1] == "... and 480 more problems"


def test_match_gate_with_mixed_key_types_is_an_error_not_a_type_error(cli, write_scenario):
    path = write_scenario(HEAD + "convergence:\n  match: {1: a, b: c}\n")
    one_error(cli("validate", path), path, 5, "exactly one axis key")


# ---------------------------------------------------------------- data paths

def test_missing_text_data_path(cli, write_scenario, tmp_path):
    missing = tmp_path / "no-such-corpus"
    path = write_scenario(f"name: t\nmodel: gpt-tiny\nseq_len: 8\ndata:\n  kind: text\n  path: {missing}\n")
    one_error(cli("validate", path), path, 6, "data.path", "No such file or directory", "leave path out")


def test_existing_text_data_file_and_folder_pass(cli, write_scenario, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("hello " * 100)
    for target in (corpus, corpus / "a.txt"):
        path = write_scenario(f"name: t\nmodel: gpt-tiny\nseq_len: 8\ndata: {{kind: text, path: '{target}'}}\n")
        result = cli("validate", path)
        assert result.exit_code == 0, result.output


def test_text_data_path_with_a_nul_byte(cli, write_scenario):
    path = write_scenario('name: t\nmodel: gpt-tiny\nseq_len: 8\ndata: {kind: text, path: "a\\0b"}\n')
    one_error(cli("validate", path), path, 4, "data.path", "null")


def test_text_data_path_of_an_unknown_users_home(cli, write_scenario):
    # Path.expanduser raises RuntimeError (not OSError) for ~nosuchuser: still one line at the field
    path = write_scenario("name: t\nmodel: gpt-tiny\nseq_len: 8\ndata: {kind: text, path: ~suite-no-such-user/x}\n")
    one_error(cli("validate", path), path, 4, "data.path", "home directory")


def test_cifar10_root_that_is_a_file_is_an_error(cli, write_scenario, tmp_path):
    root = tmp_path / "c10"
    root.write_text("not a folder")
    path = write_scenario(f"name: t\nmodel: vit-cifar10\ndata: {{kind: cifar10, root: '{root}'}}\n")
    one_error(cli("validate", path), path, 3, "data.root", "is a file, not a folder")


@pytest.mark.parametrize("download, warned", [(False, True), (True, False)])
def test_missing_cifar10_folder_is_a_warning_unless_downloaded(cli, write_scenario, tmp_path, download, warned):
    root = tmp_path / "c10"
    path = write_scenario(f"name: t\nmodel: vit-cifar10\ndata: {{kind: cifar10, root: '{root}', "
                          f"download: {str(download).lower()}}}\n")
    result = cli("validate", path)
    assert result.exit_code == 0 and not errors(result), result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == warned, result.stderr
    if warned:
        assert warnings[0].startswith(f"warning: {path}:3: data.root: ") and "download: true" in warnings[0]


def test_merge_keys_may_override_what_they_merge(write_scenario):
    # `<<: *a` then `layers: 4` is YAML's override idiom, not a key given twice (the line map reads the file as
    # written, before construction merges).
    path = write_scenario("name: t\nseq_len: 8\nmodel:\n  - &a {family: gpt, layers: 2, hidden: 64, heads: 4, "
                          "vocab: 256}\n  - {<<: *a, layers: 4}\n")
    _, cells = load_cells(str(path))
    assert [c.model.layers for c in cells] == [2, 4]


def test_a_collection_as_a_key_is_a_line_error(cli, write_scenario):
    path = write_scenario(HEAD + "? warmup_steps: 10\n")  # found by scripts/fuzz-scenarios (seed 4823)
    one_error(cli("validate", path), path, 4, "malformed YAML", "unhashable key")
