"""ZeRO-2, ZeRO-3 and HSDP with FSDP2 (`fully_shard`): parameters, gradients and optimizer states sharded.

`fully_shard(module)` replaces each parameter by a DTensor sharded on dim 0 over the mesh's ranks; every
rank stores 1/N of each.  It is applied to each transformer block and then to the root (embeddings, final
norm, head): each call forms one communication group, so one block's parameters are all-gathered at a time,
just before the block's forward (and again before its backward), and its gradients are reduce-scattered
right after its backward — each rank keeps only its gradient shard, and the optimizer (plain AdamW on
DTensors) updates only the local shard, so its states are sharded too.

    zero3: reshard_after_forward=True   free each block's unsharded parameters after its forward and
                                        all-gather them again for backward (params / N at rest, 3 x params
                                        of communication per step)
    zero2: reshard_after_forward=False  keep them from forward to backward (no second all-gather; all
                                        parameters are unsharded at the end of forward)

HSDP (`hsdp`): the same calls on a 2-D mesh (replicate R x shard S, S = policy.shard_size).  FSDP2 given a 2-D
mesh shards each parameter over the last dimension and replicates it over the first: a rank holds 1/S of
every parameter, the same 1/S as the other ranks of its column.  Forward and backward all-gather within the
shard group (S ranks: on one node, the usual layout); after backward the gradients are reduce-scattered
within the group and then all-reduced across the R replicas of the shard.  Memory per rank is zero3's with S
in place of the world size; what crosses nodes is one all-reduce of 1/S of the gradients.

CPU offload (`zero3-offload`, `hsdp-offload`): CPUOffloadPolicy keeps the sharded parameters, their gradients
and so the optimizer states and step on the host; each block's shards are copied to the device for its
all-gather and its gradient shards copied back.  `count_bytes` reports those bytes as host bytes too.

Mixed precision: MixedPrecisionPolicy casts the all-gathered parameters to bf16/fp16 for compute, keeps the
sharded fp32 parameters as the optimizer's master copy, and reduces gradients in fp32; no autocast needed.

Gradient accumulation: `set_requires_gradient_sync(False)` for every micro-batch but the last; unsharded
gradients then accumulate locally and are reduce-scattered once.

Byte counting, per rank.  Gradients and optimizer states: local shards.  Parameters: what forward and
backward compute with — for zero3 the local shards (a block's unsharded copy only exists while it runs:
the peaks pass reports it as `unsharded_parameters`); for zero2 the unsharded parameters, which stay
allocated from forward to backward (full size in the compute dtype), and their fp32 local shards are then a
second copy, reported as `master_weights`.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

from suite.strategies import registry
from suite.strategies.base import Parallel, Policy, count_tensor_bytes, local_bytes, make_optimizer
from suite.techniques.precision import compute_dtype, fsdp_mp_policy


def apply(model: nn.Module, mesh, policy: Policy, device: torch.device) -> Parallel:
    """zero2 / zero3 on a 1-D mesh over the world; hsdp on a 2-D mesh (replicate R x shard S, S =
    policy.shard_size, R x S = world); the -offload entries with FSDP2's CPUOffloadPolicy (module docstring).
    `mesh`: with tensor parallelism, the dp dimension of the (dp, tp) mesh the blocks were split on."""
    spec = registry.get(policy.strategy)
    world = dist.get_world_size()
    if mesh is not None:  # tensor parallel: shard over the data-parallel part of wrap.parallelize's (dp, tp) mesh
        return _shard(model, policy, device, mesh, spec)
    with unset_fake_temporarily():  # the planner's trace runs under FakeTensorMode; a mesh needs real ranks
        if spec.shard_group:
            mesh = init_device_mesh(device.type, (world // policy.shard_size, policy.shard_size),
                                    mesh_dim_names=("replicate", "shard"))
        else:
            mesh = init_device_mesh(device.type, (world,))
    return _shard(model, policy, device, mesh, spec)


def _shard(model: nn.Module, policy: Policy, device: torch.device, mesh, spec) -> Parallel:
    # zero3 and hsdp shard parameters at rest, so they free each block's unsharded copy after forward (the
    # registry entry's shards.parameters); zero2 keeps them until backward
    reshard = spec.shards.parameters
    mp = fsdp_mp_policy(policy.precision)
    # pinned host memory makes the copies asynchronous; pinning needs a CUDA runtime
    offload = {"offload_policy": CPUOffloadPolicy(pin_memory=device.type == "cuda")} if spec.offload else {}
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp, **offload)
    # reshard_after_forward given explicitly, so FSDP does not apply its "root keeps parameters" heuristic
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp, **offload)
    optimizer = make_optimizer(model.parameters(), policy.optimizer, device)

    @contextmanager
    def no_sync():
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)

    # The sharded DTensor parameters: FSDP2 swaps in unsharded ones around forward and backward and puts these
    # same objects back, so the list taken now is the one the optimizer steps and count_bytes reads.
    params = list(model.parameters())
    overrides = {}
    if not reshard:  # zero2 (module docstring): unsharded in the compute dtype, the fp32 shards a second copy
        dtype = compute_dtype(policy.precision)
        overrides = {"parameters": sum(p.numel() * (dtype or p.dtype).itemsize for p in params),  # numel: global
                     "master_weights": local_bytes(params)}

    return Parallel(
        model=model, optimizer=optimizer, no_sync=no_sync, autocast=False,
        count_bytes=lambda: count_tensor_bytes(params, optimizer, host=spec.offload, **overrides),
        tracker="fsdp", sharded_grad_scaler=True,
        extra={"reshard_after_forward": reshard, **({"mesh": list(mesh.shape)} if mesh.ndim > 1 else {})},
    )
