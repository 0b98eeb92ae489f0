"""scratch-dp-overlap: start each gradient's all-reduce the moment backward has produced it.

scratch-dp waits for the whole backward pass, then communicates.  But backward produces gradients layer by
layer, last layer first, and a parameter's gradient is final as soon as autograd has accumulated it: nothing
later in backward touches it again.  So its all-reduce can start right then, and travel over the network
while backward keeps computing the gradients of earlier layers.  Communication hides behind computation.

The hook that says "this gradient is final" is `Tensor.register_post_accumulate_grad_hook`: autograd calls it
after it has added this backward's contribution into `param.grad` (once per backward, even for a parameter
used twice, like a tied embedding: both contributions are summed before they are accumulated).  From it we
launch a *non-blocking* all-reduce:

    work = dist.all_reduce(param.grad, async_op=True)     returns at once; the transfer runs in the background

and keep the `work` handle.  Before the optimizer step, `before_step` waits on every handle (the transfer
may be done already, or still in flight) and divides by the world size.  The result is exactly scratch-dp's.

Order matters: collectives are matched across ranks by the order they are issued, so every rank must launch
them in the same order.  Autograd visits the same graph in the same order on every rank, so it does.

Gradient accumulation: for every micro-batch but the last, the loop enters `no_sync()`, where the hooks do
nothing: gradients just add up in `.grad`.  The last micro-batch's hooks then all-reduce the sums: one
all-reduce per parameter per optimizer step, as DDP's no_sync.  Activation checkpointing: recomputation
happens inside backward and the hooks still fire when each gradient is final.  Mixed precision (autocast):
parameters and gradients stay fp32; fp16's GradScaler unscales after the averaged gradients arrived.

What is still slow: one all-reduce per parameter; scratch-dp-bucketed packs them into buckets.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from suite.strategies.base import Parallel, Policy, count_tensor_bytes, make_optimizer, whole_world
from suite.strategies.scratch.common import Bucket, BucketReducer, broadcast_from_rank0, storage_bytes, trainable


class OverlappedAllReduce(BucketReducer):
    """Every parameter a bucket of its own: its hook launches an async all-reduce of its gradient, in place
    (autograd will not touch p.grad again in this backward, and the optimizer waits for the handle before
    reading it); `finish` waits for every handle and averages."""

    def __init__(self, params: list[nn.Parameter]):
        super().__init__([Bucket([p]) for p in params])

    def launch(self, bucket: Bucket) -> tuple:
        (p,) = bucket.params
        return dist.all_reduce(p.grad, op=dist.ReduceOp.SUM, async_op=True), p.grad

    def flush(self, bucket: Bucket) -> None:
        """A parameter whose hook never fired (no gradient on this rank) is all-reduced with zeros."""
        (p,) = bucket.params
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        self.start(bucket)

    def done(self, bucket: Bucket, grad: torch.Tensor) -> None:
        grad.div_(self.world)


def apply(model: nn.Module, mesh, policy: Policy, device: torch.device) -> Parallel:
    whole_world(mesh, policy)
    params = trainable(model)
    broadcast_from_rank0(p.data for p in params)
    reducer = OverlappedAllReduce(params)
    optimizer = make_optimizer(params, policy.optimizer, device)
    return Parallel(model=model, optimizer=optimizer, no_sync=reducer.no_sync, before_step=reducer.finish,
                    count_bytes=lambda: count_tensor_bytes(params, optimizer, count=storage_bytes),
                    extra={"communication": "one async all-reduce per parameter, launched from its gradient hook"})
