"""The strategy registry is the one source of truth: what it says is what validation, planning, checkpoints and
the report do.  (tests/e2e/test_strategy_plugin.py runs a plugin strategy through the CLI end to end.)"""

from __future__ import annotations

import importlib
import json

import pytest

from suite.plan import predict
from suite.plan.memory import static_bytes
from suite.scenario import expand, Scenario
from suite.strategies import registry
from suite.strategies.registry import Comm, StrategySpec

BASE = {"name": "t", "model": "gpt-tiny", "seq_len": 16, "gpus": 4, "micro_batch_size": 1, "global_batch_size": 8}


@pytest.fixture
def throwaway():
    spec = registry.register(StrategySpec("tmp-zero2", "zero2", "suite.strategies.fsdp:apply", Comm(5),
                                          "test only", aliases=("tz2",), twin="zero2", checkpointable=False))
    yield spec
    registry.unregister(spec.name)


def test_builtin_entries_point_at_real_apply_functions():
    for spec in registry.specs():
        module, function = spec.apply.split(":")
        assert callable(getattr(importlib.import_module(module), function)), spec.name
        assert spec.twin is None or registry.get(spec.twin).twin is None


def test_alias_resolved_once_on_validation():
    s = Scenario(**BASE, strategy=["ddp", "fsdp"], exclude=[{"strategy": "fsdp", "gpus": 2}],
                 convergence={"match": {"strategy": "fsdp"}})
    assert s.strategy == ["ddp", "zero3"] and s.exclude == [{"strategy": "zero3", "gpus": 2}]
    assert s.convergence.match.value == "zero3"


def test_unknown_strategy_names_the_choices():
    with pytest.raises(ValueError, match=r"'zero9' is unknown; registered: 'ddp'.*'zero3'.*aliases: fsdp = zero3"):
        Scenario(**BASE, strategy="zero9")


def test_planner_reads_shards_and_comm_from_the_entry(throwaway):
    assert static_bytes(1000, "tmp-zero2", "fp32", 4) == static_bytes(1000, "zero2", "fp32", 4)
    (cell,) = expand(Scenario(**BASE, strategy="tz2"))
    assert cell.strategy == "tmp-zero2"
    p = predict(cell)
    assert p.comm_bytes_per_step == 5 * p.num_parameters * 4  # Comm(5), fp32 elements


def test_report_order_and_twins_read_the_registry(throwaway):
    order = registry.order()  # what the report's sort and twin table read
    assert order.index("zero2") < order.index("scratch-zero2") < order.index("tmp-zero2") < order.index("zero3")
    assert registry.native("tmp-zero2") == "zero2"


def test_checkpointable_is_the_entry(throwaway):
    pytest.importorskip("torch")
    from suite.launch.ray.checkpoint import check_supported

    check_supported("zero2")
    with pytest.raises(ValueError, match="tmp-zero2 are not supported"):
        check_supported("tmp-zero2")


def test_register_refuses_clashes_and_bad_twins(throwaway):
    with pytest.raises(ValueError, match="registered already"):
        registry.register(StrategySpec("x", "dp", "m:f", Comm(2), "x", aliases=("fsdp",)))
    with pytest.raises(ValueError, match="not a registered native strategy"):
        registry.register(StrategySpec("y", "dp", "m:f", Comm(2), "y", twin="scratch-dp"))
    with pytest.raises(ValueError, match="family"):
        registry.register(StrategySpec("z", "zero4", "m:f", Comm(2), "z"))  # type: ignore[arg-type]
    assert "x" not in registry.names() and "y" not in registry.names()


def test_schema_and_cli_list_what_is_registered(cli, throwaway):
    enum = json.dumps(Scenario.model_json_schema()["properties"]["strategy"])
    assert '"tmp-zero2"' in enum and '"tz2"' in enum and '"fsdp"' in enum
    out = cli("strategies", "--json")
    assert out.exit_code == 0, out.output
    listed = {s["name"]: s for s in json.loads(out.stdout)}
    assert listed["tmp-zero2"]["shards"] == {"optimizer_states": True, "gradients": True, "parameters": False}
    assert listed["zero3"]["aliases"] == ["fsdp"]
