"""A Hugging Face causal LM with suite's model interface: forward(inputs, targets) -> loss, and `.blocks`.

    HfCausalLM(shape) = AutoModelForCausalLM.from_config(shape.contents), weights drawn from the RNG that
    build_model seeds (transformers' own initialization), never loaded.

The loss is suite's: next-token cross-entropy of the logits at every position against the given targets, in
fp32, as gpt.py and llama.py compute it.  suite's batches already hold the shifted targets (targets[t] is the
token after inputs[t]), so the model is called without `labels`: transformers would shift them once more.

`.blocks` is the decoder layer list itself (a property, as in vit.py: the parameters stay registered once,
under their transformers names), found as the ModuleList with one entry per `num_hidden_layers`.  Replacing
`model.blocks[i]` (checkpointing) replaces the layer inside the transformers model, which runs it unchanged.

Attention is transformers' "sdpa" implementation (fused scaled-dot-product attention, like suite's models);
no KV cache is kept (use_cache=False: training).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suite.models.own import HF_EXTRA


def build_hf(contents: dict[str, Any]) -> nn.Module:
    """transformers' causal LM for a completed config (own.complete), on the current default device."""
    try:
        from transformers import AutoModelForCausalLM
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError as exc:
        raise ImportError(f"{HF_EXTRA} ({exc})") from None
    body = {k: v for k, v in contents.items() if k != "model_type"}
    config = CONFIG_MAPPING[contents["model_type"]](**body)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.get_default_dtype())


def find_blocks(model: nn.Module, contents: dict[str, Any]) -> nn.ModuleList:
    """The decoder layer list: the ModuleList of `num_hidden_layers` entries holding the most parameters."""
    layers = next((contents[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if contents.get(k)), None)
    found = [(sum(p.numel() for p in m.parameters()), name, m) for name, m in model.named_modules()
             if isinstance(m, nn.ModuleList) and len(m) == layers]
    if not found:
        raise TypeError(f"{type(model).__name__}: no ModuleList of {layers} layers (num_hidden_layers) to "
                        "checkpoint and shard per block")
    return max(found, key=lambda f: f[0])[2]


class HfCausalLM(nn.Module):
    """forward(tokens (b, s), targets (b, s)) -> mean cross-entropy; forward(tokens) -> logits (b, s, vocab)."""

    def __init__(self, shape):
        super().__init__()
        self.shape = shape
        self.hf = build_hf(shape.contents)
        self._blocks = _path_of(self.hf, find_blocks(self.hf, shape.contents))

    @property
    def blocks(self) -> nn.ModuleList:
        return self.hf.get_submodule(self._blocks)

    def num_parameters(self) -> int:
        """transformers' count (tied embeddings once)."""
        return self.hf.num_parameters()

    def to_empty(self, *, device, recurse: bool = True) -> "HfCausalLM":
        """Materialize a meta-device build (the trace does): to_empty gives each module its own new
        Parameter, which unties a tied head from the embedding; transformers ties them again."""
        super().to_empty(device=device, recurse=recurse)
        self.hf.tie_weights()
        return self

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.hf(input_ids=inputs, use_cache=False).logits
        if targets is None:  # evaluation: the logits (through forward, so sharded models gather weights)
            return logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def _path_of(root: nn.Module, target: nn.Module) -> str:
    return next(name for name, m in root.named_modules() if m is target)
