"""What every strategy hands back (`Parallel`), and the helpers they share: the optimizer and byte counting.

The strategy interface is deliberately small.  A strategy is a function

    apply(model: nn.Module, mesh: DeviceMesh | None, policy: Policy, device: torch.device) -> Parallel

that receives the plain model (already on `device`, already checkpointed / compiled by
`suite/worker/parallelize.py`) inside an initialized process group, the device mesh it spreads the model over
(None: every rank of the process group, one dimension; with tensor parallelism, the data-parallel part of the
(dp, tp) mesh), and a `Policy`: the few settings a strategy acts on (precision, optimizer, bucket size, shard
group), never the whole cell.  It returns a `Parallel`.  The training loop (suite/worker/loop.py) only ever
talks to a `Parallel`:

    optimizer.zero_grad(set_to_none=True)
    for each micro-batch but the last:   with no_sync(): forward under autocast if `autocast`, backward
    last micro-batch:                                    forward, backward   (gradients synchronized here)
    before_step();  optimizer.step() (through the GradScaler for fp16);  after_step()

`before_step` / `after_step` are for hand-written strategies whose communication is not hidden inside a
wrapper (e.g. wait for the gradient all-reduce, or all-gather updated shards after the step); the native
strategies leave them empty.  `count_bytes` reports this rank's parameter / gradient / optimizer-state bytes
counted from the tensors (local shards only) so results can stand beside the planner's prediction.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal

import torch
from torch import nn

from suite.results.schema import TensorBytes
from suite.scenario.experiment import Optimizer
from suite.techniques.context_parallel import ContextParallel
from suite.techniques.pipeline_parallel import Pipeline


def _nothing() -> None:
    return None


@dataclass
class Parallel:
    """A model made data-parallel, ready for the training loop.

    model:       call as `model(inputs, targets) -> loss` (the wrapped / sharded module).
    optimizer:   the torch.optim.Optimizer the loop zeroes and steps (and a GradScaler unscales).
    count_bytes: () -> TensorBytes of this rank (local shards only), called after the first optimizer step.
    no_sync:     () -> context manager wrapping forward+backward of every micro-batch except the last, so
                 gradients are synchronized once per optimizer step (DDP.no_sync, FSDP2 requires_gradient_sync).
    before_step: called after the last micro-batch's backward, before the (scaled) optimizer step.
    after_step:  called right after the optimizer step.
    autocast:    True when the loop must run forward under torch.autocast for mixed precision; False when the
                 strategy casts by itself (FSDP2's MixedPrecisionPolicy).
    tracker:     which MemTracker the peaks pass uses: "module" (MemTracker) or "fsdp" (FSDPMemTracker).
    sharded_grad_scaler: fp16 needs a GradScaler whose inf check is all-reduced over ranks (FSDP's shards).
    extra:       strategy facts worth recording (go into RankRecord.extra).
    loss_context: () -> context manager around each micro-batch's forward and backward: PyTorch's
                 loss_parallel() when the head's output is split on the vocabulary (set by the worker's
                 parallelize, not by strategies), else nothing.
    pipeline:    with pipeline parallelism, the schedule that runs a step's micro-batches through this rank's
                 stages (suite/techniques/pipeline_parallel.py; set by the worker's parallelize): the loop and
                 evaluation call it instead of `model`.  None otherwise.
    context_parallel: with context parallelism, what splits each micro-batch's sequence over the cp ranks and
                 makes attention a ring while the loop's forward and backward run inside it
                 (suite/techniques/context_parallel.py; set by the worker's parallelize).  None otherwise.
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    count_bytes: Callable[[], TensorBytes]
    no_sync: Callable[[], AbstractContextManager] = nullcontext
    before_step: Callable[[], None] = _nothing
    after_step: Callable[[], None] = _nothing
    autocast: bool = True
    tracker: Literal["module", "fsdp"] = "module"
    sharded_grad_scaler: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    loss_context: Callable[[], AbstractContextManager] = nullcontext
    pipeline: Pipeline | None = None
    context_parallel: ContextParallel | None = None


def combine(parts: list[Parallel], policy: Policy, device: torch.device) -> Parallel:
    """One Parallel over several model chunks a strategy wrapped one by one (a pipeline rank holding v stages):
    one optimizer over all their parameters, each chunk's sync and step hooks in turn, bytes summed."""
    from contextlib import ExitStack

    params = [p for part in parts for group in part.optimizer.param_groups for p in group["params"]]
    optimizer = make_optimizer(params, policy.optimizer, device)

    def no_sync():
        stack = ExitStack()
        for part in parts:
            stack.enter_context(part.no_sync())
        return stack

    def count_bytes() -> TensorBytes:
        counts = [part.count_bytes() for part in parts]  # each chunk's own optimizer was never stepped: no states
        summed = {k: sum(getattr(c, k) for c in counts) for k in TensorBytes.model_fields}
        return TensorBytes(**{**summed, "optimizer_states": optimizer_state_bytes(optimizer)})

    def before_step() -> None:
        for part in parts:
            part.before_step()

    def after_step() -> None:
        for part in parts:
            part.after_step()

    return Parallel(model=nn.ModuleList(part.model for part in parts), optimizer=optimizer, count_bytes=count_bytes,
                    no_sync=no_sync, before_step=before_step, after_step=after_step, autocast=parts[0].autocast,
                    tracker=parts[0].tracker, sharded_grad_scaler=any(p.sharded_grad_scaler for p in parts),
                    extra=parts[0].extra)


@dataclass(frozen=True)
class Policy:
    """What a strategy's `apply` is told besides the model and the mesh: the settings it acts on, nothing else
    (the worker makes it from the cell: suite/worker/parallelize.policy_of)."""

    strategy: str  # the registry name (FSDP reads its entry: what it shards, whether it offloads)
    precision: str  # one of suite.axes.PRECISIONS
    optimizer: Optimizer  # the scenario's optimizer settings (every strategy builds the same one)
    bucket_cap_mb: float  # gradient bucket size of the bucketed strategies (DDP's bucket_cap_mb)
    shard_size: int | None = None  # hsdp: ranks per shard group; None for the others
    tensor_parallel: int = 1  # tensor-parallel degree the blocks were split with before apply


def whole_world(mesh, policy: Policy) -> None:
    """For strategies that run over every rank of the process group: refuse a sub-mesh (tensor parallelism
    composes only with the strategies whose registry entry allows it; scenario/tensor_parallel.py checks)."""
    if mesh is not None:
        raise ValueError(f"strategy {policy.strategy} runs over the whole process group; it cannot take the "
                         f"data-parallel part of a {tuple(mesh.shape)} mesh (tensor_parallel "
                         f"{policy.tensor_parallel})")


# ----------------------------------------------------------------------------------------------- optimizer
def make_optimizer_kwargs(opt: Optimizer, device: torch.device) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    """The optimizer class and constructor arguments (lr, weight decay, betas, fused) of `opt`.

    fused "auto" means fused on CUDA (one kernel for all parameters) and the default foreach implementation
    elsewhere; fused=True on CPU is honoured (torch has CPU fused Adam/AdamW kernels)."""
    if opt.name == "sgd":
        return torch.optim.SGD, {"lr": opt.lr, "weight_decay": opt.weight_decay}
    cls = torch.optim.AdamW if opt.name == "adamw" else torch.optim.Adam
    fused = device.type == "cuda" if opt.fused == "auto" else bool(opt.fused)
    return cls, {"lr": opt.lr, "weight_decay": opt.weight_decay, "betas": tuple(opt.betas), "fused": fused}


def make_optimizer(params: Iterable[nn.Parameter], opt: Optimizer, device: torch.device) -> torch.optim.Optimizer:
    cls, kwargs = make_optimizer_kwargs(opt, device)
    return cls(params, **kwargs)


# ----------------------------------------------------------------------------------------------- bytes
def local_nbytes(t: torch.Tensor) -> int:
    """Bytes of this rank's part of a tensor: a DTensor's local shard, or the whole plain tensor."""
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def local_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Sum of `local_nbytes` over `tensors` (None skipped: a parameter without a gradient).  Right for torch's
    wrappers, whose parameters and gradients never share memory; the hand-written strategies alias on purpose
    and count with scratch.common.storage_bytes instead."""
    return sum(local_nbytes(t) for t in tensors if t is not None)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Every tensor in the optimizer's per-parameter state (Adam: exp_avg, exp_avg_sq and the step counter)."""
    return sum(
        local_nbytes(v) for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)
    )


def count_tensor_bytes(
    params: Iterable[torch.Tensor],
    optimizer: torch.optim.Optimizer,
    *,
    masters: Iterable[torch.Tensor] = (),
    count: Callable[[Iterable[torch.Tensor | None]], int] = local_bytes,
    parameters: int | None = None,
    master_weights: int | None = None,
    host: bool = False,
) -> TensorBytes:
    """This rank's TensorBytes, the one way every strategy's `count_bytes` measures itself.

    params:   what forward and backward compute with (the model's parameters, or a wrapper's shards).
    masters:  a separate copy the optimizer updates instead (the hand-written ZeRO's fp32 flat shards).  Their
              gradients count as gradients; their bytes beyond the params' count as master weights, which is
              0 when a master is only a view of the params' memory (fp32) and its size when it is a copy.
    count:    how a list of tensors is measured: `local_bytes` (local shards, tensor by tensor) or
              `storage_bytes` (each storage once, for strategies whose tensors are views of shared buffers).
    parameters, master_weights: bytes to report instead, where they are not a count of `params` and
              `masters` (FSDP2 zero2: the unsharded compute-dtype parameters, its shards a second copy).
    optimizer_states: always the optimizer's own state (ZeroRedundancyOptimizer: pass its local `.optim`).
    host:     CPU offload: also count, as `host`, the bytes of those tensors that are in host memory."""
    params, masters = list(params), list(masters)
    counted = count(params)
    return TensorBytes(
        parameters=counted if parameters is None else parameters,
        # one list, so that a master gradient that is a view of a parameter's gradient counts once
        gradients=count([t.grad for t in params + masters]),
        optimizer_states=optimizer_state_bytes(optimizer),
        master_weights=count(params + masters) - counted if master_weights is None else master_weights,
        host=_host_bytes(params, optimizer) if host else 0,
    )


def _host_bytes(params: list[torch.Tensor], optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the parameters, their gradients and the optimizer states that are in host memory."""
    def local(t):
        return t.to_local() if hasattr(t, "to_local") else t

    tensors = [*params, *(p.grad for p in params if p.grad is not None),
               *(v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor))]
    return sum(local_nbytes(t) for t in tensors if local(t).device.type == "cpu")
