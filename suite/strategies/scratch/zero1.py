"""scratch-zero1: ZeRO stage 1: shard the optimizer states (and the fp32 master weights) over the ranks.

In data parallelism every rank keeps a full copy of Adam's two moments (8 bytes per parameter), and every
rank performs the same update on the same numbers: N-fold redundant memory and work.  ZeRO-1 (Rajbhandari
et al., arXiv 1910.02054) removes that redundancy: rank r keeps the optimizer state of 1/N of the parameters
and updates only that 1/N; the ranks then exchange their freshly updated pieces.

    backward          full gradients on every rank (as in DP)
    all-reduce        averaged full gradients on every rank                  2 x params elements on the wire
    optimizer step    rank r updates its shard only, with its 1/N of Adam's states
    all-gather        every rank receives the other ranks' updated shards    1 x params elements

That is 3 x params per step, the version the seed describes (reduce-scatter instead of all-reduce would be
enough, since rank r only reads its shard of the averaged gradient: 2 x params; scratch-zero2 does that).

The shards are flat (common.FlatLayout): the parameters of each bucket (`bucket_cap_mb`) live end to end in
one flat buffer, each parameter's `.data` a view into it, and rank r's shard is chunk r of every buffer.  The
optimizer is built over the shards only, one flat tensor per bucket, so its states are 1/N of DP's without
any bookkeeping, and the all-gather writes the updated chunks straight into the buffers the model computes
with (in place: the input is this rank's own chunk of the output, which NCCL and gloo both allow).

Mixed precision (bf16/fp16): the model computes with 16-bit parameters (the flat buffers are 16-bit, 2 bytes
per parameter) and its gradients come out 16-bit; they are all-reduced in 16 bits (as the ZeRO paper and the
planner count: 2 bytes per element).  Each rank keeps an fp32 *master* copy of its shard only (4 bytes per
parameter / N): the optimizer updates the master with an fp32 copy of its gradient shard, and the result is
rounded back into the 16-bit buffer before the all-gather.  Small updates would vanish if added to 16-bit
weights directly; they accumulate in the fp32 master.  In fp32 the master IS the buffer's chunk (a view, no
copy).  fp16 needs the sharded GradScaler: each rank checks only its gradient shard for overflow, and the
ranks must agree on skipping a step, so the check is all-reduced.

Memory per rank (fp32, Adam): 4 bytes/param weights + 4 gradients + 8/N optimizer states.
Gradient accumulation: gradients add up in `.grad`; the all-reduce in `before_step` runs once per step.
Activation checkpointing: nothing to do (communication happens outside backward).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from suite.results.schema import TensorBytes
from suite.strategies.base import Parallel, Policy, count_tensor_bytes, make_optimizer, whole_world
from suite.strategies.scratch.common import (
    Bucket,
    FlatLayout,
    all_gather_flat,
    broadcast_from_rank0,
    buckets_by_size,
    drop_model_grads_on_zero_grad,
    set_master_grad,
    storage_bytes,
    trainable,
)
from suite.techniques.precision import compute_dtype


class ShardedBucket(Bucket):
    """A bucket of parameters in one flat buffer (what the model computes with) and this rank's master shard
    (what the optimizer updates): the part ZeRO-1 and ZeRO-2 share.  ZeRO-2 also uses it as a `Bucket`, to
    reduce-scatter its gradients during backward; ZeRO-1 communicates outside backward and does not."""

    def __init__(self, params: list[nn.Parameter], dtype: torch.dtype, device: torch.device):
        super().__init__(params)
        world, rank = dist.get_world_size(), dist.get_rank()
        self.layout = FlatLayout(params, world, rank)
        with torch.no_grad():
            self.flat = self.layout.pack([p.data for p in params], dtype, device)
            for p, view in zip(params, self.layout.views(self.flat)):
                p.data = view  # the model now computes with the flat buffer's memory (16-bit in mixed precision)
            shard = self.layout.shard(self.flat)
            # fp32: the master is the chunk itself (a view: the step updates the buffer in place).
            # mixed: a separate fp32 copy of the chunk, the only place the full-precision weights live.
            self.master_is_copy = dtype != torch.float32
            self.master = nn.Parameter(shard.float() if self.master_is_copy else shard)

    @torch.no_grad()
    def gather_updated(self) -> None:
        """After the step: round the master into the 16-bit buffer (mixed only), then all-gather every chunk."""
        shard = self.layout.shard(self.flat)
        if self.master_is_copy:
            shard.copy_(self.master)
        all_gather_flat(self.flat, shard)


def make_buckets(model: nn.Module, policy: Policy, device: torch.device) -> list[ShardedBucket]:
    params = trainable(model)
    broadcast_from_rank0(p.data for p in params)
    dtype = compute_dtype(policy.precision) or torch.float32
    return [ShardedBucket(group, dtype, device) for group in buckets_by_size(params, policy.bucket_cap_mb)]


def count_sharded_bytes(buckets: list[ShardedBucket], optimizer) -> TensorBytes:
    """Parameters: the flat buffers (the model's parameters are views of them).  Gradients: the model's (views
    of the all-reduced buffers) and the masters' where they are separate fp32 copies.  Master weights: 0 in
    fp32, where each master is a view of its buffer; the fp32 shards in mixed precision."""
    return count_tensor_bytes([p for b in buckets for p in b.params], optimizer, masters=[b.master for b in buckets],
                              count=storage_bytes)


def apply(model: nn.Module, mesh, policy: Policy, device: torch.device) -> Parallel:
    whole_world(mesh, policy)
    buckets = make_buckets(model, policy, device)
    optimizer = make_optimizer([b.master for b in buckets], policy.optimizer, device)
    drop_model_grads_on_zero_grad(optimizer, [p for b in buckets for p in b.params])
    world = dist.get_world_size()

    @torch.no_grad()
    def before_step() -> None:
        for b in buckets:
            grads = b.layout.pack([p.grad for p in b.params], b.flat.dtype, b.flat.device)
            dist.all_reduce(grads, op=dist.ReduceOp.SUM)
            grads.div_(world)
            for p, view in zip(b.params, b.layout.views(grads)):
                p.grad = view  # the full averaged gradient stays (ZeRO-1 does not shard gradients)
            set_master_grad(b.master, b.layout.shard(grads))  # ... but the optimizer reads only this rank's chunk

    def after_step() -> None:
        for b in buckets:
            b.gather_updated()

    return Parallel(
        model=model, optimizer=optimizer, count_bytes=lambda: count_sharded_bytes(buckets, optimizer),
        before_step=before_step, after_step=after_step, sharded_grad_scaler=True,
        extra={"bucket_cap_mb": policy.bucket_cap_mb, "buckets": len(buckets),
               "communication": "all-reduce of gradients, all-gather of updated shards (3 x params)"},
    )
