"""Ray Train's training function: the same `run_worker` torchrun runs, told where to report and checkpoint.

Ray Train (TorchTrainer) starts one actor per rank and, before calling `train_func`, sets RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT and creates the process group - so `run_worker` finds its identity as
under torchrun and uses the existing group (suite/worker/dist.py).  What is Ray-specific lives here only:

    start       every rank reports {suite_event: start, node, pid} (ray.train.report), so the driver's
                callback learns placement, pids and how many times the group started (restarts);
    resume      if Ray hands over a checkpoint (a restart after a failure), load it into the wrapped model
                and optimizer and continue at its step, with the loss curve so far;
    every K     after every K-th optimizer step all ranks gather a full state dict, rank 0 writes it to a
                temporary folder, and all report {step, loss, neg_loss} with it: Ray copies it to storage and
                keeps the best `num_to_keep` by `checkpoint_score_attribute` (CheckpointConfig);
    done        every rank reports its RankRecord (JSON) - the driver-side callback writes rank<R>.json on
                the driver's node, so records arrive even when ranks ran on machines without a shared disk.

Fault injection (SUITE_FAULT, for tests) applies to a run that starts at step 0 only, not to a group restarted
from a checkpoint.  A rank whose record says failed / oom raises instead of reporting: its peers are blocked in a collective, and
only a raised error makes Ray tear the group down (and restart it when FailureConfig allows).  `diverged` is
reported normally: every rank stops at the same step, and a restart would diverge again.
"""

from __future__ import annotations

import importlib
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from suite.worker import ray_checkpoint as ckpt

if TYPE_CHECKING:  # annotations only: ray is imported inside the functions Ray runs, not when this loads
    from ray.train import Checkpoint

    from suite.cells import Cell
    from suite.strategies.base import Parallel
    from suite.worker.loop import Trainer

START, CHECKPOINT, DONE = "start", "checkpoint", "done"  # values of the `suite_event` metric


class RankFailed(RuntimeError):
    """A rank's run failed; carries its RankRecord (JSON) to the driver's callback."""

    def __init__(self, record_json: str, summary: str):
        super().__init__(summary)
        self.record_json = record_json

    def __reduce__(self):  # pickled across processes by Ray: keep the record
        return (RankFailed, (self.record_json, str(self)))


def resolve_worker(module: str) -> Callable:
    """`run_worker` of a worker module: suite.worker -> suite.worker.main.run_worker (tests may swap in a fake)."""
    mod = importlib.import_module(module)
    if hasattr(mod, "run_worker"):
        return mod.run_worker
    return importlib.import_module(f"{module}.main").run_worker


def node_facts() -> dict:
    import ray

    return {"node_id": ray.get_runtime_context().get_node_id(), "node_ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(), "pid": os.getpid()}


class RayHooks:
    """What run_worker calls back (suite.worker.main.RunHooks): `resume(par, trainer) -> start step` and
    `after_step(step, loss)`."""

    def __init__(self, cell: Cell, every: int | None, checkpoint: Checkpoint | None):
        self.cell, self.every, self.checkpoint = cell, every, checkpoint
        self.par: Parallel | None = None
        self.trainer: Trainer | None = None
        self.resumed_from: int | None = None
        self.saved: list[int] = []
        self.save_s = 0.0

    def resume(self, par: Parallel, trainer: Trainer) -> int:
        self.par, self.trainer = par, trainer
        if self.checkpoint is None:
            return 0
        with self.checkpoint.as_directory() as folder:
            meta = ckpt.restore(Path(folder), par.model, par.optimizer)
        trainer.load_state_dict({"losses": meta.losses, "step_times_s": meta.step_times_s, "eval": meta.eval,
                                 "grad_norms": meta.grad_norms})
        self.resumed_from = meta.step
        return meta.step

    def after_step(self, step: int, loss: float) -> None:
        done = step + 1
        if not self.every or done % self.every:
            return
        import ray.train
        import torch.distributed as dist

        t0 = time.perf_counter()
        meta = ckpt.Meta(step=done, **self.trainer.state_dict(), cell_id=self.cell.id, strategy=self.cell.strategy,
                         world_size=dist.get_world_size())
        metrics = {"suite_event": CHECKPOINT, "step": done, "loss": loss, "neg_loss": -loss}
        last = self.trainer.evals[-1] if self.trainer.evals else None
        if last is not None and last.step == done:  # evaluated just before (worker/main.py): score by it
            metrics["eval_loss"] = last.loss
            if last.accuracy is not None:
                metrics["accuracy"] = last.accuracy
        with tempfile.TemporaryDirectory(prefix="suite-ckpt-") as tmp:
            written = ckpt.save(Path(tmp), self.par.model, self.par.optimizer, meta)
            checkpoint = ray.train.Checkpoint.from_directory(tmp) if written else None
            # unique per attempt: a restarted group may checkpoint the same step again
            name = f"step{done:06d}_{int(time.time() * 1000)}" if written else None
            ray.train.report(metrics, checkpoint=checkpoint, checkpoint_dir_name=name)
        self.saved.append(done)
        self.save_s += time.perf_counter() - t0


def train_func(config: dict) -> None:
    """The function TorchTrainer runs on every rank; config: cell (JSON), workdir, worker_module, every."""
    import ray.train

    from suite.cells import Cell

    t_enter = time.time()
    if os.path.isdir(config.get("cwd") or ""):
        os.chdir(config["cwd"])  # relative paths in the cell (e.g. data roots) mean what they meant to the runner
    env = config.get("env") or {}
    os.environ.update(env)  # e.g. SUITE_FAULT for the runner's fault-injection tests
    for entry in reversed((env.get("PYTHONPATH") or "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)  # a worker module outside the installed package (tests' fakes)
    cell = Cell.model_validate_json(config["cell"])
    workdir = Path(config["workdir"])
    facts = node_facts()
    ray.train.report({"suite_event": START, "t": t_enter, **facts})
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        # Injected faults (SUITE_FAULT) belong to the first pass over the steps: a group restarted from a
        # checkpoint runs without them, or a restart would replay the same fault until retries run out.
        os.environ.pop("SUITE_FAULT", None)
    hooks = RayHooks(cell, config.get("checkpoint_every_steps"), checkpoint)
    record = resolve_worker(config["worker_module"])(cell, workdir, hooks=hooks)
    extra = {**record.extra, "ray": {"pid": facts["pid"], "entered_t": t_enter,
                                     "returned_t": time.time(), "resumed_from_step": hooks.resumed_from,
                                     "checkpoints_saved": hooks.saved, "checkpoint_save_s": hooks.save_s}}
    record = record.model_copy(update={"node_ip": facts["node_ip"], "node_id": facts["node_id"],
                                       "hostname": facts["hostname"], "extra": extra})
    if record.status in ("failed", "oom"):
        lines = (record.error or record.status).strip().splitlines() or [record.status]
        raise RankFailed(record.model_dump_json(), f"rank {record.rank} {record.status}: {lines[-1]}")
    ray.train.report({"suite_event": DONE, "record": record.model_dump_json(), "t": time.time()})
