"""Tensor-parallel arithmetic (pure): what t-way Megatron tensor parallelism of the Llama blocks changes.

- Parameters per rank: each block's projections (q, k, v, o, gate, up, down) split t ways, its two RMSNorm
  gains, the embedding, the final norm and the head replicated:
      Psi_tp = Psi - L x split x (1 - 1/t),     split = 2 h^2 + 2 h kv + 3 h f   (kv = kv_heads x head_dim)
  With sequence or loss parallelism the embedding and the head are split on the vocabulary too:
      Psi_tp = Psi - (L x split + 2 V h) x (1 - 1/t)
  The strategy's ZeRO sharding then applies to Psi_tp over the gpus / t data-parallel ranks.
- Activations per layer (Korthikanti et al. 2022, tensor parallelism without sequence parallelism):
      s b h (10 + 24 / t + 5 a s / (h t))
  the residual stream, norms and their inputs are replicated (10), the attention and MLP interiors split (24);
  with sequence parallelism the replicated part is split on the sequence too: s b h (34 / t + 5 a s / (h t)).
  Loss parallelism keeps the (b, s, V) logits (and their fp32 copy for the loss) split: V / t per rank; the
  temporaries of its backward are not (traced: as large as without it).
- Communication per micro-batch: one all-reduce of the (b, s, h) activations after attention and one after the
  MLP in forward, two of their input gradients in backward: 4 all-reduces of s b h elements per layer, 2 x each
  for a ring (as comm.py counts all-reduces): 8 s b h L elements per rank per micro-batch (12 with full
  checkpointing, which runs each block's forward, and its two all-reduces, again in backward).  Sequence
  parallelism turns each all-reduce into an all-gather plus a reduce-scatter (1 x each for a ring): the same
  8 s b h L elements, with activations / t between them.
"""

from __future__ import annotations


def split_parameters(shape) -> int:
    """Parameters of one block that tensor parallelism splits (all but the two norm gains)."""
    return shape.block_parameters() - 2 * shape.hidden


def matmul_outputs(shape, tp: int = 1) -> list[float]:
    """One block's matmul output widths on one rank, in forward order (the split ones divided by t)."""
    return [out / (tp if split else 1) for _, out, split in shape.matmuls()]


def matmul_weights(shape, tp: int = 1) -> float:
    """One block's matmul weights on one rank (what autocast copies to 16 bits; half a full recompute's FLOPs
    per token)."""
    return sum(i * o / (tp if split else 1) for i, o, split in shape.matmuls())


def block_parameters(shape, tp: int = 1) -> float:
    """Parameters of one block on one tensor-parallel rank: its projections / t, its norm gains whole."""
    return shape.block_parameters() - (split_parameters(shape) * (1 - 1 / tp) if tp > 1 else 0)


def ends_split(cell) -> int:
    """What the embedding and the head are divided by: t with sequence or loss parallelism (split on the
    vocabulary), else 1 (replicated)."""
    t = getattr(cell, "tensor_parallel", 1)
    return t if getattr(cell, "sequence_parallel", False) or getattr(cell, "loss_parallel", False) else 1


def per_rank_parameters(cell) -> float:
    """Psi_tp: the parameters one tensor-parallel rank holds before any ZeRO sharding (Psi when t = 1)."""
    t, shape = getattr(cell, "tensor_parallel", 1), cell.model
    psi = shape.num_parameters()
    if t == 1:
        return psi
    ends = 2 * shape.vocab * shape.hidden * (1 - 1 / ends_split(cell))  # the embedding's rows, the head's columns
    return psi - shape.layers * (shape.block_parameters() - block_parameters(shape, t)) - ends


def tp_comm_elements(cell) -> float:
    """Elements each rank sends per optimizer step for tensor parallelism (0 when t = 1)."""
    t = getattr(cell, "tensor_parallel", 1)
    if t == 1:
        return 0.0
    # full checkpointing recomputes each block's forward in backward: its 2 all-reduces again (12, not 8)
    per = 12.0 if cell.activation_checkpointing == "full" else 8.0
    # a pipeline rank runs its L / p layers; a context-parallel rank s / c of the sequence
    layers = cell.model.layers / getattr(cell, "pipeline_parallel", 1)
    seq = cell.seq_len / getattr(cell, "context_parallel", 1)
    return per * seq * cell.micro_batch_size * cell.model.hidden * layers * cell.grad_accum
