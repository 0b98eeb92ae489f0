"""Deterministic training data: `build_data(cell, rank, world_size).micro_batches(step)`.

The contract that lets a 2-rank run be compared with a 1-rank reference sample by sample:

- The global batch of optimizer step t depends only on (cell.seed, t): every random number a step needs is
  drawn from a fresh `torch.Generator` seeded from (seed, step), for the whole global batch, on every rank.
  Nothing carries state from one step to the next, so steps can be produced in any order (and resumed).
- Rank r takes the r-th contiguous slice of global_batch_size / world_size samples and splits it into
  micro-batches of micro_batch_size.  So 1 rank x 4 micro-batches, 2 ranks x 2 and 4 ranks x 1 see the same
  samples, in the same order, at every step.

Drawing the global batch's random numbers (cheap: indices, offsets, choices) on every rank and materializing
only the rank's own samples keeps each rank's work proportional to its slice.

Held-out data (scenario `eval:`): `eval_micro_batches(i)` is this rank's slice of held-out global batch i,
split like a training batch.  It depends on i alone, so every evaluation of a run sees the same held-out
samples and the eval curve measures the model, not the sample.  By default it comes from the kind's own
generator seeded with EVAL_TAG, a tag no training step uses (steps are >= 0, -1 seeds a kind's fixed
tables); text holds out the corpus' tail and cifar10 uses the test split instead (their modules say how).

Kinds: synthetic.py (a Markov-chain token task, or class-pattern images for vit), text.py (byte-level LM over
text files), cifar10.py (torchvision's CIFAR-10).  All tensors are returned on the CPU; the worker moves them.
"""

from __future__ import annotations

from suite.data.source import EVAL_TAG, Batch, Data, mix

__all__ = ["EVAL_TAG", "Batch", "Data", "build_data", "mix"]

def build_data(cell, rank: int, world_size: int) -> Data:
    """The data source for a cell (a suite.scenario.expand.Cell), for one rank of `world_size`."""
    kind = cell.data.kind
    if kind == "synthetic":
        from suite.data.synthetic import synthetic_data

        return synthetic_data(cell, rank, world_size)
    if kind == "text":
        from suite.data.text import TextData

        return TextData(cell, rank, world_size)
    if kind == "cifar10":
        from suite.data.cifar10 import Cifar10Data

        return Cifar10Data(cell, rank, world_size)
    raise ValueError(f"data.kind {kind!r} is unknown; expected synthetic, text or cifar10")
