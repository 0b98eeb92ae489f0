"""ZeRO-1: DDP for gradients, with the optimizer states sharded by torch's ZeroRedundancyOptimizer.

Gradients are all-reduced by DDP exactly as in ddp.py (every rank ends backward with the full averaged
gradient).  ZeroRedundancyOptimizer gives each rank a partition of the parameters (whole tensors, assigned
greedily largest-first to the least-loaded rank); each rank keeps Adam's moments only for its partition,
updates only those parameters, and then broadcasts them to the others.  So per rank: full parameters and
gradients, optimizer states / N (approximately: partitions are whole tensors).

Communication: all-reduce of gradients (2 x params) + broadcast of the updated partitions (1 x params) = 3 x
params per step, one more than ZeRO as the paper describes it (reduce-scatter + all-gather).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer

from suite.strategies.base import Parallel, Policy, count_tensor_bytes, make_optimizer_kwargs, whole_world
from suite.strategies.ddp import wrap_ddp


def apply(model: nn.Module, mesh, policy: Policy, device: torch.device) -> Parallel:
    whole_world(mesh, policy)
    ddp = wrap_ddp(model, policy, device)
    cls, kwargs = make_optimizer_kwargs(policy.optimizer, device)
    optimizer = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=cls, **kwargs)
    return Parallel(model=ddp, optimizer=optimizer, no_sync=ddp.no_sync,
                    # .optim: this rank's local optimizer, which holds only its partition's states
                    count_bytes=lambda: count_tensor_bytes(ddp.parameters(), optimizer.optim),
                    extra={"bucket_cap_mb": policy.bucket_cap_mb})
