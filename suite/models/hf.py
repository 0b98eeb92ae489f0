"""A Hugging Face causal LM with suite's model interface: forward(inputs, targets) -> loss, and `.blocks`.

    HfCausalLM(shape) = AutoModelForCausalLM.from_config(shape.contents), weights drawn from the RNG that
    build_model seeds (transformers' own initialization), never loaded.

The loss is suite's: next-token cross-entropy of the logits at every position against the given targets, in
fp32, as gpt.py and llama.py compute it.  suite's batches already hold the shifted targets (targets[t] is the
token after inputs[t]), so the model is called without `labels`: transformers would shift them once more.

`.blocks` is the decoder layer list itself (a property, as in vit.py: the parameters stay registered once,
under their transformers names), found as the ModuleList with one entry per `num_hidden_layers`.  Replacing
`model.blocks[i]` (checkpointing) replaces the layer inside the transformers model, which runs it unchanged.

Attention is transformers' "sdpa" implementation (fused scaled-dot-product attention, like suite's models)
where the architecture has it, else "eager" (chosen once, at validation: `probed["attention"]`); no KV cache
is kept (use_cache=False: training).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suite.models.hf_keys import ANALYTIC_TYPES, HF_EXTRA, LAYER_KEYS, MAX_HF_LAYERS, first_key, one_line


def _config(contents: dict[str, Any]):
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError as exc:
        raise ImportError(f"{HF_EXTRA} ({exc})") from None
    return CONFIG_MAPPING[contents["model_type"]](**{k: v for k, v in contents.items() if k != "model_type"})


def attention_for(contents: dict[str, Any]) -> str:
    """"sdpa" (fused attention, like suite's models) where the architecture supports it, else "eager"."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    config = _config(contents)
    cls = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    return "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"


def build_hf(contents: dict[str, Any], attention: str = "sdpa") -> nn.Module:
    """transformers' causal LM for a completed config (own.complete), on the current default device."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_config(_config(contents), attn_implementation=attention,
                                            dtype=torch.get_default_dtype())


def find_blocks(model: nn.Module, contents: dict[str, Any]) -> nn.ModuleList:
    """The decoder layer list: the ModuleList of the config's layer count holding the most parameters (any
    ModuleList, where the config names no layer count)."""
    layers = next((contents[k] for k in LAYER_KEYS if contents.get(k)), None)
    found = [(sum(p.numel() for p in m.parameters()), name, m) for name, m in model.named_modules()
             if isinstance(m, nn.ModuleList) and len(m) and (layers is None or len(m) == layers)]
    if not found:
        raise TypeError(f"{type(model).__name__}: no ModuleList of {layers} layers to checkpoint and shard per "
                        "block")
    return max(found, key=lambda f: f[0])[2]


class HfCausalLM(nn.Module):
    """forward(tokens (b, s), targets (b, s)) -> mean cross-entropy; forward(tokens) -> logits (b, s, vocab)."""

    def __init__(self, shape):
        super().__init__()
        self.shape = shape
        self.hf = build_hf(shape.contents, (shape.probed or {}).get("attention", "sdpa"))
        self._blocks = _path_of(self.hf, find_blocks(self.hf, shape.contents))

    @property
    def blocks(self) -> nn.ModuleList:
        return self.hf.get_submodule(self._blocks)

    def num_parameters(self) -> int:
        """transformers' count (tied embeddings once)."""
        return self.hf.num_parameters()

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.hf(input_ids=inputs, use_cache=False, return_dict=True).logits
        if targets is None:  # evaluation: the logits (through forward, so sharded models gather weights)
            return logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def _path_of(root: nn.Module, target: nn.Module) -> str:
    return next(name for name, m in root.named_modules() if m is target)


def probe_hf(path: str, contents: dict[str, Any]) -> dict[str, Any]:
    """Build the model once on the meta device (no memory): what suite needs from it, or a ValueError saying
    why transformers cannot build it.  Also checks the analytic dimensions of Llama-layout configs."""
    layers = first_key(contents, *LAYER_KEYS)
    if not isinstance(layers, int) or isinstance(layers, bool) or not 0 < layers <= MAX_HF_LAYERS:
        if layers is not None:
            raise ValueError(f"config {path!r}: {layers!r} layers; suite builds 1 to {MAX_HF_LAYERS}")
    if contents.get("model_type") in ANALYTIC_TYPES:
        _check_llama_layout(path, contents)
    try:
        attention = attention_for(contents)
        with torch.device("meta"):
            model = build_hf(contents, attention)
        blocks = find_blocks(model, contents)
        embeddings = model.get_input_embeddings()
    except Exception as exc:  # transformers cannot build it: the user's config, one line
        raise ValueError(f"config {path!r}: transformers cannot build it: {one_line(exc)}") from None
    vocab = getattr(embeddings, "num_embeddings", None)
    if not isinstance(vocab, int):
        raise ValueError(f"config {path!r}: the model has no token embedding (get_input_embeddings) to feed")
    if vocab < 2:
        raise ValueError(f"config {path!r}: a vocabulary of {vocab} token(s): nothing to predict")
    return {"parameters": model.num_parameters(), "layers": len(blocks), "vocab": vocab, "attention": attention,
            "block_parameters": max(sum(p.numel() for p in b.parameters()) for b in blocks)}


def _check_llama_layout(path: str, c: dict[str, Any]) -> None:
    """The dimensions the analytic planner reads, within the presets' bounds and dividing as they must."""
    dims = {"num_hidden_layers": (1, 10_000), "hidden_size": (1, 2**20), "num_attention_heads": (1, 2**20),
            "intermediate_size": (1, 2**22), "vocab_size": (1, 2**24)}
    for key, (low, high) in dims.items():
        v = c.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
            raise ValueError(f"config {path!r}: {key} {v!r} must be an integer from {low} to {high}")
    heads, kv = c["num_attention_heads"], c.get("num_key_value_heads") or c["num_attention_heads"]
    if not isinstance(kv, int) or kv < 1 or heads % kv:
        raise ValueError(f"config {path!r}: num_attention_heads {heads} is not divisible by num_key_value_heads {kv}")
    if not c.get("head_dim") and c["hidden_size"] % heads:
        raise ValueError(f"config {path!r}: hidden_size {c['hidden_size']} is not divisible by num_attention_heads "
                         f"{heads} (and no head_dim)")
