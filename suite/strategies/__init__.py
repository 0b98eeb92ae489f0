"""Strategies: how a plain, single-device model becomes a data-parallel one, and the order techniques go in.

`parallelize(model, cell, device)` is the one place that turns a built model into what the training loop
runs.  Like torchtitan's `parallelize`, it applies techniques to the plain model in a fixed order:

    1. activation checkpointing  wraps each block in `model.blocks`      (suite/techniques/checkpointing.py)
    2. torch.compile (optional)  compiles each (wrapped) block            (suite/techniques/compile.py)
    3. the strategy's apply()    wraps/shards the model, builds the optimizer   (ddp.py, zero1.py, fsdp.py)

Why this order: checkpointing must see the plain blocks to decide what to save; compiling after it puts the
recomputation inside the compiled region; sharding last lets FSDP treat each (checkpointed, compiled) block
as one unit of all-gather / reduce-scatter and keeps its hooks outside compiled graphs.  Mixed precision is
not a wrapping step: FSDP2 takes a MixedPrecisionPolicy in apply(), the others autocast in the loop
(`Parallel.autocast`).

The strategy interface (see base.py): a function `apply(model, cell, device) -> Parallel`, called inside an
initialized process group, registered under its name in STRATEGIES.  Adding a strategy = one file with an
`apply` and one line here (plus its name in the scenario's allowed values).
"""

from __future__ import annotations

import importlib
from typing import Callable

import torch
from torch import nn

from suite.strategies.base import Parallel
from suite.techniques.checkpointing import apply_checkpointing

__all__ = ["Parallel", "STRATEGIES", "get_strategy", "parallelize"]

# name -> "module:function", imported on first use so one strategy's imports never slow down another's.
STRATEGIES: dict[str, str] = {
    "ddp": "suite.strategies.ddp:apply",
    "zero1": "suite.strategies.zero1:apply",
    "zero2": "suite.strategies.fsdp:apply",
    "zero3": "suite.strategies.fsdp:apply",
    "fsdp": "suite.strategies.fsdp:apply",  # alias of zero3 (cells already carry zero3)
    # hand-written twins of the above, built from collectives (suite/strategies/scratch/)
    "scratch-dp": "suite.strategies.scratch.dp:apply",
    "scratch-dp-overlap": "suite.strategies.scratch.dp_overlap:apply",
    "scratch-dp-bucketed": "suite.strategies.scratch.dp_bucketed:apply",
    "scratch-zero1": "suite.strategies.scratch.zero1:apply",
    "scratch-zero2": "suite.strategies.scratch.zero2:apply",
    "scratch-zero3": "suite.strategies.scratch.zero3:apply",
}

Apply = Callable[[nn.Module, object, torch.device], Parallel]


def get_strategy(name: str) -> Apply:
    if name not in STRATEGIES:
        raise ValueError(f"strategy {name!r} is unknown; registered: {', '.join(STRATEGIES)}")
    module, function = STRATEGIES[name].split(":")
    return getattr(importlib.import_module(module), function)


def parallelize(model: nn.Module, cell, device: torch.device) -> Parallel:
    """Checkpointing -> compile -> the cell's strategy, on a model already on `device`."""
    if not hasattr(model, "blocks"):
        raise TypeError(f"{type(model).__name__} has no .blocks; strategies shard and checkpoint per block")
    apply = get_strategy(cell.strategy)
    apply_checkpointing(model, cell.activation_checkpointing)
    if cell.compile:
        from suite.techniques.compile import compile_blocks

        compile_blocks(model)
    return apply(model, cell, device)
