"""DDP: every rank holds the whole model and optimizer; gradients are all-reduced during backward.

torch's DistributedDataParallel registers a hook per parameter; gradients that become ready are packed into
buckets of `bucket_cap_mb` and each full bucket is all-reduced (averaged) while backward is still computing
earlier layers — communication overlaps computation.  `gradient_as_bucket_view=True` makes each `.grad` a view
into its bucket, so gradients are not held twice (bucket + .grad).

Per rank (fp32, Adam): 4 bytes/param parameters + 4 gradients + 8 optimizer states, nothing sharded.
Gradient accumulation: `no_sync()` skips the all-reduce; gradients accumulate locally and the last
micro-batch's backward reduces the sum.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from suite.strategies.base import Parallel, Policy, count_tensor_bytes, make_optimizer


def wrap_ddp(model: nn.Module, policy: Policy, device: torch.device, group=None) -> DDP:
    """DDP over `group` (None: the whole process group)."""
    # The planner's trace (suite/plan/trace.py) runs this under a fake process group, whose collectives move
    # nothing: DDP's constructor must not read parameter data to verify and broadcast it (fake tensors have
    # none), and its default all-reduce hook expects a result the fake group's future does not carry.
    fake = dist.get_backend() == "fake"
    ddp = DDP(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=policy.bucket_cap_mb,
        gradient_as_bucket_view=True,
        init_sync=not fake,
        process_group=group,
    )
    if fake:
        ddp.register_comm_hook(None, _in_place_hook)
        ddp.reducer = _KeepBuckets(ddp.reducer)
    return ddp


class _KeepBuckets:
    """The reducer, except that it keeps its first bucket order: the rebuild after the first backward agrees
    the new order over ranks through a tensor it reads on the host, which a fake tensor cannot give.  Bucket
    sizes, and so memory, are the same in either order."""

    def __init__(self, reducer):
        self._reducer = reducer

    def _rebuild_buckets(self) -> bool:
        return False

    def __getattr__(self, name):
        return getattr(self._reducer, name)


def _in_place_hook(state, bucket):  # no annotation: DDP checks it and this file has lazy annotations
    """The default hook's memory behaviour without its communication: the bucket is reduced in place."""
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def apply(model: nn.Module, mesh, policy: Policy, device: torch.device) -> Parallel:
    # a sub-mesh: the data-parallel ranks of a tensor-parallel group (scenario/tensor_parallel.py: ddp only when
    # gpus = tensor_parallel, so one rank) or of a pipeline stage (any number)
    if mesh is not None and mesh.size() == 1:
        return _no_data_parallel(model, policy, device)
    ddp = wrap_ddp(model, policy, device, group=mesh.get_group() if mesh is not None else None)
    optimizer = make_optimizer(ddp.parameters(), policy.optimizer, device)
    return Parallel(model=ddp, optimizer=optimizer, no_sync=ddp.no_sync,
                    count_bytes=lambda: count_tensor_bytes(ddp.parameters(), optimizer),
                    extra={"bucket_cap_mb": policy.bucket_cap_mb})


def _no_data_parallel(model: nn.Module, policy: Policy, device: torch.device) -> Parallel:
    """No data parallelism left: nothing to all-reduce.  Under tensor parallelism the replicated parameters
    (norms, embedding, head) get the same gradient on every rank of the tensor-parallel group, whose input
    gradients DTensor all-reduces already; the split ones get their own slice's.  A pipeline stage without
    replicas holds its own parameters alone."""
    from contextlib import nullcontext

    optimizer = make_optimizer(model.parameters(), policy.optimizer, device)
    return Parallel(model=model, optimizer=optimizer, no_sync=nullcontext,
                    count_bytes=lambda: count_tensor_bytes(model.parameters(), optimizer),
                    extra={"tensor_parallel": policy.tensor_parallel} if policy.tensor_parallel > 1 else {})
