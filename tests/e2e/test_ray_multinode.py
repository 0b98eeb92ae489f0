"""`suite run` with launcher: ray on real 2-node Ray clusters on this machine (loopback), with the real worker.

test_ray_private_cluster   no --ray-address: suite starts a 2-node cluster (ray start --head / --address),
                           runs a DDP cell whose ranks raise at step 3 (max_failures 0: the cell fails, the run
                           goes on) and an FSDP cell: both ranks on different nodes, best-2 checkpoints by loss,
                           the best restorable with the right weights, a curve equal to torchrun's, and no Ray
                           process left once suite exits.
test_ray_worker_killed     --ray-address of a cluster the test starts: the DDP cell's ranks are held at step
                           HANG (SUITE_FAULT hang, so the kill never races the end of the run) after two
                           checkpoints, one worker process is SIGKILLed by pid; Ray restarts the group from the
                           last checkpoint (max_failures 1; a restarted group runs without injected faults), the
                           result records the restart, gates pass and the curve still equals torchrun's;
                           stopping the cluster leaves no process.
Both compare with one torchrun run of the same cells (launcher torchrun, nodes 1): a convergence match across
launchers, with the runner's own curve gate.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from suite.gates.loss import curve_gate
from suite.launch.ray.cluster import LocalCluster
from tests.e2e.ray_helpers import (
    EVERY, STEPS, by_strategy, events, ray_env, ray_processes_alive, scenario, step_loss_from_checkpoint, torchrun_twin,
    worker_events,
)
from tests.e2e.run_helpers import cell_results, run_cli, run_dirs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
RTOL = 1e-5  # same mathematics on the same machine: fp32 curves agree to ~1e-6
HANG = 25  # the killed run's ranks wait here, after the checkpoints of steps 10 and 20


@pytest.fixture(scope="module")
def torchrun_curves(tmp_path_factory) -> dict[str, list[float]]:
    tmp = tmp_path_factory.mktemp("twin")
    run = run_cli(["run", str(torchrun_twin(tmp)), "--results", str(tmp / "results")], tmp, ray_env(), timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    (folder,) = run_dirs(tmp / "results", "ray-twin-torchrun")
    return {s: r["losses"] for s, r in by_strategy(cell_results(folder)).items()}


def _matches(result: dict, reference: list[float]) -> None:
    gate = curve_gate(result["losses"], reference, RTOL, 0.0, "torchrun twin")
    assert gate.passed, gate.detail


def test_ray_private_cluster(tmp_path, torchrun_curves):
    path = scenario(tmp_path, "ray-private")
    results = tmp_path / "results"
    from suite.scenario import load_cells

    ddp = next(c for c in load_cells(str(path))[1] if c.strategy == "ddp")
    run = run_cli(["run", str(path), "--results", str(results)], tmp_path,
                  ray_env(SUITE_FAULT=f"{ddp.id}:raise@3"), timeout=1500)
    assert run.returncode == 1, run.stderr[-3000:]  # one failed cell
    assert not run.alive(), f"left running: {ray_processes_alive(run.alive())}"
    assert any("raylet" in c for c in run.cmdlines.values()), "suite started no Ray nodes?"
    (folder,) = run_dirs(results, "ray-private")
    got = by_strategy(cell_results(folder))

    failed = got["ddp"]  # no retries: failed, with the rank's error, and the run went on
    assert failed["status"] == "failed" and "injected fault" in failed["error"], failed["error"]
    assert failed["extra"]["ray"]["attempts"] == 1 and failed["restarts"] == 0
    assert failed["extra"]["ray"]["started_by"] == "this cell" and failed["extra"]["ray"]["start_s"] > 0

    ok = got["zero3"]
    assert ok["status"] == "ok", ok["error"]
    assert [g["passed"] for g in ok["gates"]] == [True] * len(ok["gates"])
    ray = ok["extra"]["ray"]
    assert ray["started_by"] == "an earlier cell of this run"  # one cluster for the whole run
    nodes = {r["node_id"] for r in ok["ranks"]}
    assert len(ok["ranks"]) == 2 and len(nodes) == 2 and None not in nodes  # one rank on each node
    assert set(ray["placement"]["nodes"]) == nodes
    assert all(r["hostname"] and r["node_ip"] for r in ok["ranks"])
    for key in ("worker_group_setup_s", "teardown_s"):
        assert ray[key] > 0, key
    # one driver for the run: started (and connected) for the first cell, outside its wall; reused here
    first = failed["extra"]["ray"]["driver"]
    assert first["started_by"] == "this cell" and first["import_s"] > 0 and first["connect_s"] > 0
    assert ray["driver"] == {"started_by": "an earlier cell of this run", "pid": first["pid"], "jobs_before": 1}
    assert ray["driver_pid"] == first["pid"] and ray["driver_reused"]
    phases = ray["phases"]  # the cell's wall, phase by phase; the run's one-time costs on the first cell only
    assert phases["cluster_start"] == 0 == phases["driver_start"]
    first_phases = failed["extra"]["ray"]["phases"]
    assert first_phases["cluster_start"] > 0 and first_phases["driver_start"] > 0
    inside = sum(v for k, v in phases.items() if k not in ("cluster_start", "driver_start", "wall", "other"))
    assert 0 <= phases["wall"] - inside == pytest.approx(phases["other"])
    assert phases["checkpoint"] > 0 and phases["train"] > 0
    assert {r["extra"]["ray"]["channel"] for r in map(_rank_record, folder.glob("work/*/rank*.json"))} == {"files"}
    assert ok["overhead_s"]["train"] > 0 and ok["overhead_s"]["launch"] > 0
    _matches(ok, torchrun_curves["zero3"])

    # checkpoints: every EVERY steps, the best 2 by loss kept (Ray deletes the others), the best restorable
    losses = ok["losses"]
    scores = {s: losses[s - 1] for s in range(EVERY, STEPS + 1, EVERY)}
    best2 = sorted(scores, key=scores.get)[:2]
    kept = {c["step"]: c for c in ray["checkpoints"]}
    assert sorted(kept) == sorted(best2)
    for step, c in kept.items():
        assert c["loss"] == pytest.approx(scores[step], rel=1e-6)
    on_disk = sorted(p.name for p in Path(ray["storage"]).iterdir() if p.name.startswith("step"))
    assert len(on_disk) == 2
    assert ray["best"]["restored"] and ray["best"]["step"] == best2[0]
    inner = [s for s in kept if s < STEPS]  # a checkpoint after step s-1 predicts the recorded loss of step s
    assert inner
    for step in inner:
        again = step_loss_from_checkpoint(ok, Path(kept[step]["path"]), step)
        assert again == pytest.approx(losses[step], rel=1e-5), (step, again, losses[step])


@pytest.mark.long  # 78 s on 2 cores; the default tier kills a node under a sweep (test_sweep.py)
def test_ray_worker_killed(tmp_path, torchrun_curves):
    path = scenario(tmp_path, "ray-kill", strategy="ddp", ray={"max_failures": 1})
    results = tmp_path / "results"
    from suite.scenario import load_cells

    (cell,) = load_cells(str(path))[1]
    cluster = LocalCluster(nodes=2, cpus_per_node=2)
    killed: dict = {}

    def kill_rank1_while_held(_proc):
        runs = run_dirs(results, "ray-kill")
        if killed or not runs or not (runs[0] / "work").is_dir():
            return
        for workdir in (runs[0] / "work").iterdir():
            seen = events(workdir)
            from suite.launch.ray.rank_files import group_starts

            starts = group_starts(seen)
            saved = [e["step"] for e in seen if e["event"] == "checkpoint"]
            steps = [e["step"] for e in worker_events(workdir) if e["event"] == "step"]
            if starts and 2 * EVERY in saved and steps and steps[-1] == HANG - 1:
                pid = starts[0][1]["pid"]
                os.kill(pid, signal.SIGKILL)
                killed.update(pid=pid, at=time.time(), steps=[e["step"] for e in seen if e["event"] == "checkpoint"])

    try:
        cluster.start()
        run = run_cli(["run", str(path), "--results", str(results), "--ray-address", cluster.address], tmp_path,
                      ray_env(SUITE_FAULT=f"{cell.id}:hang@{HANG}"), timeout=1500, watch=kill_rank1_while_held)
    finally:
        cluster_pids = cluster.pids()
        left = cluster.stop()
    assert killed, "the worker was never killed"
    assert not left and not ray_processes_alive(cluster_pids), "Ray processes left after the cluster stopped"
    assert run.returncode == 0, run.stderr[-3000:]
    assert not run.alive()
    (folder,) = run_dirs(results, "ray-kill")
    (result,) = cell_results(folder).values()
    assert result["status"] == "ok", result["error"]
    assert result["restarts"] == 1
    ray = result["extra"]["ray"]
    assert ray["cluster"] == "existing" and ray["attempts"] == 2
    assert any(f["rank"] == 1 for f in ray["worker_failures"]), ray["worker_failures"]
    first, second = ray["groups"]
    assert first[1]["pid"] == killed["pid"] and killed["pid"] not in {r["pid"] for r in second}
    assert len({r["node_id"] for r in second}) == 2
    resumed = {r["extra"]["ray"]["resumed_from_step"] for r in map(_rank_record, folder.glob("work/*/rank*.json"))}
    assert resumed == {2 * EVERY}, resumed  # the latest checkpoint before the kill
    assert len(result["losses"]) == STEPS and all(g["passed"] for g in result["gates"])
    _matches(result, torchrun_curves["ddp"])  # the restored run continued exactly where the killed one was


def _rank_record(path: Path) -> dict:
    import json

    return json.loads(path.read_text())
