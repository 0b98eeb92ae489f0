"""Run one cell on a Ray cluster with Ray Train (`launcher: ray`); one cluster and one driver serve every cell.

    cluster    the request's ray_address (`suite run --ray-address`), else RAY_ADDRESS if the user set it:
               an existing cluster; otherwise suite starts a private one on this machine at the first ray
               cell - `nodes` Ray nodes on loopback (suite/launch/ray/cluster.py) - reuses it for every later
               cell, and stops it when the run's process exits.
    driver     one `suite.launch.ray.driver --serve` process per run (suite/launch/ray/session.py), started and connected
               at the first ray cell and given every later one as a job: TorchTrainer.fit with the cell's
               ScalingConfig / CheckpointConfig / FailureConfig.  A job is supervised like torchrun
               (suite/launch/supervise.py): polled, stopped at timeout_s or on Ctrl-C by stopping the driver
               (SIGTERM, then SIGKILL), never left behind; Ray kills the job of a dead driver, so the cell's
               worker actors go with it, the cluster stays up and the next cell gets a fresh driver.  When the
               runner itself is killed hard, the driver and a private cluster die with it (lifeline.py).
    result     the driver's ray_driver.json goes into LaunchResult.extra["ray"]; the ranks' records are in the
               work folder as under torchrun (with their node ids: the runner checks that they ran on
               `nodes` distinct nodes).

What a Ray cell costs, and where (extra.ray): the run's one-time costs - starting the private cluster
(`start_s`) and the driver (`driver.start_s`: imports and ray.init) - are paid before the first cell's clock
starts and recorded on that cell only (`started_by: this cell`).  The cell's own wall time then holds, in
order: waiting for nodes (wait_nodes_s), Ray's worker-group start up to the training function
(worker_group_setup_s: controller and worker actors, their imports, the process group), suite's setup and
training (the runner's `setup` / `train`; checkpoints apart in `checkpoint_s`), Ray's shutdown of the group
(teardown_s: the last rank's return to fit() returning), restoring the best checkpoint, and the answer's way
back to the runner.  `phases` lists them under one set of names (session.phases), and the report
shows them beside the torchrun cell of the same work.

The same call as every launcher: run_cell(request, *, stop, on_poll, grace_s).  Ray's dashboard and usage
statistics are off for clusters suite starts (and RAY_USAGE_STATS_ENABLED=0 is set for the driver in any case).
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from pathlib import Path
from typing import Callable

from suite.launch import LaunchRequest, LaunchResult
from suite.launch.ray.cluster import PRIVATE_ENV, LocalCluster
from suite.launch.ray.session import Driver, Interrupted, phases, read_json
from suite.launch.supervise import GRACE_S, outcome_error, supervise

_LOCAL: LocalCluster | None = None  # the private cluster of this process's run, if suite started one
_DRIVER: Driver | None = None  # the run's driver process (session.Driver)
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
    """Stop the run's driver, then the private cluster (if any); returns pids that survived (none expected)."""
    global _LOCAL, _DRIVER
    with _LOCAL_LOCK:
        cluster, _LOCAL = _LOCAL, None
        driver, _DRIVER = _DRIVER, None
    left = driver.stop() if driver is not None else []
    return left + (cluster.stop() if cluster is not None else [])


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
            if _DRIVER is not None:
                _DRIVER.stop()  # connected to the cluster that goes away
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


def ensure_driver(address: str, cluster: dict, log_dir: Path,
                  stop: threading.Event | None = None) -> tuple[Driver, dict]:
    """The run's driver for `address`, started (and connected) unless a usable one runs; facts about it."""
    global _DRIVER
    with _LOCAL_LOCK:
        if _DRIVER is not None and _DRIVER.usable(address):
            return _DRIVER, {"started_by": "an earlier cell of this run", "pid": _DRIVER.proc.pid,
                             "jobs_before": _DRIVER.jobs}
        if _DRIVER is not None:
            _DRIVER.stop()
        _DRIVER = Driver(address, driver_env(address, cluster), log_dir)
        return _DRIVER, {"started_by": "this cell", **_DRIVER.start(stop), "jobs_before": 0}


def run_cell(request: LaunchRequest, *, stop: threading.Event, on_poll: Callable[[], None] | None = None,
             grace_s: float = GRACE_S) -> LaunchResult:
    """Run the cell as a job of the run's Ray driver; see the module docstring."""
    workdir = Path(request.workdir).resolve()
    log_path = workdir / "launcher.log"
    result = LaunchResult(launcher="ray", log_path=log_path)
    try:
        _need_ray()
        address, cluster = ensure_cluster(request, request.ray_address)
        driver, driver_facts = ensure_driver(address, cluster, workdir.parent, stop)
    except Exception as exc:  # noqa: BLE001 - no cluster or driver: the cell fails with the reason, the run goes on
        result.started = result.ended = time.time()
        result.interrupted = isinstance(exc, Interrupted)
        result.error = str(exc) if result.interrupted else f"ray cluster: {exc}"
        return result
    job = {"cell": str(Path(request.payload).resolve()), "workdir": str(workdir),
           "worker_module": request.worker_module, "env": dict(request.env)}
    result.extra["command"] = [*driver.proc.args, "<", json.dumps(job)]
    log_path.touch()
    result.started = time.time()
    try:
        handle = driver.submit(job, workdir)
    except RuntimeError as exc:
        result.ended = time.time()
        result.error = f"ray driver: {exc}"
        return result
    result.take(supervise(handle, timeout_s=request.timeout_s, stop=stop, on_poll=on_poll, grace_s=grace_s))
    facts = read_json(handle.answer)
    result.extra["ray"] = {**cluster, **facts, "driver": driver_facts,
                           "phases": phases(facts, cluster, driver_facts, workdir, result.ended - result.started)}
    result.error = outcome_error(result, request.timeout_s, log_path, detail=facts.get("error"))
    return result
