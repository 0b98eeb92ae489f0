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

from suite.strategies.base import Parallel, make_optimizer
from suite.strategies.scratch.common import SyncSwitch, drop_model_grads_on_zero_grad, reduce_scatter_flat
from suite.strategies.scratch.zero1 import ShardedBucket, count_sharded_bytes, make_buckets


class ReduceScatterGrads(SyncSwitch):
    """Per-parameter hooks that reduce-scatter each bucket's gradients as soon as the bucket is complete."""

    def __init__(self, buckets: list[ShardedBucket]):
        self.world = dist.get_world_size()
        self.buckets = buckets
        self.bucket_of = {id(p): b for b in buckets for p in b.params}
        self.ready = {id(b): set() for b in buckets}
        self.pending: dict[int, tuple[dist.Work, torch.Tensor, torch.Tensor]] = {}  # bucket -> (work, out, in)
        for b in buckets:
            for p in b.params:
                p.register_post_accumulate_grad_hook(self._on_grad_ready)

    @torch.no_grad()
    def _on_grad_ready(self, p: nn.Parameter) -> None:
        if not self.sync:
            return
        bucket = self.bucket_of[id(p)]
        ready = self.ready[id(bucket)]
        ready.add(id(p))
        if len(ready) == len(bucket.params):
            self._launch(bucket)

    def _launch(self, bucket: ShardedBucket) -> None:
        grads = bucket.layout.pack([p.grad for p in bucket.params], bucket.flat.dtype, bucket.flat.device)
        for p in bucket.params:
            p.grad = None  # the full gradients are in `grads` now; after the reduce-scatter only a chunk remains
        out = torch.empty(bucket.layout.shard_numel, dtype=grads.dtype, device=grads.device)
        # `grads` must stay alive until the transfer is done: keep it with the handle.
        self.pending[id(bucket)] = (reduce_scatter_flat(out, grads, op=dist.ReduceOp.SUM, async_op=True), out, grads)
        self.ready[id(bucket)].clear()

    @torch.no_grad()
    def finish(self) -> None:
        """Wait for every bucket's reduce-scatter; hand each master its averaged gradient chunk.  A bucket that
        never filled (a parameter without a gradient on this rank) is sent now, in bucket order, with zeros."""
        for b in self.buckets:
            if id(b) not in self.pending:
                self._launch(b)
        for b in self.buckets:
            work, out, _ = self.pending.pop(id(b))
            work.wait()  # and drop the full-size input buffer with the handle
            b.set_master_grad(out.div_(self.world))


def apply(model: nn.Module, cell, device: torch.device) -> Parallel:
    buckets = make_buckets(model, cell, device)
    reducer = ReduceScatterGrads(buckets)
    optimizer = make_optimizer([b.master for b in buckets], cell, device)
    drop_model_grads_on_zero_grad(optimizer, [p for b in buckets for p in b.params])

    def after_step() -> None:
        for b in buckets:
            b.gather_updated()

    return Parallel(
        model=model, optimizer=optimizer, count_bytes=lambda: count_sharded_bytes(buckets, optimizer),
        no_sync=reducer.no_sync, before_step=reducer.finish, after_step=after_step, sharded_grad_scaler=True,
        extra={"bucket_cap_mb": cell.bucket_cap_mb, "buckets": len(buckets),
               "communication": "reduce-scatter of gradients per bucket during backward, all-gather of "
                                "updated shards (2 x params)"},
    )
