"""A Llama style decoder, sized by a `LlamaShape`.

    tokens -> embedding -> L x Block -> RMSNorm -> head (its own matrix: not tied)
    Block:  x = x + Attn(RMSNorm(x));  x = x + SwiGLU(RMSNorm(x))

What differs from GPT-2 (gpt.py), and why:
- RMSNorm instead of LayerNorm: scale by the root mean square only (no mean subtraction, no bias).
- SwiGLU MLP: down(silu(gate(x)) * up(x)), three matrices without biases.
- Rotary position embeddings (RoPE) instead of learned positions: each pair of query/key channels is rotated
  by an angle proportional to the position, so q.k depends on the distance between tokens.  The rotation
  frequencies are a non-persistent buffer (`inv_freq`), not parameters; cos/sin are computed per forward.
- Grouped-query attention: `kv_heads` key/value heads shared by groups of `heads / kv_heads` query heads,
  which shrinks the k/v projections (and the KV cache at inference).
No Linear has a bias, so the parameter count is exactly `LlamaShape.num_parameters()` (a test asserts it).
The attention core is its own parameter-free module (`block.attn.core`) for selective checkpointing.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from suite.models.presets import LlamaShape


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension: a 90 degree turn of each channel pair."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (batch, heads, time, head_dim) by the position angles, in fp32, returned in x's dtype."""
    xf = x.float()
    return (xf * cos + rotate_half(xf) * sin).to(x.dtype)


class CausalCore(nn.Module):
    """Causal scaled-dot-product attention; k and v heads are repeated to match the query heads (GQA)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        groups = q.shape[1] // k.shape[1]
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Attention(nn.Module):
    def __init__(self, shape: LlamaShape):
        super().__init__()
        self.heads, self.kv_heads = shape.heads, shape.kv_heads
        self.head_dim = shape.hidden // shape.heads
        self.wq = nn.Linear(shape.hidden, shape.heads * self.head_dim, bias=False)
        self.wk = nn.Linear(shape.hidden, shape.kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(shape.hidden, shape.kv_heads * self.head_dim, bias=False)
        self.core = CausalCore()
        self.wo = nn.Linear(shape.heads * self.head_dim, shape.hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        # -1 heads: under tensor parallelism a rank computes only its share of the heads
        q = self.wq(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)  # positions enter only through q and k
        y = self.core(q, k, v).transpose(1, 2).reshape(b, t, -1)
        return self.wo(y)


class SwiGLU(nn.Module):
    def __init__(self, shape: LlamaShape):
        super().__init__()
        self.gate = nn.Linear(shape.hidden, shape.ffn, bias=False)
        self.up = nn.Linear(shape.hidden, shape.ffn, bias=False)
        self.down = nn.Linear(shape.ffn, shape.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, shape: LlamaShape):
        super().__init__()
        self.attn_norm = nn.RMSNorm(shape.hidden, eps=1e-5)
        self.attn = Attention(shape)
        self.mlp_norm = nn.RMSNorm(shape.hidden, eps=1e-5)
        self.mlp = SwiGLU(shape)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    """forward(inputs, targets) -> mean cross-entropy; forward(inputs) / logits(inputs) -> (batch, time, vocab).

    Build it with suite.models.build.build_model, which seeds the RNG and calls init_weights()."""

    def __init__(self, shape: LlamaShape):
        super().__init__()
        self.shape = shape
        self.embed = nn.Embedding(shape.vocab, shape.hidden)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = nn.RMSNorm(shape.hidden, eps=1e-5)
        self.head = nn.Linear(shape.hidden, shape.vocab, bias=False)
        # Non-persistent: not in state_dict, not a parameter, so strategies neither shard nor all-reduce it.
        self.register_buffer("inv_freq", self._inv_freq(), persistent=False)

    def _inv_freq(self) -> torch.Tensor:
        head_dim = self.shape.hidden // self.shape.heads
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
        return 1.0 / (self.shape.rope_theta**exponents)

    @torch.no_grad()
    def init_weights(self) -> None:
        """N(0, 0.02) matrices, N(0, 0.02/sqrt(2L)) for each residual branch's last projection (wo, down), unit
        RMSNorm gains, from the global RNG (build_model seeds it).  Also recomputes the rotary buffer, so a
        model built on the meta device can be materialized with `to_empty()` and then this call."""
        self.inv_freq.copy_(self._inv_freq())
        for name, p in self.named_parameters():
            if "norm" in name:
                nn.init.ones_(p)
            elif name.endswith(("attn.wo.weight", "mlp.down.weight")):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * self.shape.layers))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of angle position x frequency, shaped (t, head_dim) to broadcast over batch and heads."""
        angles = torch.outer(positions.to(torch.float32), self.inv_freq)
        angles = torch.cat((angles, angles), dim=-1)  # the same angle for both halves (see rotate_half)
        return angles.cos(), angles.sin()

    def logits(self, inputs: torch.Tensor, seq_len: int | None = None,
               positions: torch.Tensor | None = None) -> torch.Tensor:
        """Token ids -> logits.  A pipeline stage is this model with some parts set to None (as torchtitan does;
        suite/techniques/pipeline_parallel.py): without `embed` the inputs are the previous stage's hidden
        states, without `head` the result is this stage's.  `seq_len`: the positions the rotary tables cover
        when the inputs hold only part of the sequence (default: the inputs' length).  `positions`: each input
        token's place in its sequence, when the inputs are not the sequence in order (context parallelism hands
        a rank chunks from its head and its tail; default: 0 .. seq_len - 1)."""
        # the whole sequence, even where SP splits x: attention sees all of it (a later pipeline stage under SP
        # receives s / t hidden states, so its caller says how long the sequence is)
        if positions is None:
            positions = torch.arange(seq_len or inputs.shape[1], device=inputs.device)
        cos, sin = self.rotary(positions)
        x = self.embed(inputs) if self.embed is not None else inputs
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x)) if self.head is not None else x

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor | None = None,
                seq_len: int | None = None, positions: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.logits(inputs, seq_len, positions)
        if targets is None:  # evaluation (see gpt.py)
            return logits
        return cross_entropy(logits, targets)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean next-token loss of (batch, time, vocab) logits, computed in fp32 (see gpt.py)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
