"""Ray Train's training function: the same `run_worker` torchrun runs, told where to report and checkpoint.

Ray Train (TorchTrainer) starts one actor per rank and, before calling `train_func`, sets RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT and creates the process group - so `run_worker` finds its identity as
under torchrun and uses the existing group (suite/worker/dist.py).  What is Ray-specific lives here only:

    start       every rank notes its node, pid and entry time (suite/launch/ray/rank_files.py: a `rank_start`
                file in the work folder, or - when some rank does not see that folder - a
                {suite_event: start} report), so the driver learns placement, pids and how many times the
                group started (restarts);
    resume      if Ray hands over a checkpoint (a restart after a failure), load it into the wrapped model
                and optimizer and continue at its step, with the loss curve so far;
    every K     after every K-th optimizer step all ranks gather a full state dict, rank 0 writes it to a
                fresh folder, and all report {step, loss, neg_loss} with it: Ray uploads it to storage in the
                background (CheckpointUploadMode.ASYNC, then deletes the local copy) and keeps the best
                `num_to_keep` by `checkpoint_score_attribute` (CheckpointConfig).  The time spent is
                recorded apart (checkpoint_save_s: writing, checkpoint_report_s: the report), never in a step;
    done        every rank writes its RankRecord as rank<R>.json in the work folder - or reports it (JSON),
                and the driver-side callback writes it on the driver's node, when ranks run on machines
                without a shared disk.  Only checkpoints are reported through Ray when the folder is shared:
                Ray Train's controller then has nothing to collect at the start and at the end.

Fault injection (SUITE_FAULT, for tests) applies to a run that starts at step 0 only, not to a group restarted
from a checkpoint.  A rank whose record says failed / oom raises instead of reporting: its peers are blocked in a collective, and
only a raised error makes Ray tear the group down (and restart it when FailureConfig allows).  `diverged` is
reported normally: every rank stops at the same step, and a restart would diverge again.
"""

from __future__ import annotations

import importlib
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from suite.launch.ray import checkpoint as ckpt
from suite.launch.ray.events import CHECKPOINT, DONE, START, RankFailed

if TYPE_CHECKING:  # annotations only: ray is imported inside the functions Ray runs, not when this loads
    from ray.train import Checkpoint

    from suite.scenario import Cell
    from suite.strategies.base import Parallel
    from suite.worker.loop import Trainer

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
        self.save_s = 0.0  # checkpoints: all of it (gathering, writing, reporting)
        self.report_s = 0.0  # of which in ray.train.report (the upload itself runs in the background)

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
        from ray.train import CheckpointUploadMode

        t0 = time.perf_counter()
        meta = ckpt.Meta(step=done, **self.trainer.state_dict(), cell_id=self.cell.id, strategy=self.cell.strategy,
                         world_size=dist.get_world_size())
        metrics = {"suite_event": CHECKPOINT, "step": done, "loss": loss, "neg_loss": -loss}
        last = self.trainer.evals[-1] if self.trainer.evals else None
        if last is not None and last.step == done:  # evaluated just before (worker/main.py): score by it
            metrics["eval_loss"] = last.loss
            if last.accuracy is not None:
                metrics["accuracy"] = last.accuracy
        # Not a TemporaryDirectory: Ray uploads the folder after report() returns and deletes it afterwards.
        folder = Path(tempfile.mkdtemp(prefix="suite-ckpt-"))
        try:
            written = ckpt.save(folder, self.par.model, self.par.optimizer, meta)
            checkpoint = ray.train.Checkpoint.from_directory(str(folder)) if written else None
            t1 = time.perf_counter()
            # unique per attempt: a restarted group may checkpoint the same step again
            name = f"step{done:06d}_{int(time.time() * 1000)}" if written else None
            ray.train.report(metrics, checkpoint=checkpoint, checkpoint_dir_name=name,
                             checkpoint_upload_mode=CheckpointUploadMode.ASYNC)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)  # Ray will not upload (and delete) it
            raise
        if not written:
            shutil.rmtree(folder, ignore_errors=True)
        self.saved.append(done)
        self.save_s += time.perf_counter() - t0
        self.report_s += time.perf_counter() - t1


def shared_workdir(workdir: Path, config: dict) -> bool:
    """Whether every rank sees the runner's work folder (its cell.json): then ranks write their own files.
    Agreed over the process group (the minimum), so all ranks take the same channel: a rank that reports
    while another does not would wait in ray.train.report's barrier forever."""
    import ray.train.torch
    import torch
    import torch.distributed as dist

    sees = not config.get("report_records") and (workdir / "cell.json").is_file()
    flag = torch.tensor([int(sees)], device=ray.train.torch.get_device())
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def train_func(config: dict) -> None:
    """The function TorchTrainer runs on every rank; config: cell (JSON), workdir, worker_module, every."""
    import ray.train

    from suite.scenario import Cell
    from suite.launch.ray import rank_files

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
    files = shared_workdir(workdir, config)
    rank = int(os.environ.get("RANK", "0"))
    attempt = rank_files.note_start(workdir, rank, facts, t_enter) if files else None
    if not files:
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
                                     "checkpoints_saved": hooks.saved, "checkpoint_save_s": hooks.save_s,
                                     "checkpoint_report_s": hooks.report_s,
                                     "channel": "files" if files else "reports"}}
    update = {"node_ip": facts["node_ip"], "node_id": facts["node_id"], "hostname": facts["hostname"], "extra": extra}
    if attempt is not None:
        update.update(restarts=attempt, extra={**extra, "restarts": attempt})
    record = record.model_copy(update=update)
    if record.status in ("failed", "oom"):
        lines = (record.error or record.status).strip().splitlines() or [record.status]
        raise RankFailed(record.model_dump_json(), f"rank {record.rank} {record.status}: {lines[-1]}")
    if files:
        rank_files.write_record(workdir, record)
    else:
        ray.train.report({"suite_event": DONE, "record": record.model_dump_json(), "t": time.time()})
