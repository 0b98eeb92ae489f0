"""torch.compile per transformer block (torchtitan's choice): each block is traced once and the compiled
code is reused by every block of the same shape, so compile time does not grow with depth, and sharding
wrappers applied afterwards stay outside the compiled graphs.  Applied after checkpointing (the checkpointed
region is compiled together with its recomputation) and before sharding."""

from __future__ import annotations

import torch
from torch import nn


def compile_blocks(model: nn.Module) -> nn.Module:
    for i, block in enumerate(model.blocks):
        model.blocks[i] = torch.compile(block)
    return model
