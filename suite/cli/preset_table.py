"""`suite presets`: the model presets a scenario may name (`model: llama3-8b`), as a table or as JSON.

The shapes come from models/presets.py and the parameter counts from its exact, torch-free formulas (the ones
`suite plan` uses), so listing them imports no torch.
"""

from __future__ import annotations

from typing import Any

from suite.models.presets import PRESETS, GptShape, LlamaShape

COLUMNS = ["preset", "family", "parameters", "layers", "hidden", "heads", "kv heads", "ffn", "vocab", "other"]


def as_json() -> list[dict[str, Any]]:
    """One object per preset: its name, every field of its shape and its exact parameter count."""
    return [{"name": name, **shape.model_dump(exclude={"preset"}), "parameters": shape.num_parameters()}
            for name, shape in PRESETS.items()]


def parameters(n: int) -> str:
    """A parameter count as model names say it: 124M, 8.03B, 70.6B (three significant digits)."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


def _other(shape) -> str:
    """What a family has beyond the common columns."""
    if isinstance(shape, GptShape):
        return f"{shape.max_seq_len} positions"
    if isinstance(shape, LlamaShape):
        return f"rope theta {shape.rope_theta:g}"
    return f"{shape.image_size}px images, {shape.patch_size}px patches, {shape.num_classes} classes"  # vit


def rows() -> list[list[str]]:
    """One row per preset: parameters (the planner's exact count, rounded), layers, widths, vocabulary."""
    out = []
    for name, shape in PRESETS.items():
        ffn = shape.ffn_size if isinstance(shape, GptShape) else shape.ffn if isinstance(shape, LlamaShape) \
            else shape.mlp
        kv_heads = str(shape.kv_heads) if isinstance(shape, LlamaShape) else "-"
        vocab = str(shape.vocab) if isinstance(shape, (GptShape, LlamaShape)) else "-"
        out.append([name, shape.family, parameters(shape.num_parameters()), str(shape.layers), str(shape.hidden),
                    str(shape.heads), kv_heads, str(ffn), vocab, _other(shape)])
    return out
