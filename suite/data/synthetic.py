"""Synthetic data generated from the cell's seed: learnable, deterministic, free, any size.

Token models (gpt, llama): sequences from a fixed random Markov chain over the vocabulary.  Every token has
`SUCCESSORS` possible next tokens (drawn once from the seed) taken with the fixed probabilities `PROBS`, so
the best achievable loss is the entropy of PROBS (about 1.11 nats) while a fresh model starts near ln(vocab)
(5.55 for vocab 256): the loss falls clearly within tens of steps once the model learns the successor table.
The table is V x SUCCESSORS integers, so it stays small for a 128k vocabulary too.

Sampling a step: from the step's generator draw, for the whole global batch, the first token of each sequence
and which successor (0..SUCCESSORS-1) each later position takes; then run the chain only for this rank's rows,
one vectorized gather per position.  inputs = seq[:-1], targets = seq[1:] (seq has seq_len + 1 tokens).

Vision models (vit): each class has a fixed random template image (from the seed); a sample is its class's
template plus unit Gaussian noise, normalized like CIFAR-10 images are.  Labels are uniform over the classes.
The noise of sample i comes from its own generator seeded by a number drawn for it, so a rank only
generates its own images.
"""

from __future__ import annotations

import torch

from suite.data.source import Batch, Data, mix

SUCCESSORS = 4
PROBS = (0.55, 0.25, 0.15, 0.05)


class MarkovTokens(Data):
    salt = 1

    def __init__(self, cell, rank: int, world_size: int):
        super().__init__(cell, rank, world_size)
        self.vocab, self.seq_len = cell.model.vocab, cell.seq_len
        g = torch.Generator().manual_seed(mix(cell.seed, self.salt, -1))  # -1: the table, not a step
        self.successors = torch.randint(self.vocab, (self.vocab, SUCCESSORS), generator=g)
        self.probs = torch.tensor(PROBS)

    @staticmethod
    def entropy_of(probs=PROBS) -> float:
        """Loss (nats per token) of a model that knows the chain exactly: the floor the training loss approaches."""
        p = torch.tensor(probs)
        return float(-(p * p.log()).sum())

    def entropy(self) -> float:
        return self.entropy_of(PROBS)

    def sample(self, g: torch.Generator, global_size: int, start: int, count: int) -> Batch:
        n = self.seq_len + 1
        first = torch.randint(self.vocab, (global_size,), generator=g)
        choice = torch.multinomial(self.probs, global_size * (n - 1), replacement=True, generator=g)
        choice = choice.view(global_size, n - 1)[start:start + count]
        seq = torch.empty(count, n, dtype=torch.long)
        seq[:, 0] = first[start:start + count]
        for t in range(1, n):
            seq[:, t] = self.successors[seq[:, t - 1], choice[:, t - 1]]
        return seq[:, :-1], seq[:, 1:]


class PatternImages(Data):
    salt = 2

    def __init__(self, cell, rank: int, world_size: int):
        super().__init__(cell, rank, world_size)
        shape = cell.model  # VitShape or an images PythonShape: image_size, num_classes
        self.classes, self.size = shape.num_classes, shape.image_size
        g = torch.Generator().manual_seed(mix(cell.seed, self.salt, -1))
        self.templates = torch.randn(self.classes, 3, self.size, self.size, generator=g)

    def sample(self, g: torch.Generator, global_size: int, start: int, count: int) -> Batch:
        labels = torch.randint(self.classes, (global_size,), generator=g)[start:start + count]
        noise_seeds = torch.randint(2**62, (global_size,), generator=g)[start:start + count]
        noise = torch.stack([
            torch.randn(3, self.size, self.size, generator=torch.Generator().manual_seed(int(s)))
            for s in noise_seeds
        ])
        images = (self.templates[labels] + noise) / 2**0.5  # unit variance per pixel, like normalized images
        return images, labels


def synthetic_data(cell, rank: int, world_size: int) -> Data:
    """Markov-chain tokens for gpt/llama cells, class-pattern images for vit cells."""
    if cell.model.inputs == "images":  # vit, or an image model of your own (family: python)
        return PatternImages(cell, rank, world_size)
    return MarkovTokens(cell, rank, world_size)
