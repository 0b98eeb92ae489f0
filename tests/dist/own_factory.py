"""Models of "your own" for the `family: python` tests: factories that honour suite's contract, and ones that
break it (tests/unit/test_own_model.py checks each error).  Imported by name (`tests.dist.own_factory:...`)
in the test process and in the spawned ranks (PYTHONPATH is the repository root there)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    """Pre-norm causal self-attention and MLP, with residuals."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.up, self.down = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, h))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, hidden: int, layers: int, heads: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(hidden), nn.Linear(hidden, vocab, bias=False)

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embed(inputs)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


class TinyClassifier(nn.Module):
    """Images (b, 3, s, s) -> one token per image row -> blocks -> mean -> classes."""

    def __init__(self, image_size: int, num_classes: int, hidden: int, layers: int):
        super().__init__()
        self.rows = nn.Linear(3 * image_size, hidden)
        self.blocks = nn.ModuleList(Block(hidden, 2) for _ in range(layers))
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, images: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        x = self.rows(images.permute(0, 2, 1, 3).flatten(2))  # (b, rows, 3 * s)
        for block in self.blocks:
            x = block(x)
        logits = self.head(x.mean(1))
        return logits if labels is None else F.cross_entropy(logits.float(), labels)


def tiny_lm(vocab: int = 256, hidden: int = 32, layers: int = 2, heads: int = 4) -> nn.Module:
    return TinyLM(vocab, hidden, layers, heads)


def tiny_classifier(image_size: int = 8, num_classes: int = 4, hidden: int = 32, layers: int = 2) -> nn.Module:
    return TinyClassifier(image_size, num_classes, hidden, layers)


def tied_lm(vocab: int = 256, hidden: int = 32) -> nn.Module:
    """Embedding and head share one matrix (as GPT-2's and many small models' do)."""
    model = TinyLM(vocab, hidden, 1, 4)
    model.head.weight = model.embed.weight
    return model


SCALE = torch.ones(2)  # a module-level tensor: must stay a real tensor however the factory is probed


def scaled_lm() -> nn.Module:
    return TinyLM(int(SCALE.sum()) * 8, 16, 1, 2)


# --- contract breakers ---------------------------------------------------------------------------------------
def no_blocks() -> nn.Module:
    return nn.Linear(4, 4)


def not_a_module() -> dict:
    return {"blocks": []}


def one_argument() -> nn.Module:
    class OneArg(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(2, 2)])

        def forward(self, inputs):
            return inputs

    return OneArg()


def wrong_count() -> nn.Module:
    model = TinyLM(16, 8, 1, 2)
    model.num_parameters = 7  # an instance attribute shadows the method: a stated count that is wrong
    return model


def raises(size: int = 1) -> nn.Module:
    raise RuntimeError(f"cannot build size {size}")
