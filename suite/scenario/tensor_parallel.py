"""Checks of the tensor_parallel axis against a cell's model and strategy (used by cells.expand), and the
data-parallel size that follows from it.  Each problem names the field's line and the numbers.

Tensor parallelism here is Megatron's for a Llama block (suite/techniques/tensor_parallel.py): q, k, v, gate
and up split by columns, o and down by rows, so each of t ranks computes heads / t query heads, kv_heads / t
key-value heads and ffn / t of the MLP; with sequence_parallel the norms and the residual stream are split on
the sequence, with loss_parallel the head's output and the cross-entropy on the vocabulary.  GPT's fused qkv projection would need a head-aware split (a plain
column split of the fused weight mixes q, k and v rows) and ViT is torchvision's: neither is built."""

from __future__ import annotations

from typing import Any

from suite.models.presets import LlamaShape
from suite.scenario.source import SourceMap
from suite.strategies import registry


def data_ranks(combo: dict[str, Any]) -> int:
    """Ranks of data parallelism: gpus / (tensor_parallel x pipeline_parallel x context_parallel)."""
    layout = combo["tensor_parallel"] * combo.get("pipeline_parallel", 1) * combo.get("context_parallel", 1)
    return max(1, combo["gpus"] // layout)


def check_sequence_and_loss_parallel(combo: dict[str, Any], shape: Any, src: SourceMap) -> list[str]:
    """sequence_parallel and loss_parallel split what tensor parallelism's ranks share: they need t > 1, and the
    sequence (SP) or the vocabulary (LP) must divide by t."""
    tp, problems = combo["tensor_parallel"], []
    for axis, what in (("sequence_parallel", "the sequence"), ("loss_parallel", "the vocabulary")):
        if not combo.get(axis):
            continue
        if tp == 1:
            problems.append(f"{src.where(axis)}: {axis} true needs tensor_parallel > 1 (got tensor_parallel 1): it "
                            f"shards {what} over the tensor-parallel ranks")
            continue
        size, name = ((combo["seq_len"], "seq_len") if axis == "sequence_parallel" else
                      (getattr(shape, "vocab", None), "vocab"))
        if size is not None and size % tp:
            problems.append(f"{src.where(axis)}: {axis} shards {what} over tensor_parallel {tp}, which does not "
                            f"divide {name} {size}")
    return problems


def check_tensor_parallel(combo: dict[str, Any], shape: Any, src: SourceMap) -> list[str]:
    tp, gpus, strategy = combo["tensor_parallel"], combo["gpus"], combo["strategy"]
    if tp == 1:
        return check_sequence_and_loss_parallel(combo, shape, src)
    where = src.where("tensor_parallel")
    if gpus % tp:
        return [f"{where}: tensor_parallel {tp} does not divide gpus {gpus}: the world must factor as data-parallel "
                f"ranks x tensor_parallel"]
    if not isinstance(shape, LlamaShape):
        return [f"{where}: tensor_parallel {tp} needs a llama model, not {shape.family} (gpt's fused qkv "
                "projection and torchvision's ViT have no tensor-parallel plan yet)"]
    problems = [f"{where}: tensor_parallel {tp} does not divide {name} {value} of the model"
                for name, value in (("heads", shape.heads), ("kv_heads", shape.kv_heads), ("ffn", shape.ffn))
                if value % tp]
    spec = registry.get(strategy)
    if not spec.tensor_parallel:
        ok = ", ".join(n for n in registry.names() if registry.get(n).tensor_parallel)
        problems.append(f"{where}: strategy {strategy} does not compose with tensor_parallel {tp} (those that do: "
                        f"{ok})")
    elif spec.family == "dp" and data_ranks(combo) != 1:
        pp = combo.get("pipeline_parallel", 1)
        names, layout = (("tensor_parallel x pipeline_parallel", f"(tensor_parallel {tp} x pipeline_parallel {pp})")
                         if pp > 1 else ("tensor_parallel", f"tensor_parallel {tp}"))
        problems.append(f"{where}: strategy {strategy} composes with tensor_parallel only without data parallelism "
                        f"(gpus = {names}); gpus {gpus} / {layout} = {data_ranks(combo)} data-parallel ranks: "
                        "use zero3")
    elif spec.family == "dp" and combo.get("context_parallel", 1) > 1:
        problems.append(f"{where}: strategy {strategy} composes with tensor_parallel only without data parallelism, "
                        f"and context_parallel {combo['context_parallel']} averages gradients over its ranks as data "
                        "parallelism does (DDP cannot hold tensor-parallel DTensors): use zero3")
    problems += check_sequence_and_loss_parallel(combo, shape, src)
    per_node = gpus // max(1, combo.get("nodes", 1))
    if per_node % tp:  # consecutive ranks form a group (the mesh's last dimension): keep it on one node's links
        problems.append(f"{where}: tensor_parallel {tp} does not divide the {per_node} gpus of a node: a "
                        "tensor-parallel group must stay within a node")
    return problems
