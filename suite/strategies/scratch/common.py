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

Overlap.  A bucket's collective can start the moment its last gradient is final, while backward is still
computing the gradients of earlier layers.  `Bucket` and `BucketReducer` are that mechanism, written once for
scratch-dp-overlap, scratch-dp-bucketed, scratch-zero2 and scratch-zero3; each strategy only says which
collective a bucket sends and what to do with its result.

Byte counting.  The hand-written strategies alias memory on purpose (a gradient that is a view of a bucket,
an fp32 shard that is a view of the flat parameters), so counting `numel x element_size` per tensor would
count the same bytes twice.  `storage_bytes` counts each underlying storage once; the strategies hand it to
base.count_tensor_bytes.
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


class Bucket:
    """Parameters whose gradients travel in ONE collective, launched as soon as the last of them is final.

    Backward delivers gradients one parameter at a time (each parameter's post-accumulate-grad hook); the
    bucket remembers which have arrived (`ready`).  When all have, the reducer launches the bucket's collective
    asynchronously and the bucket keeps the handle (`work`) together with the tensors the transfer reads and
    writes (`tensors`): they must stay alive until it is done, and the result is read from them after `wait`.

    It is one parameter in scratch-dp-overlap, a flat gradient buffer in scratch-dp-bucketed, a ZeRO shard
    bucket in scratch-zero2 and one block in scratch-zero3: subclasses add what they hold."""

    def __init__(self, params: list[nn.Parameter]):
        self.params = params
        self.ready: set[int] = set()  # ids: a set, so a hook that fired twice cannot complete a bucket early
        self.work: dist.Work | None = None  # None: not launched yet in this optimizer step
        self.tensors: tuple[torch.Tensor, ...] = ()

    def mark_ready(self, p: nn.Parameter) -> bool:
        """Note that `p`'s gradient is final; True if it was the last one (the ready set then starts over)."""
        self.ready.add(id(p))
        if len(self.ready) < len(self.params):
            return False
        self.ready.clear()
        return True

    def started(self, work: dist.Work, *tensors: torch.Tensor) -> None:
        self.work, self.tensors = work, tensors
        self.ready.clear()  # a bucket flushed before it filled starts the next backward empty too

    def wait(self) -> tuple[torch.Tensor, ...]:
        """Block until the transfer is done; -> its tensors, which the bucket then lets go of."""
        self.work.wait()
        tensors, self.work, self.tensors = self.tensors, None, ()
        return tensors


class BucketReducer(SyncSwitch):
    """Gradient hooks that launch each bucket's collective during backward, and the wait before the step.

    A subclass defines `launch(bucket) -> (work, *tensors)`, the async collective on the bucket's gradients,
    and `done(bucket, *tensors)`, what to do with the arrived result (average it, hand it to the optimizer).

    `finish` (the strategy's `before_step`) first *flushes* every bucket that never filled (a parameter that
    got no gradient on this rank: its hook never fired): `flush` launches it as it is, and a subclass that
    must prepare a missing gradient first (zeros) overrides it.  Collectives are matched across ranks by the
    order they are issued; the hooks fire in the same order on every rank (same graph), and flushing walks
    the buckets in list order, so every rank issues the same collectives in the same order.  Then it waits
    for every bucket: the transfer may be long done, or still in flight."""

    def __init__(self, buckets: list[Bucket]):
        self.world = dist.get_world_size()
        self.buckets = buckets
        self.bucket_of = {id(p): b for b in buckets for p in b.params}
        for b in buckets:
            for p in b.params:
                p.register_post_accumulate_grad_hook(self.on_grad_ready)

    def launch(self, bucket: Bucket) -> tuple:
        raise NotImplementedError

    def done(self, bucket: Bucket, *tensors: torch.Tensor) -> None:
        raise NotImplementedError

    @torch.no_grad()
    def on_grad_ready(self, p: nn.Parameter) -> None:
        # inside no_sync() nothing is counted: gradients add up in .grad and the last micro-batch sends them
        if self.sync and self.bucket_of[id(p)].mark_ready(p):
            self.start(self.bucket_of[id(p)])

    def start(self, bucket: Bucket) -> None:
        bucket.started(*self.launch(bucket))

    def flush(self, bucket: Bucket) -> None:
        self.start(bucket)

    @torch.no_grad()
    def finish(self) -> None:
        for bucket in self.buckets:
            if bucket.work is None:
                self.flush(bucket)
        for bucket in self.buckets:
            self.done(bucket, *bucket.wait())


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


def reduce_scatter_buffers(layout: FlatLayout, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The input and output of a bucket's gradient reduce-scatter: its parameters' gradients packed into a new
    flat buffer (dtype and device of `like`; zeros for a missing gradient), and an empty chunk for this rank's
    share of the sum.  The parameters' `.grad` are dropped: the full gradients now live only in the buffer,
    and once the transfer is done only the chunk remains (ZeRO-2's 1/N of the gradient memory)."""
    grads = layout.pack([p.grad for p in layout.params], like.dtype, like.device)
    for p in layout.params:
        p.grad = None
    return grads, torch.empty(layout.shard_numel, dtype=grads.dtype, device=grads.device)


def set_master_grad(master: nn.Parameter, grad_shard: torch.Tensor) -> None:
    """Hand the optimizer this rank's averaged gradient chunk, in fp32 like the master it updates (no copy when
    it already is)."""
    master.grad = grad_shard if grad_shard.dtype == torch.float32 else grad_shard.float()


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (None skipped): aliases and views count once.

    Storages are told apart by their C++ StorageImpl (`_cdata`), not their data pointer: under the planner's
    FakeTensorMode trace (suite/plan/trace.py) every fake storage's data pointer is 0."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is None:
            continue
        storage = t.untyped_storage()
        seen[storage._cdata] = storage.nbytes()
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
