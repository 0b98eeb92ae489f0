"""scratch-dp: data parallelism in its simplest form: all-reduce every gradient after backward.

Every rank holds the whole model and the whole optimizer, and runs forward and backward on its own slice of
the global batch.  The gradients then differ from rank to rank (different data), so before the optimizer
step each rank replaces its gradient g_r by the average over ranks,

    g = (g_0 + g_1 + ... + g_{N-1}) / N            one all-reduce (SUM) per parameter, then / N

and every rank applies the same update to the same weights: the ranks stay identical without ever sending
a weight.  Because each rank's loss is the mean over its slice and the slices are equal in size, the average
of the gradients is exactly the gradient of the mean loss over the global batch: N ranks compute the same
mathematics as one rank on the whole batch (the tests check this to ~1e-6 in fp32).

Why it is slow: communication starts only after backward has finished, so the network idles during backward
and the processors idle during communication; and one small all-reduce per parameter pays the per-call cost
hundreds of times.  scratch-dp-overlap fixes the first, scratch-dp-bucketed both; torch's DDP does what
scratch-dp-bucketed does.

Memory per rank (fp32, Adam): 4 bytes/param weights + 4 gradients + 8 optimizer states, nothing sharded.
Communication per step: 2 x params elements (a ring all-reduce sends and receives each element twice).

Gradient accumulation: nothing to do.  The loop runs every micro-batch's backward, gradients add up in
`.grad`, and the all-reduce in `before_step` runs once per optimizer step on the sum.  Activation
checkpointing and autocast mixed precision change nothing here (gradients are fp32 under autocast; with fp16
the loop's GradScaler unscales the already-averaged gradients, identical on every rank).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from suite.strategies.base import Parallel, Policy, count_tensor_bytes, make_optimizer, whole_world
from suite.strategies.scratch.common import broadcast_from_rank0, storage_bytes, trainable


def apply(model: nn.Module, mesh, policy: Policy, device: torch.device) -> Parallel:
    whole_world(mesh, policy)
    params = trainable(model)
    broadcast_from_rank0(p.data for p in params)
    optimizer = make_optimizer(params, policy.optimizer, device)
    world = dist.get_world_size()

    @torch.no_grad()
    def before_step() -> None:
        # Called after the last micro-batch's backward.  Every rank must issue the same collectives in the
        # same order, so a parameter that got no gradient on this rank still takes part, with zeros.
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)  # blocking: the rank waits for the slowest one
            p.grad.div_(world)  # SUM then divide: gloo has no AVG; dividing by a power of two is exact

    return Parallel(model=model, optimizer=optimizer, before_step=before_step,
                    count_bytes=lambda: count_tensor_bytes(params, optimizer, count=storage_bytes),
                    extra={"communication": "one blocking all-reduce per parameter after backward"})
