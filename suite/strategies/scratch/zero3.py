"""scratch-zero3: ZeRO stage 3 (what FSDP does): shard the parameters too, gather each block only to use it.

ZeRO-2 still keeps every parameter on every rank.  ZeRO-3 keeps only rank r's 1/N chunk of each parameter at
rest, and rebuilds a block's full parameters just for the moments they are needed:

    forward   block i:  all-gather its chunks -> full parameters -> compute -> free them
    backward  block i:  all-gather again       -> full parameters -> compute gradients -> free them,
                        reduce-scatter its gradients -> this rank's gradient chunk

so at any moment a rank holds its chunks of everything plus the full parameters of one or two blocks.
Memory (fp32, Adam): (4 + 4 + 8) / N bytes per parameter.  Communication per micro-batch: 2 x params of
all-gathers (forward and backward), plus one reduce-scatter per optimizer step: the textbook 3 x params.

How the pieces are wired, per *unit* (each block of `model.blocks`, plus a root unit with everything else:
embeddings, final norm, the tied head):

- A unit's parameters are laid end to end in one flat `full` buffer (common.FlatLayout); each parameter's
  `.data` is a view into it, so the model's code does not change.  "Freeing" resizes the buffer's *storage*
  to zero bytes; "gathering" resizes it back and all-gathers the chunks into it.  The views, and any copy
  autograd saved for backward, point at that same storage, so they see the refilled values (FSDP's trick).
- The optimizer never sees the model's parameters: it updates one fp32 flat shard per unit (the master), and
  the next all-gather reads from it.  Nothing has to be done after the step.
- Before a block's forward: a forward pre-hook gathers it and starts gathering the NEXT block in the
  background (prefetch: its transfer overlaps this block's compute).  After: a forward hook frees it and
  puts a hook on the block's output tensor.
- Before a block's backward: autograd computes the gradient of the block's output first, which fires that
  output hook: gather the block again, prefetch the PREVIOUS block (backward walks the blocks in reverse).
- After a block's backward: each parameter's post-accumulate-grad hook counts; when the unit's last gradient
  is in, pack the unit's gradients into a flat buffer, free `.grad` and the full parameters, and launch an
  async reduce-scatter.  `before_step` waits for them and gives each master its averaged chunk.
- The root unit is gathered when the model's forward starts and stays until its gradients are done at the
  end of backward: the tied embedding is used first in forward, last (the head) at its end and in backward.

Gradient accumulation: inside `no_sync()` the parameters are still gathered and freed as above, but the
unit's gradients stay full-size in `.grad` and add up; the last micro-batch reduce-scatters the sums.
Activation checkpointing works: the hooks sit on the (wrapped) blocks of `model.blocks`, so a checkpointed
block's recomputation runs inside its backward, after its output hook has gathered the parameters.
Mixed precision: the full buffers are 16-bit (the all-gather casts the fp32 master chunk first, so it moves
2 bytes per element), gradients are reduce-scattered in 16 bits and cast to fp32 for the master.
torch.compile (per block, applied before this) traces the blocks with the views as inputs and works (same
loss curve on CPU).  Not supported: a parameter shared between two units (e.g. a head tied to a weight inside
a block); the models here tie the head to the embedding, both in the root unit.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from suite.results.schema import TensorBytes
from suite.strategies.base import Parallel, Policy, count_tensor_bytes, make_optimizer, whole_world
from suite.strategies.scratch.common import (
    Bucket,
    BucketReducer,
    FlatLayout,
    all_gather_flat,
    broadcast_from_rank0,
    drop_model_grads_on_zero_grad,
    reduce_scatter_buffers,
    reduce_scatter_flat,
    set_master_grad,
    storage_bytes,
    trainable,
)
from suite.techniques.precision import compute_dtype


class Unit(Bucket):
    """The parameters of one block (or the root): an fp32 shard at rest, a full buffer only while in use.  As a
    `Bucket`, its gradients are reduce-scattered in one call when its backward is over."""

    def __init__(self, params: list[nn.Parameter], dtype: torch.dtype, device: torch.device):
        super().__init__(params)
        self.layout = FlatLayout(params, dist.get_world_size(), dist.get_rank())
        with torch.no_grad():
            self.full = self.layout.pack([p.data for p in params], dtype, device)
            self.master = nn.Parameter(self.layout.shard(self.full).float().clone())  # its own memory
            for p, view in zip(params, self.layout.views(self.full)):
                p.data = view
        self.nbytes = self.full.untyped_storage().nbytes()
        # the all-gather in flight (Bucket.work is the gradients' reduce-scatter), and the chunk it reads
        self.gathering, self.source = None, None
        self.gathered = True
        self.free()

    def gather(self, wait: bool = True) -> None:
        """Make the full parameters available; wait=False starts the all-gather and returns (prefetch)."""
        if not self.gathered and self.gathering is None:
            self.full.untyped_storage().resize_(self.nbytes)
            self.source = self.master.detach().to(self.full.dtype)  # 16-bit copy in mixed precision
            self.gathering = all_gather_flat(self.full, self.source, async_op=True)
        if wait and self.gathering is not None:
            self.gathering.wait()
            self.gathering, self.source, self.gathered = None, None, True

    def free(self) -> None:
        if self.gathering is not None:
            self.gather()  # a prefetch still in flight must land before its memory goes
        if self.gathered:
            self.full.untyped_storage().resize_(0)
            self.gathered = False


class Zero3(BucketReducer):
    def __init__(self, model: nn.Module, policy: Policy, device: torch.device):
        dtype = compute_dtype(policy.precision) or torch.float32
        params = trainable(model)
        broadcast_from_rank0(p.data for p in params)
        in_blocks = [[p for p in block.parameters() if p.requires_grad] for block in model.blocks]
        taken = {id(p) for group in in_blocks for p in group}
        root = [p for p in params if id(p) not in taken]
        self.blocks = [Unit(group, dtype, device) for group in in_blocks]
        self.root = Unit(root, dtype, device) if root else None
        self.units = self.blocks + ([self.root] if self.root else [])
        super().__init__(self.units)  # the gradient hooks: one bucket per unit

        model.register_forward_pre_hook(self._before_model)
        for i, block in enumerate(model.blocks):
            block.register_forward_pre_hook(lambda mod, args, i=i: self._before_block(i))
            block.register_forward_hook(lambda mod, args, out, i=i: self._after_block(i, out))

    # ----------------------------------------------------------------------------------------- forward
    def _before_model(self, module, args) -> None:
        if self.root:
            self.root.gather()
        if self.blocks:
            self.blocks[0].gather(wait=False)

    def _before_block(self, i: int) -> None:
        self.blocks[i].gather()
        if i + 1 < len(self.blocks):
            self.blocks[i + 1].gather(wait=False)  # prefetch: overlaps block i's forward

    def _after_block(self, i: int, out) -> None:
        self.blocks[i].free()
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        for t in outputs:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                t.register_hook(lambda grad, i=i: self._before_block_backward(i))
                break  # one tensor is enough: its gradient arrives before the block's backward starts

    # ----------------------------------------------------------------------------------------- backward
    def _before_block_backward(self, i: int) -> None:
        self.blocks[i].gather()
        if i > 0:
            self.blocks[i - 1].gather(wait=False)  # prefetch: backward visits the blocks in reverse

    @torch.no_grad()
    def on_grad_ready(self, p: nn.Parameter) -> None:
        """Counts inside no_sync() too (unlike the other reducers): when the unit's backward is over its full
        parameters are freed either way; only the reduce-scatter waits for the last micro-batch."""
        unit = self.bucket_of[id(p)]
        if unit.mark_ready(p):
            if self.sync:
                self.start(unit)
            unit.free()

    def launch(self, unit: Unit) -> tuple:
        grads, out = reduce_scatter_buffers(unit.layout, unit.full)
        return reduce_scatter_flat(out, grads, op=dist.ReduceOp.SUM, async_op=True), out, grads

    def flush(self, unit: Unit) -> None:
        """A unit with a parameter that got no gradient is sent now (zeros for it), and its parameters freed."""
        self.start(unit)
        unit.free()

    def done(self, unit: Unit, out: torch.Tensor, grads: torch.Tensor) -> None:
        set_master_grad(unit.master, out.div_(self.world))

    def count_bytes(self, optimizer) -> TensorBytes:
        """The masters are this strategy's parameters at rest (their only persistent copy), so they count as
        parameters, beside the full buffers (0 bytes while freed); gradients: the masters' and, during
        accumulation, the model's."""
        return count_tensor_bytes([p for u in self.units for p in u.params] + [u.master for u in self.units],
                                  optimizer, count=storage_bytes)


def apply(model: nn.Module, mesh, policy: Policy, device: torch.device) -> Parallel:
    whole_world(mesh, policy)
    z = Zero3(model, policy, device)
    optimizer = make_optimizer([u.master for u in z.units], policy.optimizer, device)
    drop_model_grads_on_zero_grad(optimizer, [p for u in z.units for p in u.params])
    return Parallel(
        model=model, optimizer=optimizer, count_bytes=lambda: z.count_bytes(optimizer), no_sync=z.no_sync,
        before_step=z.finish, sharded_grad_scaler=True,
        extra={"units": len(z.units),
               "communication": "all-gather per block in forward and backward (with prefetch), reduce-scatter "
                                "of gradients per block (3 x params)"},
    )
