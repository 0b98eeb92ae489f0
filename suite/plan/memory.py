"""Per-rank memory: the ZeRO paper's static model and Korthikanti et al.'s activation model.

Static memory (arXiv 1910.02054), Psi parameters, N ranks, Adam:
  mixed precision: 2 Psi params (16-bit) + 2 Psi grads (16-bit) + 4 Psi fp32 master weights + 8 Psi moments
  fp32:            4 Psi params + 4 Psi grads + 8 Psi moments (no separate master copy)
ZeRO-1 shards the optimizer states and master weights over N, ZeRO-2 also the gradients, ZeRO-3 (FSDP) also
the parameters.  HSDP is ZeRO-3 within shard groups of S ranks, replicated across groups: N becomes S.  CPU
offload (ZeRO-Offload) keeps these static bytes in host memory: they are `host`, apart from the device total.  DDP shards nothing.  What a strategy shards is its registry entry's `shards` (its family's;
a hand-written strategy is in its native twin's family).  Real implementations add buffers (FSDP's unsharded layer, DDP's buckets);
the measured numbers stand beside these, with the ratio, rather than being folded into them.

Activations (Korthikanti et al. 2022), bytes per layer with 16-bit activations, no parallelism:
  none:      s b h (34 + 5 a s / h)     (the 5 a s / h term is the s x s attention scores, softmax, dropout)
  selective: s b h 34                   (attention core recomputed)
  full:      2 s b h                    (only each layer's input kept)
  every-k:   L // k layers as full, the others as none (layer-level checkpointing)
  op-level:  not in the paper (torchtitan's policy): the as-implemented bytes (plan/implemented.py)
This is the textbook formula.  Fused attention (flash / memory-efficient SDPA) never materializes the s x s
scores, so on GPUs `none` comes out well below it; suite measures the difference instead of hiding it.  For
fp32 activations the bytes are doubled (every 16-bit tensor of the derivation is 4 bytes instead).
"""

from __future__ import annotations

from pydantic import BaseModel

from suite.axes import checkpoint_every
from suite.plan.tensor_parallel import matmul_outputs
from suite.strategies import registry

# bytes per parameter per rank before sharding: (params, grads, master weights, optimizer states)
_BYTES = {"fp32": (4, 4, 0, 8), "mixed": (2, 2, 4, 8)}
class MemoryBreakdown(BaseModel):
    """Per-rank bytes, by what holds them."""

    parameters: float
    gradients: float
    optimizer_states: float
    master_weights: float
    activations: float
    total: float  # on the device: everything above but the host bytes
    host: float = 0.0  # CPU offload: bytes of the above kept in host memory (not in total)
    temporaries: float = 0.0  # as implemented: the loss's gradients or autocast's weight copies at the peak
    gradients_absent_at_peak: float = 0.0  # as implemented: gradients not yet made at the peak (not in total)


def offloaded(static: dict[str, float], strategy: str, device_extra: float, activations: float) -> MemoryBreakdown:
    """The breakdown of a strategy's static bytes, its device-only extra bytes (already in static's
    parameters) and activations: an offloading strategy keeps the static bytes but that extra on the host."""
    host = sum(static.values()) - device_extra if registry.get(strategy).offload else 0.0
    return MemoryBreakdown(**static, activations=activations, total=sum(static.values()) + activations - host,
                           host=host)


def shard_world(cell) -> int:
    """The ranks a cell's sharded bytes divide over: the world, or hsdp's shard group (registry shard_group)."""
    shard = getattr(cell, "shard_size", None)
    if shard and registry.get(cell.strategy).shard_group:
        return shard
    # the data- (and context-) parallel ranks that hold the same stage's same tensor-parallel slice
    return cell.gpus // (getattr(cell, "tensor_parallel", 1) * getattr(cell, "pipeline_parallel", 1))


def static_bytes(num_parameters: int, strategy: str, precision: str, world: int) -> dict[str, float]:
    """Parameters, gradients, master weights and Adam states per rank, in bytes."""
    per_param = _BYTES["fp32" if precision == "fp32" else "mixed"]
    shards = registry.get(strategy).shards
    # (params, grads, master, optimizer): fp32 master weights are sharded with the optimizer states
    sharded = (shards.parameters, shards.gradients, shards.optimizer_states, shards.optimizer_states)
    params, grads, master, optim = (
        num_parameters * b / (world if s else 1) for b, s in zip(per_param, sharded)
    )
    return {"parameters": params, "gradients": grads, "optimizer_states": optim, "master_weights": master}


def activation_bytes(shape, seq_len: int, micro_batch: int, checkpointing: str, precision: str,
                     tp: int = 1, sequence_parallel: bool = False, context: int = 1) -> float:
    """Textbook activation bytes for one micro-batch over all layers (see the module docstring); with tensor
    parallelism t, Korthikanti et al.'s s b h (10 + 24 / t + 5 a s / (h t)), and with sequence parallelism
    s b h (34 / t + 5 a s / (h t)): the replicated part (and a checkpointed block's input) split on the sequence
    too (plan/tensor_parallel.py).  With context parallelism c each rank holds s / c of the sequence: every term
    / c (its queries' scores still span the whole sequence)."""
    s, b, h, a, layers = seq_len, micro_batch / context, shape.hidden, shape.heads, shape.layers
    scale = 2 if precision == "fp32" else 1
    if checkpointing == "op-level":
        return op_level_layer_bytes(shape, s, b, precision, tp) * layers
    rest = tp if sequence_parallel else 1  # what tensor parallelism alone leaves whole on every rank
    per_layer = {
        "none": s * b * h * (10 / rest + 24 / tp + 5 * a * s / (h * tp)),
        "selective": s * b * h * (10 / rest + 24 / tp),
        "full": 2 * s * b * h / rest,
    }
    return layered(per_layer, checkpointing, layers) * scale


def layered(per_layer: dict[str, float], checkpointing: str, layers: int) -> float:
    """All layers' bytes from one layer's under none / selective / full (and op-level when given): every-k
    checkpoints L // k layers in full and leaves the others as none."""
    every = checkpoint_every(checkpointing)
    if every:
        full = layers // every
        return full * per_layer["full"] + (layers - full) * per_layer["none"]
    return per_layer[checkpointing] * layers


def op_level_layer_bytes(shape, seq_len: int, micro_batch: int, precision: str, tp: int = 1) -> float:
    """One layer's saved bytes under the op-level policy (techniques/checkpointing.py): the block's input (fp32
    residual stream under autocast, as the trace shows), the outputs of its odd-numbered matmuls and of the
    attention kernel in the compute dtype, and the kernel's fp32 logsumexp.  Needs the shape's `matmuls()`."""
    tokens = seq_len * micro_batch
    compute = 4 if precision == "fp32" else 2
    saved = sum(matmul_outputs(shape, tp)[0::2])
    attention = shape.hidden / tp
    return tokens * (4 * shape.hidden + compute * (saved + attention) + 4 * shape.heads / tp)
