"""`suite run --schedule pack|node` (suite/sweep/): a scenario's cells as Ray Core tasks on a loopback cluster.

- pack on 2 nodes of 1 CPU runs two cells at once, with the serial run's loss curves and gates;
- node never lets two cells share a node; pack on 2-CPU nodes does, says so in each result, and `suite
  compare` will not judge those timings; a 2-rank torchrun cell gets its 2 CPUs on one node;
- a node killed mid-sweep: its cell runs again on the other node and the result says so;
- kill -9 of `suite run`: no process of the run (cluster, tasks, torchrun, ranks) is left, by pid;
- `launcher: [torchrun, ray]` in one sweep: the 2-rank torchrun cell on one node, the Ray cell over both;
- the sweep's ledger actor lives on the driver's node (never on a node that may die).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from suite.machine.policy import busy
from suite.results.schema import CellResult
from tests.e2e.run_helpers import FAKE_WORKER, REPO, cell_results, env, run_cli, run_dirs, runlog, write

pytestmark = pytest.mark.slow
pytest.importorskip("ray")

SCENARIO = """
name: {name}
description: 1-rank cells for the sweep tests
launcher: torchrun
device: cpu
model: gpt-tiny
seq_len: 64
strategy: ddp
gpus: {gpus}
micro_batch_size: 2
global_batch_size: {gbs}
precision: fp32
steps: {steps}
warmup_steps: 2
seed: [0, 1]
optimizer: {{name: adamw, lr: 3.0e-3, weight_decay: 0.0}}
data: {{kind: synthetic}}
convergence:
  min_loss_drop: 0.05
timeout_s: 300
"""


def scenario(tmp: Path, name: str, gpus="1", gbs="[2, 4]", steps=12) -> Path:
    return write(tmp / f"{name}.yaml", SCENARIO.format(name=name, gpus=gpus, gbs=gbs, steps=steps))


def ray_env(worker: str | None = None, **extra) -> dict[str, str]:
    return {k: v for k, v in env(worker, **extra).items() if k != "RAY_ADDRESS"}


def results_of(results: Path, name: str) -> tuple[Path, dict[str, CellResult]]:
    (folder,) = run_dirs(results, name)
    return folder, {k: CellResult.model_validate(v) for k, v in cell_results(folder).items()}


def windows(folder: Path) -> dict[str, tuple[float, float]]:
    """cell-rK -> (launch start, launch end) from the runlog (cell_start) and the result (wall)."""
    starts = {f"{e['cell']}-r{e['repeat']}": e["t"] for e in runlog(folder) if e["event"] == "cell_start"}
    return {k: (t, t + CellResult.model_validate(cell_results(folder)[k]).extra["wall_s"]) for k, t in starts.items()}


def overlapping(w: dict[str, tuple[float, float]]) -> set[frozenset]:
    keys = sorted(w)
    return {frozenset((a, b)) for i, a in enumerate(keys) for b in keys[i + 1:]
            if w[a][0] < w[b][1] and w[b][0] < w[a][1]}


@pytest.mark.long  # 72-88 s; CI's tier packs in test_node_never_shares..., scripts/sweep-speedup checks the curves
def test_pack_runs_two_cells_at_once_with_the_serial_runs_curves_and_gates(tmp_path):
    path = scenario(tmp_path, "sweep-pack")
    serial = run_cli(["run", str(path), "--results", str(tmp_path / "serial")], tmp_path, ray_env(), timeout=600)
    assert serial.returncode == 0, serial.stderr
    pack = run_cli(["run", str(path), "--results", str(tmp_path / "pack"), "--schedule", "pack", "--nodes", "2",
                    "--cpus-per-node", "1"], tmp_path, ray_env(), timeout=600)
    assert pack.returncode == 0, pack.stderr
    _, base = results_of(tmp_path / "serial", "sweep-pack")
    folder, got = results_of(tmp_path / "pack", "sweep-pack")
    assert sorted(got) == sorted(base) and len(got) == 4
    for key, r in got.items():
        assert r.losses == base[key].losses, key  # the same computation, wherever it ran
        assert [(g.name, g.passed) for g in r.gates] == [(g.name, g.passed) for g in base[key].gates]
        assert base[key].schedule is None
        assert r.schedule.mode == "pack" and r.schedule.attempts == 1 and r.machine.shared_with == []
    assert len({r.schedule.node for r in got.values()}) == 2  # both nodes worked
    assert overlapping(windows(folder))  # ... at the same time
    assert "started on node" in pack.stderr


def test_node_never_shares_a_node_pack_does_and_says_so(tmp_path):
    from suite.launch.ray.cluster import LocalCluster

    path = scenario(tmp_path, "sweep-node", gpus="[1, 2]", gbs="4")  # a 2-rank torchrun cell among 1-rank ones
    with LocalCluster(nodes=2, cpus_per_node=2, env={"PYTHONPATH": str(REPO)}) as cluster:
        runs = {}
        for mode in ("node", "pack"):
            run = run_cli(["run", str(path), "--results", str(tmp_path / mode), "--schedule", mode, "--ray-address",
                           cluster.address], tmp_path, ray_env(), timeout=600)
            assert run.returncode == 0, run.stderr
            runs[mode] = results_of(tmp_path / mode, "sweep-node")
    folder, node = runs["node"]
    assert {r.cell.gpus for r in node.values()} == {1, 2} and all(r.status == "ok" for r in node.values())
    w = windows(folder)
    for pair in overlapping(w):
        a, b = sorted(pair)
        assert node[a].schedule.node != node[b].schedule.node, f"{a} and {b} overlapped on one node"
    assert all(r.machine.shared_with == [] for r in node.values())
    folder, pack = runs["pack"]
    assert all(r.status == "ok" for r in pack.values())
    shared = {k: r for k, r in pack.items() if r.machine.shared_with}
    assert shared, "4 cells on 2 nodes of 2 CPUs: pack puts two on a node"
    for key, r in shared.items():
        assert any("shared its node with" in why for why in busy(r.machine))
        for other in r.machine.shared_with:
            assert pack[other].schedule.node == r.schedule.node
    # Markdown: the reasons unwrapped (the terminal table wraps them at its width)
    cmp = run_cli(["compare", str(runs["node"][0]), str(folder), "--format", "md"], tmp_path, env(), timeout=300)
    assert "shared its node with" in cmp.stdout + cmp.stderr


def _kill_node_when_two_run(cluster, results: Path, fired: dict):
    def watch(proc: subprocess.Popen) -> None:
        if fired or len([e for e in _events(results)]) < 2:
            return
        worker = psutil.Process(cluster.procs[1].pid)  # the second node: its `ray start --block` and below
        victims = [worker, *worker.children(recursive=True)]
        for p in victims:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                continue
        fired["at"] = time.monotonic()
    return watch


def _events(results: Path) -> list[Path]:
    """Work folders whose rank 0 has finished setting up (events.jsonl holds setup_done)."""
    return [p for p in results.glob("*/*/work/*/events.jsonl") if "setup_done" in p.read_text()]


def test_a_cell_whose_node_dies_runs_again_on_the_other_node(tmp_path):
    from suite.launch.ray.cluster import LocalCluster

    path = scenario(tmp_path, "sweep-lost", gbs="2", steps=60)
    fired: dict = {}
    results = tmp_path / "results"
    with LocalCluster(nodes=2, cpus_per_node=1, env={"PYTHONPATH": str(REPO), "FAKE_STEP_S": "0.3",
                                                     "SUITE_WORKER_MODULE": FAKE_WORKER}) as cluster:
        run = run_cli(["run", str(path), "--results", str(results), "--schedule", "pack", "--ray-address",
                       cluster.address], tmp_path, ray_env(FAKE_WORKER), timeout=600,
                      watch=_kill_node_when_two_run(cluster, results, fired))
        alive = {n["NodeID"] for n in _nodes(cluster)}
    assert fired, "the sweep never ran two cells at once"
    assert run.returncode == 0, run.stderr
    folder, got = results_of(results, "sweep-lost")
    assert all(r.status == "ok" for r in got.values()) and len(got) == 2
    retried = [r for r in got.values() if r.schedule.attempts == 2]
    assert len(retried) == 1, {k: r.schedule for k, r in got.items()}
    (r,) = retried
    assert r.schedule.lost_on and r.schedule.lost_on[0] not in alive and r.schedule.node in alive
    assert any(e["event"] == "cell_lost" for e in runlog(folder))
    lost_work = sorted((folder / "work").glob(f"{r.cell_id}-r0-a*"))
    assert len(lost_work) == 2  # the lost attempt's folder is kept beside the one that gave the result
    left = [p.pid for p in psutil.process_iter() if any(w.name in " ".join(_cmdline(p)) for w in lost_work)]
    assert not left, f"processes of the lost attempt still alive: {left}"


class _Quiet:
    def note(self, text: str) -> None:
        pass


def test_the_ledger_lives_on_the_drivers_node():
    """A soft pin sent every second ledger to the other node; the node-death test then lost the whole sweep."""
    import ray

    from suite.scenario.sweep import SweepPolicy
    from suite.sweep.dispatch import Sweep
    from suite.sweep.ledger import Want

    with Sweep(SweepPolicy(schedule="pack", nodes=2, cpus_per_node=1), None, _Quiet()) as sweep:
        sweep.cluster.wait_up(2)
        here = ray.get_runtime_context().get_node_id()
        assert len(sweep.nodes()) == 2
        homes = [ray.get(sweep.open_ledger([Want("c-r0", {"CPU": 1.0})]).__ray_call__.remote(
            lambda _: ray.get_runtime_context().get_node_id())) for _ in range(6)]
    assert homes == [here] * 6


def _nodes(cluster) -> list[dict]:
    from ray._raylet import GcsClient

    info = GcsClient(address=cluster.address).get_all_node_info(timeout=5)
    return [{"NodeID": node_id.hex(), "alive": i.state == 0} for node_id, i in info.items() if i.state == 0]


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def test_kill9_of_a_sweeping_runner_leaves_no_process(tmp_path):
    path = scenario(tmp_path, "sweep-kill9", gbs="2", steps=200)
    results = tmp_path / "results"
    fired: dict = {}

    def watch(proc: subprocess.Popen) -> None:
        if not fired and len(_events(results)) >= 2:
            os.kill(proc.pid, signal.SIGKILL)
            fired["at"] = time.monotonic()

    run = run_cli(["run", str(path), "--results", str(results), "--schedule", "pack", "--nodes", "2",
                   "--cpus-per-node", "1"], tmp_path, ray_env(FAKE_WORKER, FAKE_STEP_S="0.3"), timeout=300,
                  watch=watch)
    assert fired and run.returncode == -signal.SIGKILL
    names = {pid: c for pid, c in run.cmdlines.items()}
    assert any("raylet" in c for c in names.values()) and any(FAKE_WORKER in c for c in names.values())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and run.alive():
        time.sleep(0.1)
    left = {pid: names.get(pid, "")[:120] for pid in run.alive()}
    for pid in left:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            continue
    assert not left, f"alive 30 s after the runner's SIGKILL: {left}"


@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_sigterm_stops_a_sweep_records_nothing_interrupted_and_leaves_no_process(tmp_path, sig):
    path = scenario(tmp_path, "sweep-stop", gbs="2", steps=200)
    results = tmp_path / "results"
    fired: dict = {}

    def watch(proc: subprocess.Popen) -> None:
        if not fired and len(_events(results)) >= 2:
            os.kill(proc.pid, sig)
            fired["at"] = time.monotonic()

    run = run_cli(["run", str(path), "--results", str(results), "--schedule", "pack", "--nodes", "2",
                   "--cpus-per-node", "1"], tmp_path, ray_env(FAKE_WORKER, FAKE_STEP_S="0.3"), timeout=300,
                  watch=watch)
    assert fired and run.returncode == 128 + sig, (run.returncode, run.stderr[-2000:])
    assert time.monotonic() - fired["at"] < 60
    (folder,) = run_dirs(results, "sweep-stop")
    assert cell_results(folder) == {}  # two cells were stopped mid-training: neither is a result
    events = [e["event"] for e in runlog(folder)]
    assert events.count("cell_interrupted") == 2 and events[-1] == "interrupted"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and run.alive():
        time.sleep(0.1)
    assert not run.alive(), {pid: run.cmdlines.get(pid, "")[:120] for pid in run.alive()}
    assert "--resume" in run.stderr


def test_a_2_rank_torchrun_cell_and_a_ray_cell_in_one_sweep_each_get_their_resources_and_pass(tmp_path):
    """`launcher: [torchrun, ray]`: one scenario, one sweep.  The torchrun cell's 2 ranks share one node (its
    task asked for 2 CPUs there); the Ray cell gets the whole cluster (its 2 workers on the 2 nodes).  The same
    work under both launchers gives the same loss curve."""
    from tests.e2e.ray_helpers import scenario as ray_scenario

    path = ray_scenario(tmp_path, "sweep-mixed", strategy="ddp", steps=8, launcher=["torchrun", "ray"],
                        nodes=[1, 2], exclude=[{"launcher": "torchrun", "nodes": 2}, {"launcher": "ray", "nodes": 1}],
                        convergence={"min_loss_drop": 0.01})
    results = tmp_path / "results"
    run = run_cli(["run", str(path), "--results", str(results), "--schedule", "pack", "--nodes", "2",
                   "--cpus-per-node", "2"], tmp_path, ray_env(), timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    _, got = results_of(results, "sweep-mixed")
    by = {r.launcher: r for r in got.values()}
    assert sorted(by) == ["ray", "torchrun"] and len(got) == 2
    assert all(r.status == "ok" and r.gates and all(g.passed for g in r.gates) for r in got.values())
    ray, torchrun = by["ray"], by["torchrun"]
    assert ray.axes.launcher == "ray" and torchrun.axes.launcher == "torchrun" and ray.cell_id != torchrun.cell_id
    assert ray.schedule.node == "*" and ray.schedule.mode == "pack"
    assert len({x.node_id for x in ray.ranks}) == 2  # Ray Train spread its 2 workers over the sweep's 2 nodes
    assert ray.extra["ray"]["cluster"] == "existing"  # the sweep's cluster, not a second private one
    assert torchrun.cell.gpus == 2 and len(torchrun.ranks) == 2 and torchrun.schedule.node not in (None, "*")
    assert torchrun.losses == pytest.approx(ray.losses, rel=1e-4)
