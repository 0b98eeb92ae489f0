"""Tensor parallelism for Llama blocks, Megatron-style, with DTensor's `parallelize_module` (as torchtitan).

In each block, over the t ranks of the tensor-parallel mesh:

    attention: wq, wk, wv  ColwiseParallel   each rank computes heads / t query heads, kv_heads / t kv heads
               wo          RowwiseParallel   partial sums of the output, all-reduced (forward)
    mlp:       gate, up    ColwiseParallel   ffn / t of the hidden units
               down        RowwiseParallel   all-reduced

So one all-reduce of the (b, s, h) activations after attention and one after the MLP in forward, and two more
for the input gradients in backward.  The norms, the embedding and the head stay replicated: no sequence
parallelism yet, so every rank holds the whole residual stream and its norms (Korthikanti et al.'s
s b h (10 + 24 / t) bytes per layer).  The model needs no change: its views infer the local head count
(`view(b, t, -1, head_dim)`), and every rank of a tensor-parallel group sees the same micro-batches (the
data is split over the data-parallel ranks only).  Weights are initialized whole on every rank (the same
seed), then each rank keeps its slice: the same model as on one rank, which the tests check.
"""

from __future__ import annotations

from torch import nn


def apply_tensor_parallel(model: nn.Module, tp_mesh) -> None:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    for block in model.blocks:
        parallelize_module(block, tp_mesh, {
            "attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(),
            "mlp.gate": ColwiseParallel(), "mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel(),
        })
