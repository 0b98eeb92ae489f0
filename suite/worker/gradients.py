"""The global gradient norm of an optimizer step, however the strategy holds its gradients.

Why record it: with Adam the loss curve barely sees the gradient's scale (Adam divides it away), so two runs
whose losses agree may still have applied different gradients: doubled ones (a missing divide by the world
size) or unsynchronized ones (a skipped all-reduce).  The norm of the gradient the optimizer applied shows
both at the step they happen (docs/convergence.md: the gradient-norm gate).

Which gradient: the one the rank's optimizer steps with, read after the optimizer step (outside the step's
timer; nothing between backward and the next step's `zero_grad` frees or changes it, and fp16's GradScaler
has unscaled it in place by then).  There is no gradient clipping in suite: this is the norm before any.

How, per layout (`grads_of(par)` returns the `.grad` of the parameters of the rank's *local* optimizer:
ZeroRedundancyOptimizer's `.optim`, the hand-written ZeRO's flat master shards, FSDP2's DTensors):

    plain tensors, replicated          DDP, scratch-dp*, tensor-parallel-only ddp's unsplit parameters: every
                                       rank holds the whole averaged gradient; the local sum of squares is it
    plain tensors, partitioned         zero1 (each rank's optimizer holds a partition of whole tensors),
                                       scratch-zero1/2/3 (each rank's flat chunk): the local sums of squares add
                                       up over the ranks (one all-reduce).  Which of the two: the registry
                                       (`partitioned`: the strategy's family shards optimizer states)
    DTensors                           FSDP2 (zero2, zero3, hsdp, offload), tensor-parallel splits: grouped by
                                       mesh and placements; DTensor's own norm of each group (partial per
                                       shard, then `full_tensor`: one reduction per group, over the sharded
                                       mesh dimensions only, so HSDP's replicas are not counted twice, and
                                       FSDP-over-TP's strided shards right; reducing the local sums by hand
                                       over `mesh.get_group(dim)` got zero3 x tp wrong by 7e-2)

One host read per step; the sums of squares and norms are float64.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist


def grads_of(par) -> list[torch.Tensor]:
    """The gradients the rank's optimizer steps with (parameters without one skipped)."""
    optimizer = getattr(par.optimizer, "optim", par.optimizer)  # ZeroRedundancyOptimizer: this rank's partition
    seen, grads = set(), []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in seen and p.grad is not None:
                seen.add(id(p))
                grads.append(p.grad)
    return grads


def _is_dtensor(t: torch.Tensor) -> bool:
    return hasattr(t, "device_mesh") and hasattr(t, "placements")


PIECE = 1 << 24  # elements of a plain gradient cast to float64 at a time: at most 128 MiB of extra memory
# (a DTensor gradient's local shard is cast whole: a transient float64 copy of the largest shard, on the
# device where the shard lives, after the timed step; on CPU offload that is host memory)


def _sum_of_squares(tensors: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """Sum of squares of every element, accumulated in float64 (an fp32 norm of one large flat shard is off by
    ~1e-6 relative, as much as the tolerance allows)."""
    total = torch.zeros((), dtype=torch.float64, device=device)
    for t in tensors:
        for piece in t.reshape(-1).split(PIECE):
            total += torch.linalg.vector_norm(piece, dtype=torch.float64).square().to(device)
    return total


@torch.no_grad()
def global_norm(grads: list[torch.Tensor], partitioned: bool, device: torch.device, across=None) -> float:
    """The L2 norm of the whole gradient over every rank (see the module docstring); every rank must call it,
    with the same structure of tensors (it may all-reduce).  `across`: a process group whose ranks hold
    different parameters (a pipeline's stages), over which the sums of squares add up (one more all-reduce)."""
    from torch.distributed.tensor import DTensor, Replicate  # DTensors exist only where torch.distributed does

    plain: list[torch.Tensor] = []
    groups: dict[tuple, list[torch.Tensor]] = {}
    for g in grads:
        if not _is_dtensor(g):
            plain.append(g)
            continue
        if any(p.is_partial() for p in g.placements):
            g = g.redistribute(placements=[Replicate() if p.is_partial() else p for p in g.placements])
        groups.setdefault((g.device_mesh, tuple(g.placements)), []).append(g)
    total = _sum_of_squares(plain, device)
    if partitioned and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(total)
    for group in groups.values():
        norms = torch.stack([torch.linalg.vector_norm(g, dtype=torch.float64) for g in group])
        norm = torch.linalg.vector_norm(norms)
        # reduced on the compute device: an offloaded (CPU) shard's norm would otherwise be all-reduced on the
        # CPU, which an NCCL-only process group cannot do
        norm = DTensor.from_local(norm.to_local().to(device), norm.device_mesh, norm.placements, run_check=False)
        total += norm.full_tensor().square()
    if across is not None:
        dist.all_reduce(total, group=across)
    value = total.item()
    # a non-finite gradient (fp16's GradScaler skips that step) is inf, whether inf or NaN arose: the gate lets
    # equal infinities agree, and NaN would never equal NaN on the two sides
    return math.sqrt(value) if math.isfinite(value) else math.inf


@torch.no_grad()
def scale_(grads: list[torch.Tensor], factor: float) -> None:
    """Multiply every gradient in place (the planted grad2x fault: after synchronisation, before the step)."""
    for g in grads:
        g.mul_(factor)
