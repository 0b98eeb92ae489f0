"""Strategies: how a plain, single-device model becomes a data-parallel one.

A strategy is a function `apply(model, cell, device) -> Parallel` (see base.py), called inside an initialized
process group on a model that `parallelize` (wrap.py) has already checkpointed and compiled.  What each
strategy is — family, what it shards, what it communicates, its native twin, where its apply lives — is one
entry of the registry (registry.py), which the scenario, planner, worker and report all read.

Adding a strategy = one file with an `apply` and one `register(StrategySpec(...))` (in registry.BUILTIN, or a
plugin module named in SUITE_PLUGINS).

This package's top level imports no torch: `from suite.strategies import registry` is cheap for the planner and
the report; `parallelize` and `Parallel` are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from suite.strategies import registry

__all__ = ["Parallel", "STRATEGIES", "get_strategy", "parallelize", "registry"]


def get_strategy(name: str) -> Callable[..., Any]:
    """The `apply` function of a registered strategy (aliases accepted), imported now."""
    module, function = registry.get(name).apply.split(":")
    return getattr(importlib.import_module(module), function)


def __getattr__(name: str) -> Any:
    # Lazy: these import torch, which the planner and report never need.
    if name == "parallelize":
        from suite.strategies.wrap import parallelize

        return parallelize
    if name == "Parallel":
        from suite.strategies.base import Parallel

        return Parallel
    if name == "STRATEGIES":  # name -> "module:function", plugins included (computed at each access)
        return {s.name: s.apply for s in registry.specs()}
    raise AttributeError(f"module 'suite.strategies' has no attribute {name!r}")
