"""Strategies: how a plain, single-device model becomes a data-parallel one.

A strategy is a function `apply(model, mesh, policy, device) -> Parallel` (see base.py), called inside an
initialized process group on a model that the worker's `parallelize` (suite/worker/parallelize.py) has already
checkpointed and compiled; `policy` holds the few settings a strategy acts on, never the whole cell.  What each
strategy is — family, what it shards, what it communicates, its native twin, where its apply lives — is one
entry of the registry (registry.py), which the scenario, planner, worker and report all read.

Adding a strategy = one file with an `apply` and one `register(StrategySpec(...))` (in registry.BUILTIN, or a
plugin module named in SUITE_PLUGINS).

This package's top level imports no torch: `from suite.strategies import registry` is cheap for the planner and
the report.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from suite.strategies import registry

__all__ = ["get_strategy", "registry"]


def get_strategy(name: str) -> Callable[..., Any]:
    """The `apply` function of a registered strategy (aliases accepted), imported now."""
    module, function = registry.get(name).apply.split(":")
    return getattr(importlib.import_module(module), function)
