"""What the hand-written strategies share: flat buckets, the collectives they use, and honest byte counting.

Flat buckets.  A collective has a fixed cost per call (a launch, a handshake between ranks) on top of the
bytes it moves, so sending one large tensor beats sending the model's hundreds of small ones; and a sharded
strategy needs "rank r's 1/N of a group of parameters" to be one contiguous piece of memory.  Both come from
the same trick: lay a group of parameters (a *bucket*) end to end in one flat 1-D buffer, padded so that its
length divides by the world size N.  Chunk r of the buffer is rank r's shard:

    flat buffer  | p0 ........ | p1 .... | p2 ............. | pad |
    shards       | rank 0 's chunk        | rank 1 's chunk         |      (N = 2: chunk = numel / 2)

A shard may cut a parameter in two; that is fine, the optimizer only ever sees flat chunks and Adam treats
every element independently.  Making each parameter's `.data` a view into the buffer lets the model keep
computing with ordinary parameters while a collective on the buffer updates all of them at once.

Byte counting.  The hand-written strategies alias memory on purpose (a gradient that is a view of a bucket,
an fp32 shard that is a view of the flat parameters), so counting `numel x element_size` per tensor would
count the same bytes twice.  `storage_bytes` counts each underlying storage once.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn

# torch 2.14 renamed the flat collectives (and warns on the old names); older versions only have the old ones.
all_gather_flat = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_flat = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

MIB = 1024 * 1024  # DDP's bucket_cap_mb counts mebibytes; so do we


def trainable(model: nn.Module) -> list[nn.Parameter]:
    """The parameters the optimizer updates (shared ones, e.g. a tied embedding, once)."""
    return [p for p in model.parameters() if p.requires_grad]


@torch.no_grad()
def broadcast_from_rank0(tensors) -> None:
    """Every rank starts from rank 0's values, as DDP's constructor does.  The models are built from the same
    seed, so this changes nothing today; it guards against a rank whose initialization drifted."""
    for t in tensors:
        dist.broadcast(t, src=0)


class SyncSwitch:
    """`no_sync()` for a hand-written gradient reducer, as DDP's: the training loop enters it for every
    micro-batch of a step but the last.  Inside, `self.sync` is False and the reducer's gradient hooks return
    at once, so gradients only add up locally in `.grad`; the last micro-batch's backward runs with sync on and
    communicates the sums, once per optimizer step.  `finally` turns sync back on even if backward raised."""

    sync = True

    @contextmanager
    def no_sync(self):
        self.sync = False
        try:
            yield
        finally:
            self.sync = True


def buckets_by_size(params: list[nn.Parameter], cap_mb: float) -> list[list[nn.Parameter]]:
    """Group parameters into buckets of at most `cap_mb` MiB (a larger parameter gets a bucket of its own).

    Parameters are taken in *reverse* registration order, DDP's heuristic: backward visits the layers last to
    first, so the last parameters get their gradients first, and the first bucket fills (and can be sent)
    while backward is still working on the early layers.  A bucket holds one dtype only."""
    cap = cap_mb * MIB
    buckets: list[list[nn.Parameter]] = []
    size = 0
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if buckets and size + nbytes <= cap and buckets[-1][0].dtype == p.dtype:
            buckets[-1].append(p)
            size += nbytes
        else:
            buckets.append([p])
            size = nbytes
    return buckets


class FlatLayout:
    """Where each parameter of a bucket lives in its flat buffer, and which chunk is this rank's shard."""

    def __init__(self, params: list[nn.Parameter], world: int, rank: int):
        self.params = params
        self.shapes = [p.shape for p in params]
        self.sizes = [p.numel() for p in params]
        self.offsets = [sum(self.sizes[:i]) for i in range(len(params))]
        used = sum(self.sizes)
        self.numel = math.ceil(used / world) * world  # padded: every rank's chunk has the same length
        self.shard_numel = self.numel // world
        self.lo, self.hi = rank * self.shard_numel, (rank + 1) * self.shard_numel

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """One view per parameter, shaped like it, into `flat` (no copy)."""
        return [flat[o:o + n].view(s) for o, n, s in zip(self.offsets, self.sizes, self.shapes)]

    def shard(self, flat: torch.Tensor) -> torch.Tensor:
        """This rank's chunk of a flat buffer (a view)."""
        return flat[self.lo:self.hi]

    def pack(self, tensors: list[torch.Tensor | None], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A new flat buffer holding `tensors` end to end (None = zeros, e.g. an unused parameter's gradient)."""
        flat = torch.zeros(self.numel, dtype=dtype, device=device)
        for view, t in zip(self.views(flat), tensors):
            if t is not None:
                view.copy_(t)
        return flat


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (None skipped): aliases and views count once."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is None:
            continue
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(n for ptr, n in seen.items() if n)


def drop_model_grads_on_zero_grad(optimizer: torch.optim.Optimizer, params: list[nn.Parameter]) -> None:
    """Make `optimizer.zero_grad()` also drop the model parameters' gradients.

    The sharded strategies give the optimizer flat shards, not the model's parameters, so the loop's
    `optimizer.zero_grad()` would leave the model's `.grad` tensors alive, and the next backward would add to
    last step's gradients.  Gradients stay until then on purpose: that is when DDP and ZeRO-1 free them too,
    so the bytes counted after a step are the bytes the strategy really holds."""
    zero_shards = optimizer.zero_grad

    def zero_grad(set_to_none: bool = True) -> None:
        zero_shards(set_to_none)
        for p in params:
            p.grad = None

    optimizer.zero_grad = zero_grad
