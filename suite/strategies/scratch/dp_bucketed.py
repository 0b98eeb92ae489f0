"""scratch-dp-bucketed: overlap communication with backward, and send gradients in a few large buckets.

scratch-dp-overlap launches one all-reduce per parameter.  Each call pays a fixed cost (a launch, a
handshake, for NCCL a kernel) whatever its size, and a model has hundreds of parameters, many tiny (biases,
norm gains).  Bucketing amortizes it: parameters are grouped into buckets of about `bucket_cap_mb` MiB, each
bucket owns one flat buffer, and a bucket is all-reduced with ONE call once all of its gradients are ready.

    backward:  ... grads of layer L ready -> copied into bucket 0 -> bucket 0 full -> all_reduce(bucket 0) async
               ... grads of layer L-1 ready -> bucket 1 ...                        (bucket 0 is on the wire)

Buckets are filled in reverse parameter order (common.buckets_by_size), because backward produces the last
layers' gradients first; so the first bucket is complete early and its transfer overlaps the rest of
backward.  This is what torch's DistributedDataParallel does (its default bucket is 25 MiB; a small first
bucket and re-bucketing by the observed gradient order are refinements we leave out).

Memory: after its gradient is copied into the bucket, each parameter's `.grad` is re-pointed at its slice of
the bucket (DDP's `gradient_as_bucket_view=True`), so gradients are held once, in the buckets: 4 bytes per
parameter in fp32, like DDP, not 8.  The optimizer reads `.grad` and sees the averaged values in place.

Gradient accumulation: inside `no_sync()` the hooks do nothing and gradients add up in `.grad`; the last
micro-batch's hooks copy the sums into the buckets.  Checkpointing and autocast: as scratch-dp-overlap.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from suite.strategies.base import Parallel, Policy, count_tensor_bytes, make_optimizer, whole_world
from suite.strategies.scratch.common import (
    Bucket,
    BucketReducer,
    FlatLayout,
    broadcast_from_rank0,
    buckets_by_size,
    storage_bytes,
    trainable,
)


class GradBucket(Bucket):
    """A bucket that owns one flat buffer for its parameters' gradients, one slot (a view) per parameter."""

    def __init__(self, params: list[nn.Parameter]):
        super().__init__(params)
        layout = FlatLayout(params, world=1, rank=0)  # not sharded: no padding needed
        self.buffer = torch.zeros(layout.numel, dtype=params[0].dtype, device=params[0].device)
        self.slots = dict(zip(map(id, params), layout.views(self.buffer)))


class BucketedAllReduce(BucketReducer):
    def __init__(self, params: list[nn.Parameter], cap_mb: float):
        super().__init__([GradBucket(group) for group in buckets_by_size(params, cap_mb)])

    @torch.no_grad()
    def on_grad_ready(self, p: nn.Parameter) -> None:
        if self.sync:
            slot = self.bucket_of[id(p)].slots[id(p)]
            slot.copy_(p.grad)
            p.grad = slot  # the gradient now lives in the bucket (freeing autograd's tensor): held once, not twice
        super().on_grad_ready(p)  # ... and the bucket is sent once this was its last

    def launch(self, bucket: GradBucket) -> tuple:
        return dist.all_reduce(bucket.buffer, op=dist.ReduceOp.SUM, async_op=True), bucket.buffer

    def flush(self, bucket: GradBucket) -> None:
        """A bucket with a parameter that got no gradient on this rank never filled: that slot is sent as zeros."""
        for p in bucket.params:
            if id(p) not in bucket.ready:
                bucket.slots[id(p)].zero_()
                p.grad = bucket.slots[id(p)]
        self.start(bucket)

    def done(self, bucket: GradBucket, buffer: torch.Tensor) -> None:
        buffer.div_(self.world)  # in place: every parameter's .grad is a view of it


def apply(model: nn.Module, mesh, policy: Policy, device: torch.device) -> Parallel:
    whole_world(mesh, policy)
    params = trainable(model)
    broadcast_from_rank0(p.data for p in params)
    reducer = BucketedAllReduce(params, policy.bucket_cap_mb)
    optimizer = make_optimizer(params, policy.optimizer, device)
    return Parallel(model=model, optimizer=optimizer, no_sync=reducer.no_sync, before_step=reducer.finish,
                    # the gradients are views of the buckets: storage_bytes counts each bucket once
                    count_bytes=lambda: count_tensor_bytes(params, optimizer, count=storage_bytes),
                    extra={"bucket_cap_mb": policy.bucket_cap_mb, "buckets": len(reducer.buckets),
                           "communication": "one async all-reduce per bucket, launched when the bucket is full"})
