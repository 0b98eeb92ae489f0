"""Pipeline parallelism with PyTorch's `torch.distributed.pipelining` (as torchtitan): the model's blocks are
split into consecutive stages, one group of ranks per stage, and a schedule moves micro-batches through them.

    stage 0 (first):  embedding + blocks [0, L/S)            sends its hidden states to stage 1
    stage i:          blocks [i L/S, (i+1) L/S)              receives from i-1, sends to i+1 (and gradients back)
    stage S-1 (last): blocks [.., L) + final norm + head     computes the loss of each micro-batch

With S = p x v stages on p pipeline ranks: rank r holds stages r, r + p, ... (v model chunks, "looped" as
PyTorch's interleaved schedules expect).  A stage is the plain model with the parts it does not hold set to
None and its block list cut (torchtitan's way; `Llama.logits` skips what is None), so the strategy that runs
next (DDP, FSDP2) wraps a stage like any model, and PyTorch's stage calls DDP's `no_sync` / FSDP2's gradient
sync itself: gradients are reduced over the data-parallel ranks once per step.

The micro-batches of a step are the cell's accumulation steps: the loop hands them all to `Pipeline.step`,
which concatenates them and lets the schedule cut them again (equal chunks, in order), so the step is the same
mathematics as one rank on the same micro-batches.  The schedule divides each stage's gradients by the number
of micro-batches (`scale_grads`), as the plain loop divides each micro-batch's loss.  Schedules
(suite.axes.PIPELINE_SCHEDULES names them, plan/pipeline.py prices them):

    gpipe             ScheduleGPipe             all forwards, then all backwards
    1f1b              Schedule1F1B              warm-up forwards, then one forward / one backward
    interleaved-1f1b  ScheduleInterleaved1F1B   1f1b over v = 2 chunks per rank: the bubble / v
    zero-bubble       ScheduleInterleavedZeroBubble  ZB1P over v = 2 chunks per rank: each backward split into
                                                its input-gradient pass (which the previous stage waits for)
                                                and its weight-gradient pass (which fills the bubble);
                                                bare stages and zero2 (scenario/pipeline.planned_only)

The bubble, measured: each stage's `forward_one_chunk` and `backward_one_chunk` (and `backward_weight_one_chunk`)
are timed (the device synchronized at both ends, so on a GPU the timing itself costs a little) into `busy_s`, and
PyTorch's wait for a batch of point-to-point messages (`schedules._wait_batch_p2p`, wrapped once per process;
on a GPU the device is synchronized after it, since NCCL's wait only orders the stream) into `wait_s`; `wall_s`
is the schedule's whole run (the optimizer step is outside it).  A rank is idle while it waits for another
stage: in the schedule's waits, and outside the schedule until the slowest rank's schedule ends.  What is left,
wall - busy - wait, is the schedule's own work on this rank: cutting the batch into micro-batches, posting its
messages (gloo copies and queues them on the calling thread), the loss, scaling the gradients.  The formula has
neither waits for slow messages nor that work; the runner reports the waits as the bubble and the work apart
(suite.runner.aggregate.pipeline_measured).

Only the last stage has the loss.  What `step` returns is arranged so that the mean over every rank of the
world is the mean over the last stages: the last stage reports p x its loss, the others 0.
"""

from __future__ import annotations

import copy
import inspect
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

# the PyTorch schedule class that runs each runnable suite.axes.PIPELINE_SCHEDULES name
TORCH_SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved-1f1b": "ScheduleInterleaved1F1B",
                   "zero-bubble": "ScheduleInterleavedZeroBubble"}
# what a stage may hold besides blocks: the first stage the embedding, the last the final norm and the head
PARTS = ("embed", "norm", "head")


def stage_ids(pp_rank: int, pp: int, chunks: int) -> list[int]:
    """The stages pipeline rank `pp_rank` holds: pp_rank, pp_rank + pp, ... (`chunks` of them)."""
    return [pp_rank + k * pp for k in range(chunks)]


def split_stage(model: nn.Module, stage: int, stages: int, copy_model: bool) -> nn.Module:
    """Stage `stage` of `stages`: blocks [stage L/S, (stage+1) L/S), the embedding on the first stage, the final
    norm and the head on the last; the rest set to None.  `copy_model`: cut a copy (a rank holding several
    chunks cuts each from the whole model), else cut `model` itself."""
    layers = len(model.blocks)
    if layers % stages:
        raise ValueError(f"{stages} pipeline stages do not divide the {layers} blocks of the model")
    per = layers // stages
    keep = list(model.blocks)[stage * per:(stage + 1) * per]
    if copy_model:
        blocks, model.blocks = model.blocks, nn.ModuleList()  # copy everything but the blocks, then only the kept
        try:
            part = copy.deepcopy(model)
        finally:
            model.blocks = blocks
        part.blocks = copy.deepcopy(nn.ModuleList(keep))
    else:
        part, part.blocks = model, nn.ModuleList(keep)
    for name in PARTS:
        if (name == "embed" and stage > 0) or (name != "embed" and stage < stages - 1):
            setattr(part, name, None)
    return part


# seconds this process's pipeline schedules have waited for point-to-point messages (`_time_waits`); a step
# reads the difference
_WAITED = [0.0]


def _time_waits(sync: Callable[[], None]) -> bool:
    """Wrap PyTorch's wait for a batch of point-to-point messages, once per process, so that its seconds add up in
    `_WAITED` (`sync` after it: the device's wait).  False where this torch's schedules have no such function:
    the waits are then not told apart from the schedule's own work."""
    from torch.distributed.pipelining import schedules

    wait = getattr(schedules, "_wait_batch_p2p", None)
    if wait is None:
        return False
    if getattr(wait, "suite_timed", False):
        return True

    def timed(work):
        t0 = time.perf_counter()
        try:
            return wait(work)
        finally:
            sync()
            _WAITED[0] += time.perf_counter() - t0

    timed.suite_timed = True
    schedules._wait_batch_p2p = timed
    return True


@dataclass
class Pipeline:
    """This rank's side of a pipeline schedule: what the training loop and evaluation call instead of the
    model for a step's micro-batches.

    schedule: the PyTorch schedule over this rank's stage(s).
    group:    the process group of the pipeline ranks this rank exchanges activations with (one per data-parallel
              replica): sums over the stages (the gradient norm) reduce over it.
    first, last: whether this rank holds the first stage (it feeds the inputs) or the last (it has the loss).
    ranks:    pipeline ranks p."""

    schedule: object
    group: object
    first: bool
    last: bool
    ranks: int
    busy_s: float = 0.0  # seconds this rank's stages computed during the last step (module docstring)
    wait_s: float | None = None  # seconds the last step waited for messages; None: this torch's waits not timed
    wall_s: float = 0.0  # seconds the last step's schedule.step call took (every micro-batch, forward and backward)
    # the step's keyword that stops the last stage keeping every micro-batch's output (its logits) until the
    # step ends, to merge them for a caller that never reads them: m x the logits, the last stage's largest
    # tensors (PyTorch's `return_outputs`; a torch without it keeps them)
    no_outputs: dict = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        if "return_outputs" in inspect.signature(type(self.schedule).step).parameters:
            self.no_outputs = {"return_outputs": False}

    def time_stages(self, stages: list, device: torch.device) -> None:
        """Wrap each stage's compute calls so that `busy_s` adds up their time, and PyTorch's message waits so
        that `wait_s` adds up theirs."""
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        if _time_waits(sync):
            self.wait_s = 0.0

        def timed(call):
            def run(*args, **kwargs):
                sync()
                t0 = time.perf_counter()
                try:
                    return call(*args, **kwargs)
                finally:
                    sync()
                    self.busy_s += time.perf_counter() - t0
            return run

        for stage in stages:
            for name in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
                if hasattr(stage, name):
                    setattr(stage, name, timed(getattr(stage, name)))

    def _feed(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[tuple, dict]:
        """The schedule's arguments: the token ids (first stage), the targets (last) and, to every stage, the
        sequence's length (a stage after the first under sequence parallelism receives s / t of it)."""
        inputs = torch.cat([x for x, _ in batches]) if self.first else None
        targets = torch.cat([y for _, y in batches]) if self.last else None
        kwargs = {"seq_len": batches[0][0].shape[1]} | ({"target": targets} if self.last else {})
        return ((inputs,) if self.first else ()), kwargs

    def step(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Forward and backward of all the step's micro-batches; p x the mean loss on the last stage, else 0."""
        args, kwargs = self._feed(batches)
        losses: list[torch.Tensor] = []
        self.busy_s = 0.0
        waited = _WAITED[0]
        t0 = time.perf_counter()
        self.schedule.step(*args, **kwargs, losses=losses if self.last else None, **self.no_outputs)
        self.wall_s = time.perf_counter() - t0
        if self.wait_s is not None:
            self.wait_s = _WAITED[0] - waited
        if not self.last:
            return torch.zeros((), device=batches[0][0].device)
        return torch.stack([loss.detach() for loss in losses]).mean() * self.ranks

    @torch.no_grad()
    def evaluate(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Forward only: (loss sum, targets) of the micro-batches on the last stage (float64), zeros elsewhere."""
        args, kwargs = self._feed(batches)
        losses: list[torch.Tensor] = []
        self.schedule.eval(*args, **kwargs, losses=losses if self.last else None)
        sums = torch.zeros(2, dtype=torch.float64, device=batches[0][0].device)
        if self.last:  # the loss of each equal chunk is a mean over its targets
            per = batches[0][1].numel() * len(batches) / len(losses)
            sums[0] = sum(loss.double() for loss in losses) * per
            sums[1] = per * len(losses)
        return sums


def build_pipeline(modules: list[nn.Module], ids: list[int], stages: int, schedule: str, micro_batches: int,
                   group, device: torch.device, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                   metadata: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> Pipeline:
    """The schedule over this rank's stage modules (already wrapped by the strategy), `ids` their stage numbers.
    `metadata`: each stage's (input, output) example tensors, where the stages cannot learn them by messages
    at the first step (the planner's trace, under the fake process group); None: PyTorch's shape inference."""
    from torch.distributed import pipelining

    if schedule not in TORCH_SCHEDULES:
        raise ValueError(f"pipeline_schedule {schedule} has no PyTorch schedule in suite (runnable: "
                         f"{', '.join(TORCH_SCHEDULES)})")
    pp = torch.distributed.get_world_size(group)
    metadata = metadata or [(None, None)] * len(ids)
    built = [pipelining.PipelineStage(m, i, stages, device, group=group, input_args=inputs, output_args=outputs)
             for m, i, (inputs, outputs) in zip(modules, ids, metadata)]
    cls = getattr(pipelining, TORCH_SCHEDULES[schedule])
    sched = cls(built if len(built) > 1 else built[0], micro_batches, loss_fn=loss_fn)
    pipeline = Pipeline(schedule=sched, group=group, first=0 in ids, last=stages - 1 in ids, ranks=pp)
    pipeline.time_stages(built, device)
    return pipeline
