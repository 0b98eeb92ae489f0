"""Run one cell on a Ray cluster with Ray Train (`launcher: ray`); one cluster serves every cell of a run.

    cluster    RAY_ADDRESS (set by `suite run --ray-address`, or in the environment): an existing cluster;
               otherwise suite starts a private one on this machine at the first ray cell - `nodes` Ray
               nodes on loopback (suite/launch/ray_cluster.py) - reuses it for every later cell, and stops it
               when the run's process exits.  Its start-up time is recorded once, on the cell that paid it.
    cell       a driver process per cell (suite/launch/ray_driver.py: TorchTrainer.fit with the cell's
               ScalingConfig / CheckpointConfig / FailureConfig), watched like torchrun: polled, stopped at
               timeout_s or on Ctrl-C (SIGTERM, then SIGKILL), never left behind.  Ray kills the job of a dead
               driver, so the cell's worker actors go with it and the cluster stays up.
    result     the driver's ray_driver.json (timings, placement, restarts, checkpoints, restored best) goes
               into LaunchResult.extra["ray"]; the ranks' records are in the work folder as under torchrun.

Overhead, as the result shows it: the runner's `launch` (driver start to the worker's setup) holds the
driver's imports, connecting, and Ray's worker-group setup; extra.ray splits them (driver_import_s,
connect_s, wait_nodes_s, worker_group_setup_s) and adds teardown_s (the ranks' return to fit() returning)
and the cluster's own start_s (on the cell that started it).  After a restart, the failed attempts' time
falls into the runner's `teardown` (wall minus the rest); extra.ray.groups lists every attempt.

The same call as every launcher: run_cell(cell, workdir, *, timeout_s, stop, on_poll, worker_module, device).
Ray's dashboard and usage statistics are off for clusters suite starts (and RAY_USAGE_STATS_ENABLED=0 is set
for the driver in any case).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import psutil

from suite.launch import DEFAULT_WORKER, LaunchResult
from suite.launch.ray_cluster import PRIVATE_ENV, LocalCluster
from suite.launch.torchrun import GRACE_S, POLL_S, _tail

DRIVER = "suite.launch.ray_driver"
_LOCAL: LocalCluster | None = None  # the private cluster of this process's run, if suite started one
_LOCAL_LOCK = threading.Lock()


def _need_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise RuntimeError("launcher: ray needs Ray Train; install suite's ray extra: pip install 'suite[ray]'") from None


def _local_size(cell, device: str) -> tuple[int, float, int]:
    """(nodes, CPUs per node, GPUs per node) of a private cluster big enough for `cell`.  Logical CPUs are a
    scheduling count, not cores: each node gets at least this machine's core count."""
    per_node = cell.gpus // cell.nodes
    rpw = (cell.ray.resources_per_worker if cell.ray and cell.ray.resources_per_worker else None) or {}
    cpus = max(float(os.cpu_count() or 1), per_node * rpw.get("CPU", 0 if device == "cuda" else 1))
    gpus = per_node * int(rpw.get("GPU", 1)) if device == "cuda" else 0
    return cell.nodes, cpus, gpus


def shutdown_local() -> list[int]:
    """Stop the private cluster (if any); returns pids that survived (none expected)."""
    global _LOCAL
    with _LOCAL_LOCK:
        cluster, _LOCAL = _LOCAL, None
    return cluster.stop() if cluster is not None else []


def ensure_cluster(cell, device: str) -> tuple[str, dict]:
    """The address of the cluster this cell runs on, and facts about it for the result."""
    global _LOCAL
    address = os.environ.get("RAY_ADDRESS")
    if address:
        return address, {"cluster": "existing", "address": address}
    nodes, cpus, gpus = _local_size(cell, device)
    with _LOCAL_LOCK:
        current = _LOCAL
        if current is not None and current.nodes >= nodes and current.cpus >= cpus and current.gpus >= gpus:
            return current.address, {"cluster": "local", "address": current.address, "nodes": current.nodes,
                                     "start_s": None, "started_by": "an earlier cell of this run"}
        restarted = current is not None
        if restarted:
            current.stop()  # too small for this cell: a larger one replaces it
        if gpus and nodes > 1:  # nodes on one host would each number the same GPUs from 0
            raise RuntimeError("a private multi-node cluster on GPUs is not supported; start one with "
                               "`ray start` and pass --ray-address")
        _LOCAL = LocalCluster(nodes=nodes, cpus_per_node=cpus, gpus_per_node=gpus)
        _LOCAL.start()
        return _LOCAL.address, {"cluster": "local", "address": _LOCAL.address, "nodes": nodes, "cpus_per_node": cpus,
                                "gpus_per_node": gpus, "start_s": _LOCAL.started_s, "started_by": "this cell",
                                "replaced_smaller": restarted}


atexit.register(shutdown_local)


def driver_env(address: str, cluster: dict) -> dict[str, str]:
    env = {**os.environ, "RAY_ADDRESS": address, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}
    if cluster.get("cluster") == "local":
        env.update(PRIVATE_ENV)  # the private cluster runs without token authentication
    return env


def run_cell(cell, workdir: Path, *, timeout_s: float, stop: threading.Event,
             on_poll: Callable[[], None] | None = None, worker_module: str = DEFAULT_WORKER,
             device: str = "cpu", grace_s: float = GRACE_S) -> LaunchResult:
    """Run the cell's driver on the run's Ray cluster; see the module docstring."""
    workdir = Path(workdir).resolve()
    log_path = workdir / "launcher.log"
    result = LaunchResult(launcher="ray", log_path=log_path)
    try:
        _need_ray()
        address, cluster = ensure_cluster(cell, device)
    except Exception as exc:  # noqa: BLE001 - no cluster: the cell fails with the reason, the run goes on
        result.started = result.ended = time.time()
        result.error = f"ray cluster: {exc}"
        return result
    cell_json = workdir / "cell.json"
    cell_json.write_text(cell.model_dump_json(indent=1), encoding="utf-8")
    cmd = [sys.executable, "-m", DRIVER, str(cell_json), str(workdir), worker_module]
    result.extra["command"] = cmd
    with open(log_path, "wb") as log:
        result.started = time.time()
        # Its own session and process group: stopping the cell signals that group only.  (Not torchrun's
        # stop_tree: the runner's other descendants include this run's Ray cluster, which must survive.)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=driver_env(address, cluster), start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None:
            if on_poll is not None:
                on_poll()
            if stop.is_set() or time.monotonic() > deadline:
                result.interrupted = stop.is_set()
                result.timed_out = not result.interrupted
                result.extra["killed_pids"] = stop_group(proc, grace_s)
                break
            stop.wait(POLL_S)
        result.ended = time.time()
        result.returncode = proc.wait()
        if _group_pids(proc.pid):  # something the driver started outlived it: never leave it running
            result.extra["stray_killed"] = stop_group(proc, grace_s)
    if on_poll is not None:
        on_poll()
    facts = _read_json(workdir / "ray_driver.json")
    result.extra["ray"] = {**cluster, **facts}
    placement_error = _check_placement(cell, workdir) if result.returncode == 0 else None
    if placement_error:
        result.returncode, result.extra["ray"]["placement_error"] = 1, placement_error
    if result.timed_out:
        result.error = f"timeout: killed after {timeout_s:g} s (timeout_s)\n" + (_tail(log_path) or "")
    elif result.interrupted:
        result.error = "interrupted (Ctrl-C / SIGTERM)"
    elif result.returncode != 0:
        result.error = placement_error or "\n".join(filter(None, [facts.get("error"), _tail(log_path)]))
    return result


def _group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    pids = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                pids.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return sorted(pids)


def stop_group(proc: subprocess.Popen, grace_s: float) -> list[int]:
    """SIGTERM the driver's process group, SIGKILL it after `grace_s`; returns the pids it held.  Ray then
    ends the dead driver's job: its Train controller and worker actors are killed by the cluster."""
    pids = _group_pids(proc.pid)
    with contextlib.suppress(ProcessLookupError):  # the driver's group has already exited
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and (proc.poll() is None or _group_pids(proc.pid)):
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):  # it exited within the grace period
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return pids


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _check_placement(cell, workdir: Path) -> str | None:
    """The ranks must have run on exactly `nodes` distinct nodes, or the cell measured something else."""
    nodes = set()
    for path in workdir.glob("rank*.json"):
        record = _read_json(path)
        nodes.add(record.get("node_id"))
    if len(nodes) != cell.nodes or None in nodes:
        return f"placement: ranks ran on {len(nodes - {None})} distinct node(s), the cell says nodes: {cell.nodes}"
    return None
