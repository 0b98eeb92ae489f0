"""The run's Ray driver: `python -m suite.launch.ray.driver --serve LOG READY` (RAY_ADDRESS set), one per run.

    connect once (ray.init to the run's cluster), then for every job line on stdin
    {"cell": CELL_JSON, "workdir": WORKDIR, "worker_module": M, "env": {...}}:
        place (pick `nodes` nodes) -> TorchTrainer.fit() -> restore the best checkpoint into a fresh model
        -> WORKDIR/ray_driver.json (its facts and "exit_code": 0 ok, 1 failed), written last and atomically
    end of stdin: disconnect, exit 0.   (`python -m suite.launch.ray.driver CELL_JSON WORKDIR WORKER_MODULE`
    runs one job and exits with its code.)

Why one process for the run's cells rather than one per cell: importing Ray, torch and suite and connecting
cost 4-6 s on the 2-core test machine, paid once now (suite/launch/ray/launcher.py starts it with the cluster).  While
a job runs, the driver's stdout and stderr (Ray's worker output included) go to the cell's launcher.log.
Stopping a cell on its timeout or on Ctrl-C is still "kill the driver": Ray itself kills a dead driver's job
- the Train controller and every worker actor - while the cluster stays up, and the next cell gets a new
driver.  The driver dies with the runner (parent-death signal) when the runner is killed hard.

Placement (`placement_strategy: auto`): `nodes` alive nodes that each hold gpus/nodes workers'
resources are chosen, and worker i gets a label selector pinning it to node i // (gpus/nodes)
(`ray.io/node-id`, a label every Ray node has).  That spreads exactly as the cell says; Ray's own strategies
(PACK, SPREAD, STRICT_SPREAD, STRICT_PACK) are used as given otherwise.

What comes back and how (Train V2's `result.metrics` is not where suite's numbers live): the ranks' records
and the group's starts as files in WORKDIR (suite/launch/ray/rank_files.py: written by the ranks themselves where
they see WORKDIR, else reported and written by the Reporter callback in the Train controller), checkpoints
and worker failures through the Reporter; ray_driver.json: the phases (connect, wait for nodes, worker-group
start, shutdown), placement, the kept checkpoints with their metrics, the restored best one, the error if fit
failed.

Ray Train's controller polls its workers every RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (2 s by default); a group's
end is only noticed at the next poll, so the driver sets it to HEALTH_CHECK_S unless the user set it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

T_PROCESS = time.time()  # before the heavy imports: the driver's own start-up is part of the overhead

if __name__ == "__main__":  # before Ray's seconds of importing: a runner killed hard takes its driver along
    from suite.lifeline import PARENT_ENV, die_with_parent

    die_with_parent(signal.SIGKILL, PARENT_ENV)  # Ray then ends the dead driver's job (its actors)

import ray  # noqa: E402
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig  # noqa: E402
from ray.train.torch import TorchConfig, TorchTrainer  # noqa: E402

from suite.device import resolve_device as device_kind  # noqa: E402
from suite.launch.ray import checkpoint as ckpt, rank_files, train_fn  # noqa: E402
from suite.launch.ray.session import ANSWER  # noqa: E402
from suite.results.store import write_atomic  # noqa: E402
from suite.scenario import Cell  # noqa: E402

NODE_WAIT_S = 90.0  # nodes may still be joining a freshly started cluster
NODE_ID_LABEL = "ray.io/node-id"
# Passed to the worker actors through the training function's config (actors inherit the raylet's environment,
# not the driver's); not through a runtime_env, which would make Ray start fresh worker processes for it.
WORKER_ENV = ("PYTHONPATH", "SUITE_FAULT", "SUITE_PLUGINS")  # SUITE_PLUGINS: strategies registered outside suite
HEALTH_CHECK_S = "0.25"  # Ray Train's controller poll interval (default 2 s): see the module docstring
REPORT_RECORDS = "SUITE_RAY_REPORT_RECORDS"  # "1": records through ray.train.report even on a shared disk (tests)


def resolve_device(cell: Cell) -> str:
    """suite.device's rule, with the cluster's GPUs as the count (asked only when it matters)."""
    gpus = ray.cluster_resources().get("GPU", 0) if cell.device == "auto" else 0
    return device_kind(cell.device, int(gpus))


def place(cell: Cell, per_worker: dict[str, float], strategy: str) -> tuple[str, list[dict] | None, list[str]]:
    """(Ray placement strategy, per-worker label selectors or None, node ids chosen) - or RuntimeError."""
    per_node = cell.gpus // cell.nodes
    need = {k: v * (per_node if strategy == "auto" else 1) for k, v in per_worker.items()}
    wanted = cell.nodes if strategy == "auto" else (cell.gpus if strategy == "STRICT_SPREAD" else 1)
    deadline = time.monotonic() + NODE_WAIT_S
    while True:
        fit = sorted(n["NodeID"] for n in ray.nodes()
                     if n["Alive"] and all(n["Resources"].get(k, 0) >= v for k, v in need.items()))
        if len(fit) >= wanted:
            break
        if time.monotonic() > deadline:
            alive = sum(n["Alive"] for n in ray.nodes())
            raise RuntimeError(f"placement {strategy}: the cell needs {wanted} node(s) with {need} each "
                               f"(gpus {cell.gpus} over nodes {cell.nodes}); the cluster has {len(fit)} such of "
                               f"{alive} alive node(s) after {NODE_WAIT_S:g} s")
        time.sleep(1.0)
    if strategy != "auto":
        return strategy, None, []
    chosen = fit[:cell.nodes]
    return "PACK", label_selectors(cell, chosen), chosen


def label_selectors(cell: Cell, node_ids: list[str]) -> list[dict[str, str]]:
    """Worker i -> node i // (gpus / nodes): consecutive ranks share a node, as torchrun's would."""
    per_node = cell.gpus // cell.nodes
    return [{NODE_ID_LABEL: node_ids[i // per_node]} for i in range(cell.gpus)]


def _checkpoint_facts(checkpoint: Checkpoint, metrics: dict) -> dict:
    keep = {k: metrics.get(k) for k in ("step", "loss", "neg_loss", "accuracy", "eval_loss")}
    return {"path": checkpoint.path, **keep}


def restore_best(cell: Cell, checkpoint: Checkpoint) -> dict:
    """Load the checkpoint's weights into a freshly built plain model, strictly (what a user would do)."""
    from suite.models.build import build_model

    t0 = time.perf_counter()
    with checkpoint.as_directory() as folder:
        model = build_model(cell.model, cell.seed)
        model.load_state_dict(ckpt.load_model_state(Path(folder)), strict=True)
        meta = ckpt.read_meta(Path(folder))
    out = {"path": checkpoint.path, "step": meta.step, "loss": meta.losses[-1] if meta.losses else None,
           "restored": True, "restore_s": time.perf_counter() - t0,
           "parameters": sum(p.numel() for p in model.parameters())}
    stored = next((p for p in meta.eval if p.get("step") == meta.step), None)
    if cell.eval is not None and stored is not None:  # the restored weights, evaluated again here (1 process)
        from suite.data import build_data
        from suite.worker.evaluate import held_out

        import torch

        loss, accuracy = held_out(model, build_data(cell, 0, 1), cell, torch.device("cpu"))
        out["eval"] = {"stored": {"eval_loss": stored["loss"], "accuracy": stored.get("accuracy")},
                       "remeasured": {"eval_loss": loss, "accuracy": accuracy}}
    return out


def connect() -> float:
    """ray.init to RAY_ADDRESS, once per driver process; seconds it took (0 when connected already)."""
    if ray.is_initialized():
        return 0.0
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", HEALTH_CHECK_S)  # read by TorchTrainer: propagated
    t0 = time.time()
    ray.init(address=os.environ.get("RAY_ADDRESS"), logging_level="WARNING", log_to_driver=True)
    return time.time() - t0


def run_job(cell_json: str, workdir_arg: str, worker_module: str, env: dict[str, str] | None = None,
            driver: dict | None = None) -> int:
    """One cell's fit; writes WORKDIR/ray_driver.json last.  `env`: the job's additions to the environment the
    ranks see (WORKER_ENV keys); `driver`: facts about this driver process for the result."""
    t_job = time.time()
    workdir = Path(workdir_arg).resolve()
    facts: dict = {"address": os.environ.get("RAY_ADDRESS"), **(driver or {})}
    out = workdir / ANSWER
    try:
        cell = Cell.model_validate_json(Path(cell_json).read_text(encoding="utf-8"))
        settings = cell.ray
        facts["connect_s"] = connect()
        device = resolve_device(cell)
        use_gpu = device == "cuda"
        per_worker = dict(settings.resources_per_worker) if settings and settings.resources_per_worker else (
            {"GPU": 1.0} if use_gpu else {"CPU": 1.0})
        t0 = time.time()
        strategy, selectors, chosen = place(cell, per_worker, settings.placement_strategy if settings else "auto")
        facts.update(device=device, wait_nodes_s=time.time() - t0, resources_per_worker=per_worker,
                     placement={"requested": settings.placement_strategy if settings else "auto",
                                "ray_strategy": strategy, "nodes": chosen})
        merged = {**os.environ, **(env or {})}
        env = {k: merged[k] for k in WORKER_ENV if k in merged}
        every = settings.checkpoint_every_steps if settings else None
        if every:
            ckpt.check_supported(cell.strategy, cell.tensor_parallel, cell.pipeline_parallel)
        storage = Path(settings.storage_path).resolve() if settings and settings.storage_path else workdir / "ray"
        trainer = TorchTrainer(
            train_fn.train_func,
            train_loop_config={"cell": cell.model_copy(update={"device": device}).model_dump_json(),
                               "workdir": str(workdir), "worker_module": worker_module,
                               "checkpoint_every_steps": every, "cwd": os.getcwd(), "env": env,
                               "report_records": merged.get(REPORT_RECORDS) == "1"},
            scaling_config=ScalingConfig(num_workers=cell.gpus, use_gpu=use_gpu, resources_per_worker=per_worker,
                                         placement_strategy=strategy, label_selector=selectors),
            torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo", timeout_s=cell.timeout_s),
            run_config=RunConfig(
                name=f"{cell.id}-{workdir.name}", storage_path=str(storage),
                callbacks=[rank_files.Reporter(str(workdir))],
                checkpoint_config=CheckpointConfig(
                    num_to_keep=settings.num_to_keep if settings else None,
                    checkpoint_score_attribute=settings.checkpoint_score_attribute if settings else None,
                    checkpoint_score_order=settings.checkpoint_score_order if settings else "max"),
                failure_config=FailureConfig(max_failures=settings.max_failures if settings else 0)),
        )
        facts["fit_started_t"] = time.time()
        result = trainer.fit()
        facts["fit_returned_t"] = time.time()
        facts["checkpoints"] = [_checkpoint_facts(c, m) for c, m in (result.best_checkpoints or [])]
        facts["storage"] = result.path
        if settings and settings.restore_best and result.best_checkpoints:
            attr = settings.checkpoint_score_attribute
            best = (result.get_best_checkpoint(attr, settings.checkpoint_score_order) if attr
                    else result.checkpoint)
            facts["best"] = restore_best(cell, best)
        code = 0
    except Exception as exc:  # noqa: BLE001 - any failure of the launch is the cell's failure; recorded below
        facts["fit_returned_t"] = facts.get("fit_returned_t") or time.time()
        facts["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()[-4000:]
        print(traceback.format_exc(), file=sys.stderr, flush=True)
        code = 1
    try:
        facts.update(rank_files.from_events(workdir, facts.get("fit_started_t"), facts.get("fit_returned_t")))
    except (OSError, ValueError, KeyError) as exc:  # a damaged event file: the cell's facts say so, the driver goes on
        facts["events_error"] = f"{type(exc).__name__}: {exc}"
    facts.update(exit_code=code, job_s=time.time() - t_job, answered_t=time.time())
    write_atomic(out, json.dumps(facts, indent=1), overwrite=True)
    return code


def serve(log_path: str, ready_path: str) -> int:
    """Connect, say so in `ready_path` (atomically), then run job lines from stdin until it closes."""
    t_imported = time.time()
    connect_s = connect()
    ready = {"pid": os.getpid(), "import_s": t_imported - T_PROCESS, "connect_s": connect_s}
    write_atomic(Path(ready_path), json.dumps(ready))
    driver = {"driver_pid": os.getpid()}
    jobs = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        _redirect(str(Path(job["workdir"]) / "launcher.log"))  # this cell's log while it runs
        run_job(job["cell"], job["workdir"], job["worker_module"], job.get("env"),
                driver={**driver, "driver_jobs_before": jobs, "driver_reused": jobs > 0})
        jobs += 1
        _redirect(log_path)
    if ray.is_initialized():
        ray.shutdown()
    return 0


def _redirect(path: str) -> None:
    """The driver's fds 1 and 2 (Python's printing and Ray's worker-log printing alike) into `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        sys.exit(serve(sys.argv[2], sys.argv[3]))
    if len(sys.argv) != 4:
        print("usage: python -m suite.launch.ray.driver (--serve LOG READY | CELL_JSON WORKDIR WORKER_MODULE)",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(run_job(*sys.argv[1:], driver={"driver_import_s": time.time() - T_PROCESS}))
