"""Pipeline- and context-parallel arithmetic (pure): what p pipeline stages and c context-parallel ranks change.

Pipeline parallelism (Narayanan et al. 2021; Qi et al. 2023; ../shared/reference.md), p stages, m micro-batches
per step (the accumulation), v model chunks per rank (suite.axes.PIPELINE_SCHEDULES: 2 for interleaved-1f1b):

- Stages: rank i of the pipeline holds L / p blocks (as v chunks of L / (p v)); rank 0 also the embedding, rank
  p - 1 the final norm and the head (gpt's tied head: a copy on the last rank).  Tensor parallelism splits each
  of them as plan/tensor_parallel.py says; ZeRO then shards a rank's bytes over its gpus / (p t) data- and
  context-parallel peers (FSDP's mesh, as torchtitan's dp_shard x cp).
- Activations in flight, as micro-batches of one stage's layers, on pipeline rank i:
      gpipe                 m                                   (every forward before any backward)
      1f1b                  min(m, p - i)                        (rank 0 holds p)
      interleaved-1f1b      min(m, ((v - 1) p + 2 (p - 1 - i) + 1) / v)  (PyTorch's warm-up forwards and one
                                                                  more, in chunks of 1 / v; rank 0: p + (p - 1) / v,
                                                                  Korthikanti et al.'s 1 + (p-1)/(pv) x 1f1b's)
      zero-bubble           min(m, p)                            (every rank: v p chunks of 1 / v, each kept
                                                                  until its weight-gradient pass)
  so the first rank is the worst for activations, the last holds the loss's vocabulary-wide tensors too; the
  cell's peak is the larger of the two (`stage_ranks`).
- Bubble, as a fraction of the step:
      gpipe, 1f1b           (p - 1) / (m + p - 1)                (of the ideal time: (p - 1) / m)
      interleaved-1f1b      (p - 1) / (v m + p - 1)              (the bubble / v)
      zero-bubble           (p - 1) / (3 v m + p - 1)            (PyTorch's interleaved ZB1P, v = 2: the backward
                                                                  split into input- and weight-gradient passes)
  The interleaved and zero-bubble rows are those of PyTorch's own orders (`_calculate_single_rank_operations`)
  run through a dependency simulation with forward = input gradient = weight gradient (a full backward = 2
  forwards) and no message cost: exact for p = 2, 4, 8 and m = p to 8p (docs/parallelism.md).
- Messages: a stage keeps a receive buffer per micro-batch and message, and a send's work holds its tensor
  until the schedule drops the work, which gpipe and the runtime schedules do only at the end of the step
  (`message_tensors`): m activation-sized tensors per chunk boundary, 2 m where the sends are held.
- Point-to-point per step: each rank sends one (b, s / c, h) activation forward and one gradient backward per
  micro-batch and chunk boundary: 2 v m s b h / c elements (/ t with sequence parallelism).

Context parallelism (ring attention, c ranks): each rank holds s / c of every sequence (2 load-balanced chunks),
so its activations and the loss's tensors are / c; each attention passes its K and V blocks around the ring
c - 1 times in forward and K, V and their gradients in backward: 6 (c - 1) (s / c) b kv elements per layer per
micro-batch (kv = kv_heads x head_dim; gpt: h), 8 with full checkpointing (the forward runs again).
"""

from __future__ import annotations

from suite.axes import PIPELINE_SCHEDULES
from suite.plan.tensor_parallel import block_parameters, ends_split, per_rank_parameters


def pipeline(cell) -> tuple[int, int, str | None]:
    """(p, v, schedule) of a cell: (1, 1, None) without pipeline parallelism."""
    p = getattr(cell, "pipeline_parallel", 1)
    schedule = getattr(cell, "pipeline_schedule", None) if p > 1 else None
    return p, PIPELINE_SCHEDULES[schedule].chunks if schedule else 1, schedule


def context(cell) -> int:
    return getattr(cell, "context_parallel", 1)


def stage_ranks(cell) -> list[int]:
    """The pipeline ranks whose peak can be the cell's: the first (embedding, most in flight) and the last (head,
    loss); middle ranks hold less than the first."""
    p = pipeline(cell)[0]
    return [0] if p == 1 else [0, p - 1]


def stage_layers(cell) -> int:
    return cell.model.layers // pipeline(cell)[0]


def stage_shape(cell):
    """The model's shape with one pipeline rank's L / p layers (the model itself without pipelining)."""
    p = pipeline(cell)[0]
    return cell.model if p == 1 else cell.model.model_copy(update={"layers": stage_layers(cell)})


def in_flight(cell, rank: int) -> float:
    """Micro-batches of activations pipeline rank `rank` holds at its peak (1 without pipeline parallelism: the
    accumulation runs its micro-batches one after another)."""
    p, v, schedule = pipeline(cell)
    m = cell.grad_accum
    if p == 1:
        return 1.0
    if schedule == "gpipe":
        return float(m)
    if schedule == "interleaved-1f1b":  # (m a multiple of p: validated)
        return min(float(m), ((v - 1) * p + 2 * (p - 1 - rank) + 1) / v)
    if schedule == "zero-bubble":
        return float(min(m, p))
    return float(min(m, p - rank))


def message_tensors(cell, rank: int) -> float:
    """Activation-sized tensors pipeline rank `rank` holds for its point-to-point messages (0 without a pipeline).

    - Receive buffers: PyTorch's stage allocates one buffer per micro-batch for every message it receives (an
      activation unless the chunk is the first stage, an input gradient unless it is the last) and keeps them
      from the first step on: m per chunk boundary the rank receives across.
    - Sends held: a send's work holds the tensor it sends until the schedule drops the work (gloo and NCCL
      alike), and PyTorch's schedules drop them late: gpipe keeps every send's work to the end of its phase
      loops, and the runtime schedules (interleaved-1f1b, zero-bubble) to the end of the step, so each
      micro-batch's output and input gradient outlive its backward: m more per boundary.  1f1b waits each send
      at the next one (none counted).
    A chunk at global stage j has a boundary forward unless j is the last stage, and backward unless it is the
    first; the two lists count the same boundaries (2 v m on a middle rank).  Measured on 2 gloo ranks (tiny
    llama, interleaved-1f1b, m = 4 to 16, 2026-12-07): the real peaks grew by 6 such tensors per micro-batch."""
    p, v, schedule = pipeline(cell)
    if p == 1:
        return 0.0
    stages = [rank + k * p for k in range(v)]
    boundaries = sum((j < p * v - 1) + (j > 0) for j in stages)
    return float(cell.grad_accum * boundaries * (2 if PIPELINE_SCHEDULES[schedule].sends_held else 1))


def bubble_fraction(cell) -> float:
    """The share of a step the pipeline's ranks sit idle (0 without pipeline parallelism)."""
    p, v, schedule = pipeline(cell)
    m = cell.grad_accum
    if p == 1:
        return 0.0
    work = {"interleaved-1f1b": v * m, "zero-bubble": 3 * v * m}.get(schedule, m)
    return (p - 1) / (work + p - 1)


def stage_parameters(cell, rank: int) -> float:
    """Parameters pipeline rank `rank` holds before ZeRO sharding (tensor parallelism's split applied)."""
    p = pipeline(cell)[0]
    if p == 1:
        return per_rank_parameters(cell)
    shape, h = cell.model, cell.model.hidden
    ends = shape.vocab * h / ends_split(cell)  # the embedding, or the head
    out = stage_layers(cell) * block_parameters(shape, getattr(cell, "tensor_parallel", 1))
    if rank == 0:
        out += ends + (shape.max_seq_len * h if shape.family == "gpt" else 0)
    if rank == p - 1:
        out += ends + (2 * h if shape.family == "gpt" else h)  # gpt: the tied head's copy
    return out


def p2p_elements(cell) -> float:
    """Elements one pipeline rank sends per step to its neighbours (0 without pipeline parallelism)."""
    p, v, _ = pipeline(cell)
    if p == 1:
        return 0.0
    t = getattr(cell, "tensor_parallel", 1) if getattr(cell, "sequence_parallel", False) else 1
    return 2.0 * v * cell.grad_accum * cell.seq_len / context(cell) * cell.micro_batch_size * cell.model.hidden / t


def cp_elements(cell) -> float:
    """Elements one context-parallel rank sends per step around the ring (0 without context parallelism)."""
    c = context(cell)
    if c == 1:
        return 0.0
    shape = cell.model
    kv = shape.kv_heads * (shape.hidden // shape.heads) if hasattr(shape, "kv_heads") else shape.hidden
    kv /= getattr(cell, "tensor_parallel", 1)
    per = 8.0 if cell.activation_checkpointing == "full" else 6.0
    return per * (c - 1) * cell.seq_len / c * cell.micro_batch_size * kv * stage_layers(cell) * cell.grad_accum
