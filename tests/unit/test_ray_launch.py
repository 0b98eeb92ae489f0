"""The Ray launcher's pure parts, without a cluster: the scenario's `ray:` block, cluster sizing, placement
selectors, and the controller-side Reporter turning ray.train.report calls into suite's files."""

from __future__ import annotations

import json
import pickle
import textwrap
from pathlib import Path

import pytest

from suite.results.schema import RankRecord
from suite.scenario import expand, load_cells, load_scenario, Scenario, ScenarioError

REPO = Path(__file__).resolve().parents[2]
BASE = dict(name="r", launcher="ray", device="cpu", model="gpt-tiny", seq_len=32, gpus=2, nodes=2,
            micro_batch_size=2, global_batch_size=4, steps=10, warmup_steps=1)


def _load(tmp_path, text: str):
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(text).lstrip())
    return load_scenario(path)


@pytest.mark.parametrize("ray_block, needle", [
    ("{checkpoint_score_attribute: loss, checkpoint_every_steps: 5}", "would keep the worst"),
    ("{num_to_keep: 2}", "need checkpoint_every_steps"),
    ("{max_failure: 1}", "unknown key"),
    ("{placement_strategy: EVERYWHERE}", "placement_strategy"),
    ("{max_failures: -2}", "max_failures"),
])
def test_bad_ray_blocks_are_errors_on_their_line(tmp_path, ray_block, needle):
    with pytest.raises(ScenarioError) as info:
        _load(tmp_path, f"""
            name: r
            launcher: ray
            model: gpt-tiny
            seq_len: 32
            ray: {ray_block}
            """)
    (problem,) = info.value.problems
    assert problem.startswith(f"{tmp_path / 's.yaml'}:5: ray") and needle in problem, problem


def test_ray_block_needs_the_ray_launcher(tmp_path):
    with pytest.raises(ScenarioError) as info:
        _load(tmp_path, """
            name: r
            model: gpt-tiny
            seq_len: 32
            ray: {max_failures: 1}
            """)
    assert "ray: settings need launcher: ray (got torchrun)" in info.value.problems[0]


def test_ray_settings_reach_cells_but_not_their_ids():
    plain = expand(Scenario(**BASE))
    tuned = expand(Scenario(**BASE, ray={"max_failures": 2, "checkpoint_every_steps": 3, "num_to_keep": 1,
                                         "checkpoint_score_attribute": "neg_loss"}))
    assert [c.id for c in plain] == [c.id for c in tuned]
    assert tuned[0].ray.max_failures == 2 and tuned[0].ray.checkpoint_score_order == "max"
    assert plain[0].ray is None
    assert tuned[0].model_validate_json(tuned[0].model_dump_json()) == tuned[0]


def test_shipped_ray_scenarios():
    _, gpu = load_cells(str(REPO / "scenarios" / "ray-multinode.yaml"))
    assert {c.strategy for c in gpu} == {"ddp", "zero3"}
    assert all(c.nodes == 2 and c.gpus == 8 and c.launcher == "ray" and c.model.preset == "vit-cifar10" for c in gpu)
    assert gpu[0].ray.num_to_keep == 2 and gpu[0].ray.checkpoint_every_steps == 245  # 5 x 50,000 / 1,024 steps
    # scored as the seed did: by held-out accuracy, evaluated every epoch-equivalent (49 steps) on the test split
    assert (gpu[0].ray.checkpoint_score_attribute, gpu[0].ray.checkpoint_score_order) == ("accuracy", "max")
    assert (gpu[0].eval.every_steps, gpu[0].eval.batches) == (49, 10)
    _, cpu = load_cells(str(REPO / "scenarios" / "ray-multinode-cpu.yaml"))
    assert all(c.nodes == 2 and c.gpus == 2 and c.device == "cpu" for c in cpu)


def test_private_cluster_size():
    from suite.launch.ray.launcher import _local_size
    from suite.runner.cell import launch_request

    (cell,) = expand(Scenario(**{**BASE, "gpus": 4, "global_batch_size": 16}))
    nodes, cpus, gpus = _local_size(launch_request(cell, Path("w"), "cpu"))
    assert nodes == 2 and cpus >= 2 and gpus == 0
    (cell,) = expand(Scenario(**{**BASE, "gpus": 8, "global_batch_size": 16, "ray": {"resources_per_worker": {"CPU": 3, "GPU": 1}}}))
    assert _local_size(launch_request(cell, Path("w"), "cuda"))[1:] == (12.0, 4)


@pytest.fixture
def ray_driver():
    """suite.launch.ray.driver (it imports Ray at the top): only the tests that use it skip without the ray extra.

    A module-level importorskip here skipped the whole file, the scenario and sizing tests above included."""
    return pytest.importorskip("suite.launch.ray.driver", reason="the ray extra is not installed")


def test_auto_placement_pins_gpus_over_nodes_in_blocks(ray_driver):
    (cell,) = expand(Scenario(**{**BASE, "gpus": 4, "global_batch_size": 16}))
    assert ray_driver.label_selectors(cell, ["a", "b"]) == [{"ray.io/node-id": n} for n in "aabb"]


def _record(rank: int, status: str = "ok") -> RankRecord:
    return RankRecord(cell_id="c", rank=rank, world_size=2, local_rank=0, hostname="h", node_id=f"n{rank}",
                      device="cpu", device_name="cpu", status=status, losses=[1.0], step_times_s=[0.1],
                      warmup_steps=0, tokens_per_step=1, samples_per_step=1, extra={"ray": {"returned_t": 5.0}})


@pytest.fixture
def rank_files():
    return pytest.importorskip("suite.launch.ray.rank_files", reason="the ray extra is not installed")


def test_reporter_writes_events_records_and_restarts(tmp_path, rank_files):
    from suite.launch.ray.events import RankFailed

    rep = rank_files.Reporter(str(tmp_path))
    start = [{"suite_event": "start", "node_id": f"n{r}", "pid": 100 + r, "t": 1.0} for r in range(2)]
    rep.after_report(None, start, None)
    failed = RankFailed(_record(1, "failed").model_dump_json(), "rank 1 failed: boom")
    wrapped = RuntimeError("wrapper")
    wrapped.__cause__ = pickle.loads(pickle.dumps(failed))  # as it crosses processes
    rep.after_exception(None, {1: wrapped})
    rep.after_exception(None, {1: wrapped})  # the same failure polled twice counts once
    assert RankRecord.model_validate_json((tmp_path / "rank1.json").read_text()).status == "failed"
    rep.after_report(None, start, None)  # the restarted group
    rep.after_report(None, [{"suite_event": "checkpoint", "step": 4, "loss": 0.5, "neg_loss": -0.5}] * 2, None)
    rep.after_report(None, [{"suite_event": "done", "record": _record(r).model_dump_json()} for r in range(2)], None)
    records = [RankRecord.model_validate_json((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r.status for r in records] == ["ok", "ok"] and [r.extra["restarts"] for r in records] == [1, 1]
    events = [json.loads(line) for line in (tmp_path / "ray_events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["group_start", "worker_failure", "group_start", "checkpoint", "done"]
    facts = rank_files.from_events(tmp_path, fit_started=0.5, fit_returned=7.0)
    assert facts["attempts"] == 2 and facts["restarts"] == 1 and len(facts["worker_failures"]) == 1
    assert facts["worker_group_setup_s"] == pytest.approx(0.5) and facts["teardown_s"] == pytest.approx(2.0)
    assert facts["groups"][0][1]["pid"] == 101


def test_train_func_resolves_the_same_worker_as_torchrun():
    from suite.worker.main import run_worker
    from suite.launch.ray.train_fn import resolve_worker

    assert resolve_worker("suite.worker") is run_worker
