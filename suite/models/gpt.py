"""A GPT-2 style decoder (nanoGPT's shape), sized by a `GptShape`.

    tokens -> token embedding + learned position embedding
           -> L x Block:  x = x + Attn(LayerNorm(x));  x = x + MLP(LayerNorm(x))     (pre-norm)
           -> final LayerNorm -> logits = x @ token_embedding.T                       (tied head)

Every Linear and LayerNorm has a bias, the MLP is Linear(h, ffn) -> GELU -> Linear(ffn, h), and the query, key
and value projections are one fused Linear(h, 3h), so the parameter count is exactly
`GptShape.num_parameters()` (a test asserts it).  The head reuses the token embedding's weight instead of
owning a (vocab x h) matrix: that is GPT-2's weight tying and why the count has no separate head term.

Attention goes through `torch.nn.functional.scaled_dot_product_attention(is_causal=True)`, which picks a fused
kernel (flash / memory-efficient on CUDA, a fused CPU kernel otherwise) and never needs a mask tensor.  The
attention core lives in its own parameter-free module (`block.attn.core`) so selective activation
checkpointing can wrap just that part.

The model knows nothing about distribution: strategies shard or replicate it from the outside, per block
(`model.blocks`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from suite.models.presets import GptShape


class CausalCore(nn.Module):
    """softmax(q k^T / sqrt(d) + causal mask) v over (batch, heads, time, head_dim) tensors; no parameters."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Attention(nn.Module):
    def __init__(self, shape: GptShape):
        super().__init__()
        self.heads = shape.heads
        self.qkv = nn.Linear(shape.hidden, 3 * shape.hidden)  # fused q, k, v projections (with bias)
        self.core = CausalCore()
        self.proj = nn.Linear(shape.hidden, shape.hidden)  # output projection: a residual branch's last layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=2)
        # (b, t, h) -> (b, heads, t, head_dim): each head attends independently.
        q, k, v = (z.view(b, t, self.heads, h // self.heads).transpose(1, 2) for z in (q, k, v))
        y = self.core(q, k, v).transpose(1, 2).reshape(b, t, h)
        return self.proj(y)


class Mlp(nn.Module):
    def __init__(self, shape: GptShape):
        super().__init__()
        self.up = nn.Linear(shape.hidden, shape.ffn_size)
        self.down = nn.Linear(shape.ffn_size, shape.hidden)  # a residual branch's last layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x), approximate="tanh"))  # GPT-2's tanh approximation


class Block(nn.Module):
    """One pre-norm transformer block; its input is all that full activation checkpointing keeps."""

    def __init__(self, shape: GptShape):
        super().__init__()
        self.ln_1 = nn.LayerNorm(shape.hidden)
        self.attn = Attention(shape)
        self.ln_2 = nn.LayerNorm(shape.hidden)
        self.mlp = Mlp(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """forward(inputs, targets) -> mean cross-entropy; forward(inputs) / logits(inputs) -> (batch, time, vocab).

    Build it with suite.models.build.build_model, which seeds the RNG and calls init_weights()."""

    def __init__(self, shape: GptShape):
        super().__init__()
        self.shape = shape
        self.wte = nn.Embedding(shape.vocab, shape.hidden)  # token embedding, also the LM head (tied)
        self.wpe = nn.Embedding(shape.max_seq_len, shape.hidden)  # learned positions
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.ln_f = nn.LayerNorm(shape.hidden)

    @torch.no_grad()
    def init_weights(self) -> None:
        """nanoGPT's init from the global RNG (build_model seeds it): N(0, 0.02) for matrices and embeddings,
        zero biases, unit LayerNorm gains, and N(0, 0.02/sqrt(2L)) for the two projections that end each
        residual branch, so the residual stream's variance does not grow with depth (GPT-2 paper, sec. 2.3)."""
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln_" in name or name.startswith("ln_f"):
                nn.init.ones_(p)
            elif name.endswith(("attn.proj.weight", "mlp.down.weight")):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * self.shape.layers))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def logits(self, inputs: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Token ids -> logits.  `positions`: each token's place in its sequence when the inputs are not the
        sequence in order (context parallelism hands a rank chunks of its head and its tail; default 0 .. t-1)."""
        if positions is None:
            t = inputs.shape[1]
            if t > self.shape.max_seq_len:
                raise ValueError(f"sequence length {t} exceeds max_seq_len {self.shape.max_seq_len} (learned "
                                 "positions)")
            positions = torch.arange(t, device=inputs.device)
        x = self.wte(inputs) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied head: no separate weight

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.logits(inputs, positions)
        if targets is None:  # evaluation: the logits, through forward so wrapped / sharded models gather weights
            return logits
        # The loss is computed in fp32 even when the model runs in bf16/fp16: log-softmax over a large vocab
        # is where low precision hurts most.
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
