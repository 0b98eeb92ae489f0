"""run_worker(cell, out_dir): everything one rank does for one cell, and the record it leaves behind.

    setup    process group -> model (from the seed, on the device) -> parallelize -> data     (each timed)
    train    cell.steps timed optimizer steps (loop.py); bytes counted after the first; CUDA peaks reset
             after the warm-up steps; held-out evaluations (evaluate.py, scenario `eval:`) between steps
    peaks    optionally 2 more steps under MemTracker (measure_peaks: true), never inside the timed loop
    record   OUT_DIR/rank<R>.json (atomic), whatever happened; rank 0 also appends OUT_DIR/events.jsonl

Statuses and exit codes (`python -m suite.worker`): ok 0, diverged 3 (non-finite global loss: all ranks
stop at the same step), oom 4 (torch.OutOfMemoryError, or the CPU allocator failing), failed 1 (anything
else; the traceback's tail goes into `error`).  Imports happen before the setup clock starts, so setup
times measure work, not module loading (the launcher's overhead covers that).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from suite.compat import require_torch
from suite.data import build_data
from suite.models.build import build_model
from suite.results.schema import CudaMemory, PeakMemory, RankRecord, SetupTimes, TensorBytes
from suite.scenario import Cell
from suite.strategies import get_strategy
from suite.strategies.base import Parallel
from suite.worker import dist as wdist, measure
from suite.worker.evaluate import evaluate
from suite.worker.faults import Faults
from suite.worker.loop import Diverged, Trainer
from suite.worker.parallelize import data_replica, parallelize

EXIT_CODES = {"ok": 0, "failed": 1, "diverged": 3, "oom": 4}
ERROR_TAIL = 4000  # characters of traceback kept in the record
PEAK_STEPS = 2


class RunHooks(Protocol):
    """What a launcher may hook into a run (Ray Train's entry: suite/launch/ray/train_fn.py RayHooks)."""

    def resume(self, par: Parallel, trainer: Trainer) -> int:
        """Load a checkpoint into `par` and `trainer` and return the step to continue at (0: fresh start)."""

    def after_step(self, step: int, loss: float) -> None:
        """Called on every rank after each optimizer step, outside its timer (e.g. to checkpoint)."""


@dataclass
class _Outcome:
    """What the run produced so far; whatever is filled in when it stops goes into the record."""

    status: str = "failed"
    error: str | None = None
    rank: wdist.Rank | None = None
    trainer: Trainer | None = None
    tensor_bytes: TensorBytes | None = None
    setup: SetupTimes | None = None
    train_s: float = 0.0
    cuda: CudaMemory | None = None
    peaks: PeakMemory | None = None
    events: measure.EventLog | None = None
    host: tuple[str, str | None] = ("", None)  # (hostname, ip)
    extra: dict[str, Any] = field(default_factory=dict)


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "DefaultCPUAllocator: can't allocate memory" in str(exc)


def _tokens_per_step(cell: Cell) -> int:
    """Tokens per optimizer step over all ranks; for vit the record counts samples (images), as documented."""
    return cell.global_batch_size * (1 if cell.model.inputs == "images" else cell.seq_len)


def run_worker(cell: Cell, out_dir: Path, hooks: RunHooks | None = None) -> RankRecord:
    """Train `cell` as this rank (identity from torchrun's environment) and write OUT_DIR/rank<R>.json.

    `hooks` (optional; Ray Train's entry passes one, see RunHooks): `resume(par, trainer) -> start_step`
    (load a checkpoint, restore the trainer's state so far; 0 = fresh start) and `after_step(step, loss)`."""
    out_dir = Path(out_dir)
    torch.set_num_threads(cell.threads_per_rank)
    out = _Outcome(host=measure.host_identity())
    # rank 0 by the environment, so even a failing process-group setup leaves its "done" line
    out.events = measure.EventLog(out_dir / "events.jsonl", enabled=wdist.env_int("RANK", 0) == 0)
    try:
        get_strategy(cell.strategy)  # import the strategy's module now, outside the setup clock
        _train(cell, out_dir, out, hooks)
        out.status = "ok"
    except Diverged as exc:
        out.status, out.error = "diverged", str(exc)
    except BaseException as exc:  # every failure is recorded; interrupts are re-raised after recording
        out.status = "oom" if _is_oom(exc) else "failed"
        out.error = traceback.format_exc()[-ERROR_TAIL:]
        if not isinstance(exc, Exception):
            _finish(cell, out_dir, out)
            raise
    return _finish(cell, out_dir, out)


def _train(cell: Cell, out_dir: Path, out: _Outcome, hooks: RunHooks | None = None) -> None:
    t0 = time.perf_counter()
    require_torch()  # older than any release suite's torch calls were checked against: a clear failure
    out.rank = rank = wdist.setup(cell.device, cell.gpus)
    t_pg = time.perf_counter()
    events = out.events
    faults = Faults(cell.id)
    cell = faults.planted(cell)  # a planted learning-rate change (SUITE_FAULT lr=, tests only): the same cell else
    with torch.device(rank.device):
        model = build_model(cell.model, cell.seed)
    t_model = time.perf_counter()
    par = parallelize(model, cell, rank.device)
    out.extra.update(par.extra)
    t_strategy = time.perf_counter()
    # the ranks of a tensor-parallel group and of a pipeline see the same batches
    data = build_data(cell, *data_replica(cell, rank.rank))
    t_data = time.perf_counter()
    out.setup = SetupTimes(process_group=t_pg - t0, model_build=t_model - t_pg, strategy=t_strategy - t_model,
                           data=t_data - t_strategy, total=t_data - t0)
    events.emit("setup_done")

    out.trainer = trainer = Trainer(par, cell, rank.device, faults=faults)
    measure.reset_cuda_peaks(rank.device)
    try:
        start = hooks.resume(par, trainer) if hooks is not None else 0  # > 0: continuing from a checkpoint
        if start:
            out.extra["resumed_from_step"] = start
        evals = set(cell.eval.points(cell.steps)) if cell.eval else set()

        def after_step(step: int, loss: float) -> None:  # outside the step's timer
            if step + 1 in evals:  # before a checkpoint hook: a checkpoint holds the evaluations so far
                point = evaluate(par, data, cell, rank.device, step + 1)
                point = point.model_copy(update={"train_s": sum(trainer.step_times),
                                                 "wall_s": time.perf_counter() - t_data})
                trainer.evals.append(point)
                events.emit("eval", **point.model_dump())
            if hooks is not None:
                hooks.after_step(step, loss)

        trainer.run(
            data, events,
            on_first_step=lambda: setattr(out, "tensor_bytes", par.count_bytes()),
            on_warmup_end=lambda: measure.reset_cuda_peaks(rank.device),
            start=start, after_step=after_step,
        )
    finally:
        out.train_s = time.perf_counter() - t_data
    out.cuda = measure.cuda_memory(rank.device)

    # where torch's ModTracker fails in a later stage's backward on real tensors ("A leaf node was passed to
    # _will_engine_execute_node but we are currently running autograd.grad()"): with tensor parallelism inside
    # the stages (the planner's trace follows it on fake tensors).  Interleaved stages and zero-bubble's split
    # backward are measured since measure.py's schedule tracker stopped hooking the stages' leaf inputs.
    untracked = par.pipeline is not None and cell.tensor_parallel > 1
    if cell.measure_peaks and untracked:
        out.extra["peaks_not_measured"] = (
            "pipeline with tensor parallelism: torch's ModTracker fails in a later stage's backward on real "
            "tensors; suite plan --trace follows it on fake tensors")
    elif cell.measure_peaks:
        steps = iter(range(cell.steps, cell.steps + PEAK_STEPS))  # past the loop: fresh batches, same recipe
        out.peaks = measure.measure_peaks(
            par, lambda between: trainer.step(trainer.batches(data, next(steps)), between=between), PEAK_STEPS
        )


def _finish(cell: Cell, out_dir: Path, out: _Outcome) -> RankRecord:
    t0 = time.perf_counter()
    rank = out.rank
    if rank is not None:
        wdist.teardown(rank)
    device = rank.device if rank is not None else torch.device("cpu")
    host, ip = out.host
    record = RankRecord(
        cell_id=cell.id,
        rank=rank.rank if rank else wdist.env_int("RANK", 0),
        world_size=rank.world_size if rank else wdist.env_int("WORLD_SIZE", 1),
        local_rank=rank.local_rank if rank else wdist.env_int("LOCAL_RANK", 0),
        hostname=host,
        node_ip=ip,
        device=str(device),
        device_name=measure.device_name(device),
        status=out.status,
        error=out.error,
        losses=out.trainer.losses if out.trainer else [],
        step_times_s=out.trainer.step_times if out.trainer else [],
        grad_norms=out.trainer.grad_norms if out.trainer else [],
        pipeline_busy_s=out.trainer.busy if out.trainer else [],
        pipeline_s=out.trainer.pipeline_wall if out.trainer else [],
        pipeline_wait_s=out.trainer.pipeline_wait if out.trainer else [],
        eval=out.trainer.evals if out.trainer else [],
        warmup_steps=cell.warmup_steps,
        tokens_per_step=_tokens_per_step(cell),
        samples_per_step=cell.global_batch_size,
        tensor_bytes=out.tensor_bytes,
        cuda_memory=out.cuda,
        peaks=out.peaks,
        setup_s=out.setup,
        train_s=out.train_s,
        teardown_s=time.perf_counter() - t0,
        extra=out.extra,
    )
    measure.write_atomic(out_dir / f"rank{record.rank}.json", record)
    out.events.emit("done", status=out.status)  # after the record: "done" means rank 0's file is there
    out.events.close()
    return record
