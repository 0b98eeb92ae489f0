"""Run one cell on a Ray cluster with Ray Train (`launcher: ray`); one cluster serves every cell of a run.

    cluster    the request's ray_address (`suite run --ray-address`), else RAY_ADDRESS if the user set it:
               an existing cluster; otherwise suite starts a private one on this machine at the first ray
               cell - `nodes` Ray nodes on loopback (suite/launch/ray_cluster.py) - reuses it for every later
               cell, and stops it when the run's process exits.  Its start-up time is recorded once, on the
               cell that paid it.
    cell       a driver process per cell (suite/launch/ray_driver.py: TorchTrainer.fit with the cell's
               ScalingConfig / CheckpointConfig / FailureConfig), supervised like torchrun
               (suite/launch/supervise.py): polled, stopped at timeout_s or on Ctrl-C (SIGTERM, then SIGKILL),
               never left behind.  Ray kills the job of a dead driver, so the cell's worker actors go with it
               and the cluster stays up.  When the runner itself is killed hard, the driver and a private
               cluster die with it (parent-death signals, suite/launch/lifeline.py).
    result     the driver's ray_driver.json (timings, placement, restarts, checkpoints, restored best) goes
               into LaunchResult.extra["ray"]; the ranks' records are in the work folder as under torchrun
               (with their node ids: the runner checks that they ran on `nodes` distinct nodes).

Overhead, as the result shows it: the runner's `launch` (driver start to the worker's setup) holds the
driver's imports, connecting, and Ray's worker-group setup; extra.ray splits them (driver_import_s,
connect_s, wait_nodes_s, worker_group_setup_s) and adds teardown_s (the ranks' return to fit() returning)
and the cluster's own start_s (on the cell that started it).  After a restart, the failed attempts' time
falls into the runner's `teardown` (wall minus the rest); extra.ray.groups lists every attempt.

The same call as every launcher: run_cell(request, *, stop, on_poll, grace_s).  The driver reads the cell
from the request's payload (the runner's cell.json) and gets the cluster's address as RAY_ADDRESS, its
interface.  Ray's dashboard and usage statistics are off for clusters suite starts (and
RAY_USAGE_STATS_ENABLED=0 is set for the driver in any case).
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

from suite.launch import LaunchRequest, LaunchResult, lifeline
from suite.launch.ray_cluster import PRIVATE_ENV, LocalCluster
from suite.launch.supervise import GRACE_S, outcome_error, supervise

DRIVER = "suite.launch.ray_driver"
_LOCAL: LocalCluster | None = None  # the private cluster of this process's run, if suite started one
_LOCAL_LOCK = threading.Lock()


def _need_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise RuntimeError("launcher: ray needs Ray Train; install suite's ray extra: pip install 'suite[ray]'") from None


def _local_size(request: LaunchRequest) -> tuple[int, float, int]:
    """(nodes, CPUs per node, GPUs per node) of a private cluster big enough for the request.  Logical CPUs
    are a scheduling count, not cores: each node gets at least this machine's core count."""
    per_node = request.gpus // request.nodes
    rpw = request.resources_per_worker or {}
    cuda = request.device == "cuda"
    cpus = max(float(os.cpu_count() or 1), per_node * rpw.get("CPU", 0 if cuda else 1))
    gpus = per_node * int(rpw.get("GPU", 1)) if cuda else 0
    return request.nodes, cpus, gpus


def shutdown_local() -> list[int]:
    """Stop the private cluster (if any); returns pids that survived (none expected)."""
    global _LOCAL
    with _LOCAL_LOCK:
        cluster, _LOCAL = _LOCAL, None
    return cluster.stop() if cluster is not None else []


def ensure_cluster(request: LaunchRequest, address: str | None = None) -> tuple[str, dict]:
    """The address of the cluster this request runs on, and facts about it for the result.

    `address`: an existing cluster (the runner passes --ray-address); without one, RAY_ADDRESS where the
    user set it, else the run's private cluster, started (or enlarged) to fit the request."""
    global _LOCAL
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        return address, {"cluster": "existing", "address": address}
    nodes, cpus, gpus = _local_size(request)
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


class GroupHandle:
    """The driver's process group (supervise.Handle).  Not torchrun's process tree: the runner's other
    descendants include this run's Ray cluster, which must survive the cell."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc

    def poll(self) -> int | None:
        return self.proc.poll()

    def running(self) -> bool:
        return self.proc.poll() is None or bool(_group_pids(self.proc.pid))

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # the whole group has exited already
            os.killpg(self.proc.pid, sig)

    def terminate(self) -> list[int]:
        """SIGTERM the group; Ray then ends the dead driver's job (its Train controller and worker actors)."""
        pids = _group_pids(self.proc.pid)
        self._signal(signal.SIGTERM)
        return pids

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def wait(self) -> int | None:
        return self.proc.wait()


def run_cell(request: LaunchRequest, *, stop: threading.Event, on_poll: Callable[[], None] | None = None,
             grace_s: float = GRACE_S) -> LaunchResult:
    """Run the cell's driver on the run's Ray cluster; see the module docstring."""
    workdir = Path(request.workdir).resolve()
    log_path = workdir / "launcher.log"
    result = LaunchResult(launcher="ray", log_path=log_path)
    try:
        _need_ray()
        address, cluster = ensure_cluster(request, request.ray_address)
    except Exception as exc:  # noqa: BLE001 - no cluster: the cell fails with the reason, the run goes on
        result.started = result.ended = time.time()
        result.error = f"ray cluster: {exc}"
        return result
    cmd = [sys.executable, "-m", DRIVER, str(Path(request.payload).resolve()), str(workdir), request.worker_module]
    result.extra["command"] = cmd
    with open(log_path, "wb") as log:
        result.started = time.time()
        # Its own session and process group: stopping the cell signals that group only.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**driver_env(address, cluster), **request.env,
                                     lifeline.PARENT_ENV: str(os.getpid())},  # the driver dies with us
                                start_new_session=True)
        result.take(supervise(GroupHandle(proc), timeout_s=request.timeout_s, stop=stop, on_poll=on_poll,
                              grace_s=grace_s))
    facts = _read_json(workdir / "ray_driver.json")
    result.extra["ray"] = {**cluster, **facts}
    result.error = outcome_error(result, request.timeout_s, log_path, detail=facts.get("error"))
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


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
