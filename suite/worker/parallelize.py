"""`parallelize(model, cell, device)`: the one place a plain model becomes what the training loop runs, and
the one place a strategy meets the cell (it gets a mesh and a `Policy`, never the `Cell`).

Like torchtitan's `parallelize`, it applies techniques to the plain model in a fixed order:

    0. tensor parallelism        splits each block's projections over the tp ranks (techniques/tensor_parallel.py);
                                 with sequence_parallel the norms and residual stream on the sequence, with
                                 loss_parallel the head's output and the loss on the vocabulary
    1. activation checkpointing  wraps each block in `model.blocks`      (suite/techniques/checkpointing.py)
    2. torch.compile (optional)  compiles each (wrapped) block            (suite/techniques/compile.py)
    3. the strategy's apply()    wraps/shards the model, builds the optimizer   (its registry entry says where)

Tensor parallelism first, as torchtitan does: checkpointing and compile then see the blocks as they will run
(split), and FSDP shards the already-split DTensors over the other mesh dimension.  With tensor_parallel t the
world is one (dp, tp) mesh of (gpus / t, t); the strategy gets its dp part (`mesh=`).

Why this order: checkpointing must see the plain blocks to decide what to save; compiling after it puts the
recomputation inside the compiled region; sharding last lets FSDP treat each (checkpointed, compiled) block
as one unit of all-gather / reduce-scatter and keeps its hooks outside compiled graphs.  Mixed precision is
not a wrapping step: FSDP2 takes a MixedPrecisionPolicy in apply(), the others autocast in the loop
(`Parallel.autocast`).
"""

from __future__ import annotations

import torch
from torch import nn

from suite.scenario import Cell
from suite.scenario.pipeline import planned_only
from suite.strategies import get_strategy
from suite.strategies.base import Parallel, Policy
from suite.techniques.checkpointing import apply_checkpointing


def parallelize(model: nn.Module, cell: Cell, device: torch.device) -> Parallel:
    """Checkpointing -> compile -> the cell's strategy, on a model already on `device`."""
    if not hasattr(model, "blocks"):
        raise TypeError(f"{type(model).__name__} has no .blocks; strategies shard and checkpoint per block")
    layout = planned_only(cell)
    if layout:  # the runner skips these cells (infeasible)
        raise NotImplementedError(f"{layout}: planned only; suite has no worker for them yet")
    apply = get_strategy(cell.strategy)
    mesh = None
    if cell.tensor_parallel > 1:
        mesh = _mesh(cell, device)
        from suite.techniques.tensor_parallel import apply_tensor_parallel

        apply_tensor_parallel(model, mesh["tp"], cell.sequence_parallel, cell.loss_parallel)
    apply_checkpointing(model, cell.activation_checkpointing)
    if cell.compile:
        from suite.techniques.compile import compile_blocks

        compile_blocks(model)
    policy = policy_of(cell)
    if mesh is None:
        return apply(model, None, policy, device)
    dp = ("replicate", "shard") if cell.shard_size else "dp"  # hsdp: a 2-D data-parallel part
    par = apply(model, mesh[dp], policy, device)
    if cell.loss_parallel:
        from suite.techniques.tensor_parallel import loss_context

        par.loss_context = loss_context(True)
    return par


def policy_of(cell: Cell) -> Policy:
    """The settings of the cell a strategy acts on (strategies never see the whole cell)."""
    return Policy(strategy=cell.strategy, precision=cell.precision, optimizer=cell.optimizer,
                  bucket_cap_mb=cell.bucket_cap_mb, shard_size=cell.shard_size, tensor_parallel=cell.tensor_parallel)


def _mesh(cell: Cell, device: torch.device):
    """(dp, tp), or for hsdp (replicate, shard, tp): tp last, so a tensor-parallel group is consecutive ranks
    (one node's fast links)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import init_device_mesh

    tp, shard = cell.tensor_parallel, cell.shard_size
    with unset_fake_temporarily():  # the planner's trace runs under FakeTensorMode; a mesh needs real ranks
        if shard:
            return init_device_mesh(device.type, (cell.gpus // (shard * tp), shard, tp),
                                    mesh_dim_names=("replicate", "shard", "tp"))
        return init_device_mesh(device.type, (cell.gpus // tp, tp), mesh_dim_names=("dp", "tp"))
