"""Activation checkpointing: trade recomputation for the memory of activations saved for backward.

Backward needs some of forward's intermediate tensors ("activations").  Without checkpointing all of them
stay alive from a block's forward until its backward, so activation memory grows with layers x batch x
sequence.  Checkpointing a region keeps only its inputs and reruns its forward during backward.  The policies
people compare differ in what they keep:

- none:      keep everything.
- every-4,   layer-level (torchtitan's `selective_ac_option: k`): every k-th block (the 4th, 8th, ...; k = 4 or
  every-2:   2) is checkpointed in full, the others keep everything.  Memory and recompute fall by about 1/k
             of full checkpointing's.
- selective: each block is wrapped with an op-level policy (torch.utils.checkpoint's
             create_selective_checkpoint_contexts): the outputs of matrix multiplications (mm, addmm, bmm)
             are saved, everything else — the attention core (scaled_dot_product_attention), norms,
             activation functions, element-wise ops, dtype casts — is recomputed in backward.  Matmuls are
             where the FLOPs are, so recomputing the rest is cheap; the attention core is recomputed as in
             Korthikanti et al.'s selective recomputation.  (This choice works for every model family,
             including torchvision's ViT, without naming submodules.)  The seed's policy.
- op-level:  torchtitan's op-level policy: the attention kernel's outputs and every other matmul's (the 1st,
             3rd, ... of each block's forward) are saved; the other matmuls, norms and element-wise ops are
             recomputed.  Less memory than `selective`, some matmuls' FLOPs recomputed.
- full:      each transformer block is a checkpointed region: only its input is kept (one hidden-state
             tensor per block); backward recomputes the block (about one extra forward, ~30% more time).

Blocks are wrapped with checkpoint_wrapper (non-reentrant torch.utils.checkpoint), in place in
`model.blocks`, before compile and before sharding, so FSDP shards the wrapped blocks (torchtitan's order).
What each policy saves and recomputes, in bytes and FLOPs, is the planner's (plan/memory.py, plan/recompute.py).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from suite.axes import CHECKPOINTING, checkpoint_every

_aten = torch.ops.aten
SAVED_OPS = {_aten.mm.default, _aten.addmm.default, _aten.bmm.default}
MATMULS = {_aten.mm.default, _aten.addmm.default}  # a linear layer's forward (with or without bias)
# the attention kernels SDPA dispatches to (their outputs include the logsumexp backward needs)
ATTENTION_OPS = {getattr(_aten, name).default
                 for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                              "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")
                 if hasattr(_aten, name)}


def _save_matmuls(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def _every_other_matmul():
    """A fresh op-level policy for one checkpointed forward (or its recomputation): attention outputs and the
    odd-numbered matmuls saved.  Forward and recomputation count separately, so both make the same choices."""
    seen = {False: 0, True: 0}

    def policy(ctx, op, *args, **kwargs) -> CheckpointPolicy:
        if op in MATMULS:
            seen[ctx.is_recompute] += 1
            keep = seen[ctx.is_recompute] % 2 == 1
        else:
            keep = op in ATTENTION_OPS
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


_FULL = {"preserve_rng_state": False}  # the models have no dropout: nothing random to replay


def _block_kwargs(mode: str, index: int) -> dict | None:
    """checkpoint_wrapper's arguments for block `index` under `mode`, or None to leave the block alone."""
    if mode == "none":
        return None
    if mode == "full":
        return _FULL
    if mode == "selective":
        return {**_FULL, "context_fn": partial(create_selective_checkpoint_contexts, _save_matmuls)}
    if mode == "op-level":
        return {**_FULL, "context_fn": _every_other_matmul}
    every = checkpoint_every(mode)
    if every:
        return _FULL if (index + 1) % every == 0 else None
    raise ValueError(f"activation_checkpointing {mode!r} has no implementation; allowed: {', '.join(CHECKPOINTING)}")


# Each value of the activation_checkpointing axis (allowed values: suite/axes.py) -> a function of the block
# index giving checkpoint_wrapper's arguments (None: the block is left alone).  A new mode is one entry here
# (and its arithmetic in plan/memory.py, plan/implemented.py, plan/recompute.py) beside its entry in the table.
POLICIES = {mode: partial(_block_kwargs, mode) for mode in CHECKPOINTING}


def apply_checkpointing(model: nn.Module, mode: str) -> nn.Module:
    """Wrap the blocks of `model.blocks` for `mode` (in place); returns the model."""
    if mode not in POLICIES:
        raise ValueError(f"activation_checkpointing {mode!r} has no implementation; implemented: "
                         f"{', '.join(POLICIES)} (allowed: {', '.join(CHECKPOINTING)})")
    for i, block in enumerate(model.blocks):
        kwargs = POLICIES[mode](i)
        if kwargs is not None:
            model.blocks[i] = checkpoint_wrapper(block, **kwargs)  # non-reentrant (use_reentrant=False) by default
    return model
