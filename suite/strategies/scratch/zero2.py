"""scratch-zero2: ZeRO stage 2: shard the gradients too, with a reduce-scatter during backward.

ZeRO-1 all-reduces the full gradient, although rank r then reads only its own chunk of it.  A reduce-scatter
delivers exactly that: chunk r of the sum over ranks, on rank r, for half the traffic of an all-reduce (a
ring all-reduce *is* a reduce-scatter followed by an all-gather).  And once a bucket's gradients have been
reduce-scattered, the full-size gradients are no longer needed: each rank frees them and keeps only its
chunk, so gradient memory drops from 4 bytes per parameter to 4/N (fp32).

    backward          per bucket, as soon as its gradients are final (hooks, as in scratch-dp-bucketed):
                      pack them into a flat buffer, free the parameters' .grad,
                      reduce_scatter(flat) async -> this rank's chunk of the sum     1 x params elements
    before_step       wait for every bucket, divide by N: the optimizer's gradient shards
    optimizer step    rank r updates its master shard (1/N of Adam's states, as ZeRO-1)
    all-gather        updated shards into the flat parameter buffers (after_step)   1 x params elements

2 x params per step, the same as DDP, for 1/N of the gradients and optimizer states.

Everything about parameters, master weights and mixed precision is ZeRO-1's (the ShardedBucket in zero1.py):
16-bit flat buffers and fp32 master shards in mixed precision, gradients reduced in the 16-bit dtype they are
computed in, the sharded GradScaler for fp16.

Gradient accumulation: inside `no_sync()` the hooks do nothing, full gradients add up in `.grad` (so during
accumulation a rank does hold full gradients, as FSDP's no-sync mode does); the last micro-batch's hooks
reduce-scatter the sums and free them.  The alternative, reduce-scattering every micro-batch and summing the
shards, keeps gradient memory at 1/N but communicates once per micro-batch.  Activation checkpointing: the
hooks fire after the recomputed block's gradients are accumulated; nothing else changes.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from suite.strategies.base import Parallel, Policy, make_optimizer, whole_world
from suite.strategies.scratch.common import (
    BucketReducer,
    drop_model_grads_on_zero_grad,
    reduce_scatter_buffers,
    reduce_scatter_flat,
    set_master_grad,
)
from suite.strategies.scratch.zero1 import ShardedBucket, count_sharded_bytes, make_buckets


class ReduceScatterGrads(BucketReducer):
    """Reduce-scatters each bucket's gradients as soon as the bucket is complete; a bucket that never filled is
    sent by `finish` with zeros for the missing gradients (`pack` fills them in)."""

    def launch(self, bucket: ShardedBucket) -> tuple:
        grads, out = reduce_scatter_buffers(bucket.layout, bucket.flat)
        # `grads` travels with the handle: it must stay alive until the transfer is done, and goes with it
        return reduce_scatter_flat(out, grads, op=dist.ReduceOp.SUM, async_op=True), out, grads

    def done(self, bucket: ShardedBucket, out: torch.Tensor, grads: torch.Tensor) -> None:
        set_master_grad(bucket.master, out.div_(self.world))


def apply(model: nn.Module, mesh, policy: Policy, device: torch.device) -> Parallel:
    whole_world(mesh, policy)
    buckets = make_buckets(model, policy, device)
    reducer = ReduceScatterGrads(buckets)
    optimizer = make_optimizer([b.master for b in buckets], policy.optimizer, device)
    drop_model_grads_on_zero_grad(optimizer, [p for b in buckets for p in b.params])

    def after_step() -> None:
        for b in buckets:
            b.gather_updated()

    return Parallel(
        model=model, optimizer=optimizer, count_bytes=lambda: count_sharded_bytes(buckets, optimizer),
        no_sync=reducer.no_sync, before_step=reducer.finish, after_step=after_step, sharded_grad_scaler=True,
        extra={"bucket_cap_mb": policy.bucket_cap_mb, "buckets": len(buckets),
               "communication": "reduce-scatter of gradients per bucket during backward, all-gather of "
                                "updated shards (2 x params)"},
    )
