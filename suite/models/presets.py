"""Model shapes: the pydantic models a scenario uses to name a model, the presets, and exact parameter counts.

Pure Python (no torch), because the planner runs on machines without torch.  The counting formulas here
mirror the torch modules in gpt.py, llama.py and vit.py layer by layer; tests build those modules (on the
meta device for the big ones) and assert the counts are equal, so the two cannot drift apart silently.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


# Upper bounds on every dimension, far above any published model, so the planner's products (parameters,
# activation bytes, FLOPs) stay finite floats: `plan` never overflows and `plan --json` never says Infinity.
Layers = Annotated[int, Field(gt=0, le=10_000)]
Width = Annotated[int, Field(gt=0, le=2**20)]  # hidden, heads, kv_heads (the largest models use about 2**15)
Inner = Annotated[int, Field(gt=0, le=2**22)]  # ffn, mlp
Vocab = Annotated[int, Field(gt=0, le=2**24)]  # vocab, num_classes
Positions = Annotated[int, Field(gt=0, le=2**24)]  # max_seq_len, as the scenario's seq_len
Pixels = Annotated[int, Field(gt=0, le=2**16)]  # image_size, patch_size


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # rope_theta: .inf is refused

    preset: str | None = Field(None, description="Preset this shape came from (filled in by suite; omit it).")


class GptShape(_Shape):
    """GPT-2 style decoder: learned positions, pre-norm LayerNorm blocks with biases, GELU MLP, tied embeddings."""

    family: Literal["gpt"] = Field(description="Model family: a GPT-2 style decoder.")
    inputs: ClassVar[str] = "tokens"  # what forward takes: token ids (images: vit)
    analytic: ClassVar[bool] = True  # the planner's formulas cover it (own models may be traced only)
    layers: Layers = Field(description="Number of transformer blocks (L).")
    hidden: Width = Field(description="Hidden size (h).")
    heads: Width = Field(description="Attention heads (a); must divide hidden.")
    vocab: Vocab = Field(description="Vocabulary size (GPT-2: 50257).")
    ffn: Inner | None = Field(None, description="MLP inner size; default 4 x hidden.")
    max_seq_len: Positions = Field(1024, description="Learned positional embeddings (GPT-2: 1024); caps seq_len.")

    @model_validator(mode="after")
    def _check(self) -> "GptShape":
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not divisible by heads {self.heads}")
        return self

    @property
    def ffn_size(self) -> int:
        return self.ffn if self.ffn is not None else 4 * self.hidden

    def block_parameters(self) -> int:
        """Parameters of one transformer block (what FSDP all-gathers as one unit)."""
        h, f = self.hidden, self.ffn_size
        return (
            2 * h  # ln_1 weight + bias
            + h * 3 * h + 3 * h  # fused qkv projection with bias
            + h * h + h  # attention output projection
            + 2 * h  # ln_2
            + h * f + f  # mlp up
            + f * h + h  # mlp down
        )

    def matmuls(self) -> list[tuple[int, int, bool]]:
        """One block's linear layers in forward order: (in, out, split by tensor parallelism)."""
        h, f = self.hidden, self.ffn_size
        return [(h, 3 * h, True), (h, h, False), (h, f, True), (f, h, False)]

    def num_parameters(self) -> int:
        h = self.hidden
        embeddings = self.vocab * h + self.max_seq_len * h  # token (tied with the head) + positions
        return embeddings + self.layers * self.block_parameters() + 2 * h  # + final LayerNorm

    def largest_layer_parameters(self) -> int:
        return self.vocab * self.hidden


class LlamaShape(_Shape):
    """Llama style decoder: RMSNorm, SwiGLU MLP, rotary embeddings, grouped-query attention, untied head."""

    family: Literal["llama"] = Field(description="Model family: a Llama style decoder.")
    inputs: ClassVar[str] = "tokens"
    analytic: ClassVar[bool] = True
    layers: Layers = Field(description="Number of transformer blocks (L).")
    hidden: Width = Field(description="Hidden size (h).")
    heads: Width = Field(description="Query heads (a); must divide hidden.")
    kv_heads: Width = Field(description="Key/value heads (grouped-query attention); must divide heads.")
    ffn: Inner = Field(description="SwiGLU inner size.")
    vocab: Vocab = Field(description="Vocabulary size (Llama 3: 128256).")
    rope_theta: float = Field(500000.0, gt=0, description="Rotary embedding base (Llama 3: 500000).")

    @model_validator(mode="after")
    def _check(self) -> "LlamaShape":
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not divisible by heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not divisible by kv_heads {self.kv_heads}")
        return self

    def block_parameters(self) -> int:
        """Parameters of one transformer block (what FSDP all-gathers as one unit)."""
        h, f = self.hidden, self.ffn
        kv = self.kv_heads * (h // self.heads)
        return h * h + 2 * h * kv + h * h + 3 * h * f + 2 * h  # q, k+v, o, gate/up/down, two RMSNorms

    def matmuls(self) -> list[tuple[int, int, bool]]:
        """One block's linear layers in forward order (q, k, v, o, gate, up, down): (in, out, split by tensor
        parallelism)."""
        h, f = self.hidden, self.ffn
        kv = self.kv_heads * (h // self.heads)
        return [(h, h, True), (h, kv, True), (h, kv, True), (h, h, False), (h, f, True), (h, f, True), (f, h, False)]

    def num_parameters(self) -> int:
        h = self.hidden  # embedding + untied head + final RMSNorm
        return 2 * self.vocab * h + self.layers * self.block_parameters() + h

    def largest_layer_parameters(self) -> int:
        return self.vocab * self.hidden


class VitShape(_Shape):
    """torchvision's VisionTransformer (the seed workload): patch conv, class token, encoder, linear head."""

    family: Literal["vit"] = Field(description="Model family: torchvision.models.VisionTransformer.")
    inputs: ClassVar[str] = "images"
    analytic: ClassVar[bool] = True
    image_size: Pixels = Field(32, description="Square input image side in pixels.")
    patch_size: Pixels = Field(4, description="Square patch side; must divide image_size.")
    layers: Layers = Field(12, description="Encoder blocks (num_layers).")
    heads: Width = Field(8, description="Attention heads (num_heads).")
    hidden: Width = Field(384, description="Hidden size (hidden_dim).")
    mlp: Inner = Field(768, description="MLP inner size (mlp_dim).")
    num_classes: Vocab = Field(10, description="Classifier outputs.")

    @model_validator(mode="after")
    def _check(self) -> "VitShape":
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size {self.image_size} is not divisible by patch_size {self.patch_size}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not divisible by heads {self.heads}")
        return self

    @property
    def tokens(self) -> int:
        """Sequence length the encoder sees: one token per patch plus the class token."""
        return (self.image_size // self.patch_size) ** 2 + 1

    def block_parameters(self) -> int:
        """Parameters of one encoder block (what FSDP all-gathers as one unit)."""
        h, m = self.hidden, self.mlp
        return 2 * h + 3 * h * h + 3 * h + h * h + h + 2 * h + h * m + m + m * h + h

    def matmuls(self) -> list[tuple[int, int, bool]]:
        """One encoder block's linear layers in forward order (in-projection, out-projection, MLP): (in, out,
        split by tensor parallelism)."""
        h, m = self.hidden, self.mlp
        return [(h, 3 * h, True), (h, h, False), (h, m, True), (m, h, False)]

    def num_parameters(self) -> int:
        h = self.hidden
        stem = 3 * self.patch_size**2 * h + h + h + self.tokens * h  # conv_proj, class token, pos embedding
        return stem + self.layers * self.block_parameters() + 2 * h + h * self.num_classes + self.num_classes

    def largest_layer_parameters(self) -> int:
        return max(3 * self.hidden * self.hidden, self.hidden * self.mlp)


# Published shapes.  GPT-2 sizes from the GPT-2 paper / Hugging Face configs; Llama 3 from Meta's model cards;
# vit-cifar10 is the seed workload of ../shared/reference.md.
PRESETS: dict[str, GptShape | LlamaShape | VitShape] = {
    "gpt-tiny": GptShape(family="gpt", layers=2, hidden=64, heads=4, vocab=256, max_seq_len=256),
    "gpt2-small": GptShape(family="gpt", layers=12, hidden=768, heads=12, vocab=50257),
    "gpt2-medium": GptShape(family="gpt", layers=24, hidden=1024, heads=16, vocab=50257),
    "gpt2-large": GptShape(family="gpt", layers=36, hidden=1280, heads=20, vocab=50257),
    "gpt2-xl": GptShape(family="gpt", layers=48, hidden=1600, heads=25, vocab=50257),
    "llama-tiny": LlamaShape(family="llama", layers=2, hidden=64, heads=4, kv_heads=2, ffn=172, vocab=256),
    "llama3-8b": LlamaShape(family="llama", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256),
    "llama3-70b": LlamaShape(family="llama", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256),
    "vit-cifar10": VitShape(family="vit"),
}


class UnknownPreset(ValueError):
    """A model name that is no preset; `choices` (the presets' names) lets a caller say which one was probably
    meant (scenario/source.py's "did you mean")."""

    choices = tuple(PRESETS)

    def __init__(self, shown: str):
        """`shown`: the name as the message should quote it (a scenario's loader clips a hostile one)."""
        super().__init__(f"unknown model preset {shown}; known: {', '.join(PRESETS)} (`suite presets` lists their "
                         f"shapes)")


def resolve(model: "str | GptShape | LlamaShape | VitShape") -> "GptShape | LlamaShape | VitShape":
    """A preset name or an inline shape -> the shape, with `preset` filled in for named ones."""
    if isinstance(model, str):
        if model not in PRESETS:
            raise UnknownPreset(repr(model))
        return PRESETS[model].model_copy(update={"preset": model})
    return model
