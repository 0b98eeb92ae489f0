"""Activation checkpointing: trade recomputation for the memory of activations saved for backward.

Backward needs some of forward's intermediate tensors ("activations").  Without checkpointing all of them
stay alive from a block's forward until its backward, so activation memory grows with layers x batch x
sequence.  Checkpointing a region keeps only its inputs and reruns its forward during backward.

- none:      keep everything.
- full:      each transformer block is a checkpointed region: only its input is kept (one hidden-state
             tensor per block); backward recomputes the block (about one extra forward, ~30% more time).
- selective: each block is wrapped with an op-level policy (torch.utils.checkpoint's
             create_selective_checkpoint_contexts): the outputs of matrix multiplications (mm, addmm, bmm)
             are saved, everything else — the attention core (scaled_dot_product_attention), norms,
             activation functions, element-wise ops, dtype casts — is recomputed in backward.  Matmuls are
             where the FLOPs are, so recomputing the rest is cheap; the attention core is recomputed as in
             Korthikanti et al.'s selective recomputation.  (This choice works for every model family,
             including torchvision's ViT, without naming submodules.)

Blocks are wrapped with checkpoint_wrapper (non-reentrant torch.utils.checkpoint), in place in
`model.blocks`, before compile and before sharding, so FSDP shards the wrapped blocks (torchtitan's order).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from suite.axes import CHECKPOINTING


_aten = torch.ops.aten
SAVED_OPS = {_aten.mm.default, _aten.addmm.default, _aten.bmm.default}


def _save_matmuls(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def _none() -> dict | None:
    return None  # leave the blocks as they are


def _full() -> dict | None:
    return {"preserve_rng_state": False}  # the models have no dropout: nothing random to replay


def _selective() -> dict | None:
    return {**_full(), "context_fn": partial(create_selective_checkpoint_contexts, _save_matmuls)}


# Each value of the activation_checkpointing axis (allowed values: suite/axes.py) -> checkpoint_wrapper's
# arguments for every block, or None to leave the blocks alone.  A new mode is one entry here (and its
# arithmetic in plan/memory.py) beside its entry in the axis table.
POLICIES = {"none": _none, "selective": _selective, "full": _full}


def apply_checkpointing(model: nn.Module, mode: str) -> nn.Module:
    """Wrap every block of `model.blocks` for `mode` (in place); returns the model."""
    if mode not in POLICIES:
        raise ValueError(f"activation_checkpointing {mode!r} has no implementation; implemented: "
                         f"{', '.join(POLICIES)} (allowed: {', '.join(CHECKPOINTING)})")
    kwargs = POLICIES[mode]()
    if kwargs is None:
        return model
    for i, block in enumerate(model.blocks):
        model.blocks[i] = checkpoint_wrapper(block, **kwargs)  # non-reentrant (use_reentrant=False) by default
    return model
