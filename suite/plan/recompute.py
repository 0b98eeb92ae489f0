"""FLOPs that activation checkpointing recomputes: hardware work beyond the model's (HFU vs MFU).

Model FLOPs per token (flops.py) count each weight's forward and backward once; a checkpointing policy reruns
part of the forward during backward.  Per token and layer, with a block's weights P_block, hidden h, sequence s:

    none        0
    selective   4 h s                       the attention core (QK^T and the weighted sum; its element-wise
                                            ops are not counted: no FLOPs worth a matmul's)
    op-level    2 x (weights of the even-numbered matmuls)    the matmuls whose outputs were not saved
    full        2 P_block + 4 h s           the whole block's forward
    every-k     full's, for L // k of the L layers

Hardware FLOPs = model FLOPs + recompute FLOPs; MFU divides the first by the peak, HFU the second.
"""

from __future__ import annotations

from suite.axes import checkpoint_every
from suite.plan.tensor_parallel import matmul_weights


def recompute_flops_per_token(shape, seq_len: int, checkpointing: str) -> float:
    """Forward FLOPs per token that `checkpointing` reruns in backward (0 for a model of your own: not counted)."""
    layers, hidden = getattr(shape, "layers", None), getattr(shape, "hidden", None)
    if not layers or not hidden or not hasattr(shape, "matmuls") or checkpointing == "none":
        return 0.0
    attention = 4 * hidden * seq_len
    block = 2 * matmul_weights(shape) + attention
    every = checkpoint_every(checkpointing)
    if every:
        return float(layers // every * block)
    per_layer = {
        "selective": attention,
        "op-level": 2 * sum(i * o for n, (i, o, _) in enumerate(shape.matmuls()) if n % 2 == 1),
        "full": block,
    }[checkpointing]
    return float(layers * per_layer)
