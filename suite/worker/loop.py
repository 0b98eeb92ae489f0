"""One optimizer step, and the timed loop around it.

A step = grad_accum micro-batches.  Each micro-batch's loss is divided by grad_accum, so the accumulated
gradient is the gradient of the mean loss over the rank's slice of the global batch; the strategy averages it
over ranks, which makes the step the same mathematics as one rank on the whole global batch.  Every
micro-batch but the last runs under `no_sync()`, so gradients are communicated once per step.

What the timer brackets: forward, backward, gradient communication and the optimizer step of one optimizer
step, with the device synchronized on both ends (CUDA kernels are asynchronous).  Outside it: fetching the
step's batches, the one all-reduce that averages the loss over ranks and its host read (needed for the loss
curve and to stop at once on NaN), the global gradient norm (worker/gradients.py: read from the gradients the
optimizer just applied, with at most one all-reduce per mesh group for sharded ones) and rank 0's event line.
The loss all-reduce happens every step, so every rank sees the same global loss and all ranks stop together
when it is not finite.

With pipeline parallelism (`Parallel.pipeline`) the schedule takes all the step's micro-batches at once and runs
them through the stages (suite/techniques/pipeline_parallel.py); what it returns averages, over the world, to the
last stages' loss.  The planted loss and gradient faults below act on the plain loop only.  With context
parallelism (`Parallel.context_parallel`) each micro-batch's forward and backward run on this rank's share of
the sequence (suite/techniques/context_parallel.py); its loss is the mean over those tokens, and the all-reduce
of the loss above averages the shares back into the sequence's mean.

Planted gradient faults (SUITE_FAULT, faults.py), inside the step: `grad2x` doubles the gradients the
optimizer will read, after the strategy synchronized them (after `before_step`); `desync` runs every
micro-batch under `no_sync()` and skips `before_step`, so nothing is synchronized: DDP-like strategies step
with each rank's own gradient, FSDP2 and the hand-written ZeRO leave the optimizer no gradient shard at all
(that step updates nothing; FSDP2 carries the unreduced gradient into the next step's reduce-scatter).
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Callable, Iterator, TypedDict

import torch

from suite.data import Batch, Data
from suite.results.schema import EvalPoint
from suite.scenario import Cell
from suite.strategies import registry
from suite.strategies.base import Parallel
from suite.techniques import precision
from suite.worker import gradients
from suite.worker.dist import global_mean, synchronize
from suite.worker.faults import Faults
from suite.worker.measure import EventLog


class Diverged(Exception):
    """The global loss was NaN or infinite at `step`."""

    def __init__(self, step: int, loss: float):
        super().__init__(f"loss is {loss} at step {step}")
        self.step, self.loss = step, loss


class TrainerState(TypedDict, total=False):
    """What a Trainer carries from one run to its continuation (the keys of a checkpoint's Meta; `eval` is
    absent from checkpoints written before evaluation existed)."""

    losses: list[float]
    step_times_s: list[float]
    eval: list[dict]
    grad_norms: list[float]


@dataclass
class Trainer:
    """The training loop of one rank: owns its GradScaler, the loss curve and the step times.

    `faults` is the loop's fault hook (SUITE_FAULT); the default injects nothing."""

    par: Parallel
    cell: Cell
    device: torch.device
    faults: Faults = field(default_factory=lambda: Faults("", ""))
    scaler: torch.amp.GradScaler = field(init=False)  # enabled for fp16 only: one code path in step()
    losses: list[float] = field(init=False, default_factory=list)
    step_times: list[float] = field(init=False, default_factory=list)
    evals: list[EvalPoint] = field(init=False, default_factory=list)  # held-out evaluations (evaluate.py)
    grad_norms: list[float] = field(init=False, default_factory=list)  # global gradient norm per step
    busy: list[float] = field(init=False, default_factory=list)  # pipeline: seconds the stages computed per step
    pipeline_wall: list[float] = field(init=False, default_factory=list)  # pipeline: seconds the schedule ran
    pipeline_wait: list[float] = field(init=False, default_factory=list)  # pipeline: seconds it waited for messages

    def __post_init__(self) -> None:
        self.scaler = precision.grad_scaler(self.cell.precision, self.device, self.par.sharded_grad_scaler)

    def state_dict(self) -> TrainerState:
        """The loss curve and step times so far (copies: a checkpoint must not change as training goes on)."""
        return {"losses": list(self.losses), "step_times_s": list(self.step_times),
                "eval": [p.model_dump() for p in self.evals], "grad_norms": list(self.grad_norms)}

    def load_state_dict(self, state: TrainerState) -> None:
        """Continue from `state` (a resumed run's curve is whole: earlier steps first)."""
        self.losses = list(state["losses"])
        self.step_times = list(state["step_times_s"])
        self.evals = [EvalPoint.model_validate(p) for p in state.get("eval", [])]
        self.grad_norms = list(state.get("grad_norms", []))  # absent from checkpoints written before it existed

    def batches(self, data: Data, step: int) -> list[Batch]:
        return [(x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True))
                for x, y in data.micro_batches(step)]

    def step(self, batches: list[Batch], between: Callable[[], None] | None = None) -> torch.Tensor:
        """One optimizer step; returns this rank's mean loss (a device tensor: no host sync here)."""
        par, opt, scaler = self.par, self.par.optimizer, self.scaler
        fault = self.faults.gradient_fault()  # a planted grad2x / desync for this step (tests only): None else
        opt.zero_grad(set_to_none=True)
        if par.pipeline is not None:  # the schedule runs every micro-batch through the stages (and syncs gradients)
            with precision.autocast(self.cell.precision, self.device) if par.autocast else nullcontext():
                total = par.pipeline.step(batches)
            if between is not None:
                between()
        else:
            total = self._micro_batches(batches, between, fault)
        if fault != "desync":
            par.before_step()
        if fault == "grad2x":
            gradients.scale_(gradients.grads_of(par), 2.0)
        scaler.step(opt)
        scaler.update()
        par.after_step()
        return total

    def _micro_batches(self, batches: list[Batch], between: Callable[[], None] | None, fault: str | None
                       ) -> torch.Tensor:
        """Forward and backward of each micro-batch, gradients synchronized on the last; the mean loss."""
        par, n = self.par, len(batches)
        total = torch.zeros((), device=self.device)
        for i, (x, y) in enumerate(batches):
            # loss_context: loss_parallel's loss and backward on vocabulary shards; _sequence_split: context
            # parallelism's share of the sequence, attention a ring while open
            with par.no_sync() if i < n - 1 or fault == "desync" else nullcontext(), \
                    par.loss_context(), \
                    _sequence_split(par, x, y) as (x, y, where):
                with precision.autocast(self.cell.precision, self.device) if par.autocast else nullcontext():
                    loss = par.model(x, y, **where) / n
                loss = self.faults.on_loss(loss)  # a nan fault poisons the first micro-batch only
                self.scaler.scale(loss).backward()
            loss = loss.detach()
            total += loss.full_tensor() if hasattr(loss, "full_tensor") else loss  # loss_parallel: a DTensor
            if between is not None:
                between()
        return total

    def run(self, data: Data, events: EventLog, on_first_step: Callable[[], None],
            on_warmup_end: Callable[[], None], start: int = 0,
            after_step: Callable[[int, float], None] | None = None) -> None:
        """The timed loop over optimizer steps start..cell.steps-1 (start > 0: resumed from a checkpoint);
        raises Diverged on a non-finite global loss; `after_step(step, loss)` runs outside the step's timer."""
        world = torch.distributed.get_world_size()
        # the optimizer's plain gradients are each rank's partition when the family shards optimizer states
        partitioned = registry.get(self.cell.strategy).shards.optimizer_states
        for step in range(start, self.cell.steps):
            batches = self.batches(data, step)
            self.faults.before_step(step)
            synchronize(self.device)
            t0 = time.perf_counter()
            local = self.step(batches)
            synchronize(self.device)
            self.faults.stretch(t0)  # a planted slowdown (SUITE_FAULT slow=): nothing otherwise
            dt = time.perf_counter() - t0
            loss = global_mean(local, world)
            norm = gradients.global_norm(gradients.grads_of(self.par), partitioned, self.device,
                                         across=self.par.pipeline.group if self.par.pipeline else None)
            self.losses.append(loss)
            self.step_times.append(dt)
            self.grad_norms.append(norm)
            if self.par.pipeline is not None:
                self.busy.append(self.par.pipeline.busy_s)
                self.pipeline_wall.append(self.par.pipeline.wall_s)
                if self.par.pipeline.wait_s is not None:
                    self.pipeline_wait.append(self.par.pipeline.wait_s)
            events.emit("step", step=step, loss=loss, grad_norm=norm, step_time_s=dt)
            if not math.isfinite(loss):
                raise Diverged(step, loss)
            if step == start:
                on_first_step()
            if step + 1 == self.cell.warmup_steps:
                on_warmup_end()
            if after_step is not None:
                after_step(step, loss)


@contextmanager
def _sequence_split(par: Parallel, x: torch.Tensor, y: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor, dict]]:
    """(inputs, targets, the model's extra keywords) of one micro-batch as this rank runs it: with context
    parallelism its share of the sequence and where those tokens sit (attention is a ring while open), else as
    given."""
    if par.context_parallel is None:
        yield x, y, {}
        return
    with par.context_parallel.shard(x, y) as (xs, ys, positions):
        yield xs, ys, {"positions": positions}
