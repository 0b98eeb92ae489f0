"""How suite reads a Hugging Face config: the keys it looks for, its limits, and the one-line form of an error.

Shared by own.py (the `family: hf` shape, validated when the scenario is) and hf.py (building the model with
transformers), so neither imports the other for them.  Pure: no torch, no transformers.
"""

from __future__ import annotations

from typing import Any

# model types laid out as Llama (per block: q, k, v, o, gate, up, down, two RMSNorms): the analytic planner
# covers them exactly; qwen2 adds q/k/v biases, llama's attention_bias / mlp_bias flags add theirs
ANALYTIC_TYPES = ("llama", "mistral", "qwen2")
HF_EXTRA = "model family hf needs the optional extra: pip install 'suite[hf]' (transformers)"
MAX_HF_LAYERS = 1024  # a meta build visits every layer; the deepest published decoders have ~130
# where a config states its depth, by the names different model families use
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers")


def one_line(exc: BaseException) -> str:
    """An exception as one short line: its type and its text, white space folded, cut at 300 characters."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


def first_key(c: dict[str, Any], *keys: str) -> Any:
    """The value of the first of `keys` the config sets (not None), else None."""
    return next((c[k] for k in keys if c.get(k) is not None), None)
