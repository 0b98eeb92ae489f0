"""The base of every data kind: a rank's micro-batches of a step, drawn deterministically from (seed, step).

Every rank draws the whole global batch from one generator seeded by (seed, kind, step) and keeps its slice,
so any world size and any accumulation split see the same samples in the same order: what lets a 2-rank run be
compared with a 1-rank reference exactly.  The held-out stream uses its own tag (EVAL_TAG).
"""

from __future__ import annotations

import torch

Batch = tuple[torch.Tensor, torch.Tensor]

_MASK = (1 << 63) - 1
EVAL_TAG = -2  # the held-out stream's tag in mix(seed, salt, tag, i): training steps are >= 0, tables -1


def mix(*values: int) -> int:
    """A 63-bit seed from integers (splitmix64 steps): nearby (seed, step) pairs give unrelated streams."""
    x = 0x9E3779B97F4A7C15
    for v in values:
        x = (x ^ (v & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        x = (x ^ (x >> 31)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 29
    return x & _MASK


class Data:
    """Base class: subclasses implement `sample(generator, global_size, start, count)`.

    `sample` must draw all of its random numbers for the whole global batch (global_size samples) from the
    generator, in an order that does not depend on start/count, and return only samples [start, start+count)
    as (inputs, targets).
    """

    salt = 0  # distinguishes the streams of different data kinds with the same seed

    def __init__(self, cell, rank: int, world_size: int):
        glob, micro = cell.global_batch_size, cell.micro_batch_size
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world_size {world_size}")
        if glob % (micro * world_size):
            raise ValueError(
                f"global_batch_size {glob} is not divisible by micro_batch_size {micro} x world_size {world_size}"
            )
        self.seed, self.rank, self.world_size = cell.seed, rank, world_size
        self.global_batch_size, self.micro_batch_size = glob, micro
        self.per_rank = glob // world_size
        self.grad_accum = self.per_rank // micro  # == cell.grad_accum when world_size == cell.gpus

    def generator(self, step: int) -> torch.Generator:
        return torch.Generator().manual_seed(mix(self.seed, self.salt, step))

    def sample(self, g: torch.Generator, global_size: int, start: int, count: int) -> Batch:
        raise NotImplementedError

    def micro_batches(self, step: int) -> list[Batch]:
        """This rank's grad_accum micro-batches (inputs, targets) for optimizer step `step`, on the CPU."""
        return self._split(self.sample(self.generator(step), self.global_batch_size, self.rank * self.per_rank,
                                       self.per_rank))

    def eval_sample(self, index: int, global_size: int, start: int, count: int) -> Batch:
        """Held-out samples [start, start+count) of held-out global batch `index`: by default the training
        distribution drawn from the held-out stream (a kind with a held-out split overrides this)."""
        return self.sample(torch.Generator().manual_seed(mix(self.seed, self.salt, EVAL_TAG, index)), global_size,
                           start, count)

    def eval_micro_batches(self, index: int) -> list[Batch]:
        """This rank's micro-batches of held-out global batch `index` (the same samples at every evaluation)."""
        return self._split(self.eval_sample(index, self.global_batch_size, self.rank * self.per_rank, self.per_rank))

    def _split(self, batch: Batch) -> list[Batch]:
        inputs, targets = batch
        m = self.micro_batch_size
        return [(inputs[i * m:(i + 1) * m], targets[i * m:(i + 1) * m]) for i in range(self.grad_accum)]
