"""Tensor parallelism for Llama blocks, Megatron-style, with DTensor's `parallelize_module` (as torchtitan), and
optionally sequence parallelism and loss parallelism on top.

In each block, over the t ranks of the tensor-parallel mesh:

    attention: wq, wk, wv  ColwiseParallel   each rank computes heads / t query heads, kv_heads / t kv heads
               wo          RowwiseParallel   partial sums of the output, all-reduced (forward)
    mlp:       gate, up    ColwiseParallel   ffn / t of the hidden units
               down        RowwiseParallel   all-reduced

So one all-reduce of the (b, s, h) activations after attention and one after the MLP in forward, and two more
for the input gradients in backward.  The model needs no change: its views infer the local head count
(`view(b, t, -1, head_dim)`), and every rank of a tensor-parallel group sees the same micro-batches (the data
is split over the data-parallel ranks only).  Weights are initialized whole on every rank (the same seed),
then each rank keeps its slice: the same model as on one rank, which the tests check.

Without sequence parallelism the norms, the embedding and the head stay replicated: every rank holds the whole
residual stream and its norms (Korthikanti et al.'s s b h (10 + 24 / t) bytes per layer).

**Sequence parallelism** (`sequence_parallel`, Korthikanti et al. 2022; torchtitan's plan): between the blocks'
matmuls the residual stream is split on the sequence, `Shard(1)`, so each rank holds s / t of it and runs the
norms on its own tokens (`SequenceParallel`).  Before attention and the MLP, `PrepareModuleInput` all-gathers the
sequence (Shard(1) -> Replicate); wo and down end in a reduce-scatter onto the sequence (`output_layouts=
Shard(1)`) instead of an all-reduce: the same bytes moved, and the activations outside the matmuls / t
(s b h 34 / t per layer).  The embedding is split on the vocabulary (`RowwiseParallel`: each rank looks up its
rows, the partial sums are reduce-scattered onto the sequence), the head on the vocabulary too (`ColwiseParallel`
from the sequence-split final norm).

**Loss parallelism** (`loss_parallel`): the head's output stays split on the vocabulary (`Shard(-1)`, a DTensor),
and the cross-entropy runs on the shards under `torch.distributed.tensor.parallel.loss_parallel()` (a max and a
sum all-reduced over t instead of an all-gather of (b, s, vocab) logits).  The loss and its backward must both
run inside that context: `loss_context()` is what the training loop enters around each micro-batch.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Callable

from torch import nn


def apply_tensor_parallel(model: nn.Module, tp_mesh, sequence_parallel: bool = False,
                          loss_parallel: bool = False) -> None:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    sp = sequence_parallel
    if sp or loss_parallel:
        outer = {
            # each rank looks up its vocabulary rows; the partial sums land split on the sequence (SP) or whole
            "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1) if sp else Replicate()),
            **({"norm": SequenceParallel()} if sp else {}),
            "head": ColwiseParallel(input_layouts=Shard(1) if sp else Replicate(),
                                    output_layouts=Shard(-1) if loss_parallel else Replicate(),
                                    use_local_output=not loss_parallel),
        }
        # a pipeline stage holds only some of them (the others are None): plan only those it holds
        held = {name: style for name, style in outer.items() if getattr(model, name, None) is not None}
        if held:
            parallelize_module(model, tp_mesh, held)
    out = Shard(1) if sp else Replicate()  # where wo's and down's output goes: reduce-scatter (SP) or all-reduce
    for block in model.blocks:
        plan = {
            "attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(output_layouts=out),
            "mlp.gate": ColwiseParallel(), "mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel(output_layouts=out),
        }
        if sp:
            plan.update({
                "attn_norm": SequenceParallel(), "mlp_norm": SequenceParallel(),
                # attention's inputs: (x, cos, sin); x is all-gathered on the sequence, the rotary tables are whole
                "attn": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                           desired_input_layouts=(Replicate(), None, None)),
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            })
        parallelize_module(block, tp_mesh, plan)


def loss_context(loss_parallel: bool) -> Callable[[], AbstractContextManager]:
    """What the loop enters around each micro-batch's forward and backward: PyTorch's loss_parallel() when the
    head's output is split on the vocabulary, else nothing."""
    if not loss_parallel:
        return nullcontext
    from torch.distributed.tensor.parallel import loss_parallel as context

    return context
