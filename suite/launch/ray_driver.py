"""One cell's Ray driver: `python -m suite.launch.ray_driver CELL_JSON WORKDIR WORKER_MODULE` (RAY_ADDRESS set).

    connect (ray.init to the run's cluster) -> place (pick `nodes` nodes) -> TorchTrainer.fit()
    -> restore the best checkpoint into a fresh model -> WORKDIR/ray_driver.json; exit 0 ok, 1 failed

A process per cell (started by suite/launch/ray.py) rather than a thread of the runner: stopping a cell on its
timeout or on Ctrl-C is then "kill the driver", and Ray itself kills a dead driver's job - the Train
controller and every worker actor - while the cluster stays up for the next cell.

Placement (`placement_strategy: auto`): `nodes` alive nodes that each hold gpus/nodes workers'
resources are chosen, and worker i gets a label selector pinning it to node i // (gpus/nodes)
(`ray.io/node-id`, a label every Ray node has).  That spreads exactly as the cell says; Ray's own strategies
(PACK, SPREAD, STRICT_SPREAD, STRICT_PACK) are used as given otherwise.

What comes back and how (Train V2's `result.metrics` is not where suite's numbers live):
- the Reporter callback runs in the Train controller, which Ray pins to this driver's node, and writes
  WORKDIR/ray_events.jsonl (group starts with each rank's node and pid, checkpoints, worker failures) and each
  rank's final RankRecord (reported through ray.train.report) as WORKDIR/rank<R>.json, with `restarts`
  (and its node_id: the runner checks placement from the records);
- ray_driver.json: timings (connect, wait for nodes, worker-group setup, teardown), placement, the kept
  checkpoints with their metrics, the restored best one, and the error if fit failed.
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
    from suite.launch.lifeline import PARENT_ENV, die_with_parent

    die_with_parent(signal.SIGKILL, PARENT_ENV)  # Ray then ends the dead driver's job (its actors)

import ray  # noqa: E402
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, UserCallback  # noqa: E402
from ray.train.torch import TorchConfig, TorchTrainer  # noqa: E402

from suite.cells import Cell  # noqa: E402
from suite.device import resolve_device as device_kind  # noqa: E402
from suite.results.schema import RankRecord  # noqa: E402
from suite.worker import ray_checkpoint, ray_entry  # noqa: E402

NODE_WAIT_S = 90.0  # nodes may still be joining a freshly started cluster
NODE_ID_LABEL = "ray.io/node-id"
# Passed to the worker actors through the training function's config (actors inherit the raylet's environment,
# not the driver's); not through a runtime_env, which would make Ray start fresh worker processes for it.
WORKER_ENV = ("PYTHONPATH", "SUITE_FAULT", "SUITE_PLUGINS")  # SUITE_PLUGINS: strategies registered outside suite


def _append(file: Path, **event) -> None:
    with open(file, "a", encoding="utf-8") as f:
        f.write(json.dumps({**event, "t": time.time()}) + "\n")


def _write_record(workdir: Path, record: RankRecord) -> None:
    tmp = workdir / f".rank{record.rank}.json.ray-tmp"
    tmp.write_text(record.model_dump_json(indent=1), encoding="utf-8")
    os.replace(tmp, workdir / f"rank{record.rank}.json")


class Reporter(UserCallback):
    """Runs in the Train controller (on the driver's node): turns ray.train.report calls into suite's files."""

    def __init__(self, workdir: str):
        self.workdir = workdir
        self.starts = 0
        self.failures_seen: set[tuple[int, int]] = set()

    def _with_restarts(self, record: RankRecord) -> RankRecord:
        """The record with how many times the group restarted before it: the typed `restarts` field, and
        the same number in extra["restarts"], where records before that field carried it (older readers)."""
        restarts = max(0, self.starts - 1)
        return record.model_copy(update={"restarts": restarts, "extra": {**record.extra, "restarts": restarts}})

    def after_report(self, run_context, metrics, checkpoint) -> None:
        workdir, event = Path(self.workdir), metrics[0].get("suite_event")
        if event == ray_entry.START:
            self.starts += 1
            ranks = [{k: m.get(k) for k in ("node_id", "node_ip", "hostname", "pid", "t")} | {"rank": i}
                     for i, m in enumerate(metrics)]
            _append(workdir / "ray_events.jsonl", event="group_start", attempt=self.starts - 1, ranks=ranks)
        elif event == ray_entry.CHECKPOINT:
            _append(workdir / "ray_events.jsonl", event="checkpoint", attempt=self.starts - 1,
                    step=metrics[0]["step"], loss=metrics[0]["loss"], path=checkpoint.path if checkpoint else None)
        elif event == ray_entry.DONE:
            for m in metrics:
                _write_record(workdir, self._with_restarts(RankRecord.model_validate_json(m["record"])))
            _append(workdir / "ray_events.jsonl", event="done", attempt=self.starts - 1)

    def after_exception(self, run_context, worker_exceptions) -> None:
        workdir = Path(self.workdir)
        for rank, exc in worker_exceptions.items():
            if (self.starts, rank) in self.failures_seen:
                continue  # the controller may poll the same failure more than once
            self.failures_seen.add((self.starts, rank))
            failed = _find_rank_failed(exc)
            if failed is not None:
                _write_record(workdir, self._with_restarts(RankRecord.model_validate_json(failed.record_json)))
            _append(workdir / "ray_events.jsonl", event="worker_failure", attempt=self.starts - 1, rank=rank,
                    error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1:] or ''}"[:500])


def _find_rank_failed(exc: BaseException | None) -> ray_entry.RankFailed | None:
    """The RankFailed inside whatever Ray wrapped it in (cause chain, RayTaskError.cause)."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, ray_entry.RankFailed):
            return exc
        exc = getattr(exc, "cause", None) or exc.__cause__ or exc.__context__
        seen += 1
    return None


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
        model.load_state_dict(ray_checkpoint.load_model_state(Path(folder)), strict=True)
        meta = ray_checkpoint.read_meta(Path(folder))
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


def main(cell_json: str, workdir_arg: str, worker_module: str) -> int:
    t_imported = time.time()
    workdir = Path(workdir_arg).resolve()
    cell = Cell.model_validate_json(Path(cell_json).read_text(encoding="utf-8"))
    settings = cell.ray
    facts: dict = {"address": os.environ.get("RAY_ADDRESS"), "driver_import_s": t_imported - T_PROCESS}
    out = workdir / "ray_driver.json"
    try:
        ray.init(address=os.environ.get("RAY_ADDRESS"), logging_level="WARNING", log_to_driver=True)
        facts["connect_s"] = time.time() - t_imported
        device = resolve_device(cell)
        use_gpu = device == "cuda"
        per_worker = dict(settings.resources_per_worker) if settings and settings.resources_per_worker else (
            {"GPU": 1.0} if use_gpu else {"CPU": 1.0})
        t0 = time.time()
        strategy, selectors, chosen = place(cell, per_worker, settings.placement_strategy if settings else "auto")
        facts.update(device=device, wait_nodes_s=time.time() - t0, resources_per_worker=per_worker,
                     placement={"requested": settings.placement_strategy if settings else "auto",
                                "ray_strategy": strategy, "nodes": chosen})
        env = {k: os.environ[k] for k in WORKER_ENV if k in os.environ}
        every = settings.checkpoint_every_steps if settings else None
        if every:
            ray_checkpoint.check_supported(cell.strategy, cell.tensor_parallel)
        storage = Path(settings.storage_path).resolve() if settings and settings.storage_path else workdir / "ray"
        trainer = TorchTrainer(
            ray_entry.train_func,
            train_loop_config={"cell": cell.model_copy(update={"device": device}).model_dump_json(),
                               "workdir": str(workdir), "worker_module": worker_module,
                               "checkpoint_every_steps": every, "cwd": os.getcwd(), "env": env},
            scaling_config=ScalingConfig(num_workers=cell.gpus, use_gpu=use_gpu, resources_per_worker=per_worker,
                                         placement_strategy=strategy, label_selector=selectors),
            torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo", timeout_s=cell.timeout_s),
            run_config=RunConfig(
                name=f"{cell.id}-{workdir.name}", storage_path=str(storage), callbacks=[Reporter(str(workdir))],
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
    facts.update(_from_events(workdir, facts.get("fit_started_t"), facts.get("fit_returned_t")))
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(facts, indent=1), encoding="utf-8")
    os.replace(tmp, out)
    return code


def _from_events(workdir: Path, fit_started: float | None, fit_returned: float | None) -> dict:
    """Restarts, placement per attempt, worker-group setup and teardown times, from the callback's events and
    the ranks' own timestamps (entered/returned the training function)."""
    events = []
    path = workdir / "ray_events.jsonl"
    if path.exists():
        events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    starts = [e for e in events if e["event"] == "group_start"]
    facts: dict = {"attempts": len(starts), "restarts": max(0, len(starts) - 1),
                   "worker_failures": [e for e in events if e["event"] == "worker_failure"],
                   "groups": [e["ranks"] for e in starts]}
    if starts and fit_started:
        facts["worker_group_setup_s"] = min(r["t"] for r in starts[0]["ranks"]) - fit_started
    returned = []
    for f in workdir.glob("rank*.json"):
        try:
            returned.append(json.loads(f.read_text(encoding="utf-8"))["extra"]["ray"]["returned_t"])
        except (KeyError, ValueError, OSError):
            continue
    if returned and fit_returned:
        facts["teardown_s"] = fit_returned - max(returned)
    return facts


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print("usage: python -m suite.launch.ray_driver CELL_JSON WORKDIR WORKER_MODULE", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
