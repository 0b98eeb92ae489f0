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

from suite.results.schema import TensorBytes
from suite.strategies.base import Parallel, make_optimizer, optimizer_state_bytes
from suite.strategies.scratch.common import (
    FlatLayout,
    SyncSwitch,
    broadcast_from_rank0,
    buckets_by_size,
    storage_bytes,
    trainable,
)


class Bucket:
    """Some parameters' gradients in one flat buffer, and how many of them this backward has delivered."""

    def __init__(self, params: list[nn.Parameter]):
        self.layout = FlatLayout(params, world=1, rank=0)  # not sharded: no padding needed
        self.buffer = torch.zeros(self.layout.numel, dtype=params[0].dtype, device=params[0].device)
        self.slots = dict(zip(map(id, params), self.layout.views(self.buffer)))
        self.ready: set[int] = set()
        self.work: dist.Work | None = None


class BucketedAllReduce(SyncSwitch):
    def __init__(self, params: list[nn.Parameter], cap_mb: float):
        self.world = dist.get_world_size()
        self.buckets = [Bucket(group) for group in buckets_by_size(params, cap_mb)]
        self.bucket_of = {id(p): b for b in self.buckets for p in b.layout.params}
        for p in params:
            p.register_post_accumulate_grad_hook(self._on_grad_ready)

    @torch.no_grad()
    def _on_grad_ready(self, p: nn.Parameter) -> None:
        if not self.sync:
            return
        bucket = self.bucket_of[id(p)]
        slot = bucket.slots[id(p)]
        slot.copy_(p.grad)
        p.grad = slot  # the gradient now lives in the bucket (freeing autograd's tensor): held once, not twice
        bucket.ready.add(id(p))
        if len(bucket.ready) == len(bucket.slots):
            self._launch(bucket)

    def _launch(self, bucket: Bucket) -> None:
        bucket.work = dist.all_reduce(bucket.buffer, op=dist.ReduceOp.SUM, async_op=True)
        bucket.ready.clear()

    @torch.no_grad()
    def finish(self) -> None:
        """Wait for every bucket and average it.  A bucket with a parameter that got no gradient on this rank
        never filled: send it now (that slot holds zeros) so every rank issues the same collectives; buckets
        are launched in the same order as during backward."""
        for bucket in self.buckets:
            if bucket.work is None:
                for p in bucket.layout.params:
                    if id(p) not in bucket.ready:
                        bucket.slots[id(p)].zero_()
                        p.grad = bucket.slots[id(p)]
                self._launch(bucket)
        for bucket in self.buckets:
            bucket.work.wait()
            bucket.work = None
            bucket.buffer.div_(self.world)


def apply(model: nn.Module, cell, device: torch.device) -> Parallel:
    params = trainable(model)
    broadcast_from_rank0(p.data for p in params)
    reducer = BucketedAllReduce(params, cell.bucket_cap_mb)
    optimizer = make_optimizer(params, cell, device)

    def count_bytes() -> TensorBytes:
        return TensorBytes(
            parameters=storage_bytes(params),
            gradients=storage_bytes(p.grad for p in params),  # views of the buckets: counted once
            optimizer_states=optimizer_state_bytes(optimizer),
        )

    return Parallel(model=model, optimizer=optimizer, count_bytes=count_bytes, no_sync=reducer.no_sync,
                    before_step=reducer.finish,
                    extra={"bucket_cap_mb": cell.bucket_cap_mb, "buckets": len(reducer.buckets),
                           "communication": "one async all-reduce per bucket, launched when the bucket is full"})
