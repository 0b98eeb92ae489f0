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
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from suite.strategies.base import Parallel, count_tensor_bytes, make_optimizer


def wrap_ddp(model: nn.Module, cell, device: torch.device) -> DDP:
    return DDP(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=cell.bucket_cap_mb,
        gradient_as_bucket_view=True,
    )


def apply(model: nn.Module, cell, device: torch.device) -> Parallel:
    ddp = wrap_ddp(model, cell, device)
    optimizer = make_optimizer(ddp.parameters(), cell, device)
    return Parallel(model=ddp, optimizer=optimizer, no_sync=ddp.no_sync,
                    count_bytes=lambda: count_tensor_bytes(ddp.parameters(), optimizer),
                    extra={"bucket_cap_mb": cell.bucket_cap_mb})
