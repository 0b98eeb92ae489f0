"""What a Ray cell costs, measured beside Ray Train itself, and that it leaves nothing behind.

test_yardstick_and_suite_cell_on_one_cluster   on one 2-node loopback cluster: the bare TorchTrainer fit of a
        cell's training work (suite/launch/ray/bare.py, what a user's own script would be) and `suite run
        --ray-address` of the same cell train the same loss curve (the yardstick measures the same work); the
        suite cell's phases add up to its wall; both times are printed (the ratio is a measurement -
        scripts/ray-overhead - never an assertion on a 2-core machine's clock).
test_ctrl_c_and_kill9_leave_no_ray_process     `suite run` on its private cluster, interrupted (SIGINT, as
        Ctrl-C) or killed (SIGKILL) while a cell's ranks train: every process the run ever had - the driver,
        the Ray nodes, Train's controller and worker actors - is gone afterwards, checked by pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import pytest

from suite.gates.loss import curve_gate
from suite.launch.ray.cluster import LocalCluster
from suite.scenario import load_cells
from tests.e2e.ray_helpers import ray_env, scenario, worker_events
from tests.e2e.run_helpers import cell_results, run_cli, run_dirs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
pytest.importorskip("ray")
GONE_LIMIT_S = 60.0  # a hang guard on a loaded 2-core machine, not a speed claim (the time taken is printed)


def _plain(tmp, name: str, **changes):
    """The shipped CPU scenario's DDP cell, 16 steps, without checkpoints."""
    no_checkpoints = {"placement_strategy": "auto", "checkpoint_every_steps": None, "num_to_keep": None,
                      "checkpoint_score_attribute": None}
    return scenario(tmp, name, strategy="ddp", steps=16, ray=no_checkpoints, **changes)


@pytest.mark.long  # a measurement (suite's Ray cell against a bare TorchTrainer fit): 95 s on 2 cores
def test_yardstick_and_suite_cell_on_one_cluster(tmp_path):
    from suite.launch.ray.bare import fits_in_a_driver

    path = _plain(tmp_path, "ray-yardstick")
    (cell,) = load_cells(str(path))[1]
    with LocalCluster(nodes=2, cpus_per_node=2) as cluster:
        (bare,) = fits_in_a_driver(cluster.address, path, cell.id, tmp_path / "bare", 1, ray_env())
        run = run_cli(["run", str(path), "--results", str(tmp_path / "results"), "--ray-address", cluster.address],
                      tmp_path, ray_env(), timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
    (folder,) = run_dirs(tmp_path / "results", "ray-yardstick")
    (result,) = cell_results(folder).values()
    gate = curve_gate(result["losses"], bare["losses"], 1e-5, 0.0, "bare TorchTrainer fit")
    assert gate.passed, gate.detail  # the yardstick trains exactly the cell's work
    assert len(bare["step_times_s"]) == cell.steps and bare["fit_s"] > bare["train_s"] > 0
    phases = result["extra"]["ray"]["phases"]
    inside = sum(v for k, v in phases.items() if k not in ("cluster_start", "driver_start", "wall", "other"))
    assert phases["other"] == pytest.approx(phases["wall"] - inside) and phases["other"] >= 0
    assert phases["checkpoint"] == 0 and phases["cluster_start"] == 0  # an existing cluster; no checkpoints
    print(f"bare fit {bare['fit_s']:.2f} s, suite cell {phases['wall']:.2f} s "
          f"(ratio {phases['wall'] / bare['fit_s']:.2f}); phases {phases}")


# `long` (about 60 s each on 2 cores): CI's tier kills a runner and its private cluster in test_ray_kill9.py and
# test_sweep.py (kill -9) and stops a sweep with SIGTERM there; this runs a Ray Train cell under each signal
@pytest.mark.long
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill9"])
def test_ctrl_c_and_kill9_leave_no_ray_process(tmp_path, sig):
    path = _plain(tmp_path, "ray-stop")
    (cell,) = load_cells(str(path))[1]
    results = tmp_path / "results"
    fired: dict = {}

    def stop_when_training(proc: subprocess.Popen) -> None:
        work = [w for r in run_dirs(results, "ray-stop") for w in (r / "work").glob("*") if w.is_dir()]
        if "t" not in fired and work and any(e["event"] == "step" for e in worker_events(work[0])):
            os.kill(proc.pid, sig)
            fired["t"] = time.monotonic()

    run = run_cli(["run", str(path), "--results", str(results)], tmp_path,
                  ray_env(SUITE_FAULT=f"{cell.id}:hang@8"), timeout=600, watch=stop_when_training)
    assert "t" in fired, "the cell never trained"
    assert run.returncode == (130 if sig == signal.SIGINT else -signal.SIGKILL), run.stderr[-3000:]
    kinds = " ".join(run.cmdlines.values())
    assert "raylet" in kinds and "suite.launch.ray.driver" in kinds and "ray::RayTrainWorker" in kinds, kinds[:2000]
    while run.alive() and time.monotonic() - fired["t"] < GONE_LIMIT_S:
        time.sleep(0.1)
    left = {pid: run.cmdlines.get(pid, "")[:100] for pid in run.alive()}
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)  # do not leave them to the next test (and fail below)
    assert not left, f"alive {GONE_LIMIT_S:g} s after {sig.name}: {left}"
    print(f"{len(run.seen)} processes of the run gone {time.monotonic() - fired['t']:.1f} s after {sig.name}")
