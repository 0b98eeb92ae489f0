"""`suite plan` (table and --json) and `suite schema`: the machine-readable shapes other tools rely on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.axes import AXES
from suite.plan import predict
from suite.scenario import load_cells, Scenario

REPO = Path(__file__).resolve().parents[2]
ROW_KEYS = {"cell", "settings", "num_parameters", "memory_bytes", "as_implemented", "analytic", "host_bytes", "traced", "trace_error", "fits",
            "fits_by", "fits_bytes", "flops_per_token", "recompute_flops_per_token", "comm_bytes_per_step",
            "context_bytes_per_step", "pipeline"}
MEMORY_KEYS = {"parameters", "gradients", "optimizer_states", "master_weights", "activations", "total", "host",
               "temporaries", "gradients_absent_at_peak"}
# The keys the issue fixes for scenario files (users and CI scripts write them).
FILE_KEYS = {"name", "description", "launcher", "device", "model", "seq_len", "strategy", "activation_checkpointing",
             "precision", "gpus", "nodes", "micro_batch_size", "global_batch_size", "steps", "warmup_steps", "repeats",
             "seed", "optimizer", "data", "convergence", "gpu_memory_gb", "timeout_s", "exclude"}


@pytest.mark.parametrize("name", ["zero-stages", "smoke", "vit-cifar10"])
def test_plan_json_rows(cli, name):
    path = REPO / "scenarios" / f"{name}.yaml"
    result = cli("plan", path, "--json", "--no-trace")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    _, cells = load_cells(str(path))
    assert [r["cell"] for r in rows] == [c.id for c in cells]
    for row, cell in zip(rows, cells):
        assert set(row) == ROW_KEYS
        assert set(row["memory_bytes"]) == MEMORY_KEYS
        assert row["settings"] == cell.axes() and list(row["settings"]) == list(AXES)
        p = predict(cell)
        assert row["num_parameters"] == p.num_parameters == cell.model.num_parameters()
        assert row["memory_bytes"] == p.memory_bytes.model_dump()
        assert row["fits"] == p.fits
        assert (row["fits"] is None) == (cell.gpu_memory_gb is None)
        assert row["flops_per_token"] == p.flops_per_token and row["comm_bytes_per_step"] == p.comm_bytes_per_step


def test_plan_json_fits_column_in_zero_stages(cli):
    rows = json.loads(cli("plan", REPO / "scenarios" / "zero-stages.yaml", "--json", "--no-trace").stdout)
    assert {r["fits"] for r in rows} == {True}  # GPT-2 small/medium at b=4 fit an 80 GB GPU
    by = {(r["settings"]["model"], r["settings"]["seq_len"], r["settings"]["strategy"], r["settings"]["gpus"]): r
          for r in rows}
    ddp, z3 = by[("gpt2-medium", 1024, "ddp", 8)], by[("gpt2-medium", 1024, "zero3", 8)]
    assert z3["memory_bytes"]["total"] < ddp["memory_bytes"]["total"]
    assert z3["memory_bytes"]["activations"] == ddp["memory_bytes"]["activations"]


def test_plan_table(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    result = cli("plan", REPO / "scenarios" / "smoke.yaml")
    assert result.exit_code == 0, result.output
    assert "smoke: 4 cells" in result.stdout
    assert "textbook" in result.stdout and "as implemented" in result.stdout and "FLOPs/token" in result.stdout


def test_schema_is_the_scenario_json_schema(cli):
    result = cli("schema")
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema == Scenario.model_json_schema()
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert FILE_KEYS <= set(schema["properties"])
    assert set(schema["required"]) == {"name", "model"}
    for name, prop in schema["properties"].items():
        assert prop.get("description"), f"scenario field {name} has no description"
    # nested models forbid unknown keys too, and an editor can complete the enumerations
    for name in ("Optimizer", "SyntheticData", "TextData", "Cifar10Data", "Convergence", "MatchGate"):
        assert schema["$defs"][name]["additionalProperties"] is False, name
    strategy = json.dumps(schema["properties"]["strategy"])
    assert all(s in strategy for s in ("ddp", "zero1", "zero2", "zero3", "fsdp"))


def test_schema_rejects_what_validate_rejects(cli):
    import jsonschema

    schema = json.loads(cli("schema").stdout)
    ok = {"name": "t", "model": "gpt-tiny", "seq_len": 64, "convergence": {"match": {"strategy": "ddp"}}}
    jsonschema.validate(ok, schema)
    for bad in ({**ok, "stratgy": "ddp"}, {**ok, "steps": "many"}, {**ok, "strategy": "zero9"},
                {**ok, "optimizer": {"lr": 1, "momentum": 0.9}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_version(cli):
    """The version printed is the package's, as pyproject.toml declares it (not the constant compared with
    itself)."""
    import importlib.metadata
    import re
    from pathlib import Path

    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    declared = re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1)
    result = cli("version")
    assert result.exit_code == 0 and result.stdout.strip() == declared == importlib.metadata.version("suite")


def test_plan_only_selects_cells_by_id_or_prefix(cli):
    path = REPO / "scenarios" / "zero-stages.yaml"
    _, cells = load_cells(str(path))
    ids = [c.id for c in cells]
    rows = json.loads(cli("plan", path, "--json", "--no-trace", "--only", f"{ids[2]},{ids[0][:6]}").stdout)
    assert [r["cell"] for r in rows] == [ids[2], ids[0]]  # in the order asked for
    unknown = cli("plan", path, "--no-trace", "--only", "zzzz")
    assert unknown.exit_code == 2 and f"--only zzzz: no cell of the scenario's {len(ids)} has this id" in unknown.output
    empty = cli("plan", path, "--json", "--no-trace", "--only", "")
    assert len(json.loads(empty.stdout)) == len(ids)  # an empty --only names nothing: every cell
