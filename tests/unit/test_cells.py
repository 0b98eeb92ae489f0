"""Matrix expansion and cell ids: the cartesian product, exclude, the fsdp alias, and ids that never drift.

A cell id names a results folder and is how `compare` matches cells across runs and machines, so it must be
a pure function of the settings that change what is computed: every such setting changes it, nothing else
does (scenario name, timeouts, gates, repeats), and it is the same in any process (no hash() randomization).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.scenario import Cell, expand, load_cells, Scenario, ScenarioError

REPO = Path(__file__).resolve().parents[2]
BASE = {"name": "t", "model": "gpt-tiny", "seq_len": 64}
# The id of the simplest cell: pinned so an accidental change to the hashing (or to a default) shows up.
# If you change it on purpose, old results stop matching new ones: say so in the changelog.
BASE_ID = "1a14f41ddc"


def cells_of(**overrides) -> list[Cell]:
    return expand(Scenario.model_validate({**BASE, **overrides}))


def one_cell(**overrides) -> Cell:
    (cell,) = cells_of(**overrides)
    return cell


# ---------------------------------------------------------------- ids

def test_simplest_cell_has_the_pinned_id():
    cell = one_cell()
    assert cell.id == BASE_ID
    assert len(cell.id) == 10 and int(cell.id, 16) >= 0


# Each override changes one setting that changes what a cell computes; the key is the settings() key it touches.
CHANGES = {
    "model": {"model": "llama-tiny"},
    "seq_len": {"seq_len": 32},
    "strategy": {"strategy": "zero2"},
    "activation_checkpointing": {"activation_checkpointing": "full"},
    "precision": {"precision": "bf16-mixed"},
    "gpus": {"gpus": 2, "global_batch_size": 2},
    "nodes": {"nodes": 2, "gpus": 2, "global_batch_size": 2, "launcher": "ray"},
    "micro_batch_size": {"micro_batch_size": 2, "global_batch_size": 2},
    "global_batch_size": {"global_batch_size": 2},
    "grad_accum": {"global_batch_size": 4},
    "steps": {"steps": 51},
    "warmup_steps": {"warmup_steps": 4},
    "seed": {"seed": 1},
    "optimizer": {"optimizer": {"lr": 1.0e-3}},
    "data": {"data": {"kind": "text"}},
    "launcher": {"launcher": "ray"},
    "device": {"device": "cpu"},
    "bucket_cap_mb": {"bucket_cap_mb": 50},
    "measure_peaks": {"measure_peaks": True},
    "compile": {"compile": True},
    "threads_per_rank": {"threads_per_rank": 2},
}
MORE_CHANGES = [
    {"model": {"family": "gpt", "layers": 2, "hidden": 64, "heads": 4, "vocab": 256, "max_seq_len": 256, "ffn": 128}},
    {"optimizer": {"name": "sgd"}},
    {"optimizer": {"weight_decay": 0.1}},
    {"optimizer": {"betas": [0.9, 0.999]}},
    {"optimizer": {"fused": False}},
    {"data": {"kind": "text", "path": "corpus.txt"}},
]


def test_changes_cover_every_setting_in_the_id():
    """A new setting added to Cell must be added to CHANGES (so its effect on the id is tested)."""
    assert set(CHANGES) == set(one_cell().settings())


@pytest.mark.parametrize("override", list(CHANGES.values()) + MORE_CHANGES, ids=lambda o: json.dumps(o)[:40])
def test_every_setting_changes_the_id(override):
    assert one_cell(**override).id != BASE_ID


@pytest.mark.parametrize("override", [
    {"name": "another-name"},
    {"description": "words"},
    {"timeout_s": 7},
    {"repeats": 5},
    {"gpu_memory_gb": 24},
    {"convergence": {"min_loss_drop": 0.1, "max_final_loss": 3.0}},
    {"eval": {"every_steps": 2, "batches": 3}},  # evaluation reads the model: it never changes training
], ids=lambda o: next(iter(o)))
def test_names_timeouts_gates_and_repeats_do_not_change_the_id(override):
    cell = one_cell(**override)
    assert cell.id == BASE_ID
    key, value = next(iter(override.items()))
    if key in Cell.model_fields:  # the setting still reaches the cell; it is only left out of the id
        got = getattr(cell, "scenario" if key == "name" else key)
        assert got == (type(got).model_validate(value) if hasattr(got, "model_dump") else value)


def test_inline_shape_equal_to_a_preset_is_the_same_cell():
    inline = {"family": "gpt", "layers": 2, "hidden": 64, "heads": 4, "vocab": 256, "max_seq_len": 256}
    cell = one_cell(model=inline)
    assert cell.id == BASE_ID
    assert cell.axes()["model"] == "gpt-L2-h64" and one_cell().axes()["model"] == "gpt-tiny"
    with pytest.raises(ScenarioError, match="appears twice"):
        cells_of(model=["gpt-tiny", inline])


def test_ids_are_unique_within_every_shipped_scenario():
    for path in sorted((REPO / "scenarios").glob("*.yaml")):
        _, cells = load_cells(str(path))
        assert len({c.id for c in cells}) == len(cells), path


_IDS_SCRIPT = (
    "import json, sys; from suite.scenario.expand import load_cells; "
    "print(json.dumps([c.id for c in load_cells(sys.argv[1])[1]]))"
)


def test_ids_are_identical_across_processes_and_hash_seeds():
    path = str(REPO / "scenarios" / "zero-stages.yaml")
    here = [c.id for c in load_cells(path)[1]]
    for seed in ("1", "2718"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-c", _IDS_SCRIPT, path], capture_output=True, text=True,
                              env=env, cwd=REPO, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == here


# ---------------------------------------------------------------- fsdp alias, exclude, expansion

def test_fsdp_is_zero3():
    fsdp, zero3 = one_cell(strategy="fsdp"), one_cell(strategy="zero3")
    assert fsdp.strategy == "zero3" and fsdp.id == zero3.id
    with pytest.raises(ScenarioError, match="appears twice"):
        cells_of(strategy=["zero3", "fsdp"])


def test_fsdp_alias_in_exclude_and_match():
    cells = cells_of(strategy=["ddp", "zero3"], exclude=[{"strategy": "fsdp"}])
    assert [c.strategy for c in cells] == ["ddp"]
    gated = cells_of(strategy=["ddp", "fsdp"], convergence={"match": {"strategy": "fsdp"}})
    assert [c.strategy for c in gated] == ["ddp", "zero3"]


def test_cartesian_product_in_axis_order():
    cells = cells_of(seq_len=[32, 64], strategy=["ddp", "zero1", "zero3"], gpus=[1, 2], global_batch_size=4)
    assert len(cells) == 12
    assert [(c.seq_len, c.strategy, c.gpus) for c in cells[:4]] == [
        (32, "ddp", 1), (32, "ddp", 2), (32, "zero1", 1), (32, "zero1", 2)]
    assert {(c.seq_len, c.strategy, c.gpus) for c in cells} == {
        (s, st, g) for s in (32, 64) for st in ("ddp", "zero1", "zero3") for g in (1, 2)}


def test_exclude_drops_exactly_the_matching_partial_cells():
    cells = cells_of(strategy=["ddp", "zero1", "zero2"], gpus=[1, 2, 4], global_batch_size=8,
                     exclude=[{"strategy": "zero1", "gpus": 1}, {"gpus": 4, "strategy": "ddp"}])
    got = {(c.strategy, c.gpus) for c in cells}
    assert got == {(s, g) for s in ("ddp", "zero1", "zero2") for g in (1, 2, 4)} - {("zero1", 1), ("ddp", 4)}


def test_exclude_with_a_value_on_no_axis_drops_nothing():
    assert len(cells_of(strategy=["ddp", "zero1"], exclude=[{"strategy": "zero3"}])) == 2


def test_zero_stages_scenario_expands_as_declared():
    scenario, cells = load_cells(str(REPO / "scenarios" / "zero-stages.yaml"))
    # 2 models x 2 seq_len x 4 strategies x 4 gpu counts, minus the three sharded strategies on 1 GPU (x 2 x 2)
    assert len(cells) == 2 * 2 * 4 * 4 - 3 * 2 * 2
    assert not [c for c in cells if c.gpus == 1 and c.strategy != "ddp"]
    assert all(c.grad_accum * c.micro_batch_size * c.gpus == c.global_batch_size for c in cells)
    assert {c.grad_accum for c in cells} == {16, 8, 4, 2}


def test_grad_accum_and_resolved_fields():
    cell = one_cell(gpus=2, micro_batch_size=3, global_batch_size=30, seed=7)
    assert cell.grad_accum == 5 and cell.seed == 7 and cell.scenario == "t"
    assert cell.model.preset == "gpt-tiny" and cell.model.hidden == 64


def test_vit_cells_get_their_token_count_as_seq_len():
    cell = one_cell(model="vit-cifar10", seq_len=None, data={"kind": "cifar10"})
    assert cell.seq_len == (32 // 4) ** 2 + 1 == 65
    assert cell.axes()["seq_len"] == 65


def test_cell_round_trips_through_json():
    cells = load_cells(str(REPO / "scenarios" / "smoke.yaml"))[1]
    for cell in cells:
        again = Cell.model_validate_json(cell.model_dump_json())
        assert again == cell and again.settings() == cell.settings()
        assert again.convergence.match.axis == "strategy" and again.convergence.match.value == "ddp"


def test_axes_lists_every_axis():
    cell = one_cell()
    assert list(cell.axes()) == ["model", "seq_len", "strategy", "activation_checkpointing", "precision", "gpus",
                                 "nodes", "launcher", "shard_size", "tensor_parallel", "sequence_parallel", "loss_parallel",
                                 "pipeline_parallel", "pipeline_schedule", "context_parallel", "micro_batch_size",
                                 "global_batch_size", "seed"]
    assert cell.axes()["model"] == "gpt-tiny"


# ---------------------------------------------------------------- launcher, an axis since issue 37

def test_launcher_is_an_axis_that_keeps_the_ids_it_had_as_a_setting():
    """launcher was a shared setting every id hashed: as an axis it stays in the id at torchrun too (BASE_ID),
    and a `[torchrun, ray]` list gives the two cells that two single-launcher scenarios gave."""
    assert one_cell().id == BASE_ID and one_cell(launcher="torchrun").id == BASE_ID
    two = {"gpus": 2, "global_batch_size": 2}
    both = cells_of(launcher=["torchrun", "ray"], nodes=[1, 2], **two,
                    exclude=[{"launcher": "torchrun", "nodes": 2}, {"launcher": "ray", "nodes": 1}])
    assert [(c.launcher, c.nodes) for c in both] == [("torchrun", 1), ("ray", 2)]
    assert both[0].id == one_cell(**two).id
    assert both[1].id == one_cell(launcher="ray", nodes=2, **two).id != both[0].id
    assert both[1].axes()["launcher"] == "ray"


def test_a_torchrun_cell_over_nodes_and_ray_settings_without_a_ray_launcher_are_named():
    with pytest.raises(ScenarioError, match="nodes 2 > 1 needs launcher: ray"):
        cells_of(launcher=["torchrun", "ray"], gpus=2, nodes=2, global_batch_size=2)
    with pytest.raises(Exception, match=r"ray: settings need launcher: ray \(got \['torchrun'\]\)"):
        Scenario.model_validate({**BASE, "launcher": ["torchrun"], "ray": {"max_failures": 0}})
    assert Scenario.model_validate({**BASE, "launcher": ["torchrun", "ray"], "ray": {"max_failures": 0}})
