"""The "as implemented" memory model: what suite's code holds at rest, per strategy and precision (pure).

The textbook (memory.py) is the ZeRO paper's accounting: 16-bit parameters and gradients plus a separate
fp32 master copy in mixed precision.  The code differs, and this model follows the code where a formula can:

- Static bytes: each strategy's registry entry says what it holds per parameter (`StrategySpec.holds`, as
  `replicated + sharded / N` bytes), in fp32 and in mixed precision.  Autocast strategies keep fp32
  parameters and gradients and no master copy (ZeRO-1 mixed: 8 + 8/N bytes per parameter, where the
  textbook says 4 + 12/N); FSDP2's fp32 shards are its master copy; the hand-written ZeRO keeps 16-bit flat
  buffers and an fp32 master shard.  These are the numbers `count_bytes` reports after the first step, up to
  padding (flat buffers and FSDP2 shards are padded to a multiple of N) and ZeroRedundancyOptimizer's
  whole-tensor partitions.
- Unsharded parameters: a strategy that shards parameters gathers the root unit (embeddings, final norm,
  head) for all of forward and backward and `Holds.unsharded_blocks` blocks around it, in the compute dtype
  (a trace of llama3-8b zero3 on 8 ranks peaks at exactly root + 1 block: 2.36 GiB).  Counted under
  parameters.
- Activations: the models call fused SDPA, which saves the attention output and one logsumexp per query
  (4 bytes x s x b x a), never the s x s scores, softmax and dropout mask the textbook's 5 a s / h term
  counts.  So: the textbook's per-layer bytes without that term, plus the logsumexp, plus what the loss
  saves: the log-probabilities over the vocabulary in fp32 (4 x s x b x vocab; the models compute the loss in
  fp32).

What it leaves out, and the trace (trace.py) sees: backward's temporaries (the logits' gradient, each
matmul's input gradient), collective and bucket buffers, the optimizer step's temporaries, and that under
autocast part of a block's saved tensors (the residual stream, norm outputs) stay fp32 while the
Korthikanti count assumes 16 bits.  It is a floor, not a peak: for gpt2-small (seq 1024, micro-batch 8,
bf16-mixed, 1 rank) it says 5.8 GiB without checkpointing where the trace peaks at 9.3 GiB.  That is
why `fits` prefers a trace.
"""

from __future__ import annotations

from suite.plan.memory import MemoryBreakdown, layered, offloaded, op_level_layer_bytes, shard_world
from suite.plan.tensor_parallel import per_rank_parameters, split_parameters
from suite.strategies import registry


def static_bytes(num_parameters: int, strategy: str, precision: str, world: int) -> dict[str, float]:
    """Parameters, gradients, master weights and optimizer states per rank, as the code holds them."""
    holds = registry.get(strategy).holds(precision)
    out = {}
    for key in ("parameters", "gradients", "optimizer_states", "master_weights"):
        replicated, sharded = getattr(holds, key)
        out[key] = num_parameters * (replicated + sharded / world)
    return out


def unsharded_bytes(shape, strategy: str, precision: str, tp: int = 1) -> float:
    """The parameters a parameter-sharding strategy holds unsharded while computing (see the docstring); a
    block's split projections are 1/tp of it under tensor parallelism."""
    blocks = registry.get(strategy).holds(precision).unsharded_blocks
    if not blocks:
        return 0.0
    block = shape.block_parameters() - (split_parameters(shape) * (1 - 1 / tp) if tp > 1 else 0)
    root = shape.num_parameters() - shape.layers * shape.block_parameters()
    return (2 if precision != "fp32" else 4) * (root + blocks * block)


def activation_bytes(shape, seq_len: int, micro_batch: int, checkpointing: str, precision: str,
                     tp: int = 1) -> float:
    """Activation bytes for one micro-batch over all layers with fused attention (see the module docstring);
    tensor parallelism t splits the block interiors (24 of the 34) and the heads (plan/tensor_parallel.py)."""
    s, b, h, a, layers = seq_len, micro_batch, shape.hidden, shape.heads, shape.layers
    scale = 2 if precision == "fp32" else 1
    logsumexp = 4 * s * b * a / tp  # fp32, one per query and (local) head
    interior = 10 + 24 / tp
    per_layer = {
        "none": s * b * h * interior * scale + logsumexp,
        "selective": s * b * h * interior * scale,  # the attention core (and its logsumexp) is recomputed
        "full": 2 * s * b * h * scale,
        "op-level": op_level_layer_bytes(shape, s, b, precision, tp),
    }
    return layered(per_layer, checkpointing, layers) + _loss_bytes(shape, s, b)


def _loss_bytes(shape, seq_len: int, micro_batch: int) -> float:
    """The fp32 log-probabilities the loss saves: every token over the vocabulary (gpt, llama), or one row
    of class scores per image (vit)."""
    vocab = getattr(shape, "vocab", None)
    return 4 * micro_batch * (seq_len * vocab if vocab else shape.num_classes)


def predict_memory(cell) -> MemoryBreakdown:
    """The as-implemented per-rank breakdown of a cell."""
    tp = getattr(cell, "tensor_parallel", 1)
    static = static_bytes(per_rank_parameters(cell), cell.strategy, cell.precision, shard_world(cell))
    working = unsharded_bytes(cell.model, cell.strategy, cell.precision, tp)  # on the device, offloaded or not
    static["parameters"] += working
    acts = activation_bytes(cell.model, cell.seq_len, cell.micro_batch_size, cell.activation_checkpointing,
                            cell.precision, tp)
    return offloaded(static, cell.strategy, working, acts)
