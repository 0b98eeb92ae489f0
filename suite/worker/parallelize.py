"""`parallelize(model, cell, device)`: the one place a plain model becomes what the training loop runs, and
the one place a strategy meets the cell (it gets a mesh and a `Policy`, never the `Cell`).

Like torchtitan's `parallelize`, it applies techniques to the plain model in a fixed order:

   (pipeline stages: with pipeline_parallel the model is first cut into this rank's stage(s), and each goes
    through 0-3 like a model; techniques/pipeline_parallel.py)
    0. tensor parallelism        splits each block's projections over the tp ranks (techniques/tensor_parallel.py);
                                 with sequence_parallel the norms and residual stream on the sequence, with
                                 loss_parallel the head's output and the loss on the vocabulary
    1. activation checkpointing  wraps each block in `model.blocks`      (suite/techniques/checkpointing.py)
    2. torch.compile (optional)  compiles each (wrapped) block            (suite/techniques/compile.py)
    3. the strategy's apply()    wraps/shards the model, builds the optimizer   (its registry entry says where)

Tensor parallelism first, as torchtitan does: checkpointing and compile then see the blocks as they will run
(split), and FSDP shards the already-split DTensors over the other mesh dimension.  With tensor_parallel t and
pipeline_parallel p the world is one (pp, dp, tp) mesh of (p, gpus / (p t), t), dimensions of size 1 left out;
the strategy gets its dp part (`mesh=`), the pipeline schedule the pp part.

Why this order: checkpointing must see the plain blocks to decide what to save; compiling after it puts the
recomputation inside the compiled region; sharding last lets FSDP treat each (checkpointed, compiled) block
as one unit of all-gather / reduce-scatter and keeps its hooks outside compiled graphs.  Mixed precision is
not a wrapping step: FSDP2 takes a MixedPrecisionPolicy in apply(), the others autocast in the loop
(`Parallel.autocast`).
"""

from __future__ import annotations

import torch
from torch import nn

from suite.axes import PIPELINE_SCHEDULES
from suite.scenario import Cell
from suite.scenario.pipeline import planned_only
from suite.strategies import get_strategy
from suite.strategies.base import Parallel, Policy
from suite.techniques.checkpointing import apply_checkpointing


def parallelize(model: nn.Module, cell: Cell, device: torch.device) -> Parallel:
    """[pipeline stages ->] tensor parallelism -> checkpointing -> compile -> the cell's strategy, on a model
    already on `device`."""
    if not hasattr(model, "blocks"):
        raise TypeError(f"{type(model).__name__} has no .blocks; strategies shard and checkpoint per block")
    reason = planned_only(cell)
    if reason:  # the runner skips these cells (infeasible)
        raise NotImplementedError(f"planned only: {reason}")
    mesh = _mesh(cell, device)
    policy = policy_of(cell)
    if cell.pipeline_parallel > 1:
        return _pipeline(model, cell, device, mesh, policy)
    return _parallelize_part(model, cell, device, mesh, policy)


def _parallelize_part(model: nn.Module, cell: Cell, device: torch.device, mesh, policy: Policy) -> Parallel:
    """Steps 0 to 3 on the model, or on one pipeline stage of it."""
    apply = get_strategy(cell.strategy)
    if cell.tensor_parallel > 1:
        from suite.techniques.tensor_parallel import apply_tensor_parallel

        apply_tensor_parallel(model, mesh["tp"], cell.sequence_parallel, cell.loss_parallel)
    apply_checkpointing(model, cell.activation_checkpointing)
    if cell.compile:
        from suite.techniques.compile import compile_blocks

        compile_blocks(model)
    if mesh is None:
        return apply(model, None, policy, device)
    par = apply(model, _data_mesh(cell, mesh), policy, device)
    if cell.context_parallel > 1:
        from suite.techniques.context_parallel import ContextParallel

        par.context_parallel = ContextParallel(mesh["cp"])
    if cell.loss_parallel:
        from suite.techniques.tensor_parallel import loss_context

        par.loss_context = loss_context(True)
    return par


def _pipeline(model: nn.Module, cell: Cell, device: torch.device, mesh, policy: Policy) -> Parallel:
    """Cut this rank's stage(s) out of the model, parallelize each like a model, and hand them to the schedule
    (suite/techniques/pipeline_parallel.py): the strategy then runs over the stage's data-parallel ranks."""
    from suite.models.llama import cross_entropy
    from suite.strategies.base import combine
    from suite.techniques.pipeline_parallel import build_pipeline, split_stage, stage_ids

    pp, chunks = cell.pipeline_parallel, PIPELINE_SCHEDULES[cell.pipeline_schedule].chunks
    stages = pp * chunks
    ids = stage_ids(mesh["pp"].get_local_rank(), pp, chunks)
    fake = torch.distributed.get_backend() == "fake"  # probed before the cut: split_stage may cut `model` itself
    metadata = _boundary_tensors(model, cell, device, mesh, policy, ids, stages) if fake else None
    parts = [_parallelize_part(split_stage(model, i, stages, copy_model=chunks > 1), cell, device, mesh, policy)
             for i in ids]
    par = parts[0] if len(parts) == 1 else combine(parts, policy, device)
    par.pipeline = build_pipeline([part.model for part in parts], ids, stages, cell.pipeline_schedule,
                                  cell.grad_accum, mesh["pp"].get_group(), device, cross_entropy, metadata)
    par.extra = {**par.extra, "pipeline_stages": ids}
    return par


def _boundary_tensors(model: nn.Module, cell: Cell, device: torch.device, mesh, policy: Policy, ids: list[int],
                      stages: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The tensors that cross stage boundaries, for the planner's trace (under the fake process group).

    PyTorch's stages learn their neighbours' tensors by sending them at the first step (shape inference);
    under the fake group nothing arrives, so the trace gives every stage its input and output up front.  They
    come from a probe, not a guess: the first block (with the embedding) and the last (with the norm and head),
    cut from copies of the model and parallelized like the stages, run one micro-batch under no_grad, so the
    hidden states have the strategy's and tensor parallelism's real shape and dtype (s / t of the sequence
    under SP, bf16 where the strategy casts parameters).  Returns each of stages `ids`' (input, output): token
    ids or hidden states in, hidden states or logits out, the outputs with requires_grad as the schedule's
    have it."""
    from contextlib import nullcontext

    from suite.techniques import precision
    from suite.techniques.pipeline_parallel import split_stage

    layers = len(model.blocks)
    first = _parallelize_part(split_stage(model, 0, layers, copy_model=True), cell, device, mesh, policy)
    last = _parallelize_part(split_stage(model, layers - 1, layers, copy_model=True), cell, device, mesh, policy)
    tokens = torch.zeros(cell.micro_batch_size, cell.seq_len, dtype=torch.long, device=device)
    cast = precision.autocast(cell.precision, device) if first.autocast else nullcontext()
    with torch.no_grad(), cast:
        hidden = first.model(tokens)
        logits = last.model(hidden, seq_len=cell.seq_len)
    hidden, logits = torch.empty_like(hidden).requires_grad_(), torch.empty_like(logits).requires_grad_()
    return [(tokens if i == 0 else hidden, logits if i == stages - 1 else hidden) for i in ids]


def policy_of(cell: Cell) -> Policy:
    """The settings of the cell a strategy acts on (strategies never see the whole cell)."""
    return Policy(strategy=cell.strategy, precision=cell.precision, optimizer=cell.optimizer,
                  bucket_cap_mb=cell.bucket_cap_mb, shard_size=cell.shard_size, tensor_parallel=cell.tensor_parallel)


def data_replica(cell: Cell, rank: int) -> tuple[int, int]:
    """(which data-parallel replica this rank belongs to, how many there are): the ranks of one tensor-parallel
    group, of one context-parallel group (they split each sequence) and of one pipeline (every stage) read the
    same batches.  The mesh's order (`_mesh`) decides it."""
    return (rank // (cell.tensor_parallel * cell.context_parallel)) % cell.replicas, cell.replicas


def _mesh(cell: Cell, device: torch.device):
    """None without tensor, pipeline or context parallelism (the strategy builds its own over the world); else
    (pp, dp, cp, tp) with the dimensions of size 1 left out, dp as (replicate, shard) for hsdp.  tp last, so a
    tensor-parallel group is consecutive ranks (one node's fast links), cp next (the ring's key/value exchange
    every block); pp first, so the stages of a pipeline are far apart and its point-to-point messages are what
    crosses nodes (torchtitan's order)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import init_device_mesh

    tp, pp, cp, shard = cell.tensor_parallel, cell.pipeline_parallel, cell.context_parallel, cell.shard_size
    if tp == 1 and pp == 1 and cp == 1:
        return None
    dp = cell.gpus // (tp * pp * cp)
    dims = [("pp", pp)] if pp > 1 else []
    dims += [("replicate", dp // shard), ("shard", shard)] if shard else [("dp", dp)]
    dims += [("cp", cp)] if cp > 1 else []
    dims += [("tp", tp)] if tp > 1 else []
    with unset_fake_temporarily():  # the planner's trace runs under FakeTensorMode; a mesh needs real ranks
        return init_device_mesh(device.type, tuple(n for _, n in dims), mesh_dim_names=tuple(d for d, _ in dims))


def _data_mesh(cell: Cell, mesh):
    """The strategy's part of `mesh`: the data-parallel ranks, and with context parallelism the cp ranks with
    them (each holds part of every sequence, so gradients are averaged over both: one flattened dimension, as
    torchtitan's dp_shard_cp).  None when that is the whole world: the strategy then builds its own group."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    if cell.shard_size:  # hsdp: a 2-D data-parallel part (not with context parallelism: scenario/pipeline.py)
        return mesh[("replicate", "shard")]
    if cell.context_parallel == 1:
        return mesh["dp"]
    if cell.tensor_parallel * cell.pipeline_parallel == 1:
        return None
    with unset_fake_temporarily():
        return mesh[("dp", "cp")]._flatten("dp_cp")
