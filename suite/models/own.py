"""Your own model: a Hugging Face config (`family: hf`) or a Python factory (`family: python`).

Pure Python at import (no torch, no transformers; validating an hf or python model imports them): the planner reads these shapes like the presets'.  What a
shape needs from the outside world is read once, when the scenario is validated, and kept in the shape, so a
worker (in a container, on a Ray node) never reads the config file or probes the factory again:

- hf: the config file's JSON, completed by transformers' config class (`contents`), and the model built once
  on the meta device (`probed`: transformers' parameter count, layers, largest block, vocab, attention), so
  a config transformers cannot build fails validation, not the run.  Standard decoders (ANALYTIC_TYPES: the
  Llama layout of RMSNorm, rotary attention with grouped-query heads and a SwiGLU MLP) get the analytic
  planner: layers, hidden, heads, kv heads, ffn and vocab from the config (bounded and checked as the
  presets' are; a test holds the layout's formula count equal to the built one).  Any other causal LM is
  "traced only": its memory comes from `suite plan --trace`, and it has no MFU.
- python: `factory: "package.module:function"` with `args`, called on the meta device to check the contract
  (models/factory.py) and count parameters, layers and the largest block (`probed`).  Always traced only.

Neither downloads anything: no hub access, no weights, no remote code.  The torch side (building the module)
is models/hf.py and models/factory.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import Field, ValidationInfo, model_validator

from suite.models.hf_keys import ANALYTIC_TYPES, HF_EXTRA, LAYER_KEYS, first_key, one_line
from suite.models.trust import FACTORY, check_factory, find_project
from suite.models.presets import GptShape, LlamaShape, Pixels, Vocab, VitShape, _Shape

MAX_CONFIG_BYTES = 1 << 20  # a real config.json is a few KiB


def _transformers():
    try:
        import transformers
    except ImportError as exc:
        raise ValueError(f"{HF_EXTRA} ({exc})") from None
    return transformers


def read_config(path: str) -> dict[str, Any]:
    """The config file at `path`, checked and completed by transformers (ValueError naming what is wrong)."""
    if len(path) > 4096 or "\0" in path:
        raise ValueError(f"config {path[:80]!r}...: not a usable path ({len(path)} characters)")
    p = Path(path)
    try:
        exists, is_file = p.exists(), p.is_file()
        size = p.stat().st_size if is_file else 0
        if is_file and size <= MAX_CONFIG_BYTES:
            with p.open("rb") as f:
                data = f.read(MAX_CONFIG_BYTES + 1)  # a size that lies (/proc) or grows meanwhile: still bounded
            size = max(size, len(data))
    except OSError as exc:
        raise ValueError(f"config {path!r}: cannot read it: {exc.strerror or exc}") from None
    if not is_file:
        hub = " (it looks like a hub id: suite never downloads; save the config.json and give its path)" \
            if "/" in path and not path.endswith(".json") and not exists else ""
        what = "not a regular file" if exists else f"no such file (from {os.getcwd()})"
        raise ValueError(f"config {path!r}: {what}; suite reads a local config.json only{hub}")
    if size > MAX_CONFIG_BYTES:
        raise ValueError(f"config {path!r} is {size} bytes; a config.json is a few KiB (at most "
                         f"{MAX_CONFIG_BYTES}): is it a weights file?")
    try:
        raw = json.loads(data, parse_constant=_no_constant)  # NaN / Infinity: not JSON, and a cell can't carry them
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"config {path!r} is not JSON: {str(exc)[:200]}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"config {path!r} holds a JSON {type(raw).__name__}, not an object")
    _refuse_weights(path, raw)
    return complete(path, raw)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _refuse_weights(path: str, raw: dict[str, Any]) -> None:
    """Configs that cannot be built from the config alone: they need code or weights from somewhere else."""
    if "peft_type" in raw or "base_model_name_or_path" in raw:
        raise ValueError(f"config {path!r} is an adapter's config (peft): it needs its base model's weights; give "
                         "the base model's config.json")
    if "auto_map" in raw:
        raise ValueError(f"config {path!r} has auto_map: its model is remote code (trust_remote_code), which suite "
                         "never downloads or runs; give a config of an architecture transformers has")
    if raw.get("quantization_config"):
        raise ValueError(f"config {path!r} has quantization_config "
                         f"({raw['quantization_config'].get('quant_method', '?') if isinstance(raw['quantization_config'], dict) else '?'}): "
                         "a quantized model is loaded from its quantized weights; remove quantization_config to "
                         "benchmark the model in training precision")
    if not isinstance(raw.get("model_type"), str):
        raise ValueError(f"config {path!r} names no model_type (every transformers config.json has one, e.g. "
                         "\"llama\")")


def complete(path: str, raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` with every default transformers' config class fills in (what from_config will build)."""
    tf = _transformers()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    kind = raw["model_type"]
    if kind not in CONFIG_MAPPING:
        raise ValueError(f"config {path!r}: model_type {kind!r} is not an architecture of transformers "
                         f"{tf.__version__}")
    if kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ValueError(f"config {path!r}: model_type {kind!r} has no causal-LM class in transformers "
                         f"{tf.__version__} (suite trains next-token prediction)")
    body = {k: v for k, v in raw.items() if k != "model_type"}
    try:
        config = CONFIG_MAPPING[kind](**body)
    except Exception as exc:  # transformers' (and huggingface_hub's) validation errors: the user's input, one line
        raise ValueError(f"config {path!r}: transformers refuses it: {one_line(exc)}") from None
    full = config.to_dict()
    for key in NOT_THE_MODEL:
        full.pop(key, None)
    return json.loads(json.dumps(full, sort_keys=True))  # plain JSON values, as a worker will read them


# Config keys that change nothing the model computes in training (so not the cell id either): the version
# that wrote the file, a dtype (suite's precision decides), inference and output switches, label names.
NOT_THE_MODEL = ("transformers_version", "_name_or_path", "dtype", "torch_dtype", "use_cache", "architectures",
                 "id2label", "label2id", "return_dict", "output_hidden_states", "output_attentions")


def _stored(info: ValidationInfo) -> bool:
    """Whether this shape is read back from stored results (context {"stored": True}): then nothing named in it
    is read or imported; only a scenario's own models are resolved."""
    return bool(info.context and info.context.get("stored"))


class HfShape(_Shape):
    """A causal language model of Hugging Face Transformers, built from a local config.json (no weights)."""

    family: Literal["hf"] = Field(description="Model family: transformers' AutoModelForCausalLM.from_config.")
    config: str = Field(max_length=4096, description="Path of a config.json, from the working directory (like "
                        "data.path). Read once, when the scenario is validated; never the hub.")
    contents: dict[str, Any] | None = Field(None, description="The config as transformers completes it (filled in "
                                            "by suite when the scenario is read; omit it).")
    probed: dict[str, Any] | None = Field(None, description="What the model built on the meta device holds: "
                                          "parameters (transformers' count), layers, largest block, vocab, "
                                          "attention (filled in by suite; omit it).")

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and isinstance(data.get("config"), str):
            if (data.get("contents") is None or data.get("probed") is None) and _stored(info):
                raise ValueError(f"a stored hf cell must carry its config's contents and probe; this one does not "
                                 f"(suite does not read {repr(data['config'])[:200]} named in a stored result)")
            if data.get("contents") is None:
                data = {**data, "contents": read_config(data["config"])}
            if data.get("probed") is None:
                from suite.models.hf import probe_hf  # torch and transformers: only for hf models

                data = {**data, "probed": probe_hf(data["config"], data["contents"])}
        return data

    @property
    def c(self) -> dict[str, Any]:
        return self.contents or {}

    @property
    def model_type(self) -> str:
        return self.c.get("model_type", "?")

    @property
    def analytic(self) -> bool:
        return self.model_type in ANALYTIC_TYPES

    inputs: ClassVar[str] = "tokens"
    # the dimensions under the names the configs use (GPT-2's n_layer, T5's d_model, ...)
    layers = property(lambda self: (self.probed or {}).get("layers") or first_key(self.c, *LAYER_KEYS))
    hidden = property(lambda self: first_key(self.c, "hidden_size", "n_embd", "d_model"))
    heads = property(lambda self: first_key(self.c, "num_attention_heads", "n_head"))
    vocab = property(lambda self: (self.probed or {}).get("vocab") or self.c.get("vocab_size"))
    ffn = property(lambda self: first_key(self.c, "intermediate_size", "n_inner"))
    max_positions = property(lambda self: first_key(self.c, "max_position_embeddings", "n_positions"))

    @property
    def kv_heads(self) -> int:
        return self.c.get("num_key_value_heads") or self.heads

    @property
    def head_dim(self) -> int:
        return self.c.get("head_dim") or self.hidden // self.heads

    def block_parameters(self) -> int:
        """The largest decoder layer's parameters (what FSDP all-gathers as one unit), as built."""
        return self.probed["block_parameters"]

    def num_parameters(self) -> int:
        """transformers' own count of the built model (tied embeddings once)."""
        return self.probed["parameters"]

    def largest_layer_parameters(self) -> int:
        return self.vocab * (self.hidden or 1)

    def matmuls(self) -> list[tuple[int, int, bool]]:
        """One decoder layer's linear layers in forward order (Llama layout: q, k, v, o, gate, up, down): (in,
        out, split by tensor parallelism)."""
        h, f, d = self.hidden, self.ffn, self.head_dim
        q, kv = self.heads * d, self.kv_heads * d
        return [(h, q, True), (h, kv, True), (h, kv, True), (q, h, False), (h, f, True), (h, f, True), (f, h, False)]

    def formula_parameters(self) -> tuple[int, int]:
        """(model, block) parameters by the Llama-layout formula (analytic types; a test holds them equal to
        the built model's)."""
        h, f, d = self.hidden, self.ffn, self.head_dim
        q, kv = self.heads * d, self.kv_heads * d
        qkv_bias = self.model_type == "qwen2" or self.c.get("attention_bias", False)
        n = h * q + 2 * h * kv + q * h + 3 * h * f + 2 * h
        n += (q + 2 * kv) if qkv_bias else 0
        n += h if self.c.get("attention_bias", False) else 0  # o_proj's bias (llama's flag)
        n += (2 * f + h) if self.c.get("mlp_bias", False) else 0
        head = 0 if self.c.get("tie_word_embeddings", False) else self.vocab * h
        return self.vocab * h + head + self.layers * n + h, n


class PythonShape(_Shape):
    """Your own torch module, returned by a factory function (the contract: docs/own-model.md)."""

    family: Literal["python"] = Field(description="Model family: a user function that returns an nn.Module.")
    factory: str = Field(pattern=rf"^{FACTORY.pattern}$", max_length=300, description="\"package.module:function"
                         "\", importable where suite runs, from a module you declared as yours (models/trust.py: "
                         "your project, SUITE_TRUST or --trust, or a \"suite.models\" entry point).")
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the factory (JSON values).")
    inputs: Literal["tokens", "images"] = Field(description="What forward takes: token ids (b, s) with next-token "
                                                "targets (b, s), or images (b, 3, size, size) with labels (b,).")
    vocab: Vocab | None = Field(None, description="tokens: the vocabulary size (the data draws ids below it).")
    image_size: Pixels | None = Field(None, description="images: the square image side in pixels.")
    num_classes: Vocab | None = Field(None, description="images: the classes of the labels.")
    probed: dict[str, Any] | None = Field(None, description="What the factory's module holds: parameters, layers, "
                                          "largest block, source digest (filled in by suite; omit it).")

    @model_validator(mode="before")
    @classmethod
    def _probe(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and data.get("probed") is None and isinstance(data.get("factory"), str):
            if _stored(info):
                raise ValueError(f"a stored python cell must carry its probe; this one does not (suite does not "
                                 f"import {repr(data['factory'])[:200]} named in a stored result)")
            # code only from where the user said their code lives: checked before anything is imported
            context = info.context or {}
            check_factory(data["factory"], context["project"] if "project" in context else find_project(Path.cwd()))
            from suite.models.factory import probe  # torch: only for python models

            data = {**data, "probed": probe(data["factory"], data.get("args") or {})}
        return data

    @model_validator(mode="after")
    def _check(self) -> "PythonShape":
        need = ("vocab",) if self.inputs == "tokens" else ("image_size", "num_classes")
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"factory {self.factory}: inputs {self.inputs} needs {' and '.join(missing)}")
        return self

    analytic: ClassVar[bool] = False
    layers = property(lambda self: (self.probed or {}).get("layers"))

    def num_parameters(self) -> int:
        return (self.probed or {})["parameters"]

    def block_parameters(self) -> int:
        return (self.probed or {})["block_parameters"]

    def largest_layer_parameters(self) -> int:
        return self.block_parameters()


ModelShape = Annotated[Union[GptShape, LlamaShape, VitShape, HfShape, PythonShape], Field(discriminator="family")]
AnyShape = Union[GptShape, LlamaShape, VitShape, HfShape, PythonShape]


def fixed_seq_len(shape: AnyShape) -> int | None:
    """The sequence length an image model fixes (vit: patches + class token; a python image model: 1 sample),
    or None where the scenario's seq_len sets it."""
    if isinstance(shape, VitShape):
        return shape.tokens
    return 1 if shape.inputs == "images" else None
